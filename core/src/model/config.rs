//! Delivery configuration: every knob with a safe default, validated at build time with an
//! error that names the field (the limits are `config_limits`'s).

use crate::model::error::ConfigError;
use crate::model::failure::FailurePolicy;
use crate::model::ids::NodeId;
use crate::model::kind_controls::KindLimits;
use crate::model::payload_limit::DEFAULT_MAX_PAYLOAD_BYTES;
use std::collections::HashMap;
use std::time::Duration;

/// The most shards an Inbox can have (`shard_count`, and a re-sharding's target).
pub const MAX_SHARDS: u32 = 65_536;

/// The validated configuration of a delivery.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeliveryConfig {
    /// Number of shards of the Inbox (1..=65,536). Default 16. The first node records it; a
    /// node with another count is refused. It changes online with a re-sharding
    /// (`Shardbox::reshard`, `shardbox reshard`), after which nodes start with the new count.
    pub shard_count: u32,
    /// Rows read and committed per stage (1..=10,000). Default 256.
    pub page_size: usize,
    /// Events replayed per catch-up page (1..=100,000). Default 1,000.
    pub catch_up_page_size: usize,
    /// How long a delivered message is remembered to drop duplicates (0..=7 days). Default 60 s.
    pub dedup_window: Duration,
    /// Entries of the in-memory cache of recent deliveries (0 disables it). Default 10,000.
    pub cache_capacity: u64,
    /// How long a picked-up shard stays leased without renewal (100 ms..=1 h). Default 30 s.
    pub lease_duration: Duration,
    /// How often idle workers look for work without a notification (10 ms..lease). Default 1 s.
    pub poll_interval: Duration,
    /// Concurrent workers of a node (1..=1,024). Default 4.
    pub workers: usize,
    /// This node's id (appears in logs and the lock table): 1..=128 bytes with no NUL byte
    /// (the id rule of [`IdField::NodeId`]). Default: generated.
    pub node_id: NodeId,
    /// How long completed catch-up jobs are kept before they are purged. Default 24 h.
    pub catch_up_retention: Duration,
    /// Failure policy of kinds without their own.
    pub failure_policy: FailurePolicy,
    /// Failure policies per entity kind.
    pub kind_policies: HashMap<String, FailurePolicy>,
    /// Whether a message whose TTL ran out is also kept in the dead letters (reason
    /// `expired`), besides being counted. Default `false`: expired messages are removed.
    pub dead_letter_expired: bool,
    /// How often a running node looks for messages whose TTL passed before they were due
    /// (delayed, backed off, or waiting behind their target) and expires them, in every shard
    /// no other node holds (10 ms..=24 h). Default 30 s. Due messages are expired as soon as a
    /// stage reads them, whatever this says.
    pub ttl_sweep_interval: Duration,
    /// How often a running node reads the gauges (inbox depth by state, lag per shard, leases
    /// held, dead letters, blocked targets, catch-up progress) from storage and sets them
    /// through the `metrics` facade (100 ms..=24 h). Default 15 s. Four queries per node per
    /// interval, off the delivery path.
    pub gauge_interval: Duration,
    /// How long a node runner's worker keeps a shard's lease after draining it, so that the
    /// next write to the shard is served without a new pick-up and release (0..=half of
    /// `lease_duration`; 0 releases at once). Default [`DEFAULT_LEASE_LINGER`] (150 ms), or
    /// half of `lease_duration` when that is shorter and the linger was not set. Only a node's own shards (those
    /// the assignment prefers it for) are kept; another member's shard is released after a
    /// stage, so a kept lease never stands between a joining node and its share. Under
    /// steady traffic a node's own shard is thus served under one lease, renewed by its stages.
    pub lease_linger: Duration,
    /// How many targets of a page one worker handles at once (1..=10,000). Default 16. Each
    /// target's batch still runs in `seq` order, one batch per target at a time.
    pub handler_concurrency: usize,
    /// How many handler calls run at once on this node, over all its workers
    /// (1..=100,000). Default 1,024.
    pub max_in_flight_handlers: usize,
    /// How long one handler call may take before it fails its message, which then follows
    /// the failure policy (1 ms..=24 h). Default 60 s. A hung handler cannot hold a shard
    /// longer than this.
    pub handler_timeout: Duration,
    /// `handler_timeout` per entity kind.
    pub kind_handler_timeouts: HashMap<String, Duration>,
    /// Limits on the handler calls of an entity kind (at most N at once on a node, at most R
    /// per second over the cluster; see [`KindLimits`]). None by default: a kind's calls are
    /// bounded by `handler_concurrency` and `max_in_flight_handlers` only. Changeable at run
    /// time (`Shardbox::set_kind_settings`, `shardbox kinds set`).
    pub kind_limits: HashMap<String, KindLimits>,
    /// The largest serialized payload a send, a post or a handler's emitted event or
    /// command may carry (256 B..=256 MiB). Default 1 MiB ([`DEFAULT_MAX_PAYLOAD_BYTES`]).
    /// A send or post over it is refused with `DeliveryError::PayloadTooLarge` and writes
    /// nothing; a handler that emits one fails its message permanently, and the kind's
    /// failure policy decides (see [`crate::model::payload_limit`]).
    pub max_payload_bytes: usize,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            shard_count: 16,
            page_size: 256,
            catch_up_page_size: 1_000,
            dedup_window: Duration::from_secs(60),
            cache_capacity: 10_000,
            lease_duration: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            workers: 4,
            node_id: NodeId::generate(),
            catch_up_retention: Duration::from_secs(24 * 3600),
            failure_policy: FailurePolicy::default(),
            kind_policies: HashMap::new(),
            dead_letter_expired: false,
            ttl_sweep_interval: Duration::from_secs(30),
            gauge_interval: Duration::from_secs(15),
            lease_linger: DEFAULT_LEASE_LINGER,
            handler_concurrency: 16,
            max_in_flight_handlers: 1_024,
            handler_timeout: Duration::from_secs(60),
            kind_handler_timeouts: HashMap::new(),
            kind_limits: HashMap::new(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

impl DeliveryConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> DeliveryConfigBuilder {
        DeliveryConfigBuilder::default()
    }

    /// The failure policy of `kind`.
    pub fn policy_of(&self, kind: &str) -> &FailurePolicy {
        self.kind_policies.get(kind).unwrap_or(&self.failure_policy)
    }

    /// The `handler_timeout` of `kind`.
    pub fn handler_timeout_of(&self, kind: &str) -> Duration {
        self.kind_handler_timeouts
            .get(kind)
            .copied()
            .unwrap_or(self.handler_timeout)
    }

    /// The build-time limits of `kind` (none unless `kind_limits` names it).
    pub fn limits_of(&self, kind: &str) -> KindLimits {
        self.kind_limits.get(kind).copied().unwrap_or_default()
    }

    /// Checks that every setting keyed by entity kind (`kind_policy`,
    /// `kind_handler_timeout`, `kind_limits`) names one of the `registered` kinds: a misspelled kind would
    /// apply to nothing and leave the real kind on the defaults. The error names the
    /// setting, the unknown kind and the registered kinds.
    pub fn check_kinds(&self, registered: &[&str]) -> Result<(), ConfigError> {
        let settings = [
            ("kind_policy", sorted_keys(&self.kind_policies)),
            (
                "kind_handler_timeout",
                sorted_keys(&self.kind_handler_timeouts),
            ),
            ("kind_limits", sorted_keys(&self.kind_limits)),
        ];
        for (setting, kinds) in settings {
            if let Some(kind) = kinds.into_iter().find(|k| !registered.contains(k)) {
                let mut registered: Vec<String> =
                    registered.iter().map(|k| (*k).to_owned()).collect();
                registered.sort_unstable();
                return Err(ConfigError::UnknownKind {
                    setting,
                    kind: kind.to_owned(),
                    registered,
                });
            }
        }
        Ok(())
    }

    /// `lease_duration` as a chrono duration (for lease times).
    pub fn lease_span(&self) -> chrono::Duration {
        span(self.lease_duration)
    }

    /// `poll_interval` as a chrono duration (holds, re-checks, turns).
    pub fn poll_span(&self) -> chrono::Duration {
        span(self.poll_interval)
    }

    /// `dedup_window` as a chrono duration (how long delivered rows are kept).
    pub fn dedup_span(&self) -> chrono::Duration {
        span(self.dedup_window)
    }

    /// `catch_up_retention` as a chrono duration.
    pub fn catch_up_retention_span(&self) -> chrono::Duration {
        span(self.catch_up_retention)
    }
}

/// The keys of `map`, sorted (so that the first unknown one reported is always the same).
fn sorted_keys<V>(map: &HashMap<String, V>) -> Vec<&str> {
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

/// A validated duration as a chrono duration. Every duration field is bounded by `validate`
/// (at most ten years), far inside chrono's range, so the conversion cannot fail for a
/// validated configuration; the saturating fallback only serves an unvalidated one.
fn span(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The default [`DeliveryConfig::lease_linger`]. 150 ms keeps a shard's lease through the
/// gaps of moderate traffic (at 500 msgs/s over 16 shards, 1 % of the gaps are longer; with
/// 50 ms, until 2026-12-03, 21 % were, and each cost a release, a pick-up and a probe: 12 %
/// of a two-node benchmark's turns began with a pick-up), and fits the shortest lease (300 ms)
/// the tests use.
pub const DEFAULT_LEASE_LINGER: Duration = Duration::from_millis(150);

/// Builds a [`DeliveryConfig`]; [`DeliveryConfigBuilder::build`] validates it.
#[derive(Debug, Clone, Default)]
pub struct DeliveryConfigBuilder {
    config: DeliveryConfig,
    /// Whether `lease_linger` was set (else its default follows `lease_duration`).
    linger_set: bool,
}

macro_rules! setter {
    ($(#[$doc:meta])* $name:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.config.$name = value;
            self
        }
    };
}

impl DeliveryConfigBuilder {
    setter!(/// Sets [`DeliveryConfig::shard_count`].
        shard_count: u32);
    setter!(/// Sets [`DeliveryConfig::page_size`].
        page_size: usize);
    setter!(/// Sets [`DeliveryConfig::catch_up_page_size`].
        catch_up_page_size: usize);
    setter!(/// Sets [`DeliveryConfig::dedup_window`].
        dedup_window: Duration);
    setter!(/// Sets [`DeliveryConfig::cache_capacity`].
        cache_capacity: u64);
    setter!(/// Sets [`DeliveryConfig::lease_duration`].
        lease_duration: Duration);
    setter!(/// Sets [`DeliveryConfig::poll_interval`].
        poll_interval: Duration);
    setter!(/// Sets [`DeliveryConfig::workers`].
        workers: usize);
    setter!(/// Sets [`DeliveryConfig::node_id`].
        node_id: NodeId);
    setter!(/// Sets [`DeliveryConfig::catch_up_retention`].
        catch_up_retention: Duration);
    setter!(/// Sets [`DeliveryConfig::failure_policy`].
        failure_policy: FailurePolicy);
    setter!(/// Sets [`DeliveryConfig::dead_letter_expired`].
        dead_letter_expired: bool);
    setter!(/// Sets [`DeliveryConfig::ttl_sweep_interval`].
        ttl_sweep_interval: Duration);
    setter!(/// Sets [`DeliveryConfig::gauge_interval`].
        gauge_interval: Duration);
    /// Sets [`DeliveryConfig::lease_linger`].
    pub fn lease_linger(mut self, value: Duration) -> Self {
        self.config.lease_linger = value;
        self.linger_set = true;
        self
    }
    setter!(/// Sets [`DeliveryConfig::handler_concurrency`].
        handler_concurrency: usize);
    setter!(/// Sets [`DeliveryConfig::max_in_flight_handlers`].
        max_in_flight_handlers: usize);
    setter!(/// Sets [`DeliveryConfig::handler_timeout`].
        handler_timeout: Duration);
    setter!(/// Sets [`DeliveryConfig::max_payload_bytes`].
        max_payload_bytes: usize);

    /// Gives `kind` its own `handler_timeout`.
    pub fn kind_handler_timeout(mut self, kind: &str, timeout: Duration) -> Self {
        self.config
            .kind_handler_timeouts
            .insert(kind.to_owned(), timeout);
        self
    }

    /// Gives `kind` limits on its handler calls (see [`DeliveryConfig::kind_limits`]).
    pub fn kind_limits(mut self, kind: &str, limits: KindLimits) -> Self {
        self.config.kind_limits.insert(kind.to_owned(), limits);
        self
    }

    /// Gives `kind` its own failure policy.
    pub fn kind_policy(mut self, kind: &str, policy: FailurePolicy) -> Self {
        self.config.kind_policies.insert(kind.to_owned(), policy);
        self
    }

    /// Validates and returns the configuration.
    pub fn build(mut self) -> Result<DeliveryConfig, ConfigError> {
        if !self.linger_set {
            self.config.lease_linger = DEFAULT_LEASE_LINGER.min(self.config.lease_duration / 2);
        }
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(err: ConfigError) -> &'static str {
        match err {
            ConfigError::Invalid { field, .. } | ConfigError::Missing { field, .. } => field,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_default_linger_fits_a_short_lease_and_a_set_one_is_checked() {
        let short = DeliveryConfig::builder()
            .lease_duration(Duration::from_millis(200))
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap();
        assert_eq!(short.lease_linger, Duration::from_millis(100));
        let long = DeliveryConfig::builder()
            .lease_duration(Duration::from_secs(2))
            .build()
            .unwrap();
        assert_eq!(long.lease_linger, DEFAULT_LEASE_LINGER);
        let set = DeliveryConfig::builder()
            .lease_duration(Duration::from_millis(200))
            .poll_interval(Duration::from_millis(50))
            .lease_linger(Duration::from_millis(150))
            .build()
            .unwrap_err();
        assert_eq!(field_of(set), "lease_linger");
    }

    #[test]
    fn defaults_are_valid() {
        let c = DeliveryConfig::builder().build().unwrap();
        assert_eq!(c.shard_count, 16);
        assert_eq!(c.page_size, 256);
        assert_eq!(c.dedup_window, Duration::from_secs(60));
        assert_eq!(c.ttl_sweep_interval, Duration::from_secs(30));
        assert!(!c.dead_letter_expired);
        assert_eq!(c.lease_linger, Duration::from_millis(150));
        assert_eq!(c.handler_concurrency, 16);
        assert_eq!(c.max_in_flight_handlers, 1_024);
        assert_eq!(c.handler_timeout, Duration::from_secs(60));
        assert_eq!(c.max_payload_bytes, 1 << 20);
    }

    #[test]
    fn kind_handler_timeouts_override_the_default() {
        let c = DeliveryConfig::builder()
            .handler_timeout(Duration::from_secs(5))
            .kind_handler_timeout("mailer", Duration::from_millis(300))
            .build()
            .unwrap();
        assert_eq!(c.handler_timeout_of("mailer"), Duration::from_millis(300));
        assert_eq!(c.handler_timeout_of("other"), Duration::from_secs(5));
    }

    #[test]
    fn each_invalid_value_names_its_field() {
        let b = DeliveryConfig::builder;
        let cases: Vec<(DeliveryConfigBuilder, &str)> = vec![
            (b().shard_count(0), "shard_count"),
            (b().shard_count(70_000), "shard_count"),
            (b().page_size(0), "page_size"),
            (b().page_size(10_001), "page_size"),
            (b().catch_up_page_size(0), "catch_up_page_size"),
            (
                b().dedup_window(Duration::from_secs(8 * 24 * 3600)),
                "dedup_window",
            ),
            (
                b().lease_duration(Duration::from_millis(5)),
                "lease_duration",
            ),
            (b().poll_interval(Duration::from_millis(1)), "poll_interval"),
            (
                b().lease_duration(Duration::from_secs(1))
                    .poll_interval(Duration::from_millis(100))
                    .lease_linger(Duration::from_millis(600)),
                "lease_linger",
            ),
            (
                b().lease_duration(Duration::from_secs(1))
                    .poll_interval(Duration::from_secs(2)),
                "poll_interval",
            ),
            (b().workers(0), "workers"),
            (
                b().gauge_interval(Duration::from_millis(5)),
                "gauge_interval",
            ),
            (
                b().ttl_sweep_interval(Duration::from_millis(5)),
                "ttl_sweep_interval",
            ),
            (
                b().ttl_sweep_interval(Duration::from_secs(25 * 3600)),
                "ttl_sweep_interval",
            ),
            (b().node_id(NodeId(String::new())), "node_id"),
            (b().handler_concurrency(0), "handler_concurrency"),
            (b().handler_concurrency(10_001), "handler_concurrency"),
            (b().max_in_flight_handlers(0), "max_in_flight_handlers"),
            (b().handler_timeout(Duration::ZERO), "handler_timeout"),
            (b().handler_timeout(Duration::MAX), "handler_timeout"),
            (b().max_payload_bytes(255), "max_payload_bytes"),
            (b().max_payload_bytes((256 << 20) + 1), "max_payload_bytes"),
            (
                b().kind_handler_timeout("k", Duration::from_secs(25 * 3600)),
                "handler_timeout",
            ),
            (
                b().failure_policy(FailurePolicy {
                    max_attempts: 0,
                    ..FailurePolicy::default()
                }),
                "failure_policy",
            ),
        ];
        for (builder, field) in cases {
            let err = builder.build().expect_err(field);
            assert!(err.to_string().contains(field), "{err}");
            assert_eq!(field_of(err), field);
        }
    }

    #[test]
    fn a_node_id_outside_the_id_rule_is_refused_naming_node_id() {
        let b = DeliveryConfig::builder;
        assert!(b().node_id(NodeId("n".repeat(128))).build().is_ok());
        for (node_id, words) in [
            ("node\0a".to_owned(), "NUL"),
            ("n".repeat(129), "at most 128 bytes"),
            (String::new(), "not be empty"),
        ] {
            let err = b()
                .node_id(NodeId(node_id.clone()))
                .build()
                .expect_err(&node_id);
            let text = err.to_string();
            assert!(text.contains(words), "{text}");
            assert_eq!(field_of(err), "node_id");
        }
    }

    #[test]
    fn settings_for_unregistered_kinds_are_refused_naming_the_registered_ones() {
        let config = DeliveryConfig::builder()
            .kind_policy("counter", FailurePolicy::default())
            .kind_handler_timeout("countr", Duration::from_secs(1))
            .build()
            .expect("valid values");
        assert_eq!(config.check_kinds(&["payments", "counter"]), {
            Err(ConfigError::UnknownKind {
                setting: "kind_handler_timeout",
                kind: "countr".into(),
                registered: vec!["counter".into(), "payments".into()],
            })
        });
        let message = config
            .check_kinds(&["payments", "counter"])
            .expect_err("countr")
            .to_string();
        assert!(
            message.contains("`kind_handler_timeout(\"countr\", …)`")
                && message.contains("registered kinds: `counter`, `payments`"),
            "{message}"
        );
        assert!(config.check_kinds(&["counter", "countr"]).is_ok());
        let none = config.check_kinds(&[]).expect_err("nothing registered");
        assert!(
            none.to_string().contains("registered kinds: none"),
            "{none}"
        );
    }

    #[test]
    fn a_kind_policy_error_names_the_builder_method_and_the_kind() {
        let bad = FailurePolicy {
            max_attempts: 0,
            ..FailurePolicy::default()
        };
        let err = DeliveryConfig::builder()
            .kind_policy("audit", FailurePolicy::default())
            .kind_policy("payment", bad)
            .build()
            .expect_err("max_attempts 0");
        let message = err.to_string();
        assert!(message.contains("`payment`"), "{message}");
        assert!(!message.contains("audit"), "{message}");
        assert_eq!(field_of(err), "kind_policy");
    }

    #[test]
    fn kind_policies_override_the_default() {
        let special = FailurePolicy {
            max_attempts: 1,
            ..FailurePolicy::default()
        };
        let c = DeliveryConfig::builder()
            .kind_policy("payment", special)
            .build()
            .unwrap();
        assert_eq!(c.policy_of("payment").max_attempts, 1);
        assert_eq!(c.policy_of("other").max_attempts, 5);
    }
}
