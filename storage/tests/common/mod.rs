//! Helpers shared by the integration tests: PostgreSQL test schemas (from the conformance
//! module, which the root crate's tests use too).
#![allow(dead_code)] // each test crate uses a part

pub use shardbox_storage::conformance::{pg_url, TestSchema as Schema};
