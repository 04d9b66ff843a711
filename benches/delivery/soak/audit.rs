//! The end of a run: every message settled, then every target's state audited against what
//! the producer sent to it.

use super::fleet::Fleet;
use super::mix::{self, Sent};
use super::model::{Tally, View};
use super::probe::{self, Probe};
use shardbox::core::sync::lock;
use shardbox::prelude::*;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Waits until every message sent was settled (delays, retries and TTLs have run out, the
/// Inbox holds no row that is not delivered), at most three minutes; the last sample.
pub(super) async fn settle(fleet: &Fleet, probe: &Probe) -> Result<probe::DbSample, String> {
    // The longest delay is 5 s, a retry's back-off 1 s, the TTL sweep runs every 5 s.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        fleet.drain(Duration::from_secs(60)).await?;
        let s = probe.sample().await?;
        if s.pending == 0 {
            return Ok(s);
        }
        if Instant::now() > deadline {
            eprintln!("soak: {} rows still pending after the drain", s.pending);
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the audit found: messages missing from a target's state, applied twice, applied
/// although they should have expired.
pub(super) struct Audit {
    pub(super) lost: u64,
    pub(super) doubled: u64,
    pub(super) late: u64,
}

/// Every tally's and every view's counts against what the producer sent to it.
pub(super) async fn audit(
    sb: &Shardbox,
    targets: usize,
    sent: &Mutex<Sent>,
) -> Result<Audit, String> {
    let mut a = Audit {
        lost: 0,
        doubled: 0,
        late: 0,
    };
    let (tally, view) = {
        let s = lock(sent);
        (s.tally.clone(), s.view.clone())
    };
    for t in 0..targets {
        let id = mix::target(t);
        let got = sb
            .aggregate_state::<Tally>(&id)
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let seen = sb
            .projection_state::<View>(&id)
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        for (expected, got) in [(tally[t], got.applied), (view[t], seen.events)] {
            a.lost += expected.saturating_sub(got);
            a.doubled += got.saturating_sub(expected);
        }
        a.late += got.late + seen.late;
    }
    if a.lost + a.doubled > 0 {
        eprintln!("soak: audit: {} lost, {} applied twice", a.lost, a.doubled);
    }
    Ok(a)
}
