//! A snapshot held open elsewhere (`--hold-xmin-minutes N --hold-xmin-after M`): a
//! connection of its own starts a repeatable-read transaction, takes its snapshot and keeps
//! it for N minutes from minute M of the run, then commits. While it is open no vacuum may
//! remove a row version that the snapshot could still see, so every version the delivery
//! leaves dead stays where it is — what an application's forgotten transaction, a long report
//! or a stuck replica slot does to a queue table.

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When the snapshot was held, in seconds since the start of the run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Held {
    pub from_s: Option<f64>,
    pub until_s: Option<f64>,
}

/// Holds a snapshot from `after` for `hold` after `run_start`, unless `stop` comes first (a
/// blocking thread of its own); `held` says when it was open.
pub fn start(
    url: String,
    run_start: Instant,
    after: Duration,
    hold: Duration,
    held: Arc<Mutex<Held>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let wait_until = |at: Instant| {
            while Instant::now() < at {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            true
        };
        if !wait_until(run_start + after) {
            return;
        }
        let mut conn = match PgConnection::establish(&url) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("hold-xmin: cannot connect: {e}");
                return;
            }
        };
        if let Err(e) = conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;") {
            eprintln!("hold-xmin: cannot take the snapshot: {e}");
            return;
        }
        let now = || run_start.elapsed().as_secs_f64();
        set(&held, |h| h.from_s = Some(now()));
        eprintln!("hold-xmin: snapshot taken at {:.0} s", now());
        wait_until(Instant::now() + hold);
        if let Err(e) = conn.batch_execute("COMMIT") {
            eprintln!("hold-xmin: commit failed (the connection closes anyway): {e}");
        }
        drop(conn);
        set(&held, |h| h.until_s = Some(now()));
        eprintln!("hold-xmin: snapshot released at {:.0} s", now());
    })
}

fn set(held: &Mutex<Held>, f: impl FnOnce(&mut Held)) {
    f(&mut shardbox::core::sync::lock(held));
}
