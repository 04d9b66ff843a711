//! The suite against core's `MemoryStorage`, the reference backend: every case must pass on
//! it before it is asked of a durable one (`shardbox-storage` runs the same cases on SQLite and
//! PostgreSQL in `storage/tests/conformance.rs`). Also the smallest example of a backend's
//! run of the suite.

mod memory {
    use shardbox_core::memory::MemoryStorage;

    async fn fresh(_case: &str) -> Option<(MemoryStorage, ())> {
        Some((MemoryStorage::new(), ()))
    }

    shardbox_conformance::conformance_suite!(fresh);
}
