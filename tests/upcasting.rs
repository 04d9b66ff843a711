//! Schema evolution of events, on memory, SQLite and PostgreSQL: history written by v1 code
//! (v1 types) is read by v2 code, whose event type renamed a field (`amount` → `total`) and
//! split one event in two (`PlacedAndPaid` → `Placed` + `Paid`), through the upcaster the v2
//! code registers. Each case builds the v1 application, writes with it, drops it, and builds
//! the v2 application over the same storage, as a deployment does.

mod common;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{CatchUp, ShardboxBuilder};
use std::sync::Arc;
use std::time::Duration;

/// The commands of the order aggregate: the same in both versions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum OrderCommand {
    Place { customer: String, amount: i64 },
    PlaceAndPay { customer: String, amount: i64 },
}

impl Message for OrderCommand {
    const TYPE: &'static str = "upcast-test.order-command";
}

/// The order aggregate's state: the same shape in both versions.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct OrderState {
    pub events: u32,
}

/// The application as it was: version 1 of the order events.
mod v1 {
    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub enum OrderEvent {
        Placed { customer: String, amount: i64 },
        PlacedAndPaid { customer: String, amount: i64 },
    }

    impl Message for OrderEvent {
        const TYPE: &'static str = "upcast-test.order";
        // VERSION: 1, the default.
    }

    #[derive(Debug, Default, Clone, Serialize, Deserialize)]
    pub struct Order(pub OrderState);

    impl Aggregate for Order {
        const KIND: &'static str = "upcast-order";
        type Command = OrderCommand;
        type Event = OrderEvent;

        async fn handle(
            &self,
            c: &OrderCommand,
            _: &Context<'_>,
        ) -> Result<Vec<OrderEvent>, HandlerError> {
            Ok(vec![match c.clone() {
                OrderCommand::Place { customer, amount } => OrderEvent::Placed { customer, amount },
                OrderCommand::PlaceAndPay { customer, amount } => {
                    OrderEvent::PlacedAndPaid { customer, amount }
                }
            }])
        }

        fn apply(&mut self, _: &OrderEvent) {
            self.0.events += 1;
        }
    }

    /// The v1 sales view, registered so that posts fan out to its kind (its rows are left
    /// undelivered for the v2 code to take).
    #[derive(Debug, Default, Serialize, Deserialize)]
    pub struct Sales {
        pub amount: i64,
    }

    impl Projection for Sales {
        const KIND: &'static str = super::v2::Sales::KIND;
        type Event = OrderEvent;

        fn route(e: &OrderEvent, _: &EventSource) -> Vec<String> {
            match e {
                OrderEvent::Placed { customer, .. }
                | OrderEvent::PlacedAndPaid { customer, .. } => {
                    vec![customer.clone()]
                }
            }
        }

        async fn apply(&mut self, _: &OrderEvent, _: &Context<'_>) -> Result<(), HandlerError> {
            Err(HandlerError::new("v1 code must not deliver in this test"))
        }
    }
}

/// The application now: version 2 of the order events, and the upcaster from version 1.
mod v2 {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub enum OrderEvent {
        Placed { customer: String, total: i64 },
        Paid { customer: String, total: i64 },
    }

    impl Message for OrderEvent {
        const TYPE: &'static str = "upcast-test.order";
        const VERSION: u32 = 2;
    }

    /// v1 ─► v2: `Placed.amount` is `total` now; `PlacedAndPaid` is `Placed` then `Paid`.
    pub fn from_v1(v1: Value) -> Result<Vec<Value>, String> {
        if let Some(p) = v1.get("Placed") {
            return Ok(vec![
                json!({"Placed": {"customer": p["customer"], "total": p["amount"]}}),
            ]);
        }
        if let Some(p) = v1.get("PlacedAndPaid") {
            return Ok(vec![
                json!({"Placed": {"customer": p["customer"], "total": p["amount"]}}),
                json!({"Paid": {"customer": p["customer"], "total": p["amount"]}}),
            ]);
        }
        Err(format!("not a v1 order event: {v1}"))
    }

    #[derive(Debug, Default, Clone, Serialize, Deserialize)]
    pub struct Order(pub OrderState);

    impl Aggregate for Order {
        const KIND: &'static str = v1::Order::KIND;
        type Command = OrderCommand;
        type Event = OrderEvent;

        async fn handle(
            &self,
            c: &OrderCommand,
            _: &Context<'_>,
        ) -> Result<Vec<OrderEvent>, HandlerError> {
            Ok(match c.clone() {
                OrderCommand::Place { customer, amount } => vec![OrderEvent::Placed {
                    customer,
                    total: amount,
                }],
                OrderCommand::PlaceAndPay { customer, amount } => vec![
                    OrderEvent::Placed {
                        customer: customer.clone(),
                        total: amount,
                    },
                    OrderEvent::Paid {
                        customer,
                        total: amount,
                    },
                ],
            })
        }

        fn apply(&mut self, _: &OrderEvent) {
            self.0.events += 1;
        }
    }

    /// The read model: per customer, what was placed and paid, in the order applied.
    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Sales {
        pub placed: i64,
        pub paid: i64,
        pub log: Vec<String>,
    }

    impl Projection for Sales {
        const KIND: &'static str = "upcast-sales";
        type Event = OrderEvent;

        fn route(e: &OrderEvent, _: &EventSource) -> Vec<String> {
            match e {
                OrderEvent::Placed { customer, .. } | OrderEvent::Paid { customer, .. } => {
                    vec![customer.clone()]
                }
            }
        }

        async fn apply(&mut self, e: &OrderEvent, _: &Context<'_>) -> Result<(), HandlerError> {
            match e {
                OrderEvent::Placed { total, .. } => {
                    self.placed += total;
                    self.log.push(format!("placed {total}"));
                }
                OrderEvent::Paid { total, .. } => {
                    self.paid += total;
                    self.log.push(format!("paid {total}"));
                }
            }
            Ok(())
        }
    }
}

fn builder(storage: &Arc<dyn Storage>) -> ShardboxBuilder {
    Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .poll_interval(Duration::from_millis(20))
}

/// The v2 application, with or without the upcaster from v1.
async fn v2_app(storage: &Arc<dyn Storage>, upcaster: bool) -> Shardbox {
    let b = builder(storage)
        .aggregate::<v2::Order>()
        .projection::<v2::Sales>();
    let b = if upcaster {
        b.upcast::<v2::OrderEvent>(1, v2::from_v1)
    } else {
        b
    };
    b.build().await.expect("build v2")
}

/// Delivers until nothing is pending (a command's events fan out to shards a pass may have
/// served already; rows a catch-up held are due a poll interval later).
async fn settle(app: &Shardbox) {
    for _ in 0..500 {
        app.deliver_all().await.expect("deliver");
        let counts = app.storage().counts(None).await.expect("counts");
        if counts.pending() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let counts = app.storage().counts(None).await.expect("counts");
    panic!("still pending after 500 passes: {counts:?}");
}

/// Waits until a running node has nothing pending.
async fn idle(app: &Shardbox) {
    for _ in 0..1000 {
        if app.storage().counts(None).await.expect("counts").pending() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let counts = app.storage().counts(None).await.expect("counts");
    panic!("still pending after 10 s: {counts:?}");
}

fn place(customer: &str, amount: i64) -> OrderCommand {
    OrderCommand::Place {
        customer: customer.into(),
        amount,
    }
}

fn place_and_pay(customer: &str, amount: i64) -> OrderCommand {
    OrderCommand::PlaceAndPay {
        customer: customer.into(),
        amount,
    }
}

/// What v1 code wrote, as the v2 read model must show it.
fn expected_ada() -> v2::Sales {
    v2::Sales {
        placed: 15,
        paid: 5,
        log: vec!["placed 10".into(), "placed 5".into(), "paid 5".into()],
    }
}

fn expected_bob() -> v2::Sales {
    v2::Sales {
        placed: 8,
        paid: 7,
        log: vec!["placed 7".into(), "paid 7".into(), "placed 1".into()],
    }
}

/// v1 history (an aggregate's events), then v2 code builds its sales view by catch-up: the
/// renamed field and the split event give the expected read model; v2 events written after
/// it follow; the aggregate's own event read upcasts too.
async fn catch_up_rebuilds_v1_history_with_v2_code(storage: Arc<dyn Storage>) {
    {
        let app = builder(&storage)
            .aggregate::<v1::Order>()
            .build()
            .await
            .expect("build v1");
        for (id, c) in [
            ("o-1", place("ada", 10)),
            ("o-2", place_and_pay("ada", 5)),
            ("o-3", place_and_pay("bob", 7)),
            ("o-4", place("bob", 1)),
        ] {
            app.send::<v1::Order>(id, &c).await.expect("send");
            settle(&app).await;
        }
        let stored = app
            .storage()
            .read_events(0, &[v1::OrderEvent::TYPE.to_owned()], None, 100)
            .await
            .expect("events");
        assert_eq!(stored.len(), 4);
        assert!(
            stored.iter().all(|e| e.event.version == 1),
            "v1 code stores version 1: {stored:?}"
        );
    }

    let app = v2_app(&storage, true).await;
    let job = app
        .catch_up::<v2::Sales>(CatchUp::all())
        .await
        .expect("start catch-up");
    let node = app.start();
    let done = job.wait(Duration::from_secs(60)).await.expect("catch-up");
    assert_eq!(done.replayed, 4, "{done:?}");

    let sales = |id: &'static str| {
        let app = app.clone();
        async move { app.projection_state::<v2::Sales>(id).await.expect("read") }
    };
    assert_eq!(sales("ada").await, Some(expected_ada()));
    assert_eq!(sales("bob").await, Some(expected_bob()));

    // v2 code writes version 2, delivered live after the v1 history.
    app.send::<v2::Order>("o-5", &place_and_pay("ada", 1))
        .await
        .expect("send v2");
    idle(&app).await;
    node.shutdown().await.expect("shutdown");
    let mut ada = expected_ada();
    ada.placed += 1;
    ada.paid += 1;
    ada.log.extend(["placed 1".into(), "paid 1".into()]);
    assert_eq!(sales("ada").await, Some(ada));

    // The aggregate's own events, typed at v2: the split one twice, with its one seq.
    let o2 = app.aggregate_events::<v2::Order>("o-2").await.expect("o-2");
    let paid = v2::OrderEvent::Paid {
        customer: "ada".into(),
        total: 5,
    };
    assert!(
        matches!(&o2[..], [(a, v2::OrderEvent::Placed { total: 5, .. }), (b, p)] if a == b && *p == paid),
        "{o2:?}"
    );
    let o5 = app.aggregate_events::<v2::Order>("o-5").await.expect("o-5");
    assert_eq!(o5.len(), 2, "v2 events are read as they are: {o5:?}");
    assert!(o5[0].0 < o5[1].0, "two events, two seqs: {o5:?}");
}

/// v1 code posts events whose inbox rows it leaves undelivered; v2 code delivers them live:
/// without the upcaster they fail permanently and are dead letters naming the type and
/// version (kept at version 1); with it, the requeued letters give the expected read model.
async fn live_v1_rows_reach_v2_code_upcast(storage: Arc<dyn Storage>) {
    {
        let app = builder(&storage)
            .projection::<v1::Sales>()
            .build()
            .await
            .expect("build v1");
        for (order, e) in [
            (
                "o-1",
                v1::OrderEvent::Placed {
                    customer: "ada".into(),
                    amount: 10,
                },
            ),
            (
                "o-2",
                v1::OrderEvent::PlacedAndPaid {
                    customer: "ada".into(),
                    amount: 5,
                },
            ),
            (
                "o-3",
                v1::OrderEvent::PlacedAndPaid {
                    customer: "bob".into(),
                    amount: 7,
                },
            ),
            (
                "o-4",
                v1::OrderEvent::Placed {
                    customer: "bob".into(),
                    amount: 1,
                },
            ),
        ] {
            app.post(EventSource::external(order), &e)
                .await
                .expect("post v1");
        }
    }

    // v2 code that forgot the upcaster: each v1 row fails permanently, naming what is missing.
    {
        let app = v2_app(&storage, false).await;
        settle(&app).await;
        let dead = app
            .dead_letters(DeadLetterFilter::all())
            .await
            .expect("dead letters");
        assert_eq!(dead.len(), 4, "every v1 row: {dead:?}");
        for d in &dead {
            let reason = &d.letter.reason;
            assert!(
                reason.contains("`upcast-test.order` is stored at version 1")
                    && reason.contains(".upcast::<T>(1, …)"),
                "{reason}"
            );
            assert_eq!(d.letter.original.message.payload_version, 1);
        }
        assert_eq!(
            app.projection_state::<v2::Sales>("ada").await.unwrap(),
            None
        );
    }

    // With the upcaster: the letters requeued (still version 1), in their order.
    let app = v2_app(&storage, true).await;
    let report = app
        .requeue_dead_letters(DeadLetterFilter::all())
        .await
        .expect("requeue");
    assert_eq!(report.requeued, 4);
    settle(&app).await;
    assert_eq!(
        app.dead_letters(DeadLetterFilter::all())
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        app.projection_state::<v2::Sales>("ada").await.unwrap(),
        Some(expected_ada())
    );
    assert_eq!(
        app.projection_state::<v2::Sales>("bob").await.unwrap(),
        Some(expected_bob())
    );
}

/// The other subscribers of a split event: a reactor that sends a note per part, and a
/// process manager that logs each part.
mod subscribers {
    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct Note(pub String);

    impl Message for Note {
        const TYPE: &'static str = "upcast-test.note";
    }

    /// The notes a customer was sent, in order.
    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Notes(pub Vec<String>);

    impl Aggregate for Notes {
        const KIND: &'static str = "upcast-notes";
        type Command = Note;
        type Event = Note;

        async fn handle(&self, n: &Note, _: &Context<'_>) -> Result<Vec<Note>, HandlerError> {
            Ok(vec![n.clone()])
        }

        fn apply(&mut self, n: &Note) {
            self.0.push(n.0.clone());
        }
    }

    fn describe(e: &v2::OrderEvent) -> (String, String) {
        match e {
            v2::OrderEvent::Placed { customer, total } => {
                (customer.clone(), format!("placed {total}"))
            }
            v2::OrderEvent::Paid { customer, total } => (customer.clone(), format!("paid {total}")),
        }
    }

    /// Sends the customer a note per event.
    pub struct Notifier;

    impl Reactor for Notifier {
        const KIND: &'static str = "upcast-notifier";
        type Event = v2::OrderEvent;

        fn route(e: &v2::OrderEvent, _: &EventSource) -> Vec<String> {
            vec![describe(e).0]
        }

        async fn react(
            &self,
            e: &v2::OrderEvent,
            _: &Context<'_>,
        ) -> Result<Vec<Outgoing>, HandlerError> {
            let (customer, text) = describe(e);
            Ok(vec![Outgoing::command::<Notes>(customer, &Note(text))?])
        }
    }

    /// The notifier as v1 code had it (same kind, v1 events), so that v1 posts fan out to
    /// it; never delivered in this test.
    pub struct OldNotifier;

    impl Reactor for OldNotifier {
        const KIND: &'static str = Notifier::KIND;
        type Event = v1::OrderEvent;

        fn route(e: &v1::OrderEvent, _: &EventSource) -> Vec<String> {
            match e {
                v1::OrderEvent::Placed { customer, .. }
                | v1::OrderEvent::PlacedAndPaid { customer, .. } => vec![customer.clone()],
            }
        }

        async fn react(
            &self,
            _: &v1::OrderEvent,
            _: &Context<'_>,
        ) -> Result<Vec<Outgoing>, HandlerError> {
            Err(HandlerError::new("v1 code must not deliver in this test"))
        }
    }

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub enum Nudge {}

    impl Message for Nudge {
        const TYPE: &'static str = "upcast-test.nudge";
    }

    /// A checkout flow per customer that logs what it saw.
    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Checkout(pub Vec<String>);

    impl ProcessManager for Checkout {
        const KIND: &'static str = "upcast-checkout";
        type Event = v2::OrderEvent;
        type Command = Nudge;

        fn correlation_id(e: &v2::OrderEvent, _: &EventSource) -> Option<String> {
            Some(describe(e).0)
        }

        async fn on_event(
            &mut self,
            e: &v2::OrderEvent,
            _: &Context<'_>,
        ) -> Result<ProcessActions, HandlerError> {
            self.0.push(describe(e).1);
            Ok(ProcessActions::new())
        }

        async fn on_command(
            &mut self,
            n: &Nudge,
            _: &Context<'_>,
        ) -> Result<ProcessActions, HandlerError> {
            match *n {}
        }
    }
}

/// A v1 event split in two reaches a reactor and a process manager part by part, in order:
/// the reactor's two commands both arrive (their ids are numbered across the parts, so the
/// second is not taken for a duplicate of the first), the process manager logs both parts.
async fn split_events_reach_reactors_and_process_managers_part_by_part(storage: Arc<dyn Storage>) {
    {
        let app = builder(&storage)
            .reactor(subscribers::OldNotifier)
            .build()
            .await
            .expect("build v1");
        let e = v1::OrderEvent::PlacedAndPaid {
            customer: "bob".into(),
            amount: 7,
        };
        // Written by v1 code: its inbox row carries version 1 (no v1 code delivers it).
        app.post(EventSource::external("o-3"), &e)
            .await
            .expect("post v1");
    }
    let app = builder(&storage)
        .reactor(subscribers::Notifier)
        .process_manager::<subscribers::Checkout>()
        .aggregate::<subscribers::Notes>()
        .upcast::<v2::OrderEvent>(1, v2::from_v1)
        .build()
        .await
        .expect("build v2");
    // The process manager starts later, from history, as a v1 row of its own.
    let more = v1::OrderEvent::PlacedAndPaid {
        customer: "bob".into(),
        amount: 2,
    };
    app.post(EventSource::external("o-6"), &more)
        .await
        .expect("post v1 from v2 code");
    settle(&app).await;
    assert_eq!(
        app.aggregate_state::<subscribers::Notes>("bob")
            .await
            .unwrap(),
        Some(subscribers::Notes(vec![
            "placed 7".into(),
            "paid 7".into(),
            "placed 2".into(),
            "paid 2".into()
        ]))
    );
    assert_eq!(
        app.process_state::<subscribers::Checkout>("bob")
            .await
            .unwrap(),
        Some(subscribers::Checkout(vec![
            "placed 2".into(),
            "paid 2".into()
        ]))
    );
    assert!(app
        .dead_letters(DeadLetterFilter::all())
        .await
        .unwrap()
        .is_empty());
}

/// The tally aggregate of the state cases: version 1 of its state kept `n`, version 2 keeps
/// `count`.
mod tally {
    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct Bump;

    impl Message for Bump {
        const TYPE: &'static str = "upcast-test.bump";
    }

    macro_rules! tally {
        ($name:ident, $field:ident, $version:literal) => {
            #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
            pub struct $name {
                pub $field: u32,
            }

            impl Aggregate for $name {
                const KIND: &'static str = "upcast-tally";
                const STATE_VERSION: u32 = $version;
                type Command = Bump;
                type Event = Bump;

                async fn handle(
                    &self,
                    _: &Bump,
                    _: &Context<'_>,
                ) -> Result<Vec<Bump>, HandlerError> {
                    Ok(vec![Bump])
                }

                fn apply(&mut self, _: &Bump) {
                    self.$field += 1;
                }
            }
        };
    }

    tally!(V1, n, 1);
    tally!(V2, count, 2);
    // Version 2's shape, but STATE_VERSION left at 1: the mistake the error must name.
    tally!(Unversioned, count, 1);

    pub fn v1_to_v2(v1: Value) -> Result<Vec<Value>, String> {
        let n = v1.get("n").ok_or("no `n`")?;
        Ok(vec![json!({ "count": n })])
    }
}

/// A state stored by v1 code and read by v2 code: without a state upcaster the error names
/// the kind, tenant, id and version (in delivery, whose failure policy then applies, and in
/// the typed read), never a default; a shape changed without raising STATE_VERSION is named
/// too; with the upcaster the state goes on from its v1 value and is saved at version 2.
async fn a_v1_state_is_upcast_or_named_never_defaulted(storage: Arc<dyn Storage>) {
    {
        let app = builder(&storage)
            .aggregate::<tally::V1>()
            .build()
            .await
            .expect("build v1");
        for _ in 0..2 {
            app.send::<tally::V1>("t-1", &tally::Bump)
                .await
                .expect("send");
        }
        settle(&app).await;
        assert_eq!(
            app.aggregate_state::<tally::V1>("t-1").await.unwrap(),
            Some(tally::V1 { n: 2 })
        );
    }

    let names_it = |text: &str| {
        assert!(
            text.contains("state of `upcast-tally`")
                && text.contains("\"t-1\"")
                && text.contains("version 1"),
            "names kind, id and version: {text}"
        );
    };
    // v2 code without the state upcaster: the read and the delivery both name it.
    {
        let app = builder(&storage)
            .aggregate::<tally::V2>()
            .kind_policy_of::<tally::V2, _>(FailurePolicy::new(
                1,
                Backoff::Fixed(Duration::from_millis(1)),
                ExhaustedOutcome::DeadLetter,
            ))
            .build()
            .await
            .expect("build v2");
        let err = app.aggregate_state::<tally::V2>("t-1").await.unwrap_err();
        assert!(
            matches!(&err, DeliveryError::UndecodableState { kind, id, version: 1, .. } if kind == "upcast-tally" && id == "t-1"),
            "{err:?}"
        );
        names_it(&err.to_string());
        assert!(
            err.to_string().contains(".upcast_state::<E, _>(1, …)"),
            "{err}"
        );

        app.send::<tally::V2>("t-1", &tally::Bump)
            .await
            .expect("send");
        settle(&app).await;
        let dead = app.dead_letters(DeadLetterFilter::all()).await.unwrap();
        assert_eq!(dead.len(), 1, "{dead:?}");
        names_it(&dead[0].letter.reason);
        let stored = app
            .storage()
            .load_states(&[shardbox::EntityKey::new("upcast-tally", "", "t-1")])
            .await
            .unwrap();
        assert_eq!(
            (stored[0].state_version, &stored[0].state[..]),
            (1, &br#"{"n":2}"#[..]),
            "the v1 state is left as it was"
        );
    }

    // v2's shape without a raised STATE_VERSION: a state that does not deserialize, named.
    {
        let app = builder(&storage)
            .aggregate::<tally::Unversioned>()
            .build()
            .await
            .expect("build");
        let err = app
            .aggregate_state::<tally::Unversioned>("t-1")
            .await
            .unwrap_err();
        names_it(&err.to_string());
        assert!(err.to_string().contains("does not deserialize"), "{err}");
    }

    // With the state upcaster: the dead letter requeued is handled on the upcast state.
    let app = builder(&storage)
        .aggregate::<tally::V2>()
        .upcast_state::<tally::V2, _>(1, tally::v1_to_v2)
        .build()
        .await
        .expect("build v2");
    assert_eq!(
        app.aggregate_state::<tally::V2>("t-1").await.unwrap(),
        Some(tally::V2 { count: 2 }),
        "the typed read upcasts"
    );
    let report = app
        .requeue_dead_letters(DeadLetterFilter::all())
        .await
        .expect("requeue");
    assert_eq!(report.requeued, 1);
    settle(&app).await;
    assert_eq!(
        app.aggregate_state::<tally::V2>("t-1").await.unwrap(),
        Some(tally::V2 { count: 3 })
    );
    let stored = app
        .storage()
        .load_states(&[shardbox::EntityKey::new("upcast-tally", "", "t-1")])
        .await
        .unwrap();
    assert_eq!(
        (stored[0].state_version, &stored[0].state[..]),
        (2, &br#"{"count":3}"#[..]),
        "saved at the code's state version"
    );
}

common::on_every_backend!("upcasting";
    catch_up_rebuilds_v1_history_with_v2_code,
    live_v1_rows_reach_v2_code_upcast,
    a_v1_state_is_upcast_or_named_never_defaulted,
    split_events_reach_reactors_and_process_managers_part_by_part,
);

/// An upcaster that could never run is refused when the application is built, naming it.
#[tokio::test]
async fn an_upcaster_of_the_current_version_or_twice_is_refused_at_build() {
    for b in [
        Shardbox::builder()
            .memory()
            .upcast::<v2::OrderEvent>(2, v2::from_v1),
        Shardbox::builder()
            .memory()
            .upcast::<v2::OrderEvent>(1, v2::from_v1)
            .upcast::<v2::OrderEvent>(1, v2::from_v1),
    ] {
        let err = b.build().await.expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains("upcast") && text.contains("`upcast-test.order` version"),
            "{text}"
        );
    }
}
