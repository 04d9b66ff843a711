//! The result of a run: a readable table, then one JSON line.

use std::fmt::Write as _;

#[derive(Debug, Default)]
pub struct Report {
    pub workload: &'static str,
    pub backend: &'static str,
    pub n: usize,
    pub msgs_per_s: f64,
    pub floor_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub duplicates: u64,
    pub lost: u64,
    /// Extra rows (name, value) for the table and the JSON line.
    pub extra: Vec<(&'static str, f64)>,
    /// Each node's share of the deliveries (node id, share of all), for the table and the
    /// JSON line's `node_shares` object (the `cluster` workload).
    pub node_shares: Vec<(String, f64)>,
}

/// Peak resident set size of this process, MiB (VmHWM), 0 if unknown.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

impl Report {
    pub fn ratio(&self) -> f64 {
        if self.floor_per_s > 0.0 {
            self.msgs_per_s / self.floor_per_s
        } else {
            0.0
        }
    }

    pub fn print(&self) {
        let rss = peak_rss_mib();
        let mut rows: Vec<(&str, String)> = vec![
            ("workload", self.workload.to_owned()),
            ("backend", self.backend.to_owned()),
            ("n", self.n.to_string()),
            ("msgs/s", format!("{:.0}", self.msgs_per_s)),
            ("floor msgs/s", format!("{:.0}", self.floor_per_s)),
            ("ratio", format!("{:.3}", self.ratio())),
            ("p50 ms", format!("{:.3}", self.p50_ms)),
            ("p99 ms", format!("{:.3}", self.p99_ms)),
            ("max ms", format!("{:.3}", self.max_ms)),
            ("peak RSS MiB", format!("{rss:.1}")),
            ("duplicates", self.duplicates.to_string()),
            ("lost", self.lost.to_string()),
        ];
        for (k, v) in &self.extra {
            rows.push((k, format!("{v:.3}")));
        }
        let shares: Vec<(String, String)> = self
            .node_shares
            .iter()
            .map(|(node, share)| (format!("share {node}"), format!("{share:.3}")))
            .collect();
        rows.extend(shares.iter().map(|(k, v)| (k.as_str(), v.clone())));
        println!("+--------------------------+------------------+");
        for (k, v) in &rows {
            println!("| {k:<24} | {v:>16} |");
        }
        println!("+--------------------------+------------------+");
        let mut json = format!(
            "{{\"workload\":\"{}\",\"backend\":\"{}\",\"n\":{},\"msgs_per_s\":{:.1},\"floor_per_s\":{:.1},\"ratio\":{:.4},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\"peak_rss_mib\":{:.1},\"duplicates\":{},\"lost\":{}",
            self.workload,
            self.backend,
            self.n,
            self.msgs_per_s,
            self.floor_per_s,
            self.ratio(),
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            rss,
            self.duplicates,
            self.lost
        );
        for (k, v) in &self.extra {
            let _ = write!(json, ",\"{k}\":{v:.4}");
        }
        if !self.node_shares.is_empty() {
            json.push_str(",\"node_shares\":{");
            for (i, (node, share)) in self.node_shares.iter().enumerate() {
                let sep = if i == 0 { "" } else { "," };
                let _ = write!(json, "{sep}\"{node}\":{share:.4}");
            }
            json.push('}');
        }
        json.push('}');
        println!("{json}");
    }
}
