//! [`KindRules`]: what a node applies to each entity kind right now — its pause, failure
//! policy, handler timeout and limits — the stored controls (read every poll interval) over
//! the build-time configuration.
//!
//! ```text
//!  DeliveryConfig (kind_policy, kind_handler_timeout, kind_limits) ┐
//!  KindControls snapshot (stored; replaced by the runner's reads) ─┴─► KindRules
//!      policy_of, handler_timeout_of, limits_of, is_paused   (stored value, else configured)
//!      gate_of ─► the kind's KindGate on this node (made on first use, its limits kept current)
//! ```
//!
//! A kind without limits has no gate: its calls pay one map lookup and nothing else.

use crate::entity::kind_gate::KindGate;
use crate::model::config::DeliveryConfig;
use crate::model::failure::FailurePolicy;
use crate::model::kind_controls::{KindControls, KindLimits};
use crate::sync::{lock, read, write};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The rules a node applies to each kind now (see the module docs).
#[derive(Debug)]
pub struct KindRules {
    config: DeliveryConfig,
    controls: RwLock<Arc<KindControls>>,
    gates: Mutex<HashMap<String, Arc<KindGate>>>,
    /// Whether the stored controls were read once (before that, the configuration alone).
    loaded: AtomicBool,
    /// Whether any kind has stored controls: if not, every rule is the configuration's and
    /// a handler call reads no lock (the common case, on the delivery path).
    stored: AtomicBool,
    /// Whether any kind has a limit, configured or stored: if not, no call looks for a gate.
    limited: AtomicBool,
}

impl KindRules {
    /// The rules of `config` with nothing stored yet.
    pub fn new(config: DeliveryConfig) -> Self {
        KindRules {
            controls: RwLock::new(Arc::new(KindControls::default())),
            gates: Mutex::new(HashMap::new()),
            loaded: AtomicBool::new(false),
            stored: AtomicBool::new(false),
            limited: AtomicBool::new(!config.kind_limits.is_empty()),
            config,
        }
    }

    /// The stored controls as last read.
    pub fn controls(&self) -> Arc<KindControls> {
        read(&self.controls).clone()
    }

    /// Replaces the stored controls with a newer read; the gates of limited kinds take their
    /// new limits at once (calls waiting included).
    pub fn replace(&self, controls: KindControls) {
        let stored = !controls.all().is_empty();
        let limited = !self.config.kind_limits.is_empty()
            || controls
                .all()
                .iter()
                .any(|c| c.settings.limits.is_limited());
        *write(&self.controls) = Arc::new(controls);
        self.stored.store(stored, Ordering::Release);
        self.limited.store(limited, Ordering::Release);
        self.loaded.store(true, Ordering::Release);
        let gates = lock(&self.gates);
        for (kind, gate) in gates.iter() {
            let (max, rate) = self.node_limits(kind);
            gate.set_limits(max, rate);
        }
    }

    /// Whether the stored controls were read at least once.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Whether `kind` is paused.
    pub fn is_paused(&self, kind: &str) -> bool {
        self.has_stored() && read(&self.controls).is_paused(kind)
    }

    /// Whether any kind is paused.
    pub fn any_paused(&self) -> bool {
        self.has_stored() && read(&self.controls).any_paused()
    }

    /// Whether any kind has stored controls.
    fn has_stored(&self) -> bool {
        self.stored.load(Ordering::Acquire)
    }

    /// The failure policy of `kind`: stored, else configured for the kind, else the default.
    pub fn policy_of(&self, kind: &str) -> FailurePolicy {
        if !self.has_stored() {
            return *self.config.policy_of(kind);
        }
        read(&self.controls)
            .get(kind)
            .and_then(|c| c.settings.failure_policy)
            .unwrap_or_else(|| *self.config.policy_of(kind))
    }

    /// The handler timeout of `kind`: stored, else configured for the kind, else the default.
    pub fn handler_timeout_of(&self, kind: &str) -> Duration {
        if !self.has_stored() {
            return self.config.handler_timeout_of(kind);
        }
        read(&self.controls)
            .get(kind)
            .and_then(|c| c.settings.handler_timeout)
            .unwrap_or_else(|| self.config.handler_timeout_of(kind))
    }

    /// The limits of `kind` over the cluster: each stored limit, else the configured one.
    pub fn limits_of(&self, kind: &str) -> KindLimits {
        let configured = self.config.limits_of(kind);
        let stored = read(&self.controls)
            .get(kind)
            .map(|c| c.settings.limits)
            .unwrap_or_default();
        KindLimits {
            max_concurrent: stored.max_concurrent.or(configured.max_concurrent),
            rate_per_second: stored.rate_per_second.or(configured.rate_per_second),
        }
    }

    /// This node's limits of `kind`: the concurrency as it is, the cluster-wide rate divided
    /// by the live nodes that register the kind.
    fn node_limits(&self, kind: &str) -> (Option<u32>, Option<f64>) {
        let limits = self.limits_of(kind);
        let nodes = read(&self.controls).nodes_of(kind);
        (
            limits.max_concurrent,
            limits.rate_per_second.map(|r| r / f64::from(nodes)),
        )
    }

    /// The gate of `kind` on this node, if it has limits (made on first use).
    pub fn gate_of(&self, kind: &str) -> Option<Arc<KindGate>> {
        if !self.limited.load(Ordering::Acquire) {
            return None;
        }
        let mut gates = lock(&self.gates);
        if let Some(gate) = gates.get(kind) {
            return Some(gate.clone());
        }
        if !self.limits_of(kind).is_limited() {
            return None;
        }
        let (max, rate) = self.node_limits(kind);
        let gate = Arc::new(KindGate::new(max, rate));
        gates.insert(kind.to_owned(), gate.clone());
        Some(gate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::failure::{Backoff, ExhaustedOutcome};
    use crate::model::kind_controls::{KindControl, KindSettings};

    fn stored(kind: &str, settings: KindSettings) -> KindControl {
        KindControl {
            kind: kind.into(),
            paused_since: None,
            settings,
            updated_at: chrono::DateTime::from_timestamp(0, 0).unwrap(),
        }
    }

    #[test]
    fn stored_settings_win_over_configured_ones_field_by_field() {
        let config = DeliveryConfig::builder()
            .kind_handler_timeout("mailer", Duration::from_secs(7))
            .kind_limits(
                "mailer",
                KindLimits {
                    max_concurrent: Some(4),
                    rate_per_second: Some(100.0),
                },
            )
            .build()
            .unwrap();
        let rules = KindRules::new(config);
        assert_eq!(rules.handler_timeout_of("mailer"), Duration::from_secs(7));
        assert_eq!(rules.limits_of("mailer").max_concurrent, Some(4));
        assert!(rules.gate_of("other").is_none());
        let gate = rules.gate_of("mailer").expect("a limited kind has a gate");
        let never = FailurePolicy::new(
            2,
            Backoff::Fixed(Duration::from_secs(1)),
            ExhaustedOutcome::Drop,
        );
        rules.replace(KindControls::new(vec![stored(
            "mailer",
            KindSettings {
                failure_policy: Some(never),
                handler_timeout: None,
                limits: KindLimits {
                    max_concurrent: Some(1),
                    rate_per_second: None,
                },
            },
        )]));
        assert_eq!(rules.policy_of("mailer"), never);
        assert_eq!(rules.policy_of("other"), FailurePolicy::default());
        assert_eq!(rules.handler_timeout_of("mailer"), Duration::from_secs(7));
        let limits = rules.limits_of("mailer");
        assert_eq!(limits.max_concurrent, Some(1));
        assert_eq!(limits.rate_per_second, Some(100.0));
        assert!(Arc::ptr_eq(&gate, &rules.gate_of("mailer").unwrap()));
    }
}
