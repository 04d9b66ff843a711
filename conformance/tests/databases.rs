//! The suite against a storage over two in-memory databases (`shardbox_core::databases`).

mod databases {
    use shardbox_core::databases::{Database, Databases};
    use shardbox_core::memory::MemoryStorage;
    use std::sync::Arc;

    async fn fresh(_case: &str) -> Option<(Databases, ())> {
        let dbs: Vec<Arc<dyn Database>> = (0..2)
            .map(|_| Arc::new(MemoryStorage::new()) as Arc<dyn Database>)
            .collect();
        Some((Databases::new(dbs).expect("two databases"), ()))
    }

    shardbox_conformance::conformance_suite!(several_databases: fresh);
}
