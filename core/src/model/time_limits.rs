//! The limits of user-supplied durations and times: a send's delay, due time and TTL, and a
//! reactor's `Outgoing::delayed`. What they become (a row's `deliver_after` or `expires_at`)
//! must be a time every backend stores and every reader understands, so it must lie before
//! [`parked_until`] (9999-12-31T23:59:59Z, the value that means "waits for an event, not a
//! time"), and a delay or TTL may be at most [`MAX_SPAN`] (100 years).
//!
//! ```text
//!  delay / ttl ──► ≤ MAX_SPAN? ──► now + span ──► < parked_until? ──► deliver_after / expires_at
//!  due_at ─────────────────────────────────────► < parked_until? ──┘
//!                 └── no: InvalidTime { field, problem } (nothing is written)
//! ```
//!
//! Pure checks, no I/O: the call that takes the value ([`crate::Inbox`]'s sends and posts, a
//! reactor's reaction) turns a failure into its own typed error, never a panic and never a
//! silent "no delay".

use crate::model::parked::parked_until;
use chrono::{DateTime, Utc};
use std::fmt;
use std::time::Duration;

/// The longest delay or TTL a message may be given: 100 years (36,525 days).
pub const MAX_SPAN: Duration = Duration::from_secs(36_525 * 24 * 3600);

/// Which user-supplied duration or time is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeField {
    /// `SendOptions::delay`.
    Delay,
    /// `SendOptions::due_at`.
    DueAt,
    /// `SendOptions::ttl`.
    Ttl,
    /// `Outgoing::delayed` (a reactor's command).
    OutgoingDelay,
    /// A message's `deliver_after` (an already built message).
    DeliverAfter,
    /// A message's `expires_at` (an already built message).
    ExpiresAt,
    /// `TestKit::advance` (the test kit's clock).
    Advance,
}

impl TimeField {
    /// The field's name, as the user wrote it.
    pub fn name(self) -> &'static str {
        match self {
            TimeField::Delay => "delay",
            TimeField::DueAt => "due_at",
            TimeField::Ttl => "ttl",
            TimeField::OutgoingDelay => "Outgoing::delayed",
            TimeField::DeliverAfter => "deliver_after",
            TimeField::ExpiresAt => "expires_at",
            TimeField::Advance => "TestKit::advance",
        }
    }
}

/// A duration or time outside its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTime {
    /// The field at fault.
    pub field: TimeField,
    /// The value as given (`Debug` of the duration or the time).
    pub value: String,
}

impl fmt::Display for InvalidTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` = {} is out of range: a delay or TTL must be at most 100 years and a time before 9999-12-31T23:59:59Z",
            self.field.name(),
            self.value
        )
    }
}

impl std::error::Error for InvalidTime {}

/// `now + span`, if `span` is at most [`MAX_SPAN`] and the result lies before the parked time.
pub fn after(
    now: DateTime<Utc>,
    span: Duration,
    field: TimeField,
) -> Result<DateTime<Utc>, InvalidTime> {
    let invalid = || InvalidTime {
        field,
        value: format!("{span:?}"),
    };
    if span > MAX_SPAN {
        return Err(invalid());
    }
    let span = chrono::Duration::from_std(span).map_err(|_| invalid())?;
    let at = now.checked_add_signed(span).ok_or_else(invalid)?;
    check(at, field).map_err(|_| invalid())
}

/// `at` itself, if it lies before the parked time.
pub fn check(at: DateTime<Utc>, field: TimeField) -> Result<DateTime<Utc>, InvalidTime> {
    if at < parked_until() {
        Ok(at)
    } else {
        Err(InvalidTime {
            field,
            value: at.to_rfc3339(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn spans_up_to_the_limit_are_times_after_now() {
        let at = after(now(), Duration::from_secs(5), TimeField::Delay).unwrap();
        assert_eq!(at, now() + chrono::Duration::seconds(5));
        assert!(after(now(), MAX_SPAN, TimeField::Ttl).is_ok());
        assert_eq!(
            after(now(), Duration::ZERO, TimeField::Delay).unwrap(),
            now()
        );
    }

    #[test]
    fn longer_spans_and_late_times_name_their_field() {
        for span in [
            MAX_SPAN + Duration::from_nanos(1),
            Duration::from_secs(u64::MAX),
            Duration::MAX,
        ] {
            let err = after(now(), span, TimeField::Ttl).unwrap_err();
            assert_eq!(err.field, TimeField::Ttl);
            assert!(err.to_string().starts_with("`ttl` = "), "{err}");
        }
        // A span within the limit from a late `now` still must end before the parked time.
        let late = parked_until() - chrono::Duration::days(1);
        let err = after(late, Duration::from_secs(2 * 24 * 3600), TimeField::Delay).unwrap_err();
        assert_eq!(err.field, TimeField::Delay);
        assert!(check(parked_until(), TimeField::DueAt).is_err());
        assert!(check(DateTime::<Utc>::MAX_UTC, TimeField::DueAt).is_err());
        assert!(check(DateTime::<Utc>::MIN_UTC, TimeField::DueAt).is_ok());
        assert!(check(late, TimeField::DueAt).is_ok());
    }
}
