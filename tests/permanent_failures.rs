//! A failure that will never succeed (`HandlerError::permanent`) takes its kind's exhausted
//! outcome at its first attempt — dead letter, drop or block — with a reason that says it was
//! permanent, although the policy allows more attempts; a transient failure beside it is
//! retried as before. On memory, SQLite and PostgreSQL.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{ManualClock, Shardbox};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A payment command: refused for good, failing for now, or accepted.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Pay {
    /// The card is declined: retrying cannot help.
    Declined,
    /// The gateway timed out: a retry may succeed.
    GatewayDown,
    /// Accepted.
    Amount(i64),
}

impl Message for Pay {
    const TYPE: &'static str = "permanent-test.pay";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Paid(i64);

impl Message for Paid {
    const TYPE: &'static str = "permanent-test.paid";
}

/// Handler calls per (kind, target): proves the single attempt.
#[derive(Default)]
struct Calls(Mutex<BTreeMap<(String, String), usize>>);

impl Calls {
    fn of(&self, kind: &str, id: &str) -> usize {
        let calls = self.0.lock().unwrap();
        calls
            .get(&(kind.to_owned(), id.to_owned()))
            .copied()
            .unwrap_or(0)
    }
}

/// A payment aggregate of kind `$kind` (one per exhausted outcome, each with its own policy).
macro_rules! payment {
    ($name:ident, $kind:literal) => {
        #[derive(Debug, Default, Serialize, Deserialize)]
        struct $name {
            paid: Vec<i64>,
        }

        impl Aggregate for $name {
            const KIND: &'static str = $kind;
            type Command = Pay;
            type Event = Paid;

            async fn handle(&self, c: &Pay, cx: &Context<'_>) -> Result<Vec<Paid>, HandlerError> {
                let calls = cx.service::<Calls>()?;
                *calls
                    .0
                    .lock()
                    .unwrap()
                    .entry(($kind.to_owned(), cx.target_id.to_owned()))
                    .or_default() += 1;
                match c {
                    Pay::Declined => Err(HandlerError::permanent("card declined")),
                    Pay::GatewayDown => Err(HandlerError::new("gateway timed out")),
                    Pay::Amount(x) => Ok(vec![Paid(*x)]),
                }
            }

            fn apply(&mut self, e: &Paid) {
                self.paid.push(e.0);
            }
        }
    };
}

payment!(DeadLettered, "payment-dead-letter");
payment!(Dropped, "payment-drop");
payment!(Blocked, "payment-block");

/// Five attempts a minute apart, then `outcome`.
fn five_attempts(outcome: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(5, Backoff::Fixed(Duration::from_secs(60)), outcome)
}

const REASON: &str = "permanent failure, not retried: card declined";

async fn a_permanent_failure_takes_the_exhausted_outcome_at_once(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let calls = Arc::new(Calls::default());
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .clock(clock.clone())
        .shards(2)
        .service(calls.clone())
        .aggregate::<DeadLettered>()
        .aggregate::<Dropped>()
        .aggregate::<Blocked>()
        .kind_policy(
            DeadLettered::KIND,
            five_attempts(ExhaustedOutcome::DeadLetter),
        )
        .kind_policy(Dropped::KIND, five_attempts(ExhaustedOutcome::Drop))
        .kind_policy(Blocked::KIND, five_attempts(ExhaustedOutcome::Block))
        .build()
        .await
        .expect("build");
    // Each kind: a declined payment then an accepted one on `p-1`; a transient failure on
    // `p-2` of the dead-letter kind for comparison.
    sb.send::<DeadLettered>("p-1", &Pay::Declined)
        .await
        .unwrap();
    sb.send::<DeadLettered>("p-1", &Pay::Amount(10))
        .await
        .unwrap();
    sb.send::<Dropped>("p-1", &Pay::Declined).await.unwrap();
    sb.send::<Dropped>("p-1", &Pay::Amount(20)).await.unwrap();
    sb.send::<Blocked>("p-1", &Pay::Declined).await.unwrap();
    sb.send::<Blocked>("p-1", &Pay::Amount(30)).await.unwrap();
    sb.send::<DeadLettered>("p-2", &Pay::GatewayDown)
        .await
        .unwrap();

    let first = sb.deliver_all().await.expect("deliver");
    let t = &first.totals;
    assert_eq!(
        (t.dead_lettered, t.dropped, t.blocked, t.retried),
        (1, 1, 1, 1),
        "the permanent failures took their outcomes at once; the transient one is retried: {first:?}"
    );

    // Later passes, past every back-off: no permanent failure is attempted again.
    for _ in 0..3 {
        clock.advance(chrono::Duration::minutes(2));
        sb.deliver_all().await.expect("deliver");
    }
    assert_eq!(
        [
            calls.of(DeadLettered::KIND, "p-1"),
            calls.of(Dropped::KIND, "p-1"),
            calls.of(Blocked::KIND, "p-1"),
        ],
        [2, 2, 1],
        "one attempt each, then the next command (behind the block: not yet)"
    );
    assert_eq!(
        calls.of(DeadLettered::KIND, "p-2"),
        4,
        "the transient one is retried"
    );

    // Dead letter: one attempt, the reason says permanent; the target went on.
    let dead = sb
        .dead_letters(DeadLetterFilter::all().target(DeadLettered::KIND, "p-1"))
        .await
        .expect("dead letters");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(
        (dead[0].letter.attempts, dead[0].letter.reason.as_str()),
        (1, REASON)
    );
    let state = |paid: Option<Vec<i64>>| paid.unwrap_or_default();
    assert_eq!(
        state(
            sb.aggregate_state::<DeadLettered>("p-1")
                .await
                .unwrap()
                .map(|s| s.paid)
        ),
        [10]
    );
    // Drop: gone, counted; the target went on.
    assert_eq!(
        state(
            sb.aggregate_state::<Dropped>("p-1")
                .await
                .unwrap()
                .map(|s| s.paid)
        ),
        [20]
    );
    // Block: the target waits, the blocked message says why.
    let blocked = sb.blocked_targets().await.expect("blocked");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0].target.kind, Blocked::KIND);
    assert_eq!(blocked[0].attempts, 1);
    assert_eq!(blocked[0].last_error.as_deref(), Some(REASON));
    assert_eq!(
        sb.aggregate_state::<Blocked>("p-1")
            .await
            .unwrap()
            .map(|s| s.paid),
        None,
        "behind the block"
    );
    let m = sb.metrics();
    assert_eq!((m.dead_lettered, m.dropped), (1, 1), "{m:?}");
}

common::on_every_backend!("permanent_failures";a_permanent_failure_takes_the_exhausted_outcome_at_once);
