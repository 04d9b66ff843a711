//! `LiveDelivery` on hand-made pages: grouping by target, seq order, rows it must leave
//! alone, targets held behind a retry, TTL expiry, and the fan-out of emitted events to the
//! subscribed projections. Its decisions are read back from the Conveyor or from the commit
//! it turns into.

mod common;

use common::*;
use serde::{Deserialize, Serialize};
use shardbox_core::storage::{Page, RowChange, RowUpdate, WriteBatch};
use shardbox_core::InboxWrite;
use shardbox_core::{AggregateHandler, ProjectionHandler};
use shardbox_core::{
    Context, EventSource, HandlerError, Intent, Message, MessageKind, MessageStatus, Metadata,
    NewEvent, NewMessage, NoopMonitor, Projection, ShardIndex, SignalId, Station,
};
use std::sync::Arc;

#[tokio::test]
async fn live_groups_by_target_and_calls_each_handler_once_in_seq_order() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // Out of seq order on purpose: the Conveyor sorts, the station groups.
    let mut c = fx.conveyor(vec![
        add(4, "a", 40),
        add(1, "a", 10),
        add(2, "b", 20),
        add(6, "a", 60),
        add(3, "b", 30),
        add(5, "c", 50),
    ]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1, 4, 6]),
            ("counter".into(), "b".into(), vec![2, 3]),
            ("counter".into(), "c".into(), vec![5]),
        ]
    );
    assert_eq!(intents(&c), vec![Some(delivered()); 6]);

    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        counter_states(&commit),
        vec![
            ("a".into(), counter(&[10, 40, 60])),
            ("b".into(), counter(&[20, 30])),
            ("c".into(), counter(&[50])),
        ],
        "one state write per target, its messages applied in seq order"
    );
    assert_eq!(commit.states.len(), 3);
    let updates: Vec<RowUpdate> = (1..=6)
        .map(|seq| RowUpdate {
            seq,
            change: RowChange::Delivered {
                keep_until: t0() + secs(60),
            },
        })
        .collect();
    assert_eq!(commit.updates, updates);
    assert_eq!(report.delivered, 6);
    assert_eq!(report.page_len, 6);
}

#[tokio::test]
async fn live_leaves_rows_of_other_statuses_and_claimed_rows_alone() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // A replayed (catch-up) row is delivered with its target's live rows, in seq order, and
    // removed at delivery (its signal is unique to the job: nothing to deduplicate later).
    let mut catch_up = add(2, "a", 20);
    catch_up.status = MessageStatus::ToCatchUp;
    let mut done = add(4, "c", 40);
    done.status = MessageStatus::Delivered;
    let mut c = fx.conveyor(vec![add(1, "a", 10), catch_up, add(3, "b", 30), done]);
    c.record(2, hold(t0() + secs(7)));
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(delivered()),
            Some(Intent::Delivered { keep_until: None }),
            Some(hold(t0() + secs(7))),
            None
        ]
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![1, 2])]);
}

#[tokio::test]
async fn live_holds_a_waiting_target_until_its_retry_time() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let until = t0() + secs(5);
    let mut c = fx.conveyor_with(Page {
        messages: vec![add(1, "a", 10), add(2, "b", 20), add(3, "a", 30)],
        waiting: vec![(counter_key("a"), until)],
        ..Page::default()
    });
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![Some(hold(until)), Some(delivered()), Some(hold(until))]
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "b".into(), vec![2])]);
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(counter_states(&commit), vec![("b".into(), counter(&[20]))]);
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Hold { until }
        }
    );
    assert_eq!((report.held, report.delivered), (2, 1));
}

#[tokio::test]
async fn live_expires_a_message_whose_ttl_ran_out() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut expired = add(1, "a", 10);
    expired.message.expires_at = Some(t0());
    let mut just_alive = add(2, "a", 20);
    just_alive.message.expires_at = Some(t0() + ms(1));
    let mut c = fx.conveyor(vec![expired, just_alive]);
    live().process(&mut c).await.unwrap();

    assert_eq!(intents(&c), vec![Some(Intent::Expired), Some(delivered())]);
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![2])]);
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Remove
        }
    );
    assert_eq!(counter_states(&commit), vec![("a".into(), counter(&[20]))]);
    assert_eq!((report.expired, report.delivered), (1, 1));
}

#[tokio::test]
async fn live_fans_emitted_events_out_to_the_projection() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut row = add(1, "a", 5);
    row.message.metadata.insert("trace".into(), "t-1".into());
    let mut c = fx.conveyor(vec![row]);
    live().process(&mut c).await.unwrap();
    let (commit, report) = c.into_commit(t0() + secs(30));

    let mut metadata = Metadata::new();
    metadata.insert("trace".into(), "t-1".into());
    let payload = serde_json::to_vec(&Added(5)).unwrap();
    let event = NewEvent {
        id: SignalId("sig-1/counter:a/event/0".into()),
        event_type: "counter.added".into(),
        source: EventSource {
            kind: "counter".into(),
            id: "a".into(),
        },
        tenant: String::new(),
        occurred_at: t0(),
        payload: payload.clone(),
        version: 1,
        metadata: metadata.clone(),
    };
    let copy = InboxWrite {
        shard: ShardIndex(0),
        message: NewMessage {
            signal_id: SignalId("sig-1/counter:a/event/0".into()),
            kind: MessageKind::Event,
            target_kind: "totals".into(),
            target_id: "a".into(),
            tenant: String::new(),
            payload,
            payload_type: "counter.added".into(),
            payload_version: 1,
            metadata,
            received_at: t0(),
            deliver_after: None,
            expires_at: None,
        },
    };
    assert_eq!(
        commit.writes,
        WriteBatch {
            events: vec![event],
            messages: vec![copy],
        }
    );
    assert_eq!(report.fanned_out, 1);
}

/// The shape a stricter read model expects under the same event type name: `Added` payloads
/// do not decode as this, so routing them fails.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StrictAdded {
    amount: u32,
    note: String,
}

impl Message for StrictAdded {
    const TYPE: &'static str = "counter.added";
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct StrictView;

impl Projection for StrictView {
    const KIND: &'static str = "strict";
    type Event = StrictAdded;

    async fn apply(&mut self, _: &StrictAdded, _: &Context<'_>) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// One subscriber that cannot route an emitted event must not cost the others their copy, and
/// its own copy goes to the dead letters rather than vanishing.
#[tokio::test]
async fn live_fans_out_to_every_other_subscriber_when_one_cannot_route_the_event() {
    let fx = Fixture::build(
        config().build().unwrap(),
        Arc::new(NoopMonitor),
        vec![
            Arc::new(AggregateHandler::<Counter>::default()),
            Arc::new(ProjectionHandler::<StrictView>::default()),
            Arc::new(ProjectionHandler::<Totals>::default()),
        ],
    )
    .await;
    let mut c = fx.conveyor(vec![add(1, "a", 5)]);
    live().process(&mut c).await.unwrap();
    assert_eq!(c.intent(0), Some(&delivered()));
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(commit.writes.events.len(), 1);
    let copies: Vec<(String, String)> = commit
        .writes
        .messages
        .iter()
        .map(|w| (w.message.target_kind.clone(), w.message.target_id.clone()))
        .collect();
    assert_eq!(copies, vec![("totals".to_owned(), "a".to_owned())]);
    assert_eq!(commit.dead_letters.len(), 1, "the unroutable copy is kept");
    let dead = &commit.dead_letters[0];
    assert_eq!(dead.original.message.target_kind, "strict");
    assert!(
        dead.reason.contains("could not be routed to `strict`"),
        "{}",
        dead.reason
    );
}
