//! What a target's batch becomes on the Conveyor, once its handler ran: the state it left,
//! its emitted events (with their fan-out) and commands, and one intent per row from its
//! outcome under the failure policy.
//!
//! ```text
//!  BatchResult ─► apply_result: state (or removed, a finished process), events + fan-out
//!                 (copies no subscriber routes ─► dead letters), commands addressed
//!  outcomes    ─► record_outcomes, in seq order:
//!      Handled      ─► Delivered (kept for the dedup window; replayed rows: not kept)
//!      Failed       ─► decide: the monitor, then the kind's policy ─► RetryAt / DeadLetter /
//!                      Drop / Block / Delivered
//!      NotAttempted ─► behind the failure: held until its retry, parked behind its block,
//!                      or due at once
//! ```
//!
//! Nothing here runs a handler or reads the storage; the station (`mod.rs`) sorts the page
//! and runs the batches.

use chrono::{DateTime, Utc};
use shardbox_core::storage::{DeadLetter, EntityKey, EntityStateWrite};
use shardbox_core::FIRST_VERSION;
use shardbox_core::{
    BatchResult, Conveyor, DedupKey, FailureAction, FailureDecision, FailureInfo, HandlerError,
    InboxMessage, Intent, MessageKind, MessageOutcome, MessageStatus, NewEvent, NewMessage,
    ShardIndex, StationContext,
};

/// Puts what a target's batch changed on the Conveyor (its state, its events with their
/// fan-out and the dead letters of copies no subscriber could route, its commands) and
/// returns the outcomes of its messages.
pub(super) fn apply_result(
    conveyor: &mut Conveyor,
    env: &StationContext,
    target: &EntityKey,
    result: BatchResult,
    now: DateTime<Utc>,
) -> Vec<MessageOutcome> {
    // Saved at the state version of the code that made it.
    let state_version = env
        .registry()
        .handler(&target.kind)
        .map_or(FIRST_VERSION, |h| h.state_version());
    if result.finished {
        // A finished process: its state goes with the stage.
        conveyor.set_state(EntityStateWrite {
            key: target.clone(),
            state: None,
            state_version,
        });
    } else if let Some(state) = result.state {
        conveyor.set_state(EntityStateWrite {
            key: target.clone(),
            state: Some(state),
            state_version,
        });
    }
    if !result.events.is_empty() {
        let mut fan_out = Vec::new();
        let mut unroutable = Vec::new();
        for event in &result.events {
            for (kind, reason) in env.registry().fan_out(event, now, None, None, &mut fan_out) {
                tracing::error!(event = %event.id, kind, %reason, "emitted event could not be routed to a subscriber; its copy goes to the dead letters");
                unroutable.push(unroutable_copy(event, kind, reason, target, now));
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

/// The outcomes of a target whose kind no handler on this node serves: its first message
/// fails, the rest wait behind it.
pub(super) fn unhandled_outcomes(
    env: &StationContext,
    target: &EntityKey,
    len: usize,
) -> Vec<MessageOutcome> {
    let error = HandlerError::new(format!(
        "no handler for entity kind `{}` is registered on node {}",
        target.kind,
        env.config().node_id
    ));
    let mut v = vec![MessageOutcome::Failed(error)];
    v.resize(len, MessageOutcome::NotAttempted);
    v
}

/// Records the intent of each of a target's rows from its outcome (in `seq` order, so the
/// rows after a failure wait behind it), and adds to `delivered` the rows to remember as
/// recent deliveries.
pub(super) fn record_outcomes(
    conveyor: &mut Conveyor,
    target: &EntityKey,
    rows: &[usize],
    outcomes: Vec<MessageOutcome>,
    now: DateTime<Utc>,
    delivered: &mut Vec<(DedupKey, i64, DateTime<Utc>)>,
) {
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
                keep_until: keep_until(conveyor.context(), now),
            },
            MessageOutcome::Failed(error) => {
                let m = &conveyor.page()[i];
                tracing::warn!(seq = m.seq, kind = %target.kind, target = %target.id, attempts = m.attempts + 1, %error, "handler failed");
                let intent = decide(conveyor.context(), now, m, &error);
                waits = Some(behind(&intent, now));
                intent
            }
            MessageOutcome::NotAttempted => waits.clone().unwrap_or(Intent::Hold { until: now }),
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

/// Decides a failed message's fate at `now`: the monitor first, then the kind's policy.
pub(super) fn decide(
    env: &StationContext,
    now: DateTime<Utc>,
    m: &InboxMessage,
    error: &HandlerError,
) -> Intent {
    let attempts = m.attempts.saturating_add(1);
    let action = env.monitor().on_handler_failure(&FailureInfo {
        message: m,
        error,
        attempts,
        now,
    });
    let decision = match action {
        FailureAction::FollowPolicy => env.kinds().policy_of(&m.message.target_kind).decide(
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
                keep_until: keep_until(env, now),
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

/// The end of the deduplication window of a row delivered at `now` (`None`: no window).
fn keep_until(env: &StationContext, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let config = env.config();
    (!config.dedup_window.is_zero()).then(|| now + config.dedup_span())
}

/// What becomes of the rows behind a failed row of the same target.
pub(super) fn behind(intent: &Intent, now: DateTime<Utc>) -> Intent {
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
        payload_version: event.version,
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
