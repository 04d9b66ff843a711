//! The direct replay: a page of replayed events applied straight to the projection's states
//! (one load of all states, one handler call per target, the states written with the stage)
//! instead of being written to the Inbox as rows for live delivery.
//!
//! ```text
//!  replayed rows ─► grouped by target (seq order) ─► states loaded once
//!      ─► run_batches (targets at once, each target's events in order)
//!      ─► all handled, nothing emitted ? states on the Conveyor : the rows back, unrecorded
//! ```
//!
//! A page that cannot be applied whole (a failure, an emitted message) goes back to the caller
//! untouched, which writes it to the Inbox so that the failure policy applies. This module
//! decides nothing about the job (its step is `replay`'s).

use crate::batches::{run_batches, Batch, InFlight};
use chrono::{DateTime, Utc};
use shardbox_core::storage::{EntityKey, EntityState, EntityStateWrite};
use shardbox_core::{
    Conveyor, DeliveryError, EntityHandler, InboxMessage, InboxWrite, MessageOutcome,
    StationContext,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Applies replayed `rows` straight to their targets' states (one load of all states, one
/// handler call per target, the states written with the stage) instead of writing them to the
/// Inbox. The targets run concurrently, as in live delivery (`run_batches`: at most
/// `handler_concurrency` at a time, each target's events in order). Returns the rows back,
/// recording nothing, if any message is not handled or anything is emitted: the caller then
/// writes them, so that the failure policy applies to them.
pub(super) async fn apply_directly(
    conveyor: &mut Conveyor,
    env: &Arc<StationContext>,
    in_flight: &InFlight,
    handler: &Arc<dyn EntityHandler>,
    rows: Vec<InboxWrite>,
    now: DateTime<Utc>,
) -> Result<Option<Vec<InboxWrite>>, DeliveryError> {
    // Per target, its replayed messages in order (`seq` is the row's place in the page).
    let mut groups: BTreeMap<EntityKey, Vec<InboxMessage>> = BTreeMap::new();
    for (n, row) in rows.into_iter().enumerate() {
        let key = EntityKey {
            kind: row.message.target_kind.clone(),
            tenant: row.message.tenant.clone(),
            id: row.message.target_id.clone(),
        };
        groups
            .entry(key)
            .or_default()
            .push(InboxMessage::fresh(n as i64, row.shard, row.message));
    }
    let (keys, groups): (Vec<EntityKey>, Vec<Arc<[InboxMessage]>>) = groups
        .into_iter()
        .map(|(key, messages)| (key, messages.into()))
        .unzip();
    let mut states: HashMap<EntityKey, EntityState> = HashMap::new();
    if handler.is_stateful() {
        for s in env.load_states(&keys).await? {
            states.insert(s.key.clone(), s);
        }
    }
    let batches = keys
        .iter()
        .zip(&groups)
        .map(|(key, messages)| Batch {
            handler: handler.clone(),
            state: states.remove(key),
            messages: messages.clone(),
        })
        .collect();
    let results = run_batches(env, in_flight, batches, now).await;
    let mut writes = Vec::with_capacity(keys.len());
    for (key, result) in keys.iter().zip(results) {
        let handled = result
            .outcomes
            .iter()
            .all(|o| matches!(o, MessageOutcome::Handled));
        // Writes inside the transaction may fail at commit, where only live delivery can
        // settle them by the failure policy: such a page goes through the Inbox too.
        let settled_now = result.in_transaction.is_none();
        if !handled || !settled_now || !result.events.is_empty() || !result.commands.is_empty() {
            tracing::warn!(kind = %key.kind, target = %key.id, "a replayed event was not handled (or emitted messages) in direct replay; this page goes through the Inbox, where the failure policy applies");
            let mut back: Vec<InboxMessage> =
                groups.iter().flat_map(|g| g.iter().cloned()).collect();
            back.sort_unstable_by_key(|m| m.seq);
            return Ok(Some(
                back.into_iter()
                    .map(|m| InboxWrite {
                        shard: m.shard,
                        message: m.message,
                    })
                    .collect(),
            ));
        }
        if let Some(state) = result.state {
            writes.push(EntityStateWrite {
                key: key.clone(),
                state: Some(state),
                state_version: handler.state_version(),
            });
        }
    }
    for w in writes {
        conveyor.set_state(w);
    }
    Ok(None)
}
