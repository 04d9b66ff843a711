//! Command outcomes end to end, on memory, SQLite and PostgreSQL: a sender awaits what became
//! of its command — handled with the ids of the events it emitted, dead-lettered with the
//! last error, expired — and gets a timeout when no node serves it; across two PostgreSQL
//! instances, the sender that runs no node is answered by notification. Every wait sets a
//! fallback poll far longer than the test, so only the wake-ups can answer in time.
//!
//! Read-your-writes the same way: a sender awaits until a projection (`OrderLines`, which
//! takes its time to apply) has applied what its command or its post produced, and a read
//! right after shows it; a failed command, a kind that follows no events, an unknown kind and
//! a projection nobody serves each get their own answer; across two PostgreSQL instances the
//! sender is answered within a second of the apply.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, CommandOutcome, OutcomeWait};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When the `order` handler last handled a command, per target.
static HANDLED_AT: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    lines: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderCommand {
    /// Emits `Placed` and `Counted`.
    Place { lines: u32 },
    /// Always fails.
    OutOfStock,
}

impl Message for OrderCommand {
    const TYPE: &'static str = "outcome-test.order.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderEvent {
    Placed,
    Counted(u32),
}

impl Message for OrderEvent {
    const TYPE: &'static str = "outcome-test.order.event";
}

impl Aggregate for Order {
    const KIND: &'static str = "order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(
        &self,
        c: &OrderCommand,
        cx: &Context<'_>,
    ) -> Result<Vec<OrderEvent>, HandlerError> {
        HANDLED_AT
            .lock()
            .unwrap()
            .push((cx.target_id.to_owned(), Instant::now()));
        match c {
            OrderCommand::Place { lines } => {
                Ok(vec![OrderEvent::Placed, OrderEvent::Counted(*lines)])
            }
            OrderCommand::OutOfStock => Err(HandlerError::new("out of stock")),
        }
    }

    fn apply(&mut self, e: &OrderEvent) {
        if let OrderEvent::Counted(n) = e {
            self.lines += n;
        }
    }
}

/// When the projection last applied an event, per order.
static APPLIED_AT: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

/// How long the projection takes per event: longer than a sender's first read.
const APPLY_TIME: Duration = Duration::from_millis(150);

/// The read model: the lines of each order, applied slowly.
#[derive(Debug, Default, Serialize, Deserialize)]
struct OrderLines {
    lines: u32,
}

impl Projection for OrderLines {
    const KIND: &'static str = "outcome-test.order-lines";
    type Event = OrderEvent;

    async fn apply(&mut self, e: &OrderEvent, cx: &Context<'_>) -> Result<(), HandlerError> {
        tokio::time::sleep(APPLY_TIME).await;
        if let OrderEvent::Counted(n) = e {
            self.lines += n;
        }
        APPLIED_AT
            .lock()
            .unwrap()
            .push((cx.target_id.to_owned(), Instant::now()));
        Ok(())
    }
}

/// A wait of at most `timeout` whose fallback poll (a minute) never comes within a test.
fn wait(timeout: Duration) -> OutcomeWait {
    OutcomeWait::timeout(timeout).fallback_poll(Duration::from_secs(60))
}

async fn shardbox(storage: Arc<dyn Storage>, node: &str) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .node_id(shardbox::NodeId(node.into()))
        .shards(4)
        .dedup_window(Duration::from_secs(60))
        .poll_interval(Duration::from_secs(5))
        .kind_policy(
            Order::KIND,
            FailurePolicy::new(
                2,
                Backoff::Fixed(Duration::from_millis(10)),
                ExhaustedOutcome::DeadLetter,
            ),
        )
        .aggregate::<Order>()
        .projection::<OrderLines>()
        .build()
        .await
        .expect("build")
}

/// Handled: the outcome names the ids of the two events the command emitted (both in the
/// event store), and stays the same when asked again or for a duplicate send; a command
/// handled while its sender waits wakes the sender at once.
async fn handled_with_the_emitted_event_ids(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage.clone(), "node-a").await;
    let node = sb.start();
    let receipt = sb
        .send::<Order>("o-1", &OrderCommand::Place { lines: 3 })
        .await
        .expect("send");
    let outcome = sb
        .outcome_with(&receipt, wait(Duration::from_secs(20)))
        .await
        .expect("outcome");
    let CommandOutcome::Handled { events } = &outcome else {
        panic!("not handled: {outcome:?}");
    };
    assert_eq!(events.len(), 2, "{events:?}");
    let stored = storage.event_seqs(events).await.expect("event seqs");
    assert_eq!(
        stored.len(),
        2,
        "both emitted events are stored: {stored:?}"
    );

    let again = sb
        .outcome_with(&receipt, wait(Duration::from_secs(1)))
        .await;
    assert_eq!(again.expect("asked again"), outcome);
    let duplicate = sb
        .send_with::<Order>(
            "o-1",
            &OrderCommand::Place { lines: 3 },
            SendOptions::default().signal_id(receipt.signal_id.clone()),
        )
        .await
        .expect("duplicate send");
    assert_eq!(duplicate.report.duplicates, 1);
    let dup = sb
        .outcome_with(&duplicate, wait(Duration::from_secs(1)))
        .await;
    assert_eq!(dup.expect("duplicate's outcome"), outcome);

    // Decided while the sender already waits (delayed past its first read): the local
    // commit's signal answers it, not the minute-long fallback poll.
    let delayed = sb
        .send_with::<Order>(
            "o-1b",
            &OrderCommand::Place { lines: 1 },
            SendOptions::default().delay(Duration::from_millis(300)),
        )
        .await
        .expect("delayed send");
    let started = Instant::now();
    let outcome = sb
        .outcome_with(&delayed, wait(Duration::from_secs(20)))
        .await
        .expect("delayed outcome");
    assert_eq!(outcome.events().len(), 2, "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    node.shutdown().await.expect("shutdown");
}

/// Failed for good: the policy's exhausted outcome (a dead letter after two attempts) with
/// the last error as the reason.
async fn a_command_that_fails_for_good_is_dead_lettered_with_its_reason(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage, "node-a").await;
    let node = sb.start();
    let receipt = sb
        .send::<Order>("o-2", &OrderCommand::OutOfStock)
        .await
        .expect("send");
    let outcome = sb
        .outcome_with(&receipt, wait(Duration::from_secs(20)))
        .await
        .expect("outcome");
    match &outcome {
        CommandOutcome::DeadLettered { reason } => {
            assert!(reason.contains("out of stock"), "{reason}")
        }
        other => panic!("not dead-lettered: {other:?}"),
    }
    node.shutdown().await.expect("shutdown");
}

/// Expired: a command whose time to live ran out before any node served it.
async fn an_expired_command_gives_expired(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage, "node-a").await;
    let receipt = sb
        .send_with::<Order>(
            "o-3",
            &OrderCommand::Place { lines: 1 },
            SendOptions::default().ttl(Duration::from_millis(50)),
        )
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let node = sb.start();
    let outcome = sb
        .outcome_with(&receipt, wait(Duration::from_secs(20)))
        .await
        .expect("outcome");
    assert_eq!(outcome, CommandOutcome::Expired);
    node.shutdown().await.expect("shutdown");
}

/// No node runs: the wait ends with a timeout error after the time asked, not before.
async fn no_node_gives_a_timeout(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage, "node-a").await;
    let receipt = sb
        .send::<Order>("o-4", &OrderCommand::Place { lines: 1 })
        .await
        .expect("send");
    let started = Instant::now();
    let err = sb
        .outcome_with(&receipt, wait(Duration::from_millis(300)))
        .await
        .expect_err("nobody delivers");
    assert!(
        matches!(err, DeliveryError::OutcomeTimeout { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(err.to_string().contains(&receipt.signal_id.0), "{err}");
    let post = sb
        .post(
            EventSource {
                kind: "x".into(),
                id: "y".into(),
            },
            &OrderEvent::Placed,
        )
        .await
        .expect("post to no subscriber");
    assert!(matches!(
        sb.outcome(&post, Duration::from_millis(1)).await,
        Err(DeliveryError::NoOutcome { .. })
    ));
}

fn source(id: &str) -> EventSource {
    EventSource {
        kind: Order::KIND.into(),
        id: id.into(),
    }
}

/// A command's events, then a posted event: once `projected` answers, a read of the
/// projection shows them; a duplicate send's receipt answers the same.
async fn a_read_after_the_wait_shows_the_send(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage, "node-a").await;
    let node = sb.start();
    for n in 1..=3u32 {
        let id = format!("ryw-{n}");
        let receipt = sb
            .send::<Order>(&id, &OrderCommand::Place { lines: n })
            .await
            .expect("send");
        let started = Instant::now();
        let applied = sb
            .projected(&receipt, OrderLines::KIND, wait(Duration::from_secs(10)))
            .await
            .expect("projected");
        assert_eq!(applied, 2, "both events, each to the order's one instance");
        // Woken by the commit that applied it (the handling takes 150 ms), not by a poll.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "answered after {:?}",
            started.elapsed()
        );
        let view = sb.projection_state::<OrderLines>(&id).await.expect("read");
        assert_eq!(view.map(|v| v.lines), Some(n), "the read shows the send");
    }
    let post = sb
        .post(source("ryw-1"), &OrderEvent::Counted(10))
        .await
        .expect("post");
    let applied = sb
        .projected(&post, OrderLines::KIND, wait(Duration::from_secs(10)))
        .await
        .expect("post projected");
    assert_eq!(applied, 1);
    let view = sb
        .projection_state::<OrderLines>("ryw-1")
        .await
        .expect("read");
    assert_eq!(view.map(|v| v.lines), Some(11), "the read shows the post");
    node.shutdown().await.expect("shutdown");
}

/// Not handled, not followed, not registered, not served: each its own answer.
async fn what_cannot_be_read_back_says_why(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage, "node-a").await;
    // Nobody serves the shards yet: the wait runs out, after the time asked.
    let receipt = sb
        .send::<Order>("ryw-late", &OrderCommand::Place { lines: 1 })
        .await
        .expect("send");
    let started = Instant::now();
    let err = sb
        .projected(&receipt, OrderLines::KIND, wait(Duration::from_millis(300)))
        .await
        .expect_err("nobody delivers");
    assert!(
        matches!(err, DeliveryError::ProjectionTimeout { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(err.to_string().contains(OrderLines::KIND), "{err}");

    let node = sb.start();
    let failed = sb
        .send::<Order>("ryw-fail", &OrderCommand::OutOfStock)
        .await
        .expect("send");
    let err = sb
        .projected(&failed, OrderLines::KIND, wait(Duration::from_secs(10)))
        .await
        .expect_err("the command fails");
    assert!(matches!(err, DeliveryError::NotProjected { .. }), "{err:?}");
    assert!(err.to_string().contains("out of stock"), "{err}");

    // The aggregate follows no events: nothing to wait for once the command is handled.
    let placed = sb
        .send::<Order>("ryw-x", &OrderCommand::Place { lines: 2 })
        .await
        .expect("send");
    let none = sb
        .projected(&placed, Order::KIND, wait(Duration::from_secs(10)))
        .await
        .expect("handled");
    assert_eq!(none, 0);
    let err = sb
        .projected(&placed, "no-such-view", wait(Duration::from_secs(1)))
        .await
        .expect_err("unknown kind");
    assert!(matches!(err, DeliveryError::UnknownKind { .. }), "{err:?}");
    node.shutdown().await.expect("shutdown");
}

common::on_every_backend!("outcomes";
    handled_with_the_emitted_event_ids,
    a_command_that_fails_for_good_is_dead_lettered_with_its_reason,
    an_expired_command_gives_expired,
    no_node_gives_a_timeout,
    a_read_after_the_wait_shows_the_send,
    what_cannot_be_read_back_says_why,
);

/// Two instances on one PostgreSQL schema, each with its own connections: the sender runs
/// no node, the other delivers; the sender is answered within a second of the handling
/// although its fallback poll is a minute (by notification, not by polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_nodes_the_sender_is_answered_by_notification() {
    let Some(url) = common::pg_url("outcomes::across_nodes") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "outcomes_across_nodes");
    let sender = shardbox(Arc::new(schema.connect(2).await), "sender").await;
    let worker = shardbox(Arc::new(schema.connect(4).await), "worker").await;
    let node = worker.start();
    for n in 0..3 {
        let target = format!("across-{n}");
        let receipt = sender
            .send::<Order>(&target, &OrderCommand::Place { lines: n })
            .await
            .expect("send");
        let outcome = sender
            .outcome_with(&receipt, wait(Duration::from_secs(20)))
            .await
            .expect("answered before the timeout");
        let answered = Instant::now();
        assert_eq!(outcome.events().len(), 2, "{outcome:?}");
        let handled = HANDLED_AT
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(t, _)| *t == target)
            .map(|(_, at)| *at)
            .expect("handled by the worker");
        assert!(
            answered.duration_since(handled) < Duration::from_secs(1),
            "answered {:?} after the handling",
            answered.duration_since(handled)
        );
    }
    assert!(
        sender.metrics().stages == 0,
        "the sender ran no stage: it only listened"
    );
    node.shutdown().await.expect("shutdown");
}

/// Two instances on one PostgreSQL schema, each with its own connections: the sender runs
/// no node, the other delivers; the sender is answered within a second of the projection's
/// apply although its fallback poll is a minute (by notification, not by polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_nodes_the_sender_reads_its_writes_by_notification() {
    let Some(url) = common::pg_url("outcomes::read_your_writes_across_nodes") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "outcomes_read_your_writes");
    let sender = shardbox(Arc::new(schema.connect(2).await), "sender").await;
    let worker = shardbox(Arc::new(schema.connect(4).await), "worker").await;
    let node = worker.start();
    for n in 1..=3u32 {
        let id = format!("across-{n}");
        let receipt = sender
            .send::<Order>(&id, &OrderCommand::Place { lines: n })
            .await
            .expect("send");
        let applied = sender
            .projected(&receipt, OrderLines::KIND, wait(Duration::from_secs(20)))
            .await
            .expect("answered before the timeout");
        let answered = Instant::now();
        assert_eq!(applied, 2);
        let view = sender
            .projection_state::<OrderLines>(&id)
            .await
            .expect("read");
        assert_eq!(view.map(|v| v.lines), Some(n), "the sender's read shows it");
        let at = APPLIED_AT
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(t, _)| *t == id)
            .map(|(_, at)| *at)
            .expect("applied by the worker");
        assert!(
            answered.duration_since(at) < Duration::from_secs(1),
            "answered {:?} after the apply",
            answered.duration_since(at)
        );
    }
    assert_eq!(
        sender.metrics().stages,
        0,
        "the sender ran no stage: it only listened"
    );
    node.shutdown().await.expect("shutdown");
}
