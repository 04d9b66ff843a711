//! # shardbox-stations
//!
//! The stock stations of the Shardbox delivery pipeline:
//!
//! ```text
//!  page ─► [catch-up] ─► LiveDelivery ─► Cleanup ─► commit
//! ```
//!
//! - [`LiveDelivery`] groups the page by target, drops duplicates, keeps per-target order,
//!   calls each target's handler once with its batch and applies the failure policy.
//! - [`Cleanup`] purges delivered rows whose deduplication window has passed.
//!
//! The catch-up station joins the front of the pipeline with the catch-up feature.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod cleanup;
mod dedup;
mod live;

pub use cleanup::Cleanup;
pub use dedup::RecentDeliveries;
pub use live::LiveDelivery;
