//! The errors of shardbox-core, one enum per file. Each message says what went wrong and what
//! to do about it.
//!
//! ```text
//!  config    ConfigError: a configuration value rejected when the delivery is built
//!  storage   StorageError, and the Cause behind it (the driver's error, kept whole)
//!  payload   PayloadError: a stored payload not readable as the type asked for
//!  delivery  DeliveryError: delivery, sending or a station failed (wraps the others)
//! ```

mod config;
mod delivery;
mod payload;
mod storage;

pub use config::ConfigError;
pub use delivery::DeliveryError;
pub use payload::PayloadError;
pub use storage::{Cause, StorageError};

/// `kinds` as a message lists them: each in backticks, or "none".
fn kind_list(kinds: &[String]) -> String {
    if kinds.is_empty() {
        return "none".into();
    }
    kinds
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
