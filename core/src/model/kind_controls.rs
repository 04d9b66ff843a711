//! Kind controls: what an operator or the application steers per entity kind while nodes run —
//! a pause, the failure policy, the handler timeout and the limits — stored in the database so
//! that every node follows them, over the build-time values.
//!
//! ```text
//!  build time: DeliveryConfig (kind_policy, kind_handler_timeout, kind_limits)   the defaults
//!  run time:   stored KindControl per kind (paused since, KindSettings)          overrides
//!      └─► each node reads them every poll interval into a KindControls snapshot
//!          policy_of / handler_timeout_of / limits_of: the stored value, else the build-time one
//! ```
//!
//! A field of [`KindSettings`] left `None` means "the build-time value": clearing a stored
//! setting puts the kind back on its configuration. Plain data and checks; no I/O.

use crate::model::error::ConfigError;
use crate::model::failure::{Backoff, ExhaustedOutcome, FailurePolicy};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

/// The most handler calls of one kind a limit may allow at once (as `max_in_flight_handlers`).
pub const MAX_KIND_CONCURRENCY: u32 = 100_000;

/// The highest rate a limit may name, in handler calls per second.
pub const MAX_KIND_RATE: f64 = 1_000_000.0;

/// Limits on a kind's handler calls. `None`: no limit of that sort.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KindLimits {
    /// At most this many handler calls of the kind run at once on a node (1..=100,000).
    pub max_concurrent: Option<u32>,
    /// At most this many handler calls of the kind start per second over the cluster
    /// (> 0, ≤ 1,000,000): each node takes an equal share, the rate divided by the live nodes
    /// that register the kind. Calls are spaced evenly (no burst).
    pub rate_per_second: Option<f64>,
}

impl KindLimits {
    /// No limit.
    pub const NONE: KindLimits = KindLimits {
        max_concurrent: None,
        rate_per_second: None,
    };

    /// Whether it limits anything.
    pub fn is_limited(&self) -> bool {
        self.max_concurrent.is_some() || self.rate_per_second.is_some()
    }

    /// Checks both limits; the error names `field` and the value at fault.
    pub fn validate(&self, field: &'static str) -> Result<(), ConfigError> {
        if let Some(n) = self.max_concurrent {
            if !(1..=MAX_KIND_CONCURRENCY).contains(&n) {
                return Err(invalid(
                    field,
                    format!("max_concurrent {n}"),
                    "must be 1..=100000",
                ));
            }
        }
        if let Some(r) = self.rate_per_second {
            if !(r.is_finite() && r > 0.0 && r <= MAX_KIND_RATE) {
                return Err(invalid(
                    field,
                    format!("rate_per_second {r}"),
                    "must be a number above 0 and at most 1000000",
                ));
            }
        }
        Ok(())
    }
}

/// What is stored for a kind besides its pause: each field overrides the build-time value
/// when set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KindSettings {
    /// The kind's failure policy (else `kind_policy`, else `failure_policy`).
    pub failure_policy: Option<FailurePolicy>,
    /// The kind's handler timeout (else `kind_handler_timeout`, else `handler_timeout`).
    pub handler_timeout: Option<Duration>,
    /// The kind's limits, each one over the build-time `kind_limits` of the kind.
    pub limits: KindLimits,
}

impl KindSettings {
    /// Whether nothing is set (the kind follows its configuration).
    pub fn is_empty(&self) -> bool {
        *self == KindSettings::default()
    }

    /// Checks every set field against the configuration's rules; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(policy) = &self.failure_policy {
            policy.validate("failure_policy")?;
        }
        if let Some(t) = self.handler_timeout {
            if t < Duration::from_millis(1) || t > Duration::from_secs(24 * 3600) {
                return Err(invalid(
                    "handler_timeout",
                    format!("{t:?}"),
                    "must be 1ms..=24h",
                ));
            }
        }
        self.limits.validate("limits")
    }

    /// The stored form: a JSON object of the set fields (durations in milliseconds).
    pub fn to_stored(&self) -> String {
        let stored = Stored {
            max_attempts: self.failure_policy.map(|p| p.max_attempts),
            backoff: self.failure_policy.map(|p| StoredBackoff::of(p.backoff)),
            on_exhausted: self
                .failure_policy
                .map(|p| exhausted_name(p.on_exhausted).into()),
            handler_timeout_ms: self.handler_timeout.map(millis),
            max_concurrent: self.limits.max_concurrent,
            rate_per_second: self.limits.rate_per_second,
        };
        serde_json::to_string(&stored).unwrap_or_else(|_| "{}".into())
    }

    /// Reads the stored form back; the error says what does not decode.
    pub fn from_stored(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(KindSettings::default());
        }
        let s: Stored = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let failure_policy = match (s.max_attempts, s.backoff, s.on_exhausted) {
            (None, None, None) => None,
            (Some(max_attempts), Some(backoff), Some(on_exhausted)) => Some(FailurePolicy::new(
                max_attempts,
                backoff.into_backoff(),
                exhausted_of(&on_exhausted)?,
            )),
            _ => {
                return Err("a failure policy needs max_attempts, backoff and on_exhausted".into())
            }
        };
        Ok(KindSettings {
            failure_policy,
            handler_timeout: s.handler_timeout_ms.map(Duration::from_millis),
            limits: KindLimits {
                max_concurrent: s.max_concurrent,
                rate_per_second: s.rate_per_second,
            },
        })
    }
}

/// One kind's stored controls.
#[derive(Debug, Clone, PartialEq)]
pub struct KindControl {
    /// The entity kind.
    pub kind: String,
    /// When it was paused, if it is.
    pub paused_since: Option<DateTime<Utc>>,
    /// Its run-time settings.
    pub settings: KindSettings,
    /// When it was last changed.
    pub updated_at: DateTime<Utc>,
}

/// A node's snapshot of every kind's stored controls (read every poll interval).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindControls {
    by_kind: HashMap<String, KindControl>,
    /// Of each rate-limited kind: the live nodes that register it (its rate's divisor).
    nodes_of: HashMap<String, u32>,
}

impl KindControls {
    /// A snapshot of `controls`.
    pub fn new(controls: Vec<KindControl>) -> Self {
        KindControls {
            by_kind: controls.into_iter().map(|c| (c.kind.clone(), c)).collect(),
            nodes_of: HashMap::new(),
        }
    }

    /// The same snapshot, knowing how many live nodes register each kind (what a cluster-wide
    /// rate is divided by); a kind missing there counts one node.
    pub fn with_nodes(mut self, nodes_of: HashMap<String, u32>) -> Self {
        self.nodes_of = nodes_of;
        self
    }

    /// The stored controls of `kind`, if any.
    pub fn get(&self, kind: &str) -> Option<&KindControl> {
        self.by_kind.get(kind)
    }

    /// Whether `kind` is paused.
    pub fn is_paused(&self, kind: &str) -> bool {
        self.get(kind).is_some_and(|c| c.paused_since.is_some())
    }

    /// Whether any kind is paused (a page with none skips the per-row check).
    pub fn any_paused(&self) -> bool {
        self.by_kind.values().any(|c| c.paused_since.is_some())
    }

    /// Every stored kind, sorted by name.
    pub fn all(&self) -> Vec<&KindControl> {
        let mut all: Vec<_> = self.by_kind.values().collect();
        all.sort_by(|a, b| a.kind.cmp(&b.kind));
        all
    }

    /// The live nodes that register `kind` (at least 1).
    pub fn nodes_of(&self, kind: &str) -> u32 {
        self.nodes_of.get(kind).copied().unwrap_or(1).max(1)
    }

    /// Whether some kind has a stored rate limit (then a node counts the nodes per kind).
    pub fn any_rate(&self) -> bool {
        self.by_kind
            .values()
            .any(|c| c.settings.limits.rate_per_second.is_some())
    }
}

/// The JSON shape of [`KindSettings::to_stored`].
#[derive(Serialize, Deserialize, Default)]
struct Stored {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    backoff: Option<StoredBackoff>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    on_exhausted: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    handler_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    max_concurrent: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    rate_per_second: Option<f64>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StoredBackoff {
    Fixed { ms: u64 },
    Exponential { base_ms: u64, cap_ms: u64 },
}

impl StoredBackoff {
    fn of(b: Backoff) -> Self {
        match b {
            Backoff::Fixed(d) => StoredBackoff::Fixed { ms: millis(d) },
            Backoff::Exponential { base, cap } => StoredBackoff::Exponential {
                base_ms: millis(base),
                cap_ms: millis(cap),
            },
        }
    }

    fn into_backoff(self) -> Backoff {
        match self {
            StoredBackoff::Fixed { ms } => Backoff::Fixed(Duration::from_millis(ms)),
            StoredBackoff::Exponential { base_ms, cap_ms } => Backoff::Exponential {
                base: Duration::from_millis(base_ms),
                cap: Duration::from_millis(cap_ms),
            },
        }
    }
}

/// The name of an exhausted outcome, as stored and as the CLI takes it.
pub fn exhausted_name(outcome: ExhaustedOutcome) -> &'static str {
    match outcome {
        ExhaustedOutcome::DeadLetter => "dead_letter",
        ExhaustedOutcome::Drop => "drop",
        ExhaustedOutcome::Block => "block",
    }
}

/// The exhausted outcome named `name` (`dead_letter`, `drop` or `block`).
pub fn exhausted_of(name: &str) -> Result<ExhaustedOutcome, String> {
    match name {
        "dead_letter" | "dead-letter" => Ok(ExhaustedOutcome::DeadLetter),
        "drop" => Ok(ExhaustedOutcome::Drop),
        "block" => Ok(ExhaustedOutcome::Block),
        other => Err(format!(
            "unknown on_exhausted `{other}` (expected dead_letter, drop or block)"
        )),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn invalid(field: &'static str, value: String, reason: &'static str) -> ConfigError {
    ConfigError::Invalid {
        field,
        value,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(kind: &str, paused: bool, settings: KindSettings) -> KindControl {
        KindControl {
            kind: kind.into(),
            paused_since: paused.then(|| DateTime::from_timestamp(1_700_000_000, 0).unwrap()),
            settings,
            updated_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        }
    }

    #[test]
    fn settings_survive_their_stored_form() {
        let all = KindSettings {
            failure_policy: Some(FailurePolicy::new(
                3,
                Backoff::Exponential {
                    base: Duration::from_millis(250),
                    cap: Duration::from_secs(60),
                },
                ExhaustedOutcome::Block,
            )),
            handler_timeout: Some(Duration::from_secs(5)),
            limits: KindLimits {
                max_concurrent: Some(8),
                rate_per_second: Some(50.5),
            },
        };
        for s in [all, KindSettings::default()] {
            assert_eq!(KindSettings::from_stored(&s.to_stored()).unwrap(), s);
        }
        assert_eq!(KindSettings::default().to_stored(), "{}");
        assert_eq!(
            KindSettings::from_stored("").unwrap(),
            KindSettings::default()
        );
    }

    #[test]
    fn a_stored_form_that_does_not_decode_says_why() {
        let half = KindSettings::from_stored(r#"{"max_attempts":3}"#).unwrap_err();
        assert!(
            half.contains("max_attempts, backoff and on_exhausted"),
            "{half}"
        );
        let bad = r#"{"max_attempts":3,"backoff":{"fixed":{"ms":1}},"on_exhausted":"explode"}"#;
        assert!(KindSettings::from_stored(bad)
            .unwrap_err()
            .contains("explode"));
        assert!(KindSettings::from_stored("[").is_err());
    }

    #[test]
    fn checks_name_the_field_at_fault() {
        let field = |s: KindSettings| match s.validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        };
        let zero = KindSettings {
            limits: KindLimits {
                max_concurrent: Some(0),
                rate_per_second: None,
            },
            ..KindSettings::default()
        };
        assert_eq!(field(zero), "limits");
        let nan = KindSettings {
            limits: KindLimits {
                max_concurrent: None,
                rate_per_second: Some(f64::NAN),
            },
            ..KindSettings::default()
        };
        assert_eq!(field(nan), "limits");
        let slow = KindSettings {
            handler_timeout: Some(Duration::from_secs(25 * 3600)),
            ..KindSettings::default()
        };
        assert_eq!(field(slow), "handler_timeout");
        let policy = KindSettings {
            failure_policy: Some(FailurePolicy::new(
                0,
                Backoff::Fixed(Duration::from_secs(1)),
                ExhaustedOutcome::Drop,
            )),
            ..KindSettings::default()
        };
        assert!(policy.validate().is_err());
        assert!(KindSettings::default().validate().is_ok());
    }

    #[test]
    fn a_snapshot_answers_pauses_and_node_counts() {
        let rated = KindSettings {
            limits: KindLimits {
                max_concurrent: None,
                rate_per_second: Some(10.0),
            },
            ..KindSettings::default()
        };
        let c = KindControls::new(vec![
            control("mailer", true, KindSettings::default()),
            control("billing", false, rated),
        ])
        .with_nodes(HashMap::from([("billing".to_string(), 3)]));
        assert!(c.is_paused("mailer"));
        assert!(!c.is_paused("billing"));
        assert!(!c.is_paused("unknown"));
        assert!(c.any_paused());
        assert!(c.any_rate());
        assert_eq!(c.nodes_of("billing"), 3);
        assert_eq!(c.nodes_of("mailer"), 1);
        let names: Vec<_> = c.all().iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(names, ["billing", "mailer"]);
        assert!(!KindControls::default().any_paused());
    }
}
