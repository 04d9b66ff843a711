//! How a handler fails: a [`HandlerError`], transient by default (retried as the kind's
//! failure policy says, or after the handler's own `retry_after`, or at once when it asks
//! for a redelivery) or permanent (the policy's exhausted outcome at once). Its text is the reason a retry, dead letter, drop or block
//! records.
//!
//! What the failure policy does with it is decided in `model::failure`
//! ([`FailurePolicy::decide`](crate::FailurePolicy::decide)); this module only says what the
//! handler asked for ([`HandlerError::next_attempt`]).

use crate::model::failure::NextAttempt;
use std::fmt;
use std::time::Duration;

/// A handler could not handle a message. The message follows the kind's failure policy;
/// later messages of the same target wait behind it.
///
/// A failure is transient by default (retried after the back-off, or after `retry_after`). One
/// that can never succeed — a business rule refuses the command, the input is invalid — is
/// [`HandlerError::permanent`]: the policy's exhausted outcome (dead letter, drop or block)
/// applies at once, without retries, with a reason that says it was permanent.
///
/// ```
/// use shardbox_core::{HandlerError, NextAttempt};
/// let refused = HandlerError::permanent("card declined");
/// assert_eq!(refused.next_attempt(), NextAttempt::Never);
/// assert_eq!(refused.to_string(), "permanent failure, not retried: card declined");
/// assert_eq!(HandlerError::new("gateway timed out").next_attempt(), NextAttempt::Backoff);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    /// Why.
    pub reason: String,
    /// The handler's own wish for the next attempt (like a NACK with a delay); the longer of
    /// this and the policy's back-off wins. Ignored when the failure is permanent.
    pub retry_after: Option<Duration>,
    /// The failure will never succeed: no retry, the policy's exhausted outcome at once.
    pub permanent: bool,
    /// Try again at once, without the back-off (see [`HandlerError::redeliver`]).
    pub redeliver: bool,
}

impl HandlerError {
    /// A transient failure with a reason: retried as the failure policy says.
    pub fn new(reason: impl Into<String>) -> Self {
        HandlerError {
            reason: reason.into(),
            retry_after: None,
            permanent: false,
            redeliver: false,
        }
    }

    /// A transient failure worth trying again at once — a lost optimistic race, a stale read
    /// of another service — rather than after the policy's back-off: the message is due again
    /// immediately (in its place: its target's later messages still wait behind it). The
    /// attempt counts, so the policy's attempts bound the redeliveries and its exhausted
    /// outcome applies when they are used up.
    ///
    /// ```
    /// use shardbox_core::{HandlerError, NextAttempt};
    /// assert_eq!(HandlerError::redeliver("version moved").next_attempt(), NextAttempt::Now);
    /// ```
    pub fn redeliver(reason: impl Into<String>) -> Self {
        HandlerError {
            redeliver: true,
            ..HandlerError::new(reason)
        }
    }

    /// A failure that will never succeed, however often it is retried (a business rule
    /// refuses the command, the input is invalid): the message goes straight to the kind's
    /// exhausted outcome — dead letter, drop or block, per its failure policy — after this
    /// one attempt.
    pub fn permanent(reason: impl Into<String>) -> Self {
        HandlerError {
            permanent: true,
            ..HandlerError::new(reason)
        }
    }

    /// Asks for the next attempt no sooner than `delay` from now (no effect on a permanent
    /// failure; replaces a redelivery).
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self.redeliver = false;
        self
    }

    /// What this failure says of the next attempt, for [`FailurePolicy::decide`](crate::FailurePolicy::decide).
    pub fn next_attempt(&self) -> NextAttempt {
        match (self.permanent, self.retry_after, self.redeliver) {
            (true, _, _) => NextAttempt::Never,
            (false, Some(delay), _) => NextAttempt::NotBefore(delay),
            (false, None, true) => NextAttempt::Now,
            (false, None, false) => NextAttempt::Backoff,
        }
    }
}

/// The reason, said to be permanent for a permanent failure: the text of the retry, dead
/// letter, drop or block it leads to.
impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.permanent {
            write!(f, "permanent failure, not retried: {}", self.reason)
        } else {
            f.write_str(&self.reason)
        }
    }
}

impl std::error::Error for HandlerError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permanent_failure_asks_for_no_next_attempt_and_says_so() {
        let e = HandlerError::permanent("card declined").retry_after(Duration::from_secs(5));
        assert_eq!(
            e.next_attempt(),
            NextAttempt::Never,
            "never, whatever delay"
        );
        assert_eq!(
            e.to_string(),
            "permanent failure, not retried: card declined"
        );
        assert_eq!(e.reason, "card declined");
        let t = HandlerError::new("busy");
        assert_eq!(t.next_attempt(), NextAttempt::Backoff);
        assert_eq!(
            t.to_string(),
            "busy",
            "a transient failure's text is its reason"
        );
        assert_eq!(
            t.retry_after(Duration::from_secs(5)).next_attempt(),
            NextAttempt::NotBefore(Duration::from_secs(5))
        );
    }
}
