//! # shardbox-conformance
//!
//! The storage conformance suite of Shardbox: one set of cases that every storage backend
//! must pass. It is generic over the storage traits of `shardbox-core` — [`Storage`] (the sum
//! of `InboxStore`, `WorkRegistry`, `EventStore`, `EntityStore`, `CatchUpStore` and
//! `DeadLetterStore`) and the read-only [`Inspect`] — and knows no backend: it depends on
//! `shardbox-core` alone, as tower-test does on tower.
//!
//! ```text
//!  <case>(store)               async, generic over Storage + Inspect; panics on a broken
//!                              guarantee (it is a test suite)
//!  conformance_suite!(fresh)   stamps one #[tokio::test] per case into the calling module,
//!                              each on a fresh store from `fresh`
//!  fixtures::*                 the cases' builders (times, messages, leases, commits), for a
//!                              backend's own tests too
//! ```
//!
//! It runs against core's `MemoryStorage` (this crate's `tests/memory.rs`), and against
//! `SqliteStorage` and `PostgresStorage` (`storage/tests/conformance.rs` in `shardbox-storage`);
//! a new backend is done when it passes, not before. The cases cover the Inbox (order, paging,
//! delays, deduplication, retries, purge, counts, tenants), the stage commit (fencing,
//! atomicity), the lock table, the event store, entity states, the store's clock, catch-up
//! jobs and read models' versions, failures (first-failure times, blocked targets, the operators' dead-letter and
//! unblock API, TTL expiry reads, lease takeovers), error histories, command outcomes, re-sharding,
//! the outbox and its relay copies, and
//! concurrent writers, pick-ups, catch-up starts and requeues.
//!
//! ## Running the suite against your own store
//!
//! 1. Implement [`Storage`] (every storage trait of `shardbox-core`) and [`Inspect`] for your
//!    store.
//! 2. Add the suite and a tokio with its test macro as dev-dependencies:
//!
//!    ```toml
//!    [dev-dependencies]
//!    shardbox-conformance = "0.1"
//!    tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//!    ```
//!
//!    (Through the facade, `shardbox = { version = "0.1", features = ["conformance"] }` gives
//!    the same crate at `shardbox::conformance`.)
//! 3. In a test file, say `tests/conformance.rs`, write `fresh`: an async fn that takes the
//!    case's name and returns `Some((store, guard))` — an empty store, and a guard dropped
//!    after the case (a temporary directory, a database schema to drop; `()` when there is
//!    nothing to clean up) — or `None` to skip the case, after saying why on stderr (e.g. no
//!    database configured). Then stamp the cases next to it:
//!
//!    ```
//!    mod memory {
//!        // Your store here; core's in-memory one stands in for it.
//!        use shardbox_core::memory::MemoryStorage;
//!
//!        async fn fresh(_case: &str) -> Option<(MemoryStorage, ())> {
//!            Some((MemoryStorage::new(), ()))
//!        }
//!
//!        shardbox_conformance::conformance_suite!(fresh);
//!    }
//!    # fn main() {}
//!    ```
//!
//! 4. `cargo test --test conformance` runs one test per case, named after it
//!    (`memory::write_then_read_in_seq_order`, …); a case that fails panics with the
//!    guarantee that broke.
//!
//! The cases run at the same time, each on its own store, each on a multi-thread runtime of
//! two workers (several race tasks against each other). A store that several cases share —
//! one database server — must keep them apart: `fresh` is given the case's name to make a
//! unique database, file or schema per case. Times are whole milliseconds after a fixed
//! instant ([`fixtures::t0`]), and a store must give them back exactly.
//!
//! A case is a plain async fn, so one can also be called alone, e.g. while fixing it:
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let store = shardbox_core::memory::MemoryStorage::new();
//! shardbox_conformance::write_then_read_in_seq_order(store).await;
//! # }
//! ```
//!
//! A backend's own tests may build on [`fixtures`]: the same fixed times, messages, leases and
//! commits the cases use.
//!
//! [`Storage`]: shardbox_core::Storage
//! [`Inspect`]: shardbox_core::storage::Inspect

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod fixtures;

mod catch_up;
mod catch_up_cancel;
mod commit;
mod dedup;
mod error_history;
mod events;
mod failures;
mod inbox;
mod kind_controls;
mod outbox;
mod outcomes;
mod registry;
mod reshard;
mod several_databases;
mod versions;

pub use catch_up::{
    a_parked_retrying_row_does_not_make_its_target_wait, catch_up_lifecycle,
    catch_up_progress_commits_with_the_stage, catch_up_start_resets_targets_and_refences_shards,
    concurrent_overlapping_catch_up_starts_one_wins, event_seqs_and_counts,
    one_databases_part_of_a_catch_up_over_several, parked_rows_settle_when_the_job_completes,
};
pub use catch_up_cancel::a_cancelled_catch_up_settles_like_a_completion;
pub use commit::{
    a_stage_that_only_delivers_is_fenced_and_all_or_nothing, commit_is_all_or_nothing,
    delivered_rows_kept_until_window_then_purged, retry_reports_waiting_target,
};
pub use dedup::{
    duplicate_of_delivered_row_is_ignored_until_purged, duplicate_write_is_ignored_and_counted,
    tenant_isolation,
};
pub use error_history::{
    a_blocked_rows_history_is_kept_by_its_dead_letter_and_cleared_by_a_requeue,
    the_last_ten_failed_attempts_are_kept_and_dead_lettered,
};
pub use events::{
    entity_state_versions_and_delete, event_store_pages_by_seq_with_filters,
    events_of_one_source_in_seq_order,
};
pub use failures::{
    blocked_row_stops_only_its_target, concurrent_requeue_of_one_dead_letter_requeues_it_once,
    dead_letters_are_listed_counted_and_purged_by_filter, expired_rows_are_found_due_or_not,
    first_failure_time_is_kept_across_retries, pick_up_tells_a_takeover_from_a_free_shard,
    requeued_dead_letters_return_to_the_inbox, rows_behind_a_block_are_parked_until_the_unblock,
    unblock_by_requeue_drop_or_dead_letter,
};
pub use inbox::{
    catch_up_rows_interleave_in_seq_order, concurrent_writers_all_succeed, counts_by_status,
    deliver_after_is_respected, depths_by_kind, depths_by_wait,
    due_pages_take_the_first_rows_by_seq, paging_with_equal_timestamps_crosses_pages,
    write_all_reports_each_batch, write_then_read_in_seq_order,
};
pub use kind_controls::{
    a_paused_kinds_rows_are_parked_until_the_resume, a_resume_racing_parks_leaves_no_row_parked,
};
pub use outbox::{
    a_relay_copy_moves_its_position_once, a_stage_commits_its_outbox_rows_with_it,
    concurrent_relay_copies_from_one_position_make_one, outbox_ids_follow_commit_order,
};
pub use outcomes::{
    command_outcomes_are_kept_for_their_window,
    unhandled_commands_outcomes_are_purged_and_decided_again_by_unblock,
};
pub use registry::{
    a_database_place_is_recorded_once, clock_now_is_the_storage_clock,
    concurrent_pick_up_has_one_winner, fenced_commit_refused_after_lease_taken,
    members_beat_expire_and_leave, pick_up_refused_while_held,
    release_then_pick_up_gives_higher_epoch, the_first_shard_count_claimed_is_recorded,
    the_shard_strategy_recorded_is_read_back,
};
pub use reshard::{
    a_reshard_switch_is_refused_whole, a_reshard_switch_moves_every_row_to_its_targets_shard,
    a_shard_made_again_hands_out_no_epoch_twice,
    a_write_addressed_by_another_count_is_refused_whole,
    addressed_writes_of_messages_are_checked_and_counted,
    one_reshard_announcement_is_in_force_at_a_time,
};
pub use several_databases::{
    several_databases_find_targets_where_they_live, several_databases_keep_seq_order_per_database,
    several_databases_record_their_places_and_refuse_another_order,
    several_databases_refuse_a_count_below_one_shard_each,
    several_databases_relay_a_stages_rows_in_order, several_databases_reshard_each_database,
    several_databases_run_a_catch_up_over_all_of_them,
};
pub use versions::a_version_build_switches_at_completion_and_is_dropped_by_a_cancel;

/// Stamps one `#[tokio::test]` per conformance case into the calling module.
///
/// `$fresh` is an async fn `(case_name: &str) -> Option<(S, G)>` giving a fresh backend `S`
/// (`Storage + Inspect`) and a guard `G` dropped after the case (to remove a temporary file or
/// schema), or `None` to skip the case (say why on stderr). The calling crate needs tokio
/// with its `macros` and `rt-multi-thread` features. See the [crate documentation](crate) for
/// a whole example.
#[macro_export]
macro_rules! conformance_suite {
    ($fresh:path) => {
        $crate::conformance_suite!(@common run, $fresh);
        $crate::conformance_suite!(@one_database run, $fresh);
        $crate::conformance_suite!(@catch_up run, $fresh);
        $crate::conformance_suite!(@outbox run, $fresh);
    };
    // A storage over several databases (`shardbox_core::databases::Databases`): the common
    // cases, its own, and the others stamped as ignored with the reason, so a run lists them.
    (several_databases: $fresh:path) => {
        $crate::conformance_suite!(@common run, $fresh);
        $crate::conformance_suite!(@several_databases run, $fresh);
        $crate::conformance_suite!(@one_database skip("holds per database only: seq order, epochs and a dead letter's database are each database's own, and a target lives in its own database, not in a shard of another one placed by hand (the several-database cases state what holds)"), $fresh);
        $crate::conformance_suite!(@catch_up skip("a catch-up over several databases is one job in the home database whose steps reach every database (several_databases_run_a_catch_up_over_all_of_them; each database's part runs in one_databases_part_of_a_catch_up_over_several on every backend)"), $fresh);
        $crate::conformance_suite!(@outbox skip("the outbox is each database's own; its cases run on every backend, and the relays between databases in several_databases_relay_a_stages_rows_in_order"), $fresh);
    };
    (@common $mode:ident $(($reason:literal))?, $fresh:path) => {
        $crate::conformance_suite!(@cases $mode $(($reason))?, $fresh;
            write_then_read_in_seq_order,
            paging_with_equal_timestamps_crosses_pages,
            deliver_after_is_respected,
            due_pages_take_the_first_rows_by_seq,
            duplicate_write_is_ignored_and_counted,
            duplicate_of_delivered_row_is_ignored_until_purged,
            tenant_isolation,
            counts_by_status,
            depths_by_wait,
            depths_by_kind,
            catch_up_rows_interleave_in_seq_order,
            concurrent_writers_all_succeed,
            write_all_reports_each_batch,
            retry_reports_waiting_target,
            commit_is_all_or_nothing,
            a_stage_that_only_delivers_is_fenced_and_all_or_nothing,
            pick_up_refused_while_held,
            release_then_pick_up_gives_higher_epoch,
            fenced_commit_refused_after_lease_taken,
            concurrent_pick_up_has_one_winner,
            the_first_shard_count_claimed_is_recorded,
            the_shard_strategy_recorded_is_read_back,
            members_beat_expire_and_leave,
            clock_now_is_the_storage_clock,
            entity_state_versions_and_delete,
            a_parked_retrying_row_does_not_make_its_target_wait,
            event_seqs_and_counts,
            first_failure_time_is_kept_across_retries,
            blocked_row_stops_only_its_target,
            unblock_by_requeue_drop_or_dead_letter,
            the_last_ten_failed_attempts_are_kept_and_dead_lettered,
            a_blocked_rows_history_is_kept_by_its_dead_letter_and_cleared_by_a_requeue,
            a_paused_kinds_rows_are_parked_until_the_resume,
            a_resume_racing_parks_leaves_no_row_parked,
            dead_letters_are_listed_counted_and_purged_by_filter,
            expired_rows_are_found_due_or_not,
            pick_up_tells_a_takeover_from_a_free_shard,
            command_outcomes_are_kept_for_their_window,
            unhandled_commands_outcomes_are_purged_and_decided_again_by_unblock,
            a_reshard_switch_is_refused_whole,
            a_write_addressed_by_another_count_is_refused_whole,
            addressed_writes_of_messages_are_checked_and_counted,
            one_reshard_announcement_is_in_force_at_a_time,
        );
    };
    // Cases whose guarantee spans the whole storage where one database holds it all, or
    // that place targets by hand in any shard (over several databases a target's state,
    // outcomes, events and blocks are found in the database its placement gives).
    (@one_database $mode:ident $(($reason:literal))?, $fresh:path) => {
        $crate::conformance_suite!(@cases $mode $(($reason))?, $fresh;
            a_database_place_is_recorded_once,
            rows_behind_a_block_are_parked_until_the_unblock,
            events_of_one_source_in_seq_order,
            event_store_pages_by_seq_with_filters,
            delivered_rows_kept_until_window_then_purged,
            concurrent_requeue_of_one_dead_letter_requeues_it_once,
            requeued_dead_letters_return_to_the_inbox,
            a_shard_made_again_hands_out_no_epoch_twice,
        );
    };
    (@catch_up $mode:ident $(($reason:literal))?, $fresh:path) => {
        $crate::conformance_suite!(@cases $mode $(($reason))?, $fresh;
            catch_up_lifecycle,
            concurrent_overlapping_catch_up_starts_one_wins,
            catch_up_start_resets_targets_and_refences_shards,
            catch_up_progress_commits_with_the_stage,
            parked_rows_settle_when_the_job_completes,
            a_cancelled_catch_up_settles_like_a_completion,
            one_databases_part_of_a_catch_up_over_several,
            a_version_build_switches_at_completion_and_is_dropped_by_a_cancel,
            a_reshard_switch_moves_every_row_to_its_targets_shard,
        );
    };
    (@outbox $mode:ident $(($reason:literal))?, $fresh:path) => {
        $crate::conformance_suite!(@cases $mode $(($reason))?, $fresh;
            a_stage_commits_its_outbox_rows_with_it,
            a_relay_copy_moves_its_position_once,
            concurrent_relay_copies_from_one_position_make_one,
            outbox_ids_follow_commit_order,
        );
    };
    (@several_databases $mode:ident, $fresh:path) => {
        $crate::conformance_suite!(@cases $mode, $fresh;
            several_databases_keep_seq_order_per_database,
            several_databases_find_targets_where_they_live,
            several_databases_run_a_catch_up_over_all_of_them,
            several_databases_relay_a_stages_rows_in_order,
            several_databases_reshard_each_database,
            several_databases_refuse_a_count_below_one_shard_each,
            several_databases_record_their_places_and_refuse_another_order,
        );
    };
    (@cases run, $fresh:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some((storage, guard)) = $fresh(stringify!($case)).await else {
                    return;
                };
                $crate::$case(storage).await;
                drop(guard);
            }
        )*
    };
    (@cases skip($reason:literal), $fresh:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            #[ignore = $reason]
            async fn $case() {}
        )*
    };
}
