//! The failure policy: what happens to a message whose handling failed.
//!
//! A pure decision: given how many attempts have failed, what the failure says of a next
//! attempt ([`NextAttempt`]: the back-off, not before a delay, or never) and the time,
//! [`FailurePolicy::decide`] says retry at a time, dead-letter, drop or block. The station
//! that calls it writes the decision; nothing here does I/O.
//!
//! ```text
//!  attempt n fails ─► permanent (NextAttempt::Never) ─► on_exhausted at once, whatever n
//!                  ─► n < max_attempts ─► RetryAt(now + max(backoff(n), requested) capped)
//!                  └► n = max_attempts ─► on_exhausted: DeadLetter │ Drop │ Block
//! ```

use crate::model::backoff::ExponentialBackoff;
use crate::model::error::ConfigError;
use crate::model::time_limits::MAX_SPAN;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// How long to wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// The same delay before every retry.
    Fixed(Duration),
    /// `base * 2^(attempt-1)`, at most `cap` (an [`ExponentialBackoff`]).
    Exponential {
        /// Delay before the first retry.
        base: Duration,
        /// Longest delay.
        cap: Duration,
    },
}

impl Backoff {
    /// The delay after `attempts` failed attempts (`attempts >= 1`).
    pub fn delay(&self, attempts: u32) -> Duration {
        match *self {
            Backoff::Fixed(d) => d,
            Backoff::Exponential { base, cap } => {
                ExponentialBackoff::new(base, cap).delay(attempts)
            }
        }
    }

    /// The longest delay this back-off gives.
    pub fn cap(&self) -> Duration {
        match *self {
            Backoff::Fixed(d) => d,
            Backoff::Exponential { cap, .. } => cap,
        }
    }
}

/// What happens when a message has used up its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExhaustedOutcome {
    /// Move it to the dead letters with its origin; the target goes on.
    DeadLetter,
    /// Count it, log it and delete it; the target goes on.
    Drop,
    /// Keep it in the Inbox with status `blocked`: its target stops (later messages wait, in
    /// order) until an operator requeues or drops it; other targets go on.
    Block,
}

/// What to do with a failed message now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureDecision {
    /// Try again at this time.
    RetryAt(DateTime<Utc>),
    /// Move to the dead letters.
    DeadLetter,
    /// Delete (counted and logged).
    Drop,
    /// Block the target until an operator acts.
    Block,
}

/// What a failed attempt says of the next one (the handler's error decides it: see
/// `HandlerError::next_attempt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NextAttempt {
    /// After the policy's back-off.
    #[default]
    Backoff,
    /// No sooner than this delay: the longer of it and the back-off wins, capped by the
    /// back-off's cap.
    NotBefore(Duration),
    /// Never: the failure is permanent (retrying cannot succeed), so the policy's
    /// exhausted outcome applies at once, whatever attempts are left.
    Never,
    /// At once, without the back-off (an immediate redelivery, as a NACK without delay):
    /// still an attempt, counted, and the policy's exhausted outcome applies when they are
    /// used up.
    Now,
}

/// Attempts, back-off and the outcome when attempts are used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailurePolicy {
    /// Attempts in all, the first included (`>= 1`).
    pub max_attempts: u32,
    /// Delay between attempts.
    pub backoff: Backoff,
    /// What happens after the last attempt fails.
    pub on_exhausted: ExhaustedOutcome,
}

impl Default for FailurePolicy {
    /// 5 attempts, exponential back-off from 1 s up to 5 min, then dead-letter.
    fn default() -> Self {
        FailurePolicy {
            max_attempts: 5,
            backoff: Backoff::Exponential {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(300),
            },
            on_exhausted: ExhaustedOutcome::DeadLetter,
        }
    }
}

impl FailurePolicy {
    /// A policy: at most `max_attempts` attempts, `backoff` between them, then `on_exhausted`
    /// (checked when the configuration is built).
    ///
    /// ```
    /// use shardbox_core::{Backoff, ExhaustedOutcome, FailurePolicy};
    /// use std::time::Duration;
    /// let p = FailurePolicy::new(5, Backoff::Fixed(Duration::from_secs(1)), ExhaustedOutcome::Block);
    /// assert_eq!(p.max_attempts, 5);
    /// ```
    pub fn new(max_attempts: u32, backoff: Backoff, on_exhausted: ExhaustedOutcome) -> Self {
        FailurePolicy {
            max_attempts,
            backoff,
            on_exhausted,
        }
    }

    /// Decides after the `attempts`-th failed attempt (this one included). `next` is what the
    /// failure says of the next attempt: a permanent failure ([`NextAttempt::Never`]) takes
    /// the exhausted outcome at once; a requested delay and the back-off, the longer wins,
    /// capped by the back-off's cap (or the request itself if it is shorter than a zero cap
    /// would allow).
    ///
    /// ```
    /// use shardbox_core::{Backoff, ExhaustedOutcome, FailureDecision, FailurePolicy, NextAttempt};
    /// use std::time::Duration;
    /// let p = FailurePolicy::new(5, Backoff::Fixed(Duration::from_secs(1)), ExhaustedOutcome::DeadLetter);
    /// let now = chrono::Utc::now();
    /// assert!(matches!(p.decide(1, NextAttempt::Backoff, now), FailureDecision::RetryAt(_)));
    /// assert_eq!(p.decide(1, NextAttempt::Never, now), FailureDecision::DeadLetter);
    /// ```
    pub fn decide(&self, attempts: u32, next: NextAttempt, now: DateTime<Utc>) -> FailureDecision {
        let requested = match next {
            NextAttempt::Backoff => None,
            NextAttempt::NotBefore(delay) => Some(delay),
            NextAttempt::Never => return self.exhausted(),
            NextAttempt::Now if attempts < self.max_attempts => {
                return FailureDecision::RetryAt(now)
            }
            NextAttempt::Now => None,
        };
        if attempts >= self.max_attempts {
            return self.exhausted();
        }
        let backoff = self.backoff.delay(attempts);
        let delay = requested
            .map_or(backoff, |r| r.max(backoff))
            .min(self.backoff.cap().max(backoff));
        let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
        FailureDecision::RetryAt(now.checked_add_signed(delay).unwrap_or(now))
    }

    /// The decision once no attempt is left: the policy's exhausted outcome.
    fn exhausted(&self) -> FailureDecision {
        match self.on_exhausted {
            ExhaustedOutcome::DeadLetter => FailureDecision::DeadLetter,
            ExhaustedOutcome::Drop => FailureDecision::Drop,
            ExhaustedOutcome::Block => FailureDecision::Block,
        }
    }

    /// Checks the values; `field` prefixes the names in the error (e.g. `failure_policy`).
    pub fn validate(&self, field: &'static str) -> Result<(), ConfigError> {
        if self.max_attempts == 0 {
            return Err(ConfigError::Invalid {
                field,
                value: "max_attempts = 0".into(),
                reason: "max_attempts must be at least 1 (the first attempt counts)",
            });
        }
        if self.backoff == Backoff::Fixed(Duration::ZERO) {
            return Err(ConfigError::Invalid {
                field,
                value: "backoff = Fixed(0s)".into(),
                reason: "a fixed back-off must be longer than zero, or a failing message burns all its attempts at once",
            });
        }
        if self.backoff.cap() > MAX_SPAN {
            return Err(ConfigError::Invalid {
                field,
                value: format!("backoff = {:?}", self.backoff),
                reason: "a back-off must be at most 100 years (36525 days)",
            });
        }
        if let Backoff::Exponential { base, cap } = self.backoff {
            if base.is_zero() || cap < base {
                return Err(ConfigError::Invalid {
                    field,
                    value: format!("backoff base = {base:?}, cap = {cap:?}"),
                    reason: "exponential back-off needs base > 0 and cap >= base",
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn exponential_backoff_doubles_up_to_the_cap() {
        let b = Backoff::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        };
        let got: Vec<u64> = (1..=6).map(|a| b.delay(a).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(b.delay(200).as_secs(), 10, "no overflow on many attempts");
    }

    #[test]
    fn retries_until_max_attempts_then_applies_the_outcome() {
        let p = FailurePolicy {
            max_attempts: 3,
            backoff: Backoff::Fixed(Duration::from_secs(2)),
            on_exhausted: ExhaustedOutcome::Drop,
        };
        assert_eq!(
            p.decide(1, NextAttempt::Backoff, t0()),
            FailureDecision::RetryAt(t0() + chrono::Duration::seconds(2))
        );
        assert_eq!(
            p.decide(2, NextAttempt::Backoff, t0()),
            FailureDecision::RetryAt(t0() + chrono::Duration::seconds(2))
        );
        assert_eq!(
            p.decide(3, NextAttempt::Backoff, t0()),
            FailureDecision::Drop
        );
        let dl = FailurePolicy {
            on_exhausted: ExhaustedOutcome::DeadLetter,
            ..p
        };
        assert_eq!(
            dl.decide(3, NextAttempt::Backoff, t0()),
            FailureDecision::DeadLetter
        );
        let block = FailurePolicy {
            on_exhausted: ExhaustedOutcome::Block,
            ..p
        };
        assert!(matches!(
            block.decide(2, NextAttempt::Backoff, t0()),
            FailureDecision::RetryAt(_)
        ));
        assert_eq!(
            block.decide(3, NextAttempt::Backoff, t0()),
            FailureDecision::Block
        );
        assert_eq!(
            block.decide(9, NextAttempt::Backoff, t0()),
            FailureDecision::Block
        );
    }

    #[test]
    fn the_longer_of_request_and_backoff_wins_capped() {
        let p = FailurePolicy {
            max_attempts: 10,
            backoff: Backoff::Exponential {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(60),
            },
            on_exhausted: ExhaustedOutcome::DeadLetter,
        };
        let at = |s| FailureDecision::RetryAt(t0() + chrono::Duration::seconds(s));
        assert_eq!(
            p.decide(1, NextAttempt::NotBefore(Duration::from_secs(30)), t0()),
            at(30)
        );
        assert_eq!(
            p.decide(3, NextAttempt::NotBefore(Duration::from_millis(10)), t0()),
            at(4)
        );
        assert_eq!(
            p.decide(1, NextAttempt::NotBefore(Duration::from_secs(3600)), t0()),
            at(60)
        );
    }

    /// An immediate redelivery is due at the failure's own time, without the back-off,
    /// while attempts are left; the last attempt's takes the exhausted outcome.
    #[test]
    fn a_redelivery_is_due_at_once_until_the_attempts_are_used_up() {
        let p = FailurePolicy {
            max_attempts: 3,
            backoff: Backoff::Fixed(Duration::from_secs(30)),
            on_exhausted: ExhaustedOutcome::Block,
        };
        assert_eq!(
            p.decide(1, NextAttempt::Now, t0()),
            FailureDecision::RetryAt(t0())
        );
        assert_eq!(
            p.decide(2, NextAttempt::Now, t0()),
            FailureDecision::RetryAt(t0())
        );
        assert_eq!(p.decide(3, NextAttempt::Now, t0()), FailureDecision::Block);
        assert_eq!(
            p.decide(1, NextAttempt::Backoff, t0()),
            FailureDecision::RetryAt(t0() + chrono::Duration::seconds(30)),
            "without it, the back-off"
        );
    }

    /// A permanent failure takes the exhausted outcome at its first attempt, whatever
    /// attempts are left, for every outcome; a back-off or a requested delay never applies.
    #[test]
    fn a_permanent_failure_takes_the_exhausted_outcome_at_once() {
        let base = FailurePolicy {
            max_attempts: 5,
            backoff: Backoff::Exponential {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(60),
            },
            on_exhausted: ExhaustedOutcome::DeadLetter,
        };
        for (outcome, decision) in [
            (ExhaustedOutcome::DeadLetter, FailureDecision::DeadLetter),
            (ExhaustedOutcome::Drop, FailureDecision::Drop),
            (ExhaustedOutcome::Block, FailureDecision::Block),
        ] {
            let p = FailurePolicy {
                on_exhausted: outcome,
                ..base
            };
            for attempts in [1, 2, 4, 5, 9] {
                assert_eq!(
                    p.decide(attempts, NextAttempt::Never, t0()),
                    decision,
                    "{outcome:?} at attempt {attempts}"
                );
            }
            assert!(
                matches!(
                    p.decide(1, NextAttempt::Backoff, t0()),
                    FailureDecision::RetryAt(_)
                ),
                "a transient failure of the same policy is retried"
            );
        }
        let single = FailurePolicy {
            max_attempts: 1,
            ..base
        };
        assert_eq!(
            single.decide(1, NextAttempt::Never, t0()),
            FailureDecision::DeadLetter
        );
    }

    #[test]
    fn invalid_policies_name_the_problem() {
        let p = FailurePolicy {
            max_attempts: 0,
            ..FailurePolicy::default()
        };
        let err = p.validate("failure_policy").unwrap_err().to_string();
        assert!(
            err.contains("failure_policy") && err.contains("max_attempts"),
            "{err}"
        );
        let p = FailurePolicy {
            backoff: Backoff::Exponential {
                base: Duration::from_secs(5),
                cap: Duration::from_secs(1),
            },
            ..FailurePolicy::default()
        };
        assert!(p.validate("failure_policy").is_err());
        let p = FailurePolicy {
            backoff: Backoff::Fixed(Duration::ZERO),
            ..FailurePolicy::default()
        };
        assert!(p.validate("failure_policy").is_err());
        assert!(FailurePolicy::default().validate("failure_policy").is_ok());
    }

    #[test]
    fn a_backoff_past_the_time_limit_is_refused_not_a_retry_now() {
        // Before: Fixed(Duration::MAX) overflowed in `decide` and meant "retry at once".
        for backoff in [
            Backoff::Fixed(Duration::MAX),
            Backoff::Exponential {
                base: Duration::from_secs(1),
                cap: Duration::MAX,
            },
        ] {
            let p = FailurePolicy {
                backoff,
                ..FailurePolicy::default()
            };
            let err = p.validate("failure_policy").unwrap_err().to_string();
            assert!(err.contains("100 years"), "{err}");
        }
        let p = FailurePolicy {
            backoff: Backoff::Fixed(MAX_SPAN),
            ..FailurePolicy::default()
        };
        assert!(p.validate("failure_policy").is_ok());
        assert!(
            matches!(p.decide(1, NextAttempt::Backoff, t0()), FailureDecision::RetryAt(at) if at > t0())
        );
    }
}
