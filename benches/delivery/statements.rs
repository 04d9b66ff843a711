//! Statements issued by this process: diesel's process-wide instrumentation counts every
//! query a connection starts (Shardbox's, the floor's), so a workload can report statements
//! per message for the span it measures. On PostgreSQL each is a round trip.
//!
//! With `SHARDBOX_BENCH_STATEMENTS=1` it also tallies them by their first words and
//! [`breakdown`] lists the most frequent, to see where the round trips go.

use diesel::connection::{Instrumentation, InstrumentationEvent};
use shardbox::core::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

static STARTED: AtomicU64 = AtomicU64::new(0);
static TALLY: AtomicBool = AtomicBool::new(false);
static BY_TEXT: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

/// The first 70 characters of a statement's SQL, without its binds.
fn head(sql: &str) -> String {
    sql.split(" -- binds")
        .next()
        .unwrap_or_default()
        .chars()
        .take(70)
        .collect()
}

/// Statements per watched database (see [`watch`]), by its place in the watched list.
static PER_DB: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
/// The URLs [`watch`] was given, in order.
static WATCHED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Counts apart the statements of the connections made from now on to each of `urls` (at
/// most 8): [`per_database`] reads them.
pub fn watch(urls: &[String]) {
    *lock(&WATCHED) = urls.iter().take(PER_DB.len()).cloned().collect();
}

/// Statements so far on the connections of each watched database, in [`watch`]'s order.
pub fn per_database() -> Vec<u64> {
    let n = lock(&WATCHED).len();
    PER_DB[..n]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect()
}

/// The `host:port` of a URL (what follows `user@`, up to the path).
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

fn counter() -> Option<Box<dyn Instrumentation>> {
    // Which watched database this connection is to, learnt when it connects.
    let mut slot: Option<usize> = None;
    Some(Box::new(move |event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::StartEstablishConnection { url, .. } = &event {
            // Storages may add parameters (a schema, an application name) to the URL: the
            // server's address tells the databases apart.
            slot = lock(&WATCHED)
                .iter()
                .position(|w| url.contains(authority(w)));
        }
        if let InstrumentationEvent::StartQuery { query, .. } = event {
            STARTED.fetch_add(1, Ordering::Relaxed);
            if let Some(i) = slot {
                PER_DB[i].fetch_add(1, Ordering::Relaxed);
            }
            // The tally only when asked for: no lock per statement otherwise.
            if TALLY.load(Ordering::Relaxed) {
                let mut by_text = lock(&BY_TEXT);
                if let Some(by_text) = by_text.as_mut() {
                    // With watched databases, each statement is tallied under its database.
                    let key = match slot {
                        Some(i) if lock(&WATCHED).len() > 1 => {
                            format!("db{i} {}", head(&query.to_string()))
                        }
                        _ => head(&query.to_string()),
                    };
                    *by_text.entry(key).or_default() += 1;
                }
            }
        }
    }))
}

/// Counts the statements of every connection made from now on.
pub fn install() {
    if std::env::var_os("SHARDBOX_BENCH_STATEMENTS").is_some() {
        *lock(&BY_TEXT) = Some(HashMap::new());
        TALLY.store(true, Ordering::Relaxed);
    }
    // Fails only if set before, which would count already.
    let _ = diesel::connection::set_default_instrumentation(counter);
}

/// Statements started so far.
pub fn count() -> u64 {
    STARTED.load(Ordering::Relaxed)
}

/// Prints the most frequent statements per `messages` to stderr, if tallied.
pub fn breakdown(messages: usize) {
    let by_text = lock(&BY_TEXT);
    let Some(by_text) = by_text.as_ref() else {
        return;
    };
    let mut rows: Vec<_> = by_text.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1));
    eprintln!("statements per message, by their first words:");
    for (text, n) in rows.into_iter().take(25) {
        eprintln!("{:>8.3}  {text}", *n as f64 / messages.max(1) as f64);
    }
}

/// Forgets the tally of [`breakdown`] (when tallying), to count the next span alone.
pub fn reset_tally() {
    if let Some(by_text) = lock(&BY_TEXT).as_mut() {
        by_text.clear();
    }
}
