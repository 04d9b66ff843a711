//! The run's report: the headline figures, each sampled quantity's slope per hour after the
//! warm-up, the database's churn, the counts of what happened, and — when a snapshot pinned
//! the xmin horizon — the figures before, during and after the hold.

use super::audit::Audit;
use super::background::Background;
use super::events::Events;
use super::fleet::Totals;
use super::probe::DbSample;
use super::samples::Samples;
use super::series;
use crate::args::Args;
use crate::report::Report;
use shardbox::core::sync::lock;
use std::sync::atomic::Ordering;

/// What the producer sent: messages accepted, refused for good, sent with a TTL, failed.
pub(super) struct SentCounts {
    pub(super) messages: u64,
    pub(super) refused: u64,
    pub(super) expiring: u64,
    pub(super) errors: u64,
}

/// What a run ended with, read after its nodes stopped.
pub(super) struct Outcome<'a> {
    pub(super) a: &'a Args,
    pub(super) backend: &'static str,
    pub(super) elapsed_s: f64,
    pub(super) warm_s: f64,
    pub(super) samples: &'a Samples,
    pub(super) final_db: &'a DbSample,
    pub(super) totals: Totals,
    pub(super) audit: Audit,
    pub(super) sent: SentCounts,
    /// Dead letters purged during the run and left at its end.
    pub(super) dead_letters: u64,
    pub(super) events: &'a Events,
    pub(super) restarts: u64,
    pub(super) bg: &'a Background,
}

impl Outcome<'_> {
    /// The report: lost and doubled messages count the refused commands that did not become
    /// dead letters, and the dead letters beyond them.
    pub(super) fn report(&self) -> Report {
        let (a, totals, total) = (self.a, &self.totals, &self.samples.total);
        let (refused, dead_letters) = (self.sent.refused, self.dead_letters);
        let mut r = Report {
            workload: a.workload.name(),
            backend: self.backend,
            n: self.sent.messages as usize,
            msgs_per_s: totals.delivered as f64 / self.elapsed_s,
            p50_ms: total.value_at_quantile(0.5) as f64 / 1e3,
            p99_ms: total.value_at_quantile(0.99) as f64 / 1e3,
            max_ms: total.max() as f64 / 1e3,
            lost: self.audit.lost + refused.saturating_sub(dead_letters),
            duplicates: self.audit.doubled + dead_letters.saturating_sub(refused),
            ..Report::default()
        };
        let e = &mut r.extra;
        e.push(("minutes", a.minutes));
        e.push(("samples", self.samples.rows.len() as f64));
        e.push(("warmup_s", self.warm_s));
        e.push(("delivered", totals.delivered as f64));
        for (key, slope, mean_key, mean) in series::slopes(&self.samples.rows, self.warm_s) {
            e.push((key, slope));
            e.push((mean_key, mean));
        }
        self.push_churn(e);
        self.push_counts(e);
        self.push_hold(e);
        r
    }

    /// Dead tuples per delivered row, the share of HOT updates, the Inbox's dead-tuple peak.
    fn push_churn(&self, e: &mut Vec<(&'static str, f64)>) {
        let (final_db, delivered) = (self.final_db, self.totals.delivered);
        let churn = |i: usize| final_db.churn[i] as f64 / delivered.max(1) as f64;
        e.push(("inbox_dead_tuples_per_delivered", churn(0)));
        e.push((
            "all_dead_tuples_per_delivered",
            (0..5).map(churn).sum::<f64>(),
        ));
        e.push((
            "inbox_hot_share_of_dead_versions",
            final_db.hot_updates[0] as f64 / final_db.churn[0].max(1) as f64,
        ));
        let after_warm = self.samples.rows.iter().filter(|r| r.t_s >= self.warm_s);
        e.push((
            "inbox_dead_tuples_peak",
            after_warm
                .map(|r| r.db.dead_tuples[0] as f64)
                .fold(0.0, f64::max),
        ));
    }

    /// The counts of what happened: dead letters, expiries, retries, restarts, re-shardings,
    /// catch-ups, take-overs, vacuum passes.
    fn push_counts(&self, e: &mut Vec<(&'static str, f64)>) {
        let (totals, events) = (&self.totals, self.events);
        e.push(("dead_letters", self.dead_letters as f64));
        e.push(("dead_letters_expected", self.sent.refused as f64));
        e.push(("expired", totals.expired as f64));
        e.push(("expiring_sent", self.sent.expiring as f64));
        e.push(("late_applied", self.audit.late as f64));
        e.push(("retries", totals.retries as f64));
        e.push(("send_errors", self.sent.errors as f64));
        e.push(("restarts", self.restarts as f64));
        e.push(("reshards", events.resharded as f64));
        e.push(("catch_ups", events.catch_ups as f64));
        e.push(("catch_up_failures", events.catch_up_failures as f64));
        e.push(("lease_takeovers", totals.lease_takeovers as f64));
        e.push(("worker_restarts", totals.worker_restarts as f64));
        e.push((
            "vacuum_passes",
            self.bg.vacuums.passes.load(Ordering::Relaxed) as f64,
        ));
    }

    /// With a held snapshot: rate, p99, the Inbox's size and dead tuples before, during and
    /// after the hold, and how long the dead tuples and p99 took to recover.
    fn push_hold(&self, e: &mut Vec<(&'static str, f64)>) {
        let held = *lock(&self.bg.held);
        let (Some(from), Some(until)) = (held.from_s, held.until_s) else {
            return;
        };
        // The phase before the hold starts after half of what precedes it at most, so that
        // a hold taken right after the warm-up still has a "before".
        let rows = &self.samples.rows;
        let h = series::around_hold(rows, self.warm_s.min(from / 2.0), from, until);
        e.push(("hold_from_s", from));
        e.push(("hold_until_s", until));
        for (i, phase) in ["before", "during", "after"].iter().enumerate() {
            eprintln!(
                "held xmin, {phase}: {:.0} rows/s, p99 {:.1} ms",
                h.rate[i], h.p99_ms[i]
            );
        }
        e.push(("hold_rate_before", h.rate[0]));
        e.push(("hold_rate_during", h.rate[1]));
        e.push(("hold_rate_after", h.rate[2]));
        e.push(("hold_p99_ms_before", h.p99_ms[0]));
        e.push(("hold_p99_ms_during", h.p99_ms[1]));
        e.push(("hold_p99_ms_after", h.p99_ms[2]));
        e.push(("hold_inbox_mib_at_start", h.inbox_mib[0]));
        e.push(("hold_inbox_mib_at_end", h.inbox_mib[1]));
        e.push(("hold_inbox_mib_run_end", h.inbox_mib[2]));
        e.push(("hold_inbox_dead_before_max", h.inbox_dead[0]));
        e.push(("hold_inbox_dead_at_end", h.inbox_dead[1]));
        e.push(("hold_inbox_dead_run_end", h.inbox_dead[2]));
        e.push(("hold_dead_recovered_s", h.dead_recovered_s));
        e.push(("hold_p99_recovered_s", h.p99_recovered_s));
    }
}
