//! `shardbox status`: the one screen an operator reads first, as a text table. What it shows
//! is read by the shared status view (`shardbox_admin::views::status`), which the HTTP API
//! and the dashboard serve too.
//!
//! ```text
//!  title ─ summary line (pending, lag, nodes, leases) ─ what needs attention, or "nothing"
//!  nodes table
//!  shards table: the busy shards (a lease held or a row pending) and the totals; idle
//!                shards counted in one line (--all-shards lists them: hundreds of shards
//!                would not fit one screen)
//!  by kind: pending rows, blocked targets, dead letters per entity kind
//!  dead letters, blocked targets, running catch-ups
//! ```

use crate::table::Table;
use crate::when::human;
use chrono::{DateTime, Utc};
use shardbox_admin::views::status::{DepthView, Status};

/// An optional time as an age before `now` ("12.0s ago"), or "-".
fn ago(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map_or_else(|| "-".into(), |t| format!("{} ago", human(now - t)))
}

/// The lag column: "-" when nothing is due.
fn lag(d: &DepthView) -> String {
    if d.due == 0 {
        "-".into()
    } else {
        human(chrono::TimeDelta::milliseconds(d.lag_ms))
    }
}

/// The summary line and what needs attention (the status view's own list, which the
/// dashboard's banner shows too), each line ending in a newline.
fn summary(status: &Status) -> String {
    let t = &status.totals;
    let live = status.live_nodes;
    let held = status.leases_held;
    let shards = status.shard_count.map_or_else(
        || "no shard count recorded".to_owned(),
        |n| format!("{n} shards"),
    );
    let mut out = format!(
        "summary: {shards}; {} pending ({} due, lag {}), {} delivered kept for dedup; {} live node{}, {} lease{} held\n",
        t.pending(),
        t.due,
        lag(t),
        t.delivered,
        live,
        if live == 1 { "" } else { "s" },
        held,
        if held == 1 { "" } else { "s" },
    );
    if status.attention.is_empty() {
        out.push_str("attention: nothing needs it\n");
    } else {
        for a in &status.attention {
            out.push_str(&format!("attention: {}\n", a.line()));
        }
    }
    out
}

/// The text screen of `status`: every shard's row with `all_shards`, else only the busy ones.
pub fn render(status: &Status, all_shards: bool) -> String {
    let now = status.now;
    let mut out = format!(
        "shardbox status of {} at {}\n",
        status.database,
        now.format("%Y-%m-%d %H:%M:%S UTC")
    );
    out.push_str(&summary(status));
    out.push('\n');
    out.push_str(&nodes(status));
    out.push_str(&shards(status, all_shards));
    out.push_str(&by_kind(status));
    out.push_str(&dead_letters_and_catch_ups(status));
    out
}

/// The nodes table (or why there is none).
fn nodes(status: &Status) -> String {
    let now = status.now;
    let mut out = String::new();
    out.push_str(&format!("nodes ({})\n", status.nodes_source));
    if status.nodes.is_empty() {
        out.push_str("  none: no node is alive and no shard was ever leased\n");
    } else {
        let mut t = Table::new([
            "node",
            "last heartbeat",
            "member since",
            "leases held",
            "last pick-up",
            "last lease end",
        ]);
        for n in &status.nodes {
            let heartbeat = if n.member {
                ago(n.last_heartbeat, now)
            } else {
                "- (not a member)".into()
            };
            t.row(vec![
                n.node.clone(),
                heartbeat,
                ago(n.started_at, now),
                n.leases_held.to_string(),
                ago(n.last_picked_at, now),
                lease_end(n.last_lease_until, now),
            ]);
        }
        out.push_str(&t.render());
    }
    out
}

/// A depth's cells of the shards table, from `due` to `lag`.
fn depth_cells(d: &DepthView) -> Vec<String> {
    vec![
        d.due.to_string(),
        d.delayed.to_string(),
        d.retrying.to_string(),
        d.parked.to_string(),
        d.replay.to_string(),
        d.blocked.to_string(),
        d.delivered.to_string(),
        lag(d),
    ]
}

/// The shards table: the busy shards (every one with `all_shards`), the totals, and a
/// line counting the idle shards left out.
fn shards(status: &Status, all_shards: bool) -> String {
    let now = status.now;
    let mut out = String::new();
    out.push_str("\nshards (depth by what the rows wait for; lag = age of the oldest due row)\n");
    let mut t = Table::new([
        "shard",
        "owner",
        "epoch",
        "lease",
        "picked",
        "due",
        "delayed",
        "retrying",
        "parked",
        "replay",
        "blocked",
        "delivered",
        "lag",
    ]);
    let mut idle = 0usize;
    for s in &status.shards {
        if !all_shards && !s.held && s.depth.pending() == 0 {
            idle += 1;
            continue;
        }
        let owner = match (&s.owner, s.worker) {
            (Some(n), Some(w)) => format!("{n}/w{w}"),
            (Some(n), None) => n.clone(),
            _ => "-".into(),
        };
        let lease = if s.held {
            format!("held, {}", lease_end(s.lease_until, now))
        } else {
            "free".into()
        };
        let mut row = vec![
            s.shard.to_string(),
            owner,
            s.epoch.to_string(),
            lease,
            ago(s.picked_at, now),
        ];
        row.extend(depth_cells(&s.depth));
        t.row(row);
    }
    let mut total = vec![
        "all".into(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    ];
    total.extend(depth_cells(&status.totals));
    t.row(total);
    out.push_str(&t.render());
    if idle > 0 {
        out.push_str(&format!(
            "  + {idle} idle shard{} not listed (nothing pending, lease free; --all-shards lists them)\n",
            if idle == 1 { "" } else { "s" }
        ));
    }
    out
}

/// The kinds with pending rows or dead letters (the dashboard's Kinds table shows the same).
fn by_kind(status: &Status) -> String {
    if status.by_kind.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nby kind (pending rows, blocked targets and dead letters)\n");
    let mut t = Table::new(["kind", "due", "waiting", "blocked", "dead letters", "lag"]);
    for k in &status.by_kind {
        t.row(vec![
            k.kind.clone().unwrap_or_else(|| "(other kinds)".into()),
            k.due.to_string(),
            k.waiting.to_string(),
            k.blocked_targets.to_string(),
            k.dead_letters.to_string(),
            if k.due == 0 {
                "-".into()
            } else {
                human(chrono::TimeDelta::milliseconds(k.lag_ms))
            },
        ]);
    }
    out.push_str(&t.render());
    out
}

/// The dead letters, blocked targets and running catch-ups (each catch-up's progress).
fn dead_letters_and_catch_ups(status: &Status) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\ndead letters: {}   blocked targets: {}   running catch-ups: {}\n",
        status.dead_letters,
        status.blocked_targets,
        status.running_catch_ups.len()
    ));
    for c in &status.running_catch_ups {
        out.push_str(&format!(
            "  catch-up {} of {}: {} — {} of ~{} replayed, {:.0}/s{}\n",
            c.id,
            c.projection_kind,
            c.status,
            c.replayed,
            c.total_estimate,
            c.rate,
            c.eta_s
                .map(|s| format!(
                    ", ETA {}",
                    human(chrono::TimeDelta::milliseconds((s * 1000.0) as i64))
                ))
                .unwrap_or_default()
        ));
    }
    out
}

/// When a lease ends or ended, relative to `now`.
fn lease_end(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match until {
        None => "-".into(),
        Some(u) if u > now => format!("ends in {}", human(u - now)),
        Some(u) => format!("ended {} ago", human(now - u)),
    }
}
