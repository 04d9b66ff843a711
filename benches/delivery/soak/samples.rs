//! The run's samples: every `--sample-secs`, one row of rates, latency, process and database
//! figures, printed and kept for the slopes at the end.

use super::background::Background;
use super::fleet::Fleet;
use super::mix::Sent;
use super::model::{self, LATENCY};
use super::probe::{self, Probe};
use super::series::Row;
use hdrhistogram::Histogram;
use shardbox::core::sync::lock;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// The rows taken so far, the latency over the whole run, and what the last row counted
/// (its time, messages sent, rows delivered), which the next row's rates start from.
pub(super) struct Samples {
    pub(super) rows: Vec<Row>,
    pub(super) total: Histogram<u64>,
    last_t: f64,
    last_sent: u64,
    last_delivered: u64,
}

impl Samples {
    pub(super) fn new() -> Self {
        Samples {
            rows: Vec::new(),
            total: model::histogram(),
            last_t: 0.0,
            last_sent: 0,
            last_delivered: 0,
        }
    }

    /// When the last row was taken (seconds since the start; 0 before the first).
    pub(super) fn last_t(&self) -> f64 {
        self.last_t
    }

    /// Takes the row of time `t`, with `note`: the latency since the last row (the run's
    /// histogram swapped for a fresh one), the rates since it, the process's and the
    /// database's figures; prints and keeps it.
    pub(super) async fn take(
        &mut self,
        t: f64,
        note: String,
        sent: &Mutex<Sent>,
        fleet: &Fleet,
        probe: &Probe,
        bg: &Background,
    ) -> Result<(), String> {
        let h = lock(&LATENCY).replace(model::histogram());
        let (p50, p99) = match &h {
            Some(h) if !h.is_empty() => {
                let _ = self.total.add(h);
                (
                    h.value_at_quantile(0.5) as f64 / 1e3,
                    h.value_at_quantile(0.99) as f64 / 1e3,
                )
            }
            _ => (0.0, 0.0),
        };
        let (rss_mib, fds, threads) = probe::process();
        let sent_now = lock(sent).messages;
        let delivered = fleet.totals().delivered;
        let dt = (t - self.last_t).max(1e-9);
        let row = Row {
            t_s: t,
            sent_per_s: (sent_now - self.last_sent) as f64 / dt,
            delivered_per_s: (delivered - self.last_delivered) as f64 / dt,
            p50_ms: p50,
            p99_ms: p99,
            rss_mib,
            fds,
            threads,
            db: probe.sample().await?,
            vacuum_ms: bg.vacuums.longest_ms.swap(0, Ordering::Relaxed),
            note,
        };
        println!("{}", row.line());
        self.rows.push(row);
        (self.last_t, self.last_sent, self.last_delivered) = (t, sent_now, delivered);
        Ok(())
    }
}
