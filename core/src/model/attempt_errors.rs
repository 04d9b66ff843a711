//! A message's error history: the errors of its last failed attempts, oldest first.
//!
//! ```text
//!  failed attempt n ─► history.with(at, n, error) ─► the last KEPT attempts, each error cut
//!                                                    to ERROR_BYTES on a char boundary
//!  stored as JSON text (None when empty) ◄─► from_stored
//! ```
//!
//! Bounded on purpose: a row retried hundreds of times carries at most [`ErrorHistory::KEPT`]
//! entries of at most [`ErrorHistory::ERROR_BYTES`] each, so its failure UPDATE and a dead
//! letter stay small. The stage computes a row's next history from the row its page read
//! (no extra read); a successful delivery writes none. Pure: no I/O, no clock.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One failed attempt: when, which, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// When the attempt failed (the stage's time).
    pub at: DateTime<Utc>,
    /// Which attempt it was, counting from 1.
    pub attempt: u32,
    /// Its error, cut to [`ErrorHistory::ERROR_BYTES`].
    pub error: String,
}

/// The last [`ErrorHistory::KEPT`] failed attempts of a message, oldest first.
///
/// ```
/// use shardbox_core::ErrorHistory;
/// let now = chrono::Utc::now();
/// let history = (1..=12).fold(ErrorHistory::default(), |h, n| h.with(now, n, "boom"));
/// let attempts: Vec<u32> = history.entries().iter().map(|e| e.attempt).collect();
/// assert_eq!(attempts, (3..=12).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorHistory(Vec<AttemptError>);

impl ErrorHistory {
    /// How many attempts are kept: the last ones.
    pub const KEPT: usize = 10;
    /// The most bytes of one error kept (cut on a char boundary).
    pub const ERROR_BYTES: usize = 2048;

    /// The attempts kept, oldest first.
    pub fn entries(&self) -> &[AttemptError] {
        &self.0
    }

    /// Whether no attempt is recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This history with attempt `attempt`, failed at `at` with `error`, appended (its error
    /// cut to [`Self::ERROR_BYTES`]), the oldest dropped beyond [`Self::KEPT`].
    pub fn with(&self, at: DateTime<Utc>, attempt: u32, error: &str) -> Self {
        let start = (self.0.len() + 1).saturating_sub(Self::KEPT);
        let mut kept = Vec::with_capacity(Self::KEPT.min(self.0.len() + 1));
        kept.extend_from_slice(&self.0[start..]);
        kept.push(AttemptError {
            at,
            attempt,
            error: cut(error, Self::ERROR_BYTES).to_owned(),
        });
        ErrorHistory(kept)
    }

    /// The stored form: a JSON array, or `None` when empty (a row that never failed stores
    /// nothing).
    pub fn to_stored(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        // Serializing plain structs of strings, integers and times cannot fail.
        serde_json::to_string(&self.0).ok()
    }

    /// The history a stored form holds (`None`: empty); an error names what is wrong.
    pub fn from_stored(stored: Option<&str>) -> Result<Self, String> {
        match stored {
            None => Ok(ErrorHistory::default()),
            Some(text) => serde_json::from_str(text)
                .map(ErrorHistory)
                .map_err(|e| format!("error history is not a JSON list of attempts: {e}")),
        }
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
    }

    fn failed(n: u32) -> ErrorHistory {
        (1..=n).fold(ErrorHistory::default(), |h, i| {
            h.with(t(i64::from(i)), i, &format!("e{i}"))
        })
    }

    #[test]
    fn the_last_ten_attempts_are_kept_oldest_first() {
        let h = failed(12);
        let kept: Vec<(u32, &str)> = h
            .entries()
            .iter()
            .map(|e| (e.attempt, e.error.as_str()))
            .collect();
        assert_eq!(kept.len(), ErrorHistory::KEPT);
        assert_eq!(kept.first(), Some(&(3, "e3")));
        assert_eq!(kept.last(), Some(&(12, "e12")));
        assert!(kept.windows(2).all(|w| w[0].0 + 1 == w[1].0));
        assert_eq!(h.entries()[0].at, t(3));
        assert_eq!(failed(4).entries().len(), 4);
    }

    #[test]
    fn a_long_error_is_cut_on_a_char_boundary() {
        // 'é' is two bytes: 2049 bytes with the boundary at 2048 falling inside one.
        let long = format!("x{}", "é".repeat(1024));
        let h = ErrorHistory::default().with(t(0), 1, &long);
        let kept = &h.entries()[0].error;
        assert_eq!(kept.len(), 2047);
        assert!(long.starts_with(kept.as_str()));
        let short = "short";
        assert_eq!(
            ErrorHistory::default().with(t(0), 1, short).entries()[0].error,
            short
        );
    }

    #[test]
    fn the_stored_form_round_trips_and_is_none_when_empty() {
        assert_eq!(ErrorHistory::default().to_stored(), None);
        assert_eq!(ErrorHistory::from_stored(None), Ok(ErrorHistory::default()));
        let h = failed(3);
        let stored = h.to_stored().expect("stored");
        assert_eq!(ErrorHistory::from_stored(Some(&stored)), Ok(h));
        assert!(ErrorHistory::from_stored(Some("{nope")).is_err());
    }
}
