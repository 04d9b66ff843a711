//! Where the in-memory backend finds a shard's due rows without walking the rows due later.
//!
//! ```text
//!  pending rows of a shard = maybe_due (by seq)  ∪  later (by deliver_after, seq)
//!  new row, no delay ───────────► maybe_due
//!  new row, delayed ────────────► later, filed under its deliver_after
//!  a read at `now`:  later up to now ──► maybe_due; maybe_due in seq order: due rows make the
//!                    page, rows found not due (a stage held or retried them) ──► later
//! ```
//!
//! A row in `later` was never handed to a stage since it was filed, so its time there is its
//! time in the row: nothing before that time needs to look at it. Rows a stage may change
//! stay in `maybe_due` and are checked against the row at every read, until a read finds
//! them not due. That read may file them under their new time only if no earlier read saw a
//! later `now` (see [`DueIndex::due`]).
//!
//! Pure bookkeeping over sequence numbers: the backend passes each row's current
//! `deliver_after` in as a function.

use chrono::{DateTime, Utc};
use std::collections::{BTreeSet, HashMap};

/// The due-order index of one shard's pending rows; see the module docs.
#[derive(Debug, Default)]
pub(super) struct DueIndex {
    /// Rows that may be due, in seq order; checked against the row at every read.
    maybe_due: BTreeSet<i64>,
    /// Rows due later, by (deliver_after, seq).
    later: BTreeSet<(DateTime<Utc>, i64)>,
    /// The time each row of `later` is filed under.
    filed: HashMap<i64, DateTime<Utc>>,
    /// The latest `now` a read has used.
    latest_read: Option<DateTime<Utc>>,
}

impl DueIndex {
    /// Adds a pending row that no stage has seen, due at `deliver_after` (at once if none).
    pub(super) fn add(&mut self, seq: i64, deliver_after: Option<DateTime<Utc>>) {
        self.remove(seq);
        match deliver_after {
            Some(at) => {
                self.later.insert((at, seq));
                self.filed.insert(seq, at);
            }
            None => {
                self.maybe_due.insert(seq);
            }
        }
    }

    /// Forgets a row that is no longer pending.
    pub(super) fn remove(&mut self, seq: i64) {
        self.maybe_due.remove(&seq);
        if let Some(at) = self.filed.remove(&seq) {
            self.later.remove(&(at, seq));
        }
    }

    /// A row handed to a stage outside [`DueIndex::due`] (a TTL sweep): its time may change
    /// under that stage, so it is checked at every read from now on.
    pub(super) fn handed_out(&mut self, seq: i64) {
        if let Some(at) = self.filed.remove(&seq) {
            self.later.remove(&(at, seq));
            self.maybe_due.insert(seq);
        }
    }

    /// The first `limit` rows due at `now`, in seq order. `deliver_after_of` gives a row's
    /// current time. Looks at the rows whose filed time has come and the rows that may be
    /// due, never at the rest.
    ///
    /// A row found not due is filed under its new time only if no read saw a later `now`:
    /// then every stage that had it in a page read it due at or before `now`, so its time
    /// was changed since by a commit, and a stage that still holds it is a fenced one whose
    /// commit will fail. After a read with an earlier `now` (another node's clock behind)
    /// such rows stay where they are, checked at every read.
    pub(super) fn due(
        &mut self,
        now: DateTime<Utc>,
        limit: usize,
        deliver_after_of: impl Fn(i64) -> Option<DateTime<Utc>>,
    ) -> Vec<i64> {
        let come: Vec<(DateTime<Utc>, i64)> =
            self.later.range(..=(now, i64::MAX)).copied().collect();
        for (at, seq) in come {
            self.later.remove(&(at, seq));
            self.filed.remove(&seq);
            self.maybe_due.insert(seq);
        }
        let settled = self.latest_read.is_none_or(|t| t <= now);
        if settled {
            self.latest_read = Some(now);
        }
        let mut due = Vec::new();
        let mut not_yet = Vec::new();
        for &seq in &self.maybe_due {
            if due.len() >= limit {
                break;
            }
            match deliver_after_of(seq) {
                Some(at) if at > now => not_yet.push((at, seq)),
                _ => due.push(seq),
            }
        }
        if settled {
            for (at, seq) in not_yet {
                self.maybe_due.remove(&seq);
                self.later.insert((at, seq));
                self.filed.insert(seq, at);
            }
        }
        due
    }

    /// The earliest time after `now` at which a row becomes due, if any.
    pub(super) fn next_after(
        &self,
        now: DateTime<Utc>,
        deliver_after_of: impl Fn(i64) -> Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        let filed = self
            .later
            .range((now, i64::MAX)..)
            .map(|(at, _)| *at)
            .find(|at| *at > now);
        let checked = self
            .maybe_due
            .iter()
            .filter_map(|seq| deliver_after_of(*seq))
            .filter(|at| *at > now)
            .min();
        filed.into_iter().chain(checked).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    /// Rows' current times, as the backend would report them.
    struct Rows(HashMap<i64, Option<DateTime<Utc>>>);

    impl Rows {
        fn at(&self) -> impl Fn(i64) -> Option<DateTime<Utc>> + '_ {
            |seq| self.0.get(&seq).copied().flatten()
        }
    }

    fn index(rows: &[(i64, Option<i64>)]) -> (DueIndex, Rows) {
        let mut index = DueIndex::default();
        let mut times = HashMap::new();
        for &(seq, at) in rows {
            index.add(seq, at.map(t));
            times.insert(seq, at.map(t));
        }
        (index, Rows(times))
    }

    #[test]
    fn due_rows_come_in_seq_order_whatever_their_delay() {
        let (mut index, rows) = index(&[(1, Some(5)), (2, None), (3, Some(1)), (4, Some(50))]);
        assert_eq!(index.due(t(0), 10, rows.at()), vec![2]);
        assert_eq!(index.due(t(5), 10, rows.at()), vec![1, 2, 3]);
        assert_eq!(
            index.due(t(5), 2, rows.at()),
            vec![1, 2],
            "the first by seq"
        );
        assert_eq!(index.due(t(50), 10, rows.at()), vec![1, 2, 3, 4]);
    }

    #[test]
    fn rows_due_later_are_not_looked_at() {
        let (mut index, rows) = index(&[(1, Some(100)), (2, Some(200)), (3, None)]);
        let looked = std::cell::RefCell::new(Vec::new());
        let due = index.due(t(0), 10, |seq| {
            looked.borrow_mut().push(seq);
            rows.at()(seq)
        });
        assert_eq!(due, vec![3]);
        assert_eq!(*looked.borrow(), vec![3]);
    }

    #[test]
    fn a_row_a_stage_held_is_found_again_when_its_new_time_comes() {
        let (mut index, mut rows) = index(&[(1, None), (2, None)]);
        assert_eq!(index.due(t(0), 10, rows.at()), vec![1, 2]);
        // The stage held row 1 until t(30) and retried row 2 at t(10).
        rows.0.insert(1, Some(t(30)));
        rows.0.insert(2, Some(t(10)));
        assert!(index.due(t(1), 10, rows.at()).is_empty());
        assert_eq!(index.next_after(t(1), rows.at()), Some(t(10)));
        assert_eq!(index.due(t(10), 10, rows.at()), vec![2]);
        assert_eq!(index.due(t(30), 10, rows.at()), vec![1, 2]);
    }

    #[test]
    fn after_a_read_with_an_earlier_clock_changed_rows_stay_checked() {
        let (mut index, mut rows) = index(&[(1, None)]);
        assert_eq!(index.due(t(10), 10, rows.at()), vec![1]);
        rows.0.insert(1, Some(t(20)));
        // A read with a clock behind does not file the row under t(20)…
        assert!(index.due(t(5), 10, rows.at()).is_empty());
        // …so a stage that read it at t(10) may still move it earlier, and it is found.
        rows.0.insert(1, Some(t(12)));
        assert_eq!(index.due(t(12), 10, rows.at()), vec![1]);
    }

    #[test]
    fn removed_and_handed_out_rows() {
        let (mut index, mut rows) = index(&[(1, Some(100)), (2, Some(100)), (3, None)]);
        index.remove(1);
        index.remove(3);
        assert_eq!(index.next_after(t(0), rows.at()), Some(t(100)));
        // Row 2 went to a TTL sweep, which may change its time.
        index.handed_out(2);
        rows.0.insert(2, Some(t(3)));
        assert_eq!(index.next_after(t(0), rows.at()), Some(t(3)));
        assert_eq!(index.due(t(3), 10, rows.at()), vec![2]);
        index.remove(2);
        assert!(index.due(t(1000), 10, rows.at()).is_empty());
        assert_eq!(index.next_after(t(0), rows.at()), None);
    }
}
