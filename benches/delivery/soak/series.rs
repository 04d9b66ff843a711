//! The soak's samples as a series: one table row per sample, and what the series says at the
//! end — each quantity's least-squares slope per hour after the warm-up, and around a held
//! snapshot, how the run behaved before, during and after it and how soon it recovered.

use super::probe::DbSample;

/// One sample of the run.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Seconds since the start.
    pub t_s: f64,
    /// Messages accepted per second since the last sample.
    pub sent_per_s: f64,
    /// Inbox rows delivered per second since the last sample.
    pub delivered_per_s: f64,
    /// Send → handler-start latency of plain commands since the last sample, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rss_mib: f64,
    pub fds: i64,
    /// The process's threads (tokio's blocking pool among them).
    pub threads: i64,
    pub db: DbSample,
    /// PostgreSQL: the longest vacuum pass since the last sample, ms.
    pub vacuum_ms: u64,
    /// What happened since the last sample (restart, re-sharding, catch-up, held snapshot).
    pub note: String,
}

const MIB: f64 = 1024.0 * 1024.0;

impl Row {
    pub fn header() -> String {
        format!(
            "{:>6} {:>6} {:>7} {:>7} {:>8} {:>6} {:>4} {:>4} {:>5} {:>8} {:>7} {:>6} {:>7} {:>6} {:>7} {:>6} {:>7} {:>5} {:>8} {:>8} {:>8} {:>6}  note",
            "t_s", "sent/s", "deliv/s", "p50_ms", "p99_ms", "rss", "fds", "thr", "conns", "inboxMiB",
            "outcMiB", "stMiB", "evMiB", "dbMiB", "kept", "pend", "outc", "dl", "dead_inb",
            "dead_all", "xmin_age", "vac_ms"
        )
    }

    pub fn line(&self) -> String {
        let d = &self.db;
        format!(
            "{:>6.0} {:>6.0} {:>7.0} {:>7.1} {:>8.1} {:>6.1} {:>4} {:>4} {:>5} {:>8.2} {:>7.2} {:>6.2} {:>7.1} {:>6.1} {:>7} {:>6} {:>7} {:>5} {:>8} {:>8} {:>8} {:>6}  {}",
            self.t_s,
            self.sent_per_s,
            self.delivered_per_s,
            self.p50_ms,
            self.p99_ms,
            self.rss_mib,
            self.fds,
            self.threads,
            d.connections,
            d.table_bytes[0] as f64 / MIB,
            d.table_bytes[1] as f64 / MIB,
            d.table_bytes[2] as f64 / MIB,
            d.table_bytes[3] as f64 / MIB,
            d.total_bytes as f64 / MIB,
            d.delivered_kept,
            d.pending,
            d.outcomes,
            d.dead_letters,
            d.dead_tuples[0],
            d.dead_tuples.iter().sum::<i64>(),
            d.xmin_age,
            self.vacuum_ms,
            self.note
        )
    }
}

/// The quantities whose slope is reported: the JSON keys of the slope (per hour) and of the
/// mean after the warm-up, and the value of a row.
type Sloped = (&'static str, &'static str, fn(&Row) -> f64);

pub const SLOPED: [Sloped; 14] = [
    ("slope_rss_mib_per_h", "mean_rss_mib", |r| r.rss_mib),
    ("slope_fds_per_h", "mean_fds", |r| r.fds as f64),
    ("slope_threads_per_h", "mean_threads", |r| r.threads as f64),
    ("slope_connections_per_h", "mean_connections", |r| {
        r.db.connections as f64
    }),
    ("slope_inbox_mib_per_h", "mean_inbox_mib", |r| {
        r.db.table_bytes[0] as f64 / MIB
    }),
    ("slope_outcomes_mib_per_h", "mean_outcomes_mib", |r| {
        r.db.table_bytes[1] as f64 / MIB
    }),
    ("slope_states_mib_per_h", "mean_states_mib", |r| {
        r.db.table_bytes[2] as f64 / MIB
    }),
    ("slope_events_mib_per_h", "mean_events_mib", |r| {
        r.db.table_bytes[3] as f64 / MIB
    }),
    (
        "slope_dead_letters_mib_per_h",
        "mean_dead_letters_mib",
        |r| r.db.table_bytes[4] as f64 / MIB,
    ),
    ("slope_db_mib_per_h", "mean_db_mib", |r| {
        r.db.total_bytes as f64 / MIB
    }),
    ("slope_delivered_kept_per_h", "mean_delivered_kept", |r| {
        r.db.delivered_kept as f64
    }),
    ("slope_outcome_rows_per_h", "mean_outcome_rows", |r| {
        r.db.outcomes as f64
    }),
    ("slope_pending_per_h", "mean_pending", |r| {
        r.db.pending as f64
    }),
    (
        "slope_inbox_dead_tuples_per_h",
        "mean_inbox_dead_tuples",
        |r| r.db.dead_tuples[0] as f64,
    ),
];

/// The least-squares slope of `(x, y)` points (0 for fewer than two distinct x).
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// Each of [`SLOPED`]'s slopes per hour over the rows from `after_s` on, and the mean of the
/// quantity over the same rows: (slope key, slope, mean key, mean).
pub fn slopes(rows: &[Row], after_s: f64) -> Vec<(&'static str, f64, &'static str, f64)> {
    let kept: Vec<&Row> = rows.iter().filter(|r| r.t_s >= after_s).collect();
    SLOPED
        .iter()
        .map(|(key, mean_key, value)| {
            let points: Vec<(f64, f64)> = kept.iter().map(|r| (r.t_s / 3600.0, value(r))).collect();
            let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len().max(1) as f64;
            (*key, slope(&points), *mean_key, mean)
        })
        .collect()
}

/// How the run behaved around a snapshot held from `from_s` to `until_s`.
#[derive(Debug, Default)]
pub struct AroundHold {
    /// Mean delivered rows/s and mean p99 before (after the warm-up), during and after.
    pub rate: [f64; 3],
    pub p99_ms: [f64; 3],
    /// Inbox bytes (MiB) at the hold's start, at its end and at the end of the run.
    pub inbox_mib: [f64; 3],
    /// Inbox dead tuples: the most before, at the hold's end, at the end of the run.
    pub inbox_dead: [f64; 3],
    /// Seconds after the release until the inbox's dead tuples were back under twice the
    /// most seen before the hold (-1: not within the run).
    pub dead_recovered_s: f64,
    /// Seconds after the release until p99 was back under twice its mean before (-1: not
    /// within the run).
    pub p99_recovered_s: f64,
}

/// The behaviour around a hold, from the rows after `warm_s`.
pub fn around_hold(rows: &[Row], warm_s: f64, from_s: f64, until_s: f64) -> AroundHold {
    let phase = |r: &&Row| -> usize {
        if r.t_s <= from_s {
            0
        } else if r.t_s <= until_s {
            1
        } else {
            2
        }
    };
    let kept: Vec<&Row> = rows.iter().filter(|r| r.t_s >= warm_s).collect();
    let mut a = AroundHold::default();
    for p in 0..3 {
        let in_phase: Vec<&&Row> = kept.iter().filter(|r| phase(r) == p).collect();
        let n = in_phase.len().max(1) as f64;
        a.rate[p] = in_phase.iter().map(|r| r.delivered_per_s).sum::<f64>() / n;
        a.p99_ms[p] = in_phase.iter().map(|r| r.p99_ms).sum::<f64>() / n;
    }
    let last_of = |p: usize| kept.iter().rev().find(|r| phase(r) == p);
    let inbox = |r: &Row| r.db.table_bytes[0] as f64 / MIB;
    let dead = |r: &Row| r.db.dead_tuples[0] as f64;
    a.inbox_mib = [
        last_of(0).map_or(0.0, |r| inbox(r)),
        last_of(1).map_or(0.0, |r| inbox(r)),
        last_of(2).map_or(0.0, |r| inbox(r)),
    ];
    let dead_before = kept
        .iter()
        .filter(|r| phase(r) == 0)
        .map(|r| dead(r))
        .fold(0.0, f64::max);
    a.inbox_dead = [
        dead_before,
        last_of(1).map_or(0.0, |r| dead(r)),
        last_of(2).map_or(0.0, |r| dead(r)),
    ];
    let after: Vec<&&Row> = kept.iter().filter(|r| phase(r) == 2).collect();
    a.dead_recovered_s = after
        .iter()
        .find(|r| dead(r) <= 2.0 * dead_before.max(1.0))
        .map_or(-1.0, |r| r.t_s - until_s);
    a.p99_recovered_s = after
        .iter()
        .find(|r| r.p99_ms <= 2.0 * a.p99_ms[0])
        .map_or(-1.0, |r| r.t_s - until_s);
    a
}
