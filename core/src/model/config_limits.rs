//! The limits every field of a [`DeliveryConfig`] is checked against, and the error that names
//! the field at fault ([`ConfigError::Invalid`], with the value and the allowed range).
//!
//! The checks run in the fields' order, so that a configuration with several faults always
//! names the same one. Every duration is bounded (at most ten years), which is what lets the
//! configuration hand its durations out as chrono spans without a failure path.

use crate::model::config::{DeliveryConfig, MAX_SHARDS};
use crate::model::error::ConfigError;
use crate::model::ids::{validate as validate_id, IdField};
use crate::model::payload_limit::{MAX_PAYLOAD_LIMIT, MIN_PAYLOAD_LIMIT};
use std::time::Duration;

/// The longest `catch_up_retention` (ten years).
const MAX_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The error naming `field`, its value and the allowed range.
fn invalid(field: &'static str, value: impl std::fmt::Debug, reason: &'static str) -> ConfigError {
    ConfigError::Invalid {
        field,
        value: format!("{value:?}"),
        reason,
    }
}

impl DeliveryConfig {
    /// Checks every field; the error names the first field at fault.
    ///
    /// The shard count is at most [`MAX_SHARDS`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        // In the fields' order, so that the field named is the first at fault, every time.
        self.validate_sizes()?;
        self.validate_windows()?;
        self.validate_node()?;
        self.validate_handlers()?;
        self.validate_policies()?;
        self.validate_kind_limits()
    }

    /// The shard count, the page sizes and the payload limit.
    fn validate_sizes(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_SHARDS).contains(&self.shard_count) {
            return Err(invalid(
                "shard_count",
                self.shard_count,
                "must be 1..=65536",
            ));
        }
        if !(1..=10_000).contains(&self.page_size) {
            return Err(invalid("page_size", self.page_size, "must be 1..=10000"));
        }
        if !(1..=100_000).contains(&self.catch_up_page_size) {
            return Err(invalid(
                "catch_up_page_size",
                self.catch_up_page_size,
                "must be 1..=100000",
            ));
        }
        if !(MIN_PAYLOAD_LIMIT..=MAX_PAYLOAD_LIMIT).contains(&self.max_payload_bytes) {
            return Err(invalid(
                "max_payload_bytes",
                self.max_payload_bytes,
                "must be 256..=268435456 (256 B to 256 MiB)",
            ));
        }
        Ok(())
    }

    /// The delivery's windows: deduplication, lease, poll.
    fn validate_windows(&self) -> Result<(), ConfigError> {
        if self.dedup_window > Duration::from_secs(7 * 24 * 3600) {
            return Err(invalid(
                "dedup_window",
                self.dedup_window,
                "must be at most 7 days (delivered rows are kept that long)",
            ));
        }
        if self.lease_duration < Duration::from_millis(100)
            || self.lease_duration > Duration::from_secs(3600)
        {
            return Err(invalid(
                "lease_duration",
                self.lease_duration,
                "must be 100ms..=1h",
            ));
        }
        if self.poll_interval < Duration::from_millis(10)
            || self.poll_interval >= self.lease_duration
        {
            return Err(invalid(
                "poll_interval",
                self.poll_interval,
                "must be at least 10ms and shorter than lease_duration",
            ));
        }
        Ok(())
    }

    /// The node's own settings: workers, id, its periodic tasks, retention and linger.
    fn validate_node(&self) -> Result<(), ConfigError> {
        if !(1..=1_024).contains(&self.workers) {
            return Err(invalid("workers", self.workers, "must be 1..=1024"));
        }
        // The id rule: a NUL byte would make every pick-up fail on PostgreSQL (text).
        validate_id(IdField::NodeId, &self.node_id.0)
            .map_err(|e| ConfigError::invalid_id(e, "node_id", &self.node_id.0))?;
        if self.ttl_sweep_interval < Duration::from_millis(10)
            || self.ttl_sweep_interval > Duration::from_secs(24 * 3600)
        {
            return Err(invalid(
                "ttl_sweep_interval",
                self.ttl_sweep_interval,
                "must be 10ms..=24h (each sweep costs one query per node)",
            ));
        }
        if self.gauge_interval < Duration::from_millis(100)
            || self.gauge_interval > Duration::from_secs(24 * 3600)
        {
            return Err(invalid(
                "gauge_interval",
                self.gauge_interval,
                "must be 100ms..=24h (each reading costs four queries per node)",
            ));
        }
        if self.catch_up_retention > MAX_RETENTION {
            return Err(invalid(
                "catch_up_retention",
                self.catch_up_retention,
                "must be at most 3650 days",
            ));
        }
        if self.lease_linger > self.lease_duration / 2 {
            return Err(invalid(
                "lease_linger",
                self.lease_linger,
                "must be at most half of lease_duration",
            ));
        }
        Ok(())
    }

    /// The handlers' concurrency and time limits (the default one and each kind's).
    fn validate_handlers(&self) -> Result<(), ConfigError> {
        if !(1..=10_000).contains(&self.handler_concurrency) {
            return Err(invalid(
                "handler_concurrency",
                self.handler_concurrency,
                "must be 1..=10000",
            ));
        }
        if !(1..=100_000).contains(&self.max_in_flight_handlers) {
            return Err(invalid(
                "max_in_flight_handlers",
                self.max_in_flight_handlers,
                "must be 1..=100000",
            ));
        }
        let timeouts =
            std::iter::once(&self.handler_timeout).chain(self.kind_handler_timeouts.values());
        for timeout in timeouts {
            if *timeout < Duration::from_millis(1) || *timeout > Duration::from_secs(24 * 3600) {
                return Err(invalid("handler_timeout", timeout, "must be 1ms..=24h"));
            }
        }
        Ok(())
    }

    /// Each kind's limits (the first kind at fault in name order is named).
    fn validate_kind_limits(&self) -> Result<(), ConfigError> {
        per_kind(&self.kind_limits, |limits| limits.validate("kind_limits"))
    }

    /// The failure policies: the default one and each kind's.
    fn validate_policies(&self) -> Result<(), ConfigError> {
        self.failure_policy.validate("failure_policy")?;
        per_kind(&self.kind_policies, |policy| policy.validate("kind_policy"))
    }
}

/// Checks each kind's setting of `settings` with `check`, in kind name order; the error of the
/// first at fault names its kind beside the value. Named as the builder method, with the kind
/// (the same one every time): a bare "invalid policy" would not say which call to fix.
fn per_kind<V>(
    settings: &std::collections::HashMap<String, V>,
    check: impl Fn(&V) -> Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    let mut kinds: Vec<_> = settings.iter().collect();
    kinds.sort_by_key(|(kind, _)| *kind);
    for (kind, setting) in kinds {
        check(setting).map_err(|err| match err {
            ConfigError::Invalid {
                field,
                value,
                reason,
            } => ConfigError::Invalid {
                field,
                value: format!("kind `{kind}`: {value}"),
                reason,
            },
            other => other,
        })?;
    }
    Ok(())
}
