//! What one send or post may ask for ([`SendOptions`]: tenant, signal id, metadata, delay,
//! due time, time to live), and the times they make for a row, each checked against the
//! limits of [`crate::model::time_limits`] so that an out-of-range one is an error naming its
//! field, never a panic or a silent clamp.

use crate::model::ids::SignalId;
use crate::model::message::{Metadata, NewMessage};
use crate::model::time_limits::{self, InvalidTime, TimeField};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Options of one send or post.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SendOptions {
    /// Tenant of the target (empty for single-tenant applications).
    pub tenant: String,
    /// The signal id; a fresh one when unset. Sending the same id twice to a target within
    /// the deduplication window delivers it once.
    pub signal_id: Option<SignalId>,
    /// Metadata carried with the message.
    pub metadata: Metadata,
    /// Not delivered before this delay has passed.
    pub delay: Option<Duration>,
    /// Not delivered before this time (the later of this and `delay` wins).
    pub due_at: Option<DateTime<Utc>>,
    /// Expires (is not delivered) after this long.
    pub ttl: Option<Duration>,
}

impl SendOptions {
    /// Sets the signal id (for idempotent sends).
    pub fn signal_id(mut self, id: impl Into<SignalId>) -> Self {
        self.signal_id = Some(id.into());
        self
    }

    /// Sets the tenant.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// Delays delivery.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Not delivered before `at` (the later of this and a delay wins).
    pub fn due_at(mut self, at: DateTime<Utc>) -> Self {
        self.due_at = Some(at);
        self
    }

    /// Sets a time to live.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Adds a metadata entry.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The signal id of a lone send (`n` = None) or of the `n`-th of many: the one set
    /// (`"{id}/{n}"` for the n-th), or a fresh one.
    pub(super) fn signal(&self, n: Option<usize>) -> SignalId {
        match (&self.signal_id, n) {
            (Some(id), None) => id.clone(),
            (Some(base), Some(n)) => SignalId(format!("{base}/{n}")),
            (None, _) => SignalId::generate(),
        }
    }

    /// When a row sent with these options at `now` becomes due: the later of `now + delay`
    /// and `due_at`, each checked against the time limits.
    pub(super) fn deliver_after(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, InvalidTime> {
        let delayed = self
            .delay
            .map(|d| time_limits::after(now, d, TimeField::Delay))
            .transpose()?;
        let due = self
            .due_at
            .map(|at| time_limits::check(at, TimeField::DueAt))
            .transpose()?;
        Ok(match (delayed, due) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        })
    }

    /// When a row sent with these options at `now` expires (`now + ttl`), checked against the
    /// time limits.
    pub(super) fn expires_at(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, InvalidTime> {
        self.ttl
            .map(|d| time_limits::after(now, d, TimeField::Ttl))
            .transpose()
    }
}

/// Checks the times of an already built message (`send_message`).
pub(super) fn validate_times(message: &NewMessage) -> Result<(), InvalidTime> {
    if let Some(at) = message.deliver_after {
        time_limits::check(at, TimeField::DeliverAfter)?;
    }
    if let Some(at) = message.expires_at {
        time_limits::check(at, TimeField::ExpiresAt)?;
    }
    Ok(())
}
