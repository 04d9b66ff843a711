//! # shardbox-stations
//!
//! The stock stations of the Shardbox delivery pipeline:
//!
//! ```text
//!  page ─► CatchUpStation ─► LiveDelivery ─► Cleanup ─► commit
//! ```
//!
//! - [`LiveDelivery`] groups the page by target, drops duplicates, keeps per-target order,
//!   calls each target's handler once with its batch and applies the failure policy.
//! - [`Cleanup`] purges delivered rows whose deduplication window has passed.
//!
//! - [`CatchUpStation`] drives catch-up jobs (replaying history straight into the projections'
//!   states) and parks live traffic of the projections being rebuilt until the job completes.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod batches;
mod catch_up;
mod cleanup;
mod dedup;
mod live;

pub use catch_up::{tick_message, CatchUpStation, TICK_TYPE};
pub use cleanup::Cleanup;
pub use dedup::RecentDeliveries;
pub use live::LiveDelivery;
