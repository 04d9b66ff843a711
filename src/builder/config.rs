//! The builder's configuration setters: one method per setting of the core's
//! `DeliveryConfigBuilder`, and the errors of a bad value named after the method the user
//! called.

use super::ShardboxBuilder;
use shardbox_core::{ConfigError, FailurePolicy, NodeId};
use std::time::Duration;

/// The configuration setters, each `method => core field: type`, and `builder_method`: the
/// builder names some settings differently from the core's fields (`shards`, not
/// `shard_count`), and an error must name the method the user called.
macro_rules! config_setters {
    ($($(#[$doc:meta])* $name:ident => $field:ident: $ty:ty;)*) => {
        impl ShardboxBuilder {
            $(
                $(#[$doc])*
                pub fn $name(mut self, value: $ty) -> Self {
                    self.config = self.config.$field(value);
                    self
                }
            )*
        }

        /// The builder method that sets the core's configuration field `field` (`field`
        /// itself where the builder has no setter of its own for it, e.g. `kind_policy`).
        fn builder_method(field: &'static str) -> &'static str {
            $(
                if field == stringify!($field) {
                    return stringify!($name);
                }
            )*
            field
        }
    };
}

config_setters! {
    /// Number of shards (default 16): the count recorded in the database by the first node;
    /// another one is refused at build. Change it with [`Shardbox::reshard`](crate::Shardbox::reshard).
    shards => shard_count: u32;
    /// Rows per stage (default 256).
    page_size => page_size: usize;
    /// Events per catch-up page (default 1,000).
    catch_up_page_size => catch_up_page_size: usize;
    /// How long duplicates are recognised after a delivery (default 60 s).
    dedup_window => dedup_window: Duration;
    /// Entries of the recent-delivery cache (default 10,000; 0 disables it).
    cache_capacity => cache_capacity: u64;
    /// Shard lease duration (default 30 s).
    lease_duration => lease_duration: Duration;
    /// Poll interval of idle workers (default 1 s).
    poll_interval => poll_interval: Duration;
    /// Concurrent workers of this node (default 4).
    workers => workers: usize;
    /// This node's id (default generated).
    node_id => node_id: NodeId;
    /// How long completed catch-up jobs are kept (default 24 h).
    catch_up_retention => catch_up_retention: Duration;
    /// Failure policy of kinds without their own.
    failure_policy => failure_policy: FailurePolicy;
    /// Also keep messages whose TTL ran out in the dead letters (default false).
    dead_letter_expired => dead_letter_expired: bool;
    /// How often a running node expires messages whose TTL passed before they were due
    /// (default 30 s).
    ttl_sweep_interval => ttl_sweep_interval: Duration;
    /// How often a running node reads the gauges from storage (default 15 s).
    gauge_interval => gauge_interval: Duration;
    /// How long a worker keeps a drained shard's lease for the next write (default
    /// 150 ms, or half of a shorter `lease_duration`; 0 releases at once).
    lease_linger => lease_linger: Duration;
    /// Targets of a page one worker handles at once (default 16).
    handler_concurrency => handler_concurrency: usize;
    /// Handler calls in flight on this node, over all workers (default 1,024).
    max_in_flight_handlers => max_in_flight_handlers: usize;
    /// How long one handler call may take before it fails (default 60 s).
    handler_timeout => handler_timeout: Duration;
    /// The largest serialized payload a send, a post or a handler's emission may carry
    /// (default 1 MiB; 256 B..=256 MiB).
    max_payload_bytes => max_payload_bytes: usize;
}

/// `err` naming the builder method instead of the core's field.
pub(super) fn named_as_builder(err: ConfigError) -> ConfigError {
    match err {
        ConfigError::Invalid {
            field,
            value,
            reason,
        } => ConfigError::Invalid {
            field: builder_method(field),
            value,
            reason,
        },
        other => other,
    }
}
