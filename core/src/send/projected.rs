//! Read-your-writes: awaiting until a projection has applied what a send produced.
//!
//! ```text
//!  a command's receipt ─► its outcome (send/outcome.rs) ─► Handled { events } ─┐
//!  a post's receipt ─► its event ───────────────────────────────────────────────┤
//!                                                                               ▼
//!  each event the projection subscribes to ─► read it, route it as the kind does
//!     ─► the projection's copies (one inbox row per routed id, the event's id as signal)
//!  each copy ─► await its row as a command's outcome is awaited (same signals and listener,
//!               same storage read): Handled ─► applied · anything else ─► NotProjected
//! ```
//!
//! A copy is settled in the stage commit that applies it — for a SQL projection the same
//! transaction that writes its tables, for a JSON-state projection the one that saves its
//! state — so once every copy reads as handled, a read of the projection shows the send.
//! Stage commits that settle event copies wake the shard's waiters like commands' outcomes
//! do, on this node and (PostgreSQL) on the others by notification; the fallback poll only
//! stands in for a lost notification.

use crate::model::error::DeliveryError;
use crate::model::ids::SignalId;
use crate::model::message::DedupKey;
use crate::model::outcome::CommandOutcome;
use crate::runner::env::DeliveryEnv;
use crate::send::inbox::{Inbox, SendReceipt};
use crate::send::outcome::{await_row, OutcomeWait};
use tokio::time::Instant;

impl Inbox {
    /// Awaits, at most `wait.timeout`, until the projection of kind `kind` has applied what
    /// the send `receipt` was given for produced: for a command, the events its handler
    /// emitted (after awaiting its outcome); for a post, its event. Returns how many copies
    /// (an event to one instance of the projection) were applied: 0 when the projection does
    /// not follow those events. Events emitted further down (by the projection's own reactions, or by
    /// other kinds reacting to the events) are not awaited.
    ///
    /// Fails with [`DeliveryError::UnknownKind`] if `kind` is not registered on this node (its
    /// routing is needed), [`DeliveryError::NotProjected`] if the command was not handled or a
    /// copy was not applied, [`DeliveryError::ProjectionTimeout`] when time runs out.
    pub async fn projected(
        &self,
        receipt: &SendReceipt,
        kind: &str,
        wait: OutcomeWait,
    ) -> Result<usize, DeliveryError> {
        let env = &self.env;
        let deadline = Instant::now() + wait.timeout;
        let timeout = || DeliveryError::ProjectionTimeout {
            kind: kind.to_owned(),
            signal_id: receipt.signal_id.0.clone(),
            waited: wait.timeout,
        };
        let not_projected = |reason: String| DeliveryError::NotProjected {
            kind: kind.to_owned(),
            signal_id: receipt.signal_id.0.clone(),
            reason,
        };
        if env.registry.handler(kind).is_none() {
            return Err(DeliveryError::UnknownKind {
                kind: kind.to_owned(),
                registered: env.registry.kinds().iter().map(|k| k.to_string()).collect(),
            });
        }
        let events = match &receipt.target {
            None => vec![receipt.signal_id.clone()],
            Some((target, shard)) => {
                let key = DedupKey {
                    tenant: target.tenant.clone(),
                    target_kind: target.kind.clone(),
                    target_id: target.id.clone(),
                    signal_id: receipt.signal_id.clone(),
                };
                match await_row(env, &key, *shard, wait, deadline).await? {
                    None => return Err(timeout()),
                    Some(CommandOutcome::Handled { events }) => events,
                    Some(other) => {
                        return Err(not_projected(format!(
                            "the command was not handled: {other:?}"
                        )))
                    }
                }
            }
        };
        let mut applied = 0;
        for (key, shard) in copies(env, kind, &events).await? {
            match await_row(env, &key, shard, wait, deadline).await? {
                None => return Err(timeout()),
                Some(CommandOutcome::Handled { .. }) => applied += 1,
                Some(other) => {
                    let reason = match other {
                        CommandOutcome::Unknown if rebuilding(env, kind).await? => format!("a catch-up of `{kind}` is running: its replay applies the event in place of this copy (a live copy the replay covers is dropped), so the copy cannot say when the view shows it. Wait for the catch-up, or rebuild beside the served version (`build_version`), which leaves the served kind's copies alone"),
                        CommandOutcome::Unknown => "it is blocked, dead-lettered or dropped (see the blocked rows and the dead letters), or was applied longer ago than the deduplication window".to_owned(),
                        other => format!("{other:?}"),
                    };
                    return Err(not_projected(format!(
                        "the copy of event `{}` for id `{}`: {reason}",
                        key.signal_id.0, key.target_id
                    )));
                }
            }
        }
        Ok(applied)
    }
}

/// The inbox rows of `kind` that `events` fanned out to (with their shards), routed as the
/// kind's handler routes them; events of types the kind does not follow have none.
async fn copies(
    env: &DeliveryEnv,
    kind: &str,
    events: &[SignalId],
) -> Result<Vec<(DedupKey, crate::model::ids::ShardIndex)>, DeliveryError> {
    let Some(handler) = env.registry.handler(kind) else {
        return Ok(Vec::new());
    };
    let mut copies = Vec::new();
    for (_, seq) in env.storage.event_seqs(events).await? {
        // `seq` is unique: the first event after `seq - 1` is this one.
        let Some(stored) = env.storage.read_events(seq - 1, &[], None, 1).await?.pop() else {
            continue;
        };
        let event = stored.event;
        if !handler.event_types().contains(&event.event_type.as_str()) {
            continue;
        }
        let ids = handler
            .route(&event, env.registry.upcasters())
            .map_err(|e| DeliveryError::Unroutable {
                kind: kind.to_owned(),
                event_type: event.event_type.clone(),
                reason: e.reason,
            })?;
        for target_id in ids {
            copies.push((
                DedupKey {
                    tenant: event.tenant.clone(),
                    target_kind: kind.to_owned(),
                    signal_id: event.id.clone(),
                    target_id: target_id.clone(),
                },
                env.registry.shard_of(kind, &target_id),
            ));
        }
    }
    Ok(copies)
}

/// Whether a catch-up (a rebuild in place) of `kind` is running.
async fn rebuilding(env: &DeliveryEnv, kind: &str) -> Result<bool, DeliveryError> {
    Ok(env
        .storage
        .running_catch_ups()
        .await?
        .iter()
        .any(|job| job.spec.projection_kind == kind))
}
