//! Awaiting what became of a sent command.
//!
//! ```text
//!  subscribe to the command's shard (OutcomeSignals) ─► InboxStore::outcome
//!     Decided ─► the outcome · Unknown ─► CommandOutcome::Unknown (window passed)
//!     Pending ─► wait: a signal of the shard (a local commit, or another node's NOTIFY
//!                heard by this environment's listener) or the fallback poll ─► read again
//!     deadline passed ─► DeliveryError::OutcomeTimeout
//! ```
//!
//! The storage read is the answer; the signals only say when to read again, so the fallback
//! poll (slow by default) is a safety net for a lost notification or a backend that has none
//! across processes (SQLite shared by two processes), not the way outcomes arrive.

use crate::model::error::DeliveryError;
use crate::model::ids::{NodeId, ShardIndex};
use crate::model::message::DedupKey;
use crate::model::outcome::{CommandOutcome, OutcomeLookup};
use crate::runner::env::DeliveryEnv;
use crate::send::inbox::{Inbox, SendReceipt};
use crate::storage::ShardObserver;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long to wait for an outcome, and how often to read it again without a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutcomeWait {
    /// The longest wait; then [`DeliveryError::OutcomeTimeout`].
    pub timeout: Duration,
    /// The read again without a signal (default 1 s): only a safety net.
    pub fallback_poll: Duration,
}

impl OutcomeWait {
    /// Waits at most `timeout`, reading again every second without a signal.
    pub fn timeout(timeout: Duration) -> Self {
        OutcomeWait {
            timeout,
            fallback_poll: Duration::from_secs(1),
        }
    }

    /// Sets the fallback poll (at least 1 ms).
    pub fn fallback_poll(mut self, every: Duration) -> Self {
        self.fallback_poll = every.max(Duration::from_millis(1));
        self
    }
}

/// A bare timeout is a wait with the default fallback poll.
impl From<Duration> for OutcomeWait {
    fn from(timeout: Duration) -> Self {
        OutcomeWait::timeout(timeout)
    }
}

/// Starts this environment's listener for other processes' outcomes, once, if its storage
/// has one (PostgreSQL). Failing to start it only leaves the fallback poll.
fn listen_for_outcomes(env: &DeliveryEnv) {
    env.outcomes.listen_once(|| {
        let listener = env.storage.write_listener()?;
        let node = NodeId(format!("{}/outcomes", env.config.node_id));
        // Weakly: the signals keep the listener's handle, and a listener holding the signals
        // would keep both alive for good — its connection and thread outliving the
        // environment (one per Shardbox dropped after awaiting an outcome).
        let observer: Arc<dyn ShardObserver> =
            Arc::new(WeakSignals(Arc::downgrade(&env.outcomes)));
        match listener.listen(&node, crate::MAX_SHARDS, observer) {
            Ok(handle) => Some(handle),
            Err(error) => {
                tracing::warn!(%error, "could not listen for other nodes' command outcomes; polling for them instead");
                None
            }
        }
    });
}

/// The outcome signals as the listener sees them: gone once the environment is.
struct WeakSignals(std::sync::Weak<crate::runner::outcomes::OutcomeSignals>);

impl ShardObserver for WeakSignals {
    fn on_write(&self, shards: &[crate::model::ids::ShardIndex]) {
        if let Some(signals) = self.0.upgrade() {
            signals.on_write(shards);
        }
    }

    fn on_missed_writes(&self) {
        if let Some(signals) = self.0.upgrade() {
            signals.on_missed_writes();
        }
    }

    fn on_outcomes(&self, shards: &[crate::model::ids::ShardIndex]) {
        if let Some(signals) = self.0.upgrade() {
            signals.on_outcomes(shards);
        }
    }
}

impl Inbox {
    /// Awaits what became of the command `receipt` was given for: its outcome once a stage
    /// decides it (on this node, or on another one sharing the database), for the
    /// deduplication window after that ([`CommandOutcome::Unknown`] once it has passed); a
    /// [`DeliveryError::OutcomeTimeout`] if it is not decided within `wait.timeout`, and
    /// [`DeliveryError::NoOutcome`] for a post's receipt.
    pub async fn outcome(
        &self,
        receipt: &SendReceipt,
        wait: OutcomeWait,
    ) -> Result<CommandOutcome, DeliveryError> {
        await_outcome(&self.env, receipt, wait).await
    }
}

/// Awaits the outcome of the command `receipt` was given for (see the module docs).
async fn await_outcome(
    env: &DeliveryEnv,
    receipt: &SendReceipt,
    wait: OutcomeWait,
) -> Result<CommandOutcome, DeliveryError> {
    let Some((target, shard)) = &receipt.target else {
        return Err(DeliveryError::NoOutcome {
            signal_id: receipt.signal_id.0.clone(),
        });
    };
    let key = DedupKey {
        tenant: target.tenant.clone(),
        target_kind: target.kind.clone(),
        target_id: target.id.clone(),
        signal_id: receipt.signal_id.clone(),
    };
    match await_row(env, &key, *shard, wait, Instant::now() + wait.timeout).await? {
        Some(outcome) => Ok(outcome),
        None => Err(DeliveryError::OutcomeTimeout {
            signal_id: key.signal_id.0,
            waited: wait.timeout,
        }),
    }
}

/// Awaits what became of the inbox row `key` (in `shard`) until `deadline`: its outcome, or
/// `None` if it still waits for delivery then. The row of a command or of an event's copy
/// alike (read-your-writes waits for the latter, see `send/projected.rs`).
pub(crate) async fn await_row(
    env: &DeliveryEnv,
    key: &DedupKey,
    shard: ShardIndex,
    wait: OutcomeWait,
    deadline: Instant,
) -> Result<Option<CommandOutcome>, DeliveryError> {
    // Subscribed before the first read: a commit after it wakes the wait below.
    let mut signal = env.outcomes.subscribe(shard);
    let mut listening = false;
    loop {
        match env.storage.outcome(key, env.clock.now()).await? {
            OutcomeLookup::Decided { outcome, .. } => return Ok(Some(outcome)),
            OutcomeLookup::Unknown => return Ok(Some(CommandOutcome::Unknown)),
            OutcomeLookup::Pending => {}
        }
        if !listening {
            // Only once the row is known to wait: answered rows cost no listener.
            listen_for_outcomes(env);
            listening = true;
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let nap = (deadline - now).min(wait.fallback_poll);
        match signal.as_mut() {
            Some(rx) => {
                if let Ok(Err(_)) = tokio::time::timeout(nap, rx.changed()).await {
                    // The signals are gone (never while the environment lives): poll.
                    signal = None;
                }
            }
            None => tokio::time::sleep(nap).await,
        }
    }
}
