//! The live-delivery station.
//!
//! ```text
//!  open to_deliver rows ─► expired? ─► duplicate? (page, recent-delivery cache)
//!        ─► kind paused? (parked until the resume)
//!        ─► target blocked? (parked) ─► waiting behind a retry? (hold until it)
//!        ─► kind registered? (else failure)
//!        ─► group by target, seq order ─► load states once ─► handler(batch) once per target,
//!           the targets concurrently (see `batches`)
//!        ─► Delivered / RetryAt / DeadLetter / Drop / Block, later rows of a failed target
//!           held until its retry, or parked behind its block until an operator acts
//! ```
//!
//! A row behind a blocked message is parked ([`Intent::BehindBlock`]): written once, not
//! read again while the block lasts, and made due by the unblock together with every other
//! row of its target, so that they go on in `seq` order. Holding them "a poll interval from
//! now" instead rewrote each one every poll interval, and staggered their due times by when
//! each stage read them, which delivered them out of order after the unblock.
//!
//! Duplicates already kept as delivered rows never reach a page: the Inbox's unique key
//! (tenant, target, signal) refuses them at write. This station catches the rest: duplicates
//! within one page and rows whose key the cache remembers from another row.
//!
//! ```text
//!  mod     LiveDelivery: the page sorted, the targets' batches run (this file)
//!  settle  what a target's result becomes on the Conveyor: state, emitted messages, intents
//!  in_transaction  a target's writes for the commit's transaction (SQL projections), with
//!          what its rows become if they fail
//! ```

mod in_transaction;
mod settle;

use crate::batches::{run_batches, Batch, InFlight};
use crate::dedup::RecentDeliveries;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use settle::{apply_result, record_outcomes, unhandled_outcomes};
use shardbox_core::storage::{EntityKey, EntityState};
use shardbox_core::{
    BatchResult, Conveyor, DeliveryError, InboxMessage, Intent, MessageStatus, Station,
    StationContext,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Delivers the page's live messages to their handlers.
#[derive(Debug, Clone)]
pub struct LiveDelivery {
    recent: RecentDeliveries,
    /// The bound on handler calls in flight over every worker (`max_in_flight_handlers`).
    in_flight: InFlight,
}

impl LiveDelivery {
    /// A station remembering recent deliveries in `recent`.
    pub fn new(recent: RecentDeliveries) -> Self {
        LiveDelivery {
            recent,
            in_flight: InFlight::default(),
        }
    }
}

fn target_of(m: &InboxMessage) -> EntityKey {
    EntityKey {
        kind: m.message.target_kind.clone(),
        tenant: m.message.tenant.clone(),
        id: m.message.target_id.clone(),
    }
}

/// The page's open rows sorted for delivery: what needs no handler, decided, and the rest
/// grouped by target, each target's rows in `seq` order.
#[derive(Default)]
struct SortedRows {
    decided: Vec<(usize, Intent)>,
    batches: BTreeMap<EntityKey, Vec<usize>>,
}

/// A target's rows (indices into the page) and, if its kind is registered here, the result
/// of its handler's call.
type TargetResult = ((EntityKey, Vec<usize>), Option<BatchResult>);

impl LiveDelivery {
    /// Pass 1: decides what needs no handler (expired, duplicate, behind a block, waiting
    /// behind a retry) and groups the rest by target in seq order.
    fn sort_rows(&self, conveyor: &Conveyor, now: DateTime<Utc>) -> SortedRows {
        let waiting: HashMap<EntityKey, DateTime<Utc>> =
            conveyor.waiting().iter().cloned().collect();
        let blocked: HashSet<EntityKey> = conveyor.blocked().iter().cloned().collect();
        let kinds = conveyor.context().kinds();
        let any_paused = kinds.any_paused();
        let mut sorted = SortedRows::default();
        let mut seen = HashSet::new();
        for (i, m) in conveyor.open().filter(|(_, m)| {
            matches!(
                m.status,
                MessageStatus::ToDeliver | MessageStatus::ToCatchUp
            )
        }) {
            if m.is_expired(now) {
                sorted.decided.push((i, Intent::Expired));
                continue;
            }
            let key = m.dedup_key();
            if !seen.insert(key.clone()) || self.recent.is_duplicate(&key, m.seq, now) {
                sorted.decided.push((i, Intent::Duplicate));
                continue;
            }
            // A paused kind's live rows wait, untouched, for the resume (a catch-up's rows go
            // on: the job is stopped by cancelling it).
            if any_paused
                && m.status == MessageStatus::ToDeliver
                && kinds.is_paused(&m.message.target_kind)
            {
                sorted.decided.push((i, Intent::Paused));
                continue;
            }
            let target = target_of(m);
            // Blocked first: a parked row with failed attempts reports its target as
            // waiting too, with no time to wait for.
            if blocked.contains(&target) {
                sorted.decided.push((i, Intent::BehindBlock));
                continue;
            }
            if let Some(until) = waiting.get(&target) {
                sorted.decided.push((i, Intent::Hold { until: *until }));
                continue;
            }
            sorted.batches.entry(target).or_default().push(i);
        }
        sorted
    }

    /// Pass 2: one handler call per target, the targets at once. Returns the targets with
    /// their results in the targets' order, then those whose kind no handler here serves.
    async fn run_targets(
        &self,
        conveyor: &Conveyor,
        env: &Arc<StationContext>,
        batches: BTreeMap<EntityKey, Vec<usize>>,
        now: DateTime<Utc>,
    ) -> Result<Vec<TargetResult>, DeliveryError> {
        let mut states = load_states(env, &batches).await?;
        let mut handled = Vec::new();
        let mut unhandled = Vec::new();
        for (target, rows) in batches {
            match env.registry().handler(&target.kind) {
                Some(handler) => {
                    let page = conveyor.page();
                    let batch = Batch {
                        handler: handler.clone(),
                        state: states.remove(&target),
                        messages: rows
                            .iter()
                            .map(|&i| page[i].clone())
                            .collect::<Vec<_>>()
                            .into(),
                    };
                    handled.push((target, rows, batch));
                }
                None => unhandled.push((target, rows)),
            }
        }
        let (keys, batches): (Vec<_>, Vec<_>) = handled
            .into_iter()
            .map(|(target, rows, batch)| ((target, rows), batch))
            .unzip();
        let results = run_batches(env, &self.in_flight, batches, now).await;
        Ok(keys
            .into_iter()
            .zip(results.into_iter().map(Some))
            .chain(unhandled.into_iter().map(|key| (key, None)))
            .collect())
    }
}

/// Loads the states of every stateful target with one storage call.
async fn load_states(
    env: &StationContext,
    batches: &BTreeMap<EntityKey, Vec<usize>>,
) -> Result<HashMap<EntityKey, EntityState>, DeliveryError> {
    let stateful: Vec<EntityKey> = batches
        .keys()
        .filter(|k| {
            env.registry()
                .handler(&k.kind)
                .is_some_and(|h| h.is_stateful())
        })
        .cloned()
        .collect();
    let mut states: HashMap<EntityKey, EntityState> = HashMap::new();
    if !stateful.is_empty() {
        for s in env.load_states(&stateful).await? {
            states.insert(s.key.clone(), s);
        }
    }
    Ok(states)
}

#[async_trait]
impl Station for LiveDelivery {
    fn name(&self) -> &str {
        "live-delivery"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        let now = conveyor.now();
        let env = conveyor.context().clone();
        let SortedRows { decided, batches } = self.sort_rows(conveyor, now);
        for (i, intent) in decided {
            conveyor.record(i, intent);
        }
        let targets = self.run_targets(conveyor, &env, batches, now).await?;
        // Remembered as recent deliveries only once the stage committed (see
        // `Conveyor::after_commit`).
        let mut delivered = Vec::new();
        for ((target, rows), result) in targets {
            let writes = result.as_ref().and_then(|r| r.in_transaction.clone());
            let outcomes = match result {
                Some(result) => apply_result(conveyor, &env, &target, result, now),
                None => unhandled_outcomes(&env, &target, rows.len()),
            };
            match writes {
                Some(writes) => {
                    // Delivered only if its writes commit: not remembered as a recent
                    // delivery (a failed write leaves the row due again, same seq).
                    record_outcomes(conveyor, &target, &rows, outcomes, now, &mut Vec::new());
                    in_transaction::put(conveyor, &target, &rows, writes);
                }
                None => record_outcomes(conveyor, &target, &rows, outcomes, now, &mut delivered),
            }
        }
        if !delivered.is_empty() {
            let recent = self.recent.clone();
            conveyor.after_commit(move || {
                for (key, seq, keep_until) in delivered {
                    recent.remember(key, seq, keep_until);
                }
            });
        }
        Ok(())
    }
}
