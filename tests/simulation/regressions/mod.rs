//! Defects the simulation found, each replayed as one exact scenario with scripted faults
//! (see [`FaultyStorage::fail_next`]) on memory, SQLite and PostgreSQL: each test failed
//! before its fix.
//!
//! ```text
//!  mod        the shared scaffolding (a node, the storage wrapper) and one test per case and
//!             backend (`on_every_backend!`)
//!  requeue    a requeued dead letter
//!  catch_up   catch-up jobs
//!  leases     leases a live node kept with nothing scheduled to release them
//!  reshard    lock-table epochs across re-shardings
//! ```

mod catch_up;
mod leases;
mod requeue;
mod reshard;

use super::faulty::{FaultRates, FaultyStorage};
use super::model::{Apply, Audit, Ledger};
use super::rng::SimRng;
use catch_up::{
    catch_up_whose_start_lost_its_ack, replay_page_after_another_node_spilled,
    two_ticks_of_one_job_in_one_stage,
};
use chrono::{DateTime, Utc};
use leases::{
    a_kept_lease_renewed_past_its_recorded_time, failed_release_of_a_kept_lease,
    failed_release_of_a_kept_lease_at_a_reshard_announcement,
    release_retried_across_a_reshard_pause,
};
use requeue::requeue_after_an_uncommitted_delivery;
use reshard::epochs_of_a_shard_dropped_and_made_again;
use shardbox::core::memory::MemoryStorage;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{ManualClock, SqliteOptions};
use std::sync::Arc;
use std::time::Duration;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_900_000_000, 0).expect("a valid start time")
}

fn apply(n: u64, audit: &str) -> Apply {
    Apply {
        n,
        fail_first: 0,
        poison: false,
        audit: audit.to_owned(),
        audit_fail_first: 0,
        relay: None,
    }
}

async fn node(faults: &FaultyStorage, clock: &Arc<ManualClock>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(Arc::new(faults.clone()))
        .clock(clock.clone())
        .shards(2)
        .lease_duration(Duration::from_secs(4))
        .poll_interval(Duration::from_millis(250))
        .dedup_window(Duration::from_secs(3_600))
        .dead_letter_expired(true)
        .aggregate::<Ledger>()
        .projection::<Audit>()
        .build()
        .await
        .expect("build a node")
}

fn wrap(inner: Arc<dyn Storage>) -> FaultyStorage {
    FaultyStorage::new(inner, SimRng::new(0), FaultRates::default())
}

async fn sqlite() -> (Arc<dyn Storage>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SqliteOptions::default().checkpoint_interval(None);
    let s = SqliteStorage::open_with(dir.path().join("regression.db"), options)
        .await
        .expect("open SQLite");
    (Arc::new(s), dir)
}

macro_rules! on_every_backend {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(start_paused = true)]
                async fn $case() {
                    super::$case(std::sync::Arc::new(super::MemoryStorage::new())).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(start_paused = true)]
                async fn $case() {
                    let (storage, _dir) = super::sqlite().await;
                    super::$case(storage).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(url) = crate::common::pg_url(concat!("simulation::", stringify!($case))) else {
                        return;
                    };
                    let schema = crate::common::PgSchema::new(&url, concat!("sim_", stringify!($case)));
                    super::$case(std::sync::Arc::new(schema.connect(4).await)).await;
                }
            )*
        }
    };
}

on_every_backend!(
    a_kept_lease_renewed_past_its_recorded_time,
    epochs_of_a_shard_dropped_and_made_again,
    two_ticks_of_one_job_in_one_stage,
    failed_release_of_a_kept_lease,
    failed_release_of_a_kept_lease_at_a_reshard_announcement,
    release_retried_across_a_reshard_pause,
    replay_page_after_another_node_spilled,
    requeue_after_an_uncommitted_delivery,
    catch_up_whose_start_lost_its_ack,
);
