//! Read-your-writes end to end, on memory, SQLite and PostgreSQL: a sender awaits until a
//! projection has applied what its command (or its post) produced, and a read right after
//! shows it; a command that fails, a kind that does not follow the events, an unknown kind
//! and a projection nobody serves each get their own answer. Across two PostgreSQL instances
//! the sender that runs no node is answered by notification within a second of the apply.
//! Every wait sets a fallback poll far longer than the test, and the projection takes its
//! time to apply, so only the wake-ups of the projection's commits can answer in time.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, OutcomeWait};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When the projection last applied an event, per order.
static APPLIED_AT: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

/// How long the projection takes per event: longer than a sender's first read.
const APPLY_TIME: Duration = Duration::from_millis(150);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    lines: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderCommand {
    /// Emits `Counted`.
    Place { lines: u32 },
    /// Always fails.
    OutOfStock,
}

impl Message for OrderCommand {
    const TYPE: &'static str = "ryw-test.order.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderEvent {
    Counted(u32),
}

impl Message for OrderEvent {
    const TYPE: &'static str = "ryw-test.order.event";
}

impl Aggregate for Order {
    const KIND: &'static str = "ryw-order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(
        &self,
        c: &OrderCommand,
        _: &Context<'_>,
    ) -> Result<Vec<OrderEvent>, HandlerError> {
        match c {
            OrderCommand::Place { lines } => Ok(vec![OrderEvent::Counted(*lines)]),
            OrderCommand::OutOfStock => Err(HandlerError::new("out of stock")),
        }
    }

    fn apply(&mut self, e: &OrderEvent) {
        let OrderEvent::Counted(n) = e;
        self.lines += n;
    }
}

/// The read model: the lines of each order, applied slowly.
#[derive(Debug, Default, Serialize, Deserialize)]
struct OrderLines {
    lines: u32,
}

impl Projection for OrderLines {
    const KIND: &'static str = "ryw-order-lines";
    type Event = OrderEvent;

    async fn apply(&mut self, e: &OrderEvent, cx: &Context<'_>) -> Result<(), HandlerError> {
        tokio::time::sleep(APPLY_TIME).await;
        let OrderEvent::Counted(n) = e;
        self.lines += n;
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
                1,
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
        assert_eq!(applied, 1, "one row of the projection follows the order");
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

common::on_every_backend!("read_your_writes";
    a_read_after_the_wait_shows_the_send,
    what_cannot_be_read_back_says_why,
);

/// Two instances on one PostgreSQL schema, each with its own connections: the sender runs
/// no node, the other delivers; the sender is answered within a second of the projection's
/// apply although its fallback poll is a minute (by notification, not by polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_nodes_the_sender_reads_its_writes_by_notification() {
    let Some(url) = common::pg_url("read_your_writes::across_nodes") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "read_your_writes_across_nodes");
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
        assert_eq!(applied, 1);
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
