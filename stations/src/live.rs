//! The live-delivery station.
//!
//! ```text
//!  open to_deliver rows ─► expired? ─► duplicate? (page, recent-delivery cache)
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

use crate::batches::{run_batches, Batch, InFlight};
use crate::dedup::RecentDeliveries;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardbox_core::storage::{DeadLetter, EntityKey, EntityStateWrite};
use shardbox_core::NewMessage;
use shardbox_core::{
    Conveyor, DeliveryError, FailureAction, FailureDecision, FailureInfo, HandlerError,
    InboxMessage, Intent, MessageKind, MessageOutcome, MessageStatus, NewEvent, ShardIndex,
    Station,
};
use std::collections::{BTreeMap, HashMap, HashSet};

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

/// Decides a failed message's fate: the monitor first, then the kind's policy.
fn decide(conveyor: &Conveyor, m: &InboxMessage, error: &HandlerError) -> Intent {
    let env = conveyor.context();
    let now = conveyor.now();
    let attempts = m.attempts.saturating_add(1);
    let action = env.monitor().on_handler_failure(&FailureInfo {
        message: m,
        error,
        attempts,
        now,
    });
    let decision = match action {
        FailureAction::FollowPolicy => env.config().policy_of(&m.message.target_kind).decide(
            attempts,
            error.next_attempt(),
            now,
        ),
        FailureAction::RetryAt(at) => FailureDecision::RetryAt(at.max(now)),
        FailureAction::DeadLetter => FailureDecision::DeadLetter,
        FailureAction::Drop => FailureDecision::Drop,
        FailureAction::Block => FailureDecision::Block,
        FailureAction::MarkDelivered => {
            return Intent::Delivered {
                keep_until: keep_until(conveyor),
            }
        }
    };
    // The error's text: its reason, said to be permanent for a permanent failure.
    let reason = error.to_string();
    match decision {
        FailureDecision::RetryAt(at) => Intent::RetryAt { at, error: reason },
        FailureDecision::DeadLetter => Intent::DeadLetter { reason },
        FailureDecision::Drop => Intent::Drop { reason },
        FailureDecision::Block => Intent::Block { reason },
    }
}

fn keep_until(conveyor: &Conveyor) -> Option<DateTime<Utc>> {
    let config = conveyor.context().config();
    (!config.dedup_window.is_zero()).then(|| conveyor.now() + config.dedup_span())
}

/// What becomes of the rows behind a failed row of the same target.
fn behind(intent: &Intent, now: DateTime<Utc>) -> Intent {
    match intent {
        Intent::RetryAt { at, .. } => Intent::Hold { until: *at },
        Intent::Hold { until } => Intent::Hold { until: *until },
        // Blocked until an operator acts: parked, released by the unblock.
        Intent::Block { .. } => Intent::BehindBlock,
        // The failed row left the way (dead letter, drop, delivered): the rest go on at once.
        _ => Intent::Hold { until: now },
    }
}

/// The dead letter of an emitted event's copy that subscriber `kind` could not route: kept
/// with the event's payload so an operator can see and replay it.
fn unroutable_copy(
    event: &NewEvent,
    kind: &str,
    reason: String,
    emitter: &EntityKey,
    now: DateTime<Utc>,
) -> DeadLetter {
    let message = NewMessage {
        signal_id: event.id.clone(),
        kind: MessageKind::Event,
        target_kind: kind.to_owned(),
        target_id: String::new(),
        tenant: event.tenant.clone(),
        payload: event.payload.clone(),
        payload_type: event.event_type.clone(),
        metadata: event.metadata.clone(),
        received_at: now,
        deliver_after: None,
        expires_at: None,
    };
    DeadLetter {
        original: InboxMessage::fresh(0, ShardIndex(0), message),
        reason: format!(
            "event emitted by {}/{} could not be routed to `{kind}`: {reason}",
            emitter.kind, emitter.id
        ),
        attempts: 0,
        first_attempt_at: None,
        last_attempt_at: now,
    }
}

#[async_trait]
impl Station for LiveDelivery {
    fn name(&self) -> &str {
        "live-delivery"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        let now = conveyor.now();
        let env = conveyor.context().clone();
        let waiting: HashMap<EntityKey, DateTime<Utc>> =
            conveyor.waiting().iter().cloned().collect();
        let blocked: HashSet<EntityKey> = conveyor.blocked().iter().cloned().collect();

        // Pass 1: decide what needs no handler, group the rest by target in seq order.
        let mut decided: Vec<(usize, Intent)> = Vec::new();
        let mut batches: BTreeMap<EntityKey, Vec<usize>> = BTreeMap::new();
        let mut seen = HashSet::new();
        for (i, m) in conveyor.open().filter(|(_, m)| {
            matches!(
                m.status,
                MessageStatus::ToDeliver | MessageStatus::ToCatchUp
            )
        }) {
            if m.is_expired(now) {
                decided.push((i, Intent::Expired));
                continue;
            }
            let key = m.dedup_key();
            if !seen.insert(key.clone()) || self.recent.is_duplicate(&key, m.seq, now) {
                decided.push((i, Intent::Duplicate));
                continue;
            }
            let target = target_of(m);
            // Blocked first: a parked row with failed attempts reports its target as
            // waiting too, with no time to wait for.
            if blocked.contains(&target) {
                decided.push((i, Intent::BehindBlock));
                continue;
            }
            if let Some(until) = waiting.get(&target) {
                decided.push((i, Intent::Hold { until: *until }));
                continue;
            }
            batches.entry(target).or_default().push(i);
        }
        for (i, intent) in decided {
            conveyor.record(i, intent);
        }

        // Load the states of every stateful target with one storage call.
        let stateful: Vec<EntityKey> = batches
            .keys()
            .filter(|k| {
                env.registry()
                    .handler(&k.kind)
                    .is_some_and(|h| h.is_stateful())
            })
            .cloned()
            .collect();
        let mut states: HashMap<EntityKey, Vec<u8>> = HashMap::new();
        if !stateful.is_empty() {
            for s in env.load_states(&stateful).await? {
                states.insert(s.key, s.state);
            }
        }

        // Pass 2: one handler call per target, the targets at once; their results are
        // recorded in the targets' order.
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
        let results = run_batches(&env, &self.in_flight, batches, now).await;
        let targets = keys
            .into_iter()
            .zip(results.into_iter().map(Some))
            .chain(unhandled.into_iter().map(|key| (key, None)));
        // Remembered as recent deliveries only once the stage committed (see
        // `Conveyor::after_commit`).
        let mut delivered = Vec::new();
        for ((target, rows), result) in targets {
            let outcomes: Vec<MessageOutcome> = match result {
                Some(result) => {
                    if result.finished {
                        // A finished process: its state goes with the stage.
                        conveyor.set_state(EntityStateWrite {
                            key: target.clone(),
                            state: None,
                        });
                    } else if let Some(state) = result.state {
                        conveyor.set_state(EntityStateWrite {
                            key: target.clone(),
                            state: Some(state),
                        });
                    }
                    if !result.events.is_empty() {
                        let mut fan_out = Vec::new();
                        let mut unroutable = Vec::new();
                        for event in &result.events {
                            for (kind, reason) in
                                env.registry().fan_out(event, now, None, None, &mut fan_out)
                            {
                                tracing::error!(event = %event.id, kind, %reason, "emitted event could not be routed to a subscriber; its copy goes to the dead letters");
                                unroutable.push(unroutable_copy(event, kind, reason, &target, now));
                            }
                        }
                        conveyor.emit_events(result.events, fan_out);
                        for dead in unroutable {
                            conveyor.add_dead_letter(dead);
                        }
                    }
                    if !result.commands.is_empty() {
                        let addressed = result
                            .commands
                            .into_iter()
                            .map(|c| env.registry().address(c))
                            .collect();
                        conveyor.emit_messages(addressed);
                    }
                    result.outcomes
                }
                None => {
                    let error = HandlerError::new(format!(
                        "no handler for entity kind `{}` is registered on node {}",
                        target.kind,
                        env.config().node_id
                    ));
                    let mut v = vec![MessageOutcome::Failed(error)];
                    v.resize(rows.len(), MessageOutcome::NotAttempted);
                    v
                }
            };

            let mut waits: Option<Intent> = None;
            for (n, &i) in rows.iter().enumerate() {
                let outcome = outcomes
                    .get(n)
                    .cloned()
                    .unwrap_or(MessageOutcome::NotAttempted);
                let replayed = conveyor.page()[i].status == MessageStatus::ToCatchUp;
                let intent = match outcome {
                    // Replayed rows carry job-unique signals: nothing to deduplicate later.
                    MessageOutcome::Handled if replayed => Intent::Delivered { keep_until: None },
                    MessageOutcome::Handled => Intent::Delivered {
                        keep_until: keep_until(conveyor),
                    },
                    MessageOutcome::Failed(error) => {
                        let m = &conveyor.page()[i];
                        tracing::warn!(seq = m.seq, kind = %target.kind, target = %target.id, attempts = m.attempts + 1, %error, "handler failed");
                        let intent = decide(conveyor, m, &error);
                        waits = Some(behind(&intent, now));
                        intent
                    }
                    MessageOutcome::NotAttempted => {
                        waits.clone().unwrap_or(Intent::Hold { until: now })
                    }
                };
                if let Intent::Delivered {
                    keep_until: Some(keep_until),
                } = intent
                {
                    // Replayed rows are delivered with no window, so never remembered.
                    let m = &conveyor.page()[i];
                    delivered.push((m.dedup_key(), m.seq, keep_until));
                }
                conveyor.record(i, intent);
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
