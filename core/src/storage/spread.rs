//! [`CatchUpSpread`]: where a catch-up over several databases stands (what its live rows
//! become is decided in [`crate::catch_up::decide_spread_live_row`]).
//!
//! One database hands out event seqs in commit order, so one cursor tells which events a
//! replay has applied. Several databases each have their own order, and a database with
//! fewer events hands out lower numbers: an event committed there after the replay passed its
//! number would look replayed. So a job over several databases replays a fixed *set*:
//!
//! ```text
//!  start        every database: affected shards re-fenced, targets reset; then every
//!               database's last event seq ─► `events`, the set: seq ≤ events[d] in database d
//!               (read after every reset: a copy delivered before its database's reset has its
//!               event in the set)
//!  replay       the set's events merged by global seq (local × N + database), as rows
//!  live row     event in the set ─► dropped (the replay applies it)
//!               event after it   ─► parked until the job ends
//!               set not read yet ─► held a poll interval, decided again
//!               its database released the job's parked rows (settling) ─► delivered as any row
//!  end          outboxes drained past `outboxes` (every copy of the set's events and every
//!               replayed row is in its Inbox) ─► `inboxes` read ─► no live row at or below them
//!               undecided, no replayed row left ─► `settling` stored ─► each other database:
//!               parked rows released, shards re-fenced, its release recorded (one transaction)
//!               ─► the home commit: its own parked rows released, Completed / Cancelled
//! ```
//!
//! A cancelled job's set is not applied past its cursor: live copies of the set's events are
//! dropped whether the replay reached them or not (as on one database, the events before the
//! start that a cancelled replay did not reach are not applied; a new catch-up of the targets
//! rebuilds them). Events after the set are delivered in order once it ends.

use crate::model::ids::ShardIndex;
use serde::{Deserialize, Serialize};

/// How a catch-up over several databases stands (`None` on a job of one database). Stored
/// with the job; each field is written once, in this order, by the job's steps.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CatchUpSpread {
    /// How many databases the job spans.
    pub databases: u32,
    /// The replay's set: each database's last (local) event seq, read once the targets were
    /// reset in every database. Empty until then.
    pub events: Vec<i64>,
    /// Each database's last outbox id once the replay had ended: when every outbox is drained
    /// past these, every live copy of an event of the set and every replayed row is in its
    /// target's Inbox. Empty until then.
    pub outboxes: Vec<i64>,
    /// Each database's last Inbox seq once the outboxes were drained: every live copy of an
    /// event of the set is at or below it. Empty until then.
    pub inboxes: Vec<i64>,
    /// The job is ending: each database but the home one releases its parked rows (and
    /// records that it did, in the same transaction); the home database releases its own
    /// with the commit that ends the job.
    pub settling: bool,
    /// Which databases have released the job's parked rows, as read with the job while it
    /// is settling (not stored with it: each database records its own release).
    #[serde(default, skip)]
    pub released: Vec<bool>,
}

/// One database's positions, as read by a catch-up's end over several databases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StorePositions {
    /// The outbox's lowest id still in it (`None`: it is empty).
    pub outbox_first: Option<i64>,
    /// The outbox's highest id still in it (0: it is empty).
    pub outbox_last: i64,
    /// The Inbox's highest seq (0: it is empty).
    pub inbox_last: i64,
}

/// What [`crate::storage::CatchUpStore::spread_progress`] found: the job's spread as it should
/// be stored now, and whether the job must still wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadProgress {
    /// The spread, with what this look recorded.
    pub spread: CatchUpSpread,
    /// Whether anything is still to drain or deliver before the job may end.
    pub pending: bool,
}

impl CatchUpSpread {
    /// A job over `databases` databases, nothing read yet.
    pub fn new(databases: u32) -> Self {
        CatchUpSpread {
            databases,
            ..CatchUpSpread::default()
        }
    }

    /// Whether the first step has read the set.
    pub fn prepared(&self) -> bool {
        !self.events.is_empty()
    }

    /// The database of a global shard.
    pub fn database_of_shard(&self, shard: ShardIndex) -> u32 {
        shard.0 % self.databases.max(1)
    }

    /// Whether `database` has released the job's parked rows (see [`CatchUpSpread::released`]).
    pub fn released_in(&self, database: u32) -> bool {
        self.released
            .get(database as usize)
            .copied()
            .unwrap_or(false)
    }

    /// `shards` (global) that live in `database`, by their local index there.
    pub fn shards_in(&self, database: u32, shards: &[ShardIndex]) -> Vec<ShardIndex> {
        let n = self.databases.max(1);
        shards
            .iter()
            .filter(|s| s.0 % n == database)
            .map(|s| ShardIndex(s.0 / n))
            .collect()
    }

    /// Whether the event of global seq `seq` (`local × N + database`) is in the set.
    pub fn in_set(&self, seq: i64) -> bool {
        let n = i64::from(self.databases.max(1));
        let (database, local) = (seq.rem_euclid(n), seq.div_euclid(n));
        self.events
            .get(database as usize)
            .is_some_and(|last| local >= 1 && local <= *last)
    }

    /// The set's highest global seq (0 for an empty set): the replay's end.
    pub fn until_seq(&self) -> i64 {
        let n = i64::from(self.databases.max(1));
        self.events
            .iter()
            .enumerate()
            .filter(|(_, last)| **last > 0)
            .map(|(d, last)| last * n + d as i64)
            .max()
            .unwrap_or(0)
    }

    /// Whether every outbox is drained past the ends recorded when the replay ended, given
    /// each database's lowest outbox id now (`None`: empty).
    pub fn outboxes_drained(&self, firsts: &[Option<i64>]) -> bool {
        self.outboxes.len() == firsts.len()
            && firsts
                .iter()
                .zip(&self.outboxes)
                .all(|(first, end)| first.is_none_or(|f| f > *end))
    }

    /// The spread as stored text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A spread from its stored text; the error names what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let spread: CatchUpSpread =
            serde_json::from_str(text).map_err(|e| format!("catch-up spread {text:?}: {e}"))?;
        let n = spread.databases as usize;
        for (name, list) in [
            ("events", &spread.events),
            ("outboxes", &spread.outboxes),
            ("inboxes", &spread.inboxes),
        ] {
            if !list.is_empty() && list.len() != n {
                return Err(format!(
                    "catch-up spread {text:?}: {name} has {} entries for {n} databases",
                    list.len()
                ));
            }
        }
        Ok(spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared() -> CatchUpSpread {
        CatchUpSpread {
            events: vec![10, 0, 4],
            ..CatchUpSpread::new(3)
        }
    }

    #[test]
    fn the_set_is_each_databases_seqs_up_to_its_end() {
        let s = prepared();
        // Database 0: local 1..=10 (global 3..=30); database 1: none; database 2: local 1..=4.
        assert!(s.in_set(3) && s.in_set(30));
        assert!(!s.in_set(33), "local 11 of database 0");
        assert!(!s.in_set(4), "database 1 had no event");
        assert!(s.in_set(5) && s.in_set(14));
        assert!(!s.in_set(17), "local 5 of database 2");
        assert!(!s.in_set(0) && !s.in_set(2), "no local seq 0");
        assert_eq!(s.until_seq(), 30);
        assert_eq!(CatchUpSpread::new(3).until_seq(), 0);
    }

    #[test]
    fn outboxes_are_drained_when_each_first_id_is_past_its_end() {
        let s = CatchUpSpread {
            outboxes: vec![7, 0],
            ..prepared()
        };
        assert!(!s.outboxes_drained(&[Some(7), None]));
        assert!(s.outboxes_drained(&[Some(8), None]));
        assert!(s.outboxes_drained(&[None, Some(1)]));
        assert!(!s.outboxes_drained(&[None]), "a database missing");
    }

    #[test]
    fn text_round_trips_and_names_what_is_wrong() {
        let s = CatchUpSpread {
            outboxes: vec![1, 2, 3],
            settling: true,
            ..prepared()
        };
        assert_eq!(CatchUpSpread::parse(&s.to_text()), Ok(s));
        let err = CatchUpSpread::parse(
            r#"{"databases":2,"events":[1],"outboxes":[],"inboxes":[],"settling":false}"#,
        )
        .unwrap_err();
        assert!(
            err.contains("events has 1 entries for 2 databases"),
            "{err}"
        );
        assert!(CatchUpSpread::parse("nope").is_err());
    }
}
