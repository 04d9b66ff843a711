//! What must hold after every run, read back through the API once the Inbox settled: entity
//! states, the dead-letter listing, the event store, and the storage-boundary log of
//! pick-ups and commits.
//!
//! ```text
//!  no loss            accepted send/post ─► applied | dead letter | dropped by the operator
//!                     (expired: a dead letter with reason "expired", dead_letter_expired on)
//!  per-target order   each target's applied numbers, among those sent in order, increase
//!  exactly once       every number at most once in state + dead letters; one event per
//!                     applied command; each audit instance saw each of its events once,
//!                     in event-store order (live, retried or replayed by a catch-up)
//!  one committer      no (shard, epoch) handed out twice, every commit under an epoch its
//!                     committer picked up, none under an epoch superseded before it began
//!  process manager    every relayed event in exactly one batch its flow's timeout flushed
//!                     to the sink, in event-store order; no timeout handled before it was
//!                     due; no flow left unfinished (its state removed)
//!  outcomes           every outcome read agrees with what happened to the command:
//!                     Handled only if applied (once, with its one event), DeadLettered only
//!                     if dead-lettered, Dropped only if an operator dropped it, Blocked only
//!                     for a poison command under the block policy, Expired only with a TTL,
//!                     never Unknown inside the deduplication window; once settled, the read
//!                     is the end state's (applied ⇒ Handled, dead-lettered ⇒ DeadLettered or
//!                     Expired, dropped ⇒ Dropped)
//!  cancelled rebuild  once a cancelled catch-up ended, each audit instance holds a
//!                     subsequence of its events in event-store order, none twice (the
//!                     settle phase then repairs it with a new catch-up; the checks above
//!                     then want all of them)
//!  re-sharding        a re-sharding that returned Ok left the count it reported recorded
//!                     (the checks above hold across it: rows moved, none lost or doubled)
//!  latency            see `latency.rs` (checked during the settle phase)
//! ```
//!
//! A send that returned `Err` may or may not have been written (a lost acknowledgement): it
//! must then appear at most once.

use super::faulty::FaultyStorage;
use super::model::{Applied, Audit, Gate, Ledger, Relay, Sink};
use shardbox::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// A command the driver sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub kind: &'static str,
    pub target: String,
    pub n: u64,
    pub signal: String,
    /// Whether a send returned `Ok` (after at most three tries with the same signal).
    pub accepted: bool,
    /// Whether it takes part in the per-target order (not delayed, not a dead-lettered one).
    pub ordered: bool,
    pub poison: bool,
    /// Whether it was sent with a time to live.
    pub ttl: bool,
    /// How it was sent (delay, TTL, failures, tries), for the report of a failing seed.
    pub note: String,
}

/// What the driver did, to compare with what the storage holds.
#[derive(Debug, Default)]
pub struct Oracle {
    next: u64,
    pub sent: Vec<Sent>,
    /// Posted numbers and whether the post returned `Ok`.
    pub posted: Vec<(u64, bool)>,
    /// Signals an operator dropped (or tried to: a lost acknowledgement may have dropped it).
    pub dropped: BTreeSet<String>,
    /// Signals an operator requeued from the dead letters (they lose their place in order).
    pub requeued: BTreeSet<String>,
    /// Outcomes read by the senders that awaited them, then by the settled read.
    pub outcomes: Vec<OutcomeRead>,
    /// Catch-up jobs an operator cancelled (or tried to).
    pub cancelled: Vec<i64>,
    /// What each re-sharding returned: (from, to) or the error.
    pub reshards: Vec<Result<(u32, u32), String>>,
}

/// One read of a command's outcome.
#[derive(Debug)]
pub struct OutcomeRead {
    /// The command's index in [`Oracle::sent`].
    pub sent: usize,
    /// Read after the settle phase (everything decided), or by a sender during the run.
    pub settled: bool,
    pub read: Result<CommandOutcome, String>,
}

impl Oracle {
    /// The next number: unique in the run, increasing in send order.
    pub fn next_n(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// Every violation found, each naming its invariant.
pub async fn check(
    sb: &Shardbox,
    faults: &FaultyStorage,
    oracle: &Oracle,
    prefix: &str,
    across_sources: bool,
) -> Vec<String> {
    let mut v = Vec::new();
    if let Err(e) = check_messages(sb, oracle, prefix, across_sources, &mut v).await {
        v.push(format!("could not read the end state: {e}"));
    }
    if let Err(e) = check_relays(sb, prefix, across_sources, &mut v).await {
        v.push(format!("could not read the relays' sinks: {e}"));
    }
    if let Err(e) = check_outcomes(sb, oracle, &mut v).await {
        v.push(format!(
            "could not read the end state for the outcomes: {e}"
        ));
    }
    check_reshards(faults, oracle, &mut v).await;
    check_commits(faults, &mut v);
    v
}

async fn check_messages(
    sb: &Shardbox,
    oracle: &Oracle,
    prefix: &str,
    across_sources: bool,
    v: &mut Vec<String>,
) -> Result<(), DeliveryError> {
    // The end state, as the API shows it.
    let mut applied: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
    for s in &oracle.sent {
        let key = (s.kind, s.target.as_str());
        if applied.contains_key(&key) {
            continue;
        }
        let list = if s.kind == Gate::KIND {
            sb.aggregate_state::<Gate>(&s.target)
                .await?
                .map(|g| g.applied)
        } else {
            sb.aggregate_state::<Ledger>(&s.target)
                .await?
                .map(|l| l.applied)
        };
        applied.insert(key, list.unwrap_or_default());
    }
    let mut dead: BTreeMap<String, usize> = BTreeMap::new();
    for d in sb.dead_letters(DeadLetterFilter::all()).await? {
        let m = &d.letter.original.message;
        if m.target_kind == Audit::KIND {
            v.push(format!(
                "no loss: audit {} dead-lettered an event ({}) though its policy never exhausts",
                m.target_id, d.letter.reason
            ));
        }
        *dead.entry(m.signal_id.0.clone()).or_default() += 1;
    }
    let events = all_events(sb).await?;

    // Each command: no loss, exactly once.
    let mut known: BTreeSet<(&str, &str, u64)> = BTreeSet::new();
    for s in &oracle.sent {
        known.insert((s.kind, s.target.as_str(), s.n));
        let c = applied[&(s.kind, s.target.as_str())]
            .iter()
            .filter(|n| **n == s.n)
            .count();
        let d = dead.get(&s.signal).copied().unwrap_or(0);
        if c + d > 1 {
            v.push(format!(
                "exactly once: {} {} n={} is applied {c} times and dead-lettered {d} times (accepted: {})",
                s.kind, s.target, s.n, s.accepted
            ));
        }
        if s.accepted && c + d == 0 && !oracle.dropped.contains(&s.signal) {
            v.push(format!(
                "no loss: accepted {} {} n={} ({}) is neither applied, dead-lettered nor dropped",
                s.kind, s.target, s.n, s.note
            ));
        }
    }
    for ((kind, target), list) in &applied {
        for n in list {
            if !known.contains(&(*kind, *target, *n)) {
                v.push(format!(
                    "exactly once: {kind} {target} applied n={n} that was never sent to it"
                ));
            }
        }
        // Per-target order, among the commands sent in order.
        let in_order: BTreeSet<u64> = oracle
            .sent
            .iter()
            .filter(|s| s.kind == *kind && s.target == *target)
            .filter(|s| s.ordered && !oracle.requeued.contains(&s.signal))
            .map(|s| s.n)
            .collect();
        let seen: Vec<u64> = list
            .iter()
            .copied()
            .filter(|n| in_order.contains(n))
            .collect();
        if seen.windows(2).any(|w| w[0] >= w[1]) {
            let notes: Vec<String> = oracle
                .sent
                .iter()
                .filter(|s| s.kind == *kind && s.target == *target)
                .map(|s| format!("n={} {}", s.n, s.note))
                .collect();
            v.push(format!(
                "per-target order: {kind} {target} applied {seen:?} (all: {list:?}); sent: {notes:?}"
            ));
        }
    }

    // Events: one per applied command, one per accepted post, none else.
    let mut by_origin: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for (_, e) in &events {
        *by_origin.entry((e.source.clone(), e.n)).or_default() += 1;
    }
    for ((_, target), list) in &applied {
        for n in list {
            let c = by_origin.remove(&((*target).to_owned(), *n)).unwrap_or(0);
            if c != 1 {
                v.push(format!("exactly once: {target} applied n={n} but the event store holds {c} events of it"));
            }
        }
    }
    let source = format!("{prefix}-ext");
    for (n, accepted) in &oracle.posted {
        let c = by_origin.remove(&(source.clone(), *n)).unwrap_or(0);
        if c > 1 || (*accepted && c == 0) {
            v.push(format!("no loss / exactly once: post n={n} (accepted: {accepted}) is in the event store {c} times"));
        }
    }
    for ((source, n), c) in by_origin {
        v.push(format!(
            "exactly once: {c} events of {source} n={n} whose command was never applied"
        ));
    }

    // The projection: each of its events once, in event-store order — across all sources
    // where one writer orders them (`across_sources`), else each source's events in their
    // order (PostgreSQL: the documented guarantee, docs/entities.md "Order across streams").
    let audits: BTreeSet<&str> = events.iter().map(|(_, e)| e.audit.as_str()).collect();
    for audit in audits {
        let expected: Vec<(String, u64)> = events
            .iter()
            .filter(|(_, e)| e.audit == audit)
            .map(|(_, e)| (e.source.clone(), e.n))
            .collect();
        let seen = sb
            .projection_state::<Audit>(audit)
            .await?
            .map(|a| a.seen)
            .unwrap_or_default();
        let in_order = |s: &[(String, u64)]| {
            if across_sources {
                return s.to_vec();
            }
            let mut by_source = s.to_vec();
            by_source.sort_by(|x, y| x.0.cmp(&y.0)); // stable: each source's order kept
            by_source
        };
        if in_order(&seen) != in_order(&expected) {
            let mut a = seen.clone();
            let mut b = expected.clone();
            a.sort();
            b.sort();
            let what = if a == b {
                "per-target order"
            } else {
                "exactly once / no loss"
            };
            v.push(format!(
                "{what}: audit {audit} saw {seen:?}, the event store holds {expected:?} in this order"
            ));
        }
    }
    Ok(())
}

/// The end state as lines (every target's applied numbers, every audit instance, the dead
/// letters and the events), for the determinism check.
pub async fn end_state(sb: &Shardbox, oracle: &Oracle, prefix: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let targets: BTreeSet<(&str, &str)> = oracle
        .sent
        .iter()
        .map(|s| (s.kind, s.target.as_str()))
        .collect();
    for (kind, target) in targets {
        let list = if kind == Gate::KIND {
            sb.aggregate_state::<Gate>(target)
                .await
                .map(|g| g.map(|g| g.applied))
        } else {
            sb.aggregate_state::<Ledger>(target)
                .await
                .map(|l| l.map(|l| l.applied))
        };
        lines.push(format!("state {kind} {target}: {list:?}"));
    }
    for a in 0..3 {
        let audit = format!("{prefix}-A{a}");
        let seen = sb
            .projection_state::<Audit>(&audit)
            .await
            .map(|a| a.map(|a| a.seen));
        lines.push(format!("state audit {audit}: {seen:?}"));
    }
    match sb.dead_letters(DeadLetterFilter::all()).await {
        Ok(dead) => lines.extend(dead.iter().map(|d| {
            let m = &d.letter.original.message;
            format!(
                "dead {} {}/{}: {}",
                m.signal_id.0, m.target_kind, m.target_id, d.letter.reason
            )
        })),
        Err(e) => lines.push(format!("dead letters unreadable: {e}")),
    }
    match all_events(sb).await {
        Ok(events) => lines.extend(events.iter().map(|(seq, e)| format!("event {seq}: {e:?}"))),
        Err(e) => lines.push(format!("events unreadable: {e}")),
    }
    lines
}

/// Every `Applied` event in the store, in `seq` order.
async fn all_events(sb: &Shardbox) -> Result<Vec<(i64, Applied)>, DeliveryError> {
    let types = [<Applied as Message>::TYPE.to_owned()];
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = sb.storage().read_events(after, &types, None, 500).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in page {
            let applied: Applied = serde_json::from_slice(&e.event.payload).map_err(|err| {
                shardbox::StorageError::Corrupt(format!("event {} does not parse: {err}", e.seq))
            })?;
            out.push((e.seq, applied));
        }
    }
    Ok(out)
}

/// One committer per (shard, epoch), and commits fenced by the epoch.
fn check_commits(faults: &FaultyStorage, v: &mut Vec<String>) {
    for dup in faults.duplicate_pick_ups() {
        v.push(format!("one committer per (shard, epoch): {dup}"));
    }
    let picked = faults.picked();
    let mut committers: BTreeMap<(u32, i64), BTreeSet<(String, u32)>> = BTreeMap::new();
    for c in faults.commits() {
        committers
            .entry((c.shard, c.epoch))
            .or_default()
            .insert(c.holder.clone());
        match picked.get(&(c.shard, c.epoch)) {
            Some(h) if *h == c.holder => {}
            other => v.push(format!(
                "one committer per (shard, epoch): {:?} committed on shard {} under epoch {} picked up by {other:?}",
                c.holder, c.shard, c.epoch
            )),
        }
        if let Some(newer) = c.superseded_by {
            v.push(format!(
                "fenced commit: {:?} committed on shard {} under epoch {} after epoch {newer} was picked up",
                c.holder, c.shard, c.epoch
            ));
        }
    }
    for ((shard, epoch), holders) in committers {
        if holders.len() > 1 {
            v.push(format!("one committer per (shard, epoch): shard {shard} epoch {epoch} committed by {holders:?}"));
        }
    }
}

/// Once every cancelled catch-up has ended, before the repair: each audit instance holds a
/// subsequence of its events in event-store order, none twice (a cancelled rebuild is partial,
/// never doubled or reordered).
pub async fn check_cancelled_rebuilds(
    sb: &Shardbox,
    oracle: &Oracle,
    prefix: &str,
    across_sources: bool,
) -> Result<Vec<String>, DeliveryError> {
    let mut v = Vec::new();
    let events = all_events(sb).await?;
    for a in 0..3 {
        let audit = format!("{prefix}-A{a}");
        let expected: Vec<(String, u64)> = events
            .iter()
            .filter(|(_, e)| e.audit == audit)
            .map(|(_, e)| (e.source.clone(), e.n))
            .collect();
        let seen = sb
            .projection_state::<Audit>(&audit)
            .await?
            .map(|a| a.seen)
            .unwrap_or_default();
        // Across sources where one writer orders them, else each source's own order.
        let subsequence = if across_sources {
            let mut rest = expected.iter();
            seen.iter().all(|x| rest.any(|e| e == x))
        } else {
            let sources: BTreeSet<&String> = seen.iter().map(|(s, _)| s).collect();
            sources.into_iter().all(|source| {
                let mut rest = expected.iter().filter(|(s, _)| s == source);
                seen.iter()
                    .filter(|(s, _)| s == source)
                    .all(|x| rest.any(|e| e == x))
            })
        };
        if !subsequence {
            v.push(format!(
                "cancelled rebuild: after cancelling catch-ups {:?}, audit {audit} saw {seen:?}, not a subsequence of its events {expected:?}",
                oracle.cancelled
            ));
        }
    }
    Ok(v)
}

/// The relays: every relayed event in exactly one flushed batch of its flow's sink, in
/// event-store order — across all sources where one writer orders them (`across_sources`),
/// else each source's events in their order (PostgreSQL: a process manager is a multi-stream
/// target like the projection, docs/entities.md "Order across streams") — no timeout early,
/// no flow unfinished.
async fn check_relays(
    sb: &Shardbox,
    prefix: &str,
    across_sources: bool,
    v: &mut Vec<String>,
) -> Result<(), DeliveryError> {
    let events = all_events(sb).await?;
    for r in 0..2 {
        let relay = format!("{prefix}-R{r}");
        let relayed: Vec<&Applied> = events
            .iter()
            .filter(|(_, e)| e.relay.as_deref() == Some(relay.as_str()))
            .map(|(_, e)| e)
            .collect();
        let expected: Vec<u64> = relayed.iter().map(|e| e.n).collect();
        // Every event's `n` is the workload's own, unique in a run.
        let source_of: BTreeMap<u64, &str> =
            relayed.iter().map(|e| (e.n, e.source.as_str())).collect();
        let in_order = |ns: &[u64]| {
            let mut ns = ns.to_vec();
            if !across_sources {
                // Stable: each source's order kept.
                ns.sort_by_key(|n| source_of.get(n).copied().unwrap_or(""));
            }
            ns
        };
        let batches = sb
            .aggregate_state::<Sink>(&relay)
            .await?
            .map(|s| s.batches)
            .unwrap_or_default();
        let flushed: Vec<u64> = batches.iter().flat_map(|b| b.ns.iter().copied()).collect();
        if in_order(&flushed) != in_order(&expected) {
            let (mut a, mut b) = (flushed.clone(), expected.clone());
            a.sort_unstable();
            b.sort_unstable();
            let what = if a == b {
                "process manager (per-target order)"
            } else {
                "process manager (exactly once / no loss)"
            };
            v.push(format!(
                "{what}: relay {relay} flushed {batches:?}, its events are {expected:?} in event-store order"
            ));
        }
        for b in batches.iter().filter(|b| b.early_ms > 0 || b.ns.is_empty()) {
            v.push(format!(
                "process manager (timeouts): relay {relay} flushed {:?} {} ms before its timeout was due",
                b.ns, b.early_ms
            ));
        }
        if let Some(state) = sb.process_state::<Relay>(&relay).await? {
            v.push(format!(
                "process manager (timeouts): relay {relay} is still running after the settle phase (its timeout never finished it): {state:?}"
            ));
        }
    }
    Ok(())
}

/// Every outcome read agrees with what happened to its command (see the module doc).
async fn check_outcomes(
    sb: &Shardbox,
    oracle: &Oracle,
    v: &mut Vec<String>,
) -> Result<(), DeliveryError> {
    let mut applied: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
    for s in &oracle.sent {
        let key = (s.kind, s.target.as_str());
        if applied.contains_key(&key) {
            continue;
        }
        let list = if s.kind == Gate::KIND {
            sb.aggregate_state::<Gate>(&s.target)
                .await?
                .map(|g| g.applied)
        } else {
            sb.aggregate_state::<Ledger>(&s.target)
                .await?
                .map(|l| l.applied)
        };
        applied.insert(key, list.unwrap_or_default());
    }
    let mut dead: BTreeMap<String, usize> = BTreeMap::new();
    for d in sb.dead_letters(DeadLetterFilter::all()).await? {
        *dead
            .entry(d.letter.original.message.signal_id.0.clone())
            .or_default() += 1;
    }
    for r in &oracle.outcomes {
        let s = &oracle.sent[r.sent];
        let c = applied[&(s.kind, s.target.as_str())]
            .iter()
            .filter(|n| **n == s.n)
            .count();
        let d = dead.get(&s.signal).copied().unwrap_or(0);
        let requeued = oracle.requeued.contains(&s.signal);
        let dropped = oracle.dropped.contains(&s.signal);
        let wrong = match &r.read {
            Ok(CommandOutcome::Handled { events }) => (c != 1 || events.len() != 1)
                .then_some("Handled, but it was not applied once with its one event"),
            Ok(CommandOutcome::DeadLettered { .. }) => (d == 0 && !requeued).then_some(
                "DeadLettered, but it is not in the dead letters and was never requeued from them",
            ),
            Ok(CommandOutcome::Dropped { .. }) => (!dropped || c > 0)
                .then_some("Dropped, but no operator dropped it (or it was applied)"),
            Ok(CommandOutcome::Blocked { .. }) => (s.kind != Gate::KIND || !s.poison)
                .then_some("Blocked, but it is no poison command under the block policy"),
            Ok(CommandOutcome::Expired) => (!s.ttl || (c > 0 && !requeued))
                .then_some("Expired, but it had no TTL (or was applied)"),
            Ok(CommandOutcome::Unknown) => Some("Unknown inside the deduplication window"),
            Ok(_) => Some("an outcome the simulation does not know"),
            Err(_) if r.settled => Some("not decided after the settle phase"),
            Err(_) => None,
        };
        let settled_wrong = match (&r.read, r.settled) {
            (Ok(o), true) => {
                let ok = if c == 1 {
                    matches!(o, CommandOutcome::Handled { .. })
                } else if d > 0 {
                    matches!(
                        o,
                        CommandOutcome::DeadLettered { .. } | CommandOutcome::Expired
                    )
                } else if dropped {
                    matches!(o, CommandOutcome::Dropped { .. })
                } else {
                    true
                };
                (!ok).then_some("not the end state's outcome")
            }
            _ => None,
        };
        if let Some(why) = wrong.or(settled_wrong) {
            v.push(format!(
                "outcomes: {} {} n={} ({}) read {:?} ({}): {why} (applied {c}, dead-lettered {d}, requeued {requeued}, dropped {dropped})",
                s.kind,
                s.target,
                s.n,
                s.note,
                r.read,
                if r.settled { "settled" } else { "awaited by its sender" },
            ));
        }
    }
    Ok(())
}

/// A re-sharding that returned Ok (the last one) left its count recorded.
async fn check_reshards(faults: &FaultyStorage, oracle: &Oracle, v: &mut Vec<String>) {
    use shardbox::core::storage::WorkRegistry;
    if let Some(Ok((from, to))) = oracle.reshards.last() {
        match faults.recorded_shard_count().await {
            Ok(Some(count)) if count == *to => {}
            other => v.push(format!(
                "re-sharding: {from} -> {to} returned Ok, but the recorded count is {other:?}"
            )),
        }
    }
}
