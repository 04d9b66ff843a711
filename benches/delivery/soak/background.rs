//! The background parts of a run on PostgreSQL: the workload's own vacuum (see `upkeep`) and
//! a snapshot held open to pin the xmin horizon (see `xmin`), stopped together at its end.

use super::{upkeep, with_application, xmin};
use crate::args::Args;
use crate::backend::Db;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The background parts of a run, stopped together at its end.
pub(super) struct Background {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) threads: Vec<std::thread::JoinHandle<()>>,
    pub(super) vacuums: Arc<upkeep::Vacuums>,
    pub(super) held: Arc<Mutex<xmin::Held>>,
}

/// Starts what `a` asks for besides the traffic (PostgreSQL only).
pub(super) fn background(a: &Args, db: &Db, started: Instant) -> Result<Background, String> {
    let mut b = Background {
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
        vacuums: Arc::default(),
        held: Arc::default(),
    };
    let Some((url, schema)) = db.pg() else {
        if a.hold_xmin_minutes > 0.0 || a.vacuum_secs.is_some_and(|v| v > 0) {
            return Err("--hold-xmin-minutes and --vacuum-secs are for PostgreSQL".into());
        }
        return Ok(b);
    };
    let autovacuum = upkeep::autovacuum_on(url)?;
    let every = a.vacuum_secs.unwrap_or(if autovacuum { 0 } else { 60 });
    eprintln!(
        "soak: server autovacuum {}; the workload's own VACUUM (ANALYZE) {}",
        if autovacuum { "on" } else { "off" },
        if every == 0 {
            "off".to_owned()
        } else {
            format!("every {every} s")
        }
    );
    if every > 0 {
        b.threads.push(upkeep::start(
            url.clone(),
            schema.clone(),
            Duration::from_secs(every),
            b.vacuums.clone(),
            b.stop.clone(),
        ));
    }
    if a.hold_xmin_minutes > 0.0 {
        b.threads.push(xmin::start(
            with_application(url, "sbx_soak_hold_xmin"),
            started,
            Duration::from_secs_f64(a.hold_xmin_after * 60.0),
            Duration::from_secs_f64(a.hold_xmin_minutes * 60.0),
            b.held.clone(),
            b.stop.clone(),
        ));
    }
    Ok(b)
}
