//! The reads an application's tests and tools use, on memory, SQLite and PostgreSQL: entity
//! state in any tenant, a dead letter's payload as its type, and one aggregate instance's own
//! events in `seq` order.

mod common;

use common::{Tally, TallyCommand, TallyEvent, TallyView};
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{DeliveryError, PayloadError};
use std::sync::Arc;
use std::time::Duration;

/// Serves every shard until a pass delivers nothing.
async fn deliver_until_idle(sb: &Shardbox) {
    for _ in 0..10 {
        if sb.deliver_all().await.expect("deliver").totals.delivered == 0 {
            return;
        }
    }
    panic!("still delivering after 10 passes");
}

async fn build(storage: Arc<dyn Storage>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .failure_policy(FailurePolicy::new(
            1,
            Backoff::Fixed(Duration::from_secs(1)),
            ExhaustedOutcome::DeadLetter,
        ))
        .aggregate::<Tally>()
        .aggregate::<Refuser>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build")
}

fn in_tenant(tenant: &str) -> SendOptions {
    SendOptions::default().tenant(tenant)
}

/// One id in three tenants: each tenant's aggregate and projection state is read apart.
async fn state_is_read_in_any_tenant(storage: Arc<dyn Storage>) {
    let sb = build(storage).await;
    sb.send::<Tally>("t-1", &TallyCommand::Add(4))
        .await
        .unwrap();
    sb.send_with::<Tally>("t-1", &TallyCommand::Add(1), in_tenant("acme"))
        .await
        .unwrap();
    sb.send_with::<Tally>("t-1", &TallyCommand::Add(2), in_tenant("globex"))
        .await
        .unwrap();
    deliver_until_idle(&sb).await;

    let sum = |t: Option<Tally>| t.map(|t| t.sum);
    assert_eq!(
        sum(sb.aggregate_state::<Tally>("t-1").await.unwrap()),
        Some(4)
    );
    assert_eq!(
        sum(sb.aggregate_state_in::<Tally>("", "t-1").await.unwrap()),
        Some(4),
        "the default tenant is the empty one"
    );
    assert_eq!(
        sum(sb.aggregate_state_in::<Tally>("acme", "t-1").await.unwrap()),
        Some(1)
    );
    assert_eq!(
        sum(sb
            .aggregate_state_in::<Tally>("globex", "t-1")
            .await
            .unwrap()),
        Some(2)
    );
    assert_eq!(
        sb.aggregate_state_in::<Tally>("initech", "t-1")
            .await
            .unwrap()
            .map(|t| t.sum),
        None
    );
    let view = |sum| Some(TallyView { events: 1, sum });
    assert_eq!(
        sb.projection_state::<TallyView>("t-1").await.unwrap(),
        view(4)
    );
    assert_eq!(
        sb.projection_state_in::<TallyView>("acme", "t-1")
            .await
            .unwrap(),
        view(1)
    );
    assert_eq!(
        sb.projection_state_in::<TallyView>("globex", "t-1")
            .await
            .unwrap(),
        view(2)
    );
}

/// A command [`Refuser`] refuses for good.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    sku: String,
    quantity: u32,
}

impl Message for Order {
    const TYPE: &'static str = "reads-test.order";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ordered;

impl Message for Ordered {
    const TYPE: &'static str = "reads-test.ordered";
}

/// Refuses every order: each one is dead-lettered at once.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Refuser;

impl Aggregate for Refuser {
    const KIND: &'static str = "refuser";
    type Command = Order;
    type Event = Ordered;

    async fn handle(&self, _: &Order, _: &Context<'_>) -> Result<Vec<Ordered>, HandlerError> {
        Err(HandlerError::permanent("out of stock"))
    }

    fn apply(&mut self, _: &Ordered) {}
}

/// A dead letter's payload reads back as its command type; asked as another type, the error
/// names both type names.
async fn a_dead_letters_payload_is_read_as_its_type(storage: Arc<dyn Storage>) {
    let sb = build(storage).await;
    let order = Order {
        sku: "sku-42".into(),
        quantity: 3,
    };
    sb.send::<Refuser>("o-1", &order).await.unwrap();
    deliver_until_idle(&sb).await;
    let dead = sb
        .dead_letters(DeadLetterFilter::all().kind(Refuser::KIND))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].letter.payload_as::<Order>().unwrap(), order);
    let err = dead[0].letter.payload_as::<TallyCommand>().unwrap_err();
    assert!(
        matches!(&err, PayloadError::WrongType { stored, expected }
            if stored == "reads-test.order" && *expected == "tally.command"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("`reads-test.order`") && text.contains("`tally.command`"),
        "{text}"
    );
}

/// One aggregate instance's events, typed, in `seq` order — across more than one page of the
/// read, interleaved with other instances' and another tenant's events; an instance whose
/// stored events are of another type is an error naming both types.
async fn an_aggregates_own_events_are_read_in_order(storage: Arc<dyn Storage>) {
    let sb = build(storage).await;
    let n: u64 = 620;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut commands: Vec<(&str, TallyCommand)> = Vec::new();
        for &i in chunk {
            commands.push(("t-1", TallyCommand::Record(i)));
            commands.push(("t-2", TallyCommand::Add(1)));
        }
        sb.send_many::<Tally>(&commands).await.unwrap();
        deliver_until_idle(&sb).await;
    }
    sb.send_with::<Tally>("t-1", &TallyCommand::Add(9), in_tenant("acme"))
        .await
        .unwrap();
    deliver_until_idle(&sb).await;

    let events = sb.aggregate_events::<Tally>("t-1").await.unwrap();
    let recorded: Vec<u64> = events
        .iter()
        .map(|(_, e)| match e {
            TallyEvent::Recorded(i) => *i,
            TallyEvent::Added(x) => panic!("t-1 of the default tenant added {x}"),
        })
        .collect();
    assert_eq!(
        recorded,
        (0..n).collect::<Vec<_>>(),
        "every event, in order"
    );
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0), "ascending seq");
    assert_eq!(
        sb.aggregate_events::<Tally>("t-2").await.unwrap().len(),
        620
    );
    let acme = sb
        .aggregate_events_in::<Tally>("acme", "t-1")
        .await
        .unwrap();
    assert!(
        matches!(acme.as_slice(), [(_, TallyEvent::Added(9))]),
        "{acme:?}"
    );
    assert!(sb
        .aggregate_events::<Tally>("t-9")
        .await
        .unwrap()
        .is_empty());

    // An event posted as if `tally` t-3 produced it, of another type.
    sb.post(
        EventSource {
            kind: Tally::KIND.into(),
            id: "t-3".into(),
        },
        &Ordered,
    )
    .await
    .unwrap();
    let err = sb.aggregate_events::<Tally>("t-3").await.unwrap_err();
    assert!(
        matches!(&err, DeliveryError::Payload(PayloadError::WrongType { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("`reads-test.ordered`") && text.contains("`tally.event`"),
        "{text}"
    );
}

common::on_every_backend!("reads";
    state_is_read_in_any_tenant,
    a_dead_letters_payload_is_read_as_its_type,
    an_aggregates_own_events_are_read_in_order,
);
