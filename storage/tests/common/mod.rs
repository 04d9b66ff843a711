//! Helpers shared by the integration tests: PostgreSQL test schemas (this crate's
//! `test_schema`, which the root crate's tests use too), and the statements diesel issues.
#![allow(dead_code)] // each test crate uses a part

#[allow(unused_imports)] // the SQLite tests use none
pub use shardbox_storage::test_schema::{pg_url, TestSchema as Schema};

use diesel::connection::{Instrumentation, InstrumentationEvent};
use shardbox_core::sync::lock;
use std::sync::Mutex;

/// Every statement issued since [`capture_statements`] (its SQL without binds).
pub static ISSUED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The statements diesel kept prepared since [`capture_statements`].
pub static CACHED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records into [`ISSUED`] and [`CACHED`] what every connection made from now on does (diesel's
/// instrumentation is process-wide: a test crate that counts them must run alone).
pub fn capture_statements() {
    diesel::connection::set_default_instrumentation(capture).expect("instrumentation");
}

fn capture() -> Option<Box<dyn Instrumentation>> {
    Some(Box::new(|event: InstrumentationEvent<'_>| match event {
        InstrumentationEvent::StartQuery { query, .. } => {
            let sql = query.to_string();
            let sql = sql.split(" -- binds").next().unwrap_or_default().to_owned();
            lock(&ISSUED).push(sql);
        }
        InstrumentationEvent::CacheQuery { sql, .. } => {
            lock(&CACHED).push(sql.to_owned());
        }
        _ => {}
    }))
}

/// What `from` recorded so far, leaving it empty.
pub fn taken(from: &Mutex<Vec<String>>) -> Vec<String> {
    std::mem::take(&mut *lock(from))
}
