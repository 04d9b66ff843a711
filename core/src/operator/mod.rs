//! Operator actions, written once: requeue, purge and unblock, catch-up start and cancel, a
//! kind's pause, resume and run-time settings, and
//! where a tool without the application may put rows.
//!
//! ```text
//!  Shardbox (facade) ──┐
//!  admin surface ──────┼─► operator::{requeue_dead_letters, purge_dead_letters, unblock,
//!  shardbox CLI ───────┘                start_catch_up, cancel_catch_up}
//!                           │ narrow stores (DeadLetterStore, CatchUpStore + InboxStore, …)
//!                           │ an Addressing: the application's strategy and shard count, or
//!                           ▼ the recorded one rebuilt by `placement` (refused if custom)
//!                        storage
//! ```
//!
//! What each caller adds stays with it: the facade counts the action in its metrics and
//! wakes its own workers, the admin surface mounted in an application does the same through
//! its node, the CLI prints. None of them places a row by a strategy of its own: rows go
//! where the application's strategy puts them, or — for a tool that cannot rebuild it —
//! where the database already holds them, or the action is refused.
//!
//! Re-sharding is an operator action too; it lives with the lock table it drives
//! (`cluster::reshard`), and tools reach it with an addressing from [`placement`].

mod catch_up;
mod dead_letters;
mod kinds;
pub mod placement;

pub use catch_up::{
    cancel_catch_up, check_projection_served, start_catch_up, CatchUpStart, StartedCatchUp,
};
pub use dead_letters::{purge_dead_letters, requeue_dead_letters, unblock, Placement};
pub use kinds::{check_steerable, kind_controls, pause_kind, resume_kind, set_kind_settings};
