//! The operator's views and actions, one source for each: the CLI prints them as tables or
//! JSON, the HTTP API serves them as JSON, the dashboard draws them.
//!
//! ```text
//!  status        nodes, shards with lease and depth, lag, counts, running catch-ups
//!  by_kind       pending rows, lag, blocked targets, dead letters by entity kind (in status)
//!  attention     what needs an operator (the status's warnings: CLI lines, dashboard banner)
//!  dead_letters  list, show, requeue, purge (with the library's filters)
//!  blocked       list, unblock
//!  catch_ups     running jobs, one job's progress
//!  kinds         every kind: paused or not, run-time settings; pause, resume, set
//!  versions      read models' versions: served, being built (blue/green), previous
//!  since         the time forms operators write (RFC 3339 or an age)
//! ```
//!
//! Every function takes the narrowest store it reads or writes (`DeadLetterStore`,
//! `CatchUpStore`, …) and a `now`; none prints or knows HTTP. The actions are the library's
//! own (`shardbox_core::operator`): these views check an operator's request and shape the
//! answer.

pub mod attention;
pub mod blocked;
pub mod by_kind;
pub mod catch_ups;
pub mod dead_letter_preview;
pub mod dead_letters;
pub mod kinds;
pub mod since;
pub mod status;
pub mod versions;

pub use since::Since;
