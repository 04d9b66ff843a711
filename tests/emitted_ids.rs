//! The ids of what handlers emit never collide between two targets that handle one signal, on
//! memory, SQLite and PostgreSQL. Two silent losses stood here before the id of an emitted
//! event or command included who emitted it (`SignalId::emitted`):
//!
//! - two reactor kinds, or two routed instances of one reactor, each sending a command to one
//!   target in reaction to one event: the commands got one signal id, and the second was a
//!   write duplicate, never delivered;
//! - one caller-chosen signal id sent to two aggregates: both emitted events got one id, the
//!   event store kept one, and a catch-up of a projection (or any reader of the store) missed
//!   the other.

mod common;

use common::{Tally, TallyCommand, TallyView};
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::CatchUp;
use std::sync::Arc;
use std::time::Duration;

/// An order was shipped (posted by the test, from outside).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Shipped;

impl Message for Shipped {
    const TYPE: &'static str = "emitted-ids-test.shipped";
}

/// A note to a journal: who sent it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Note(String);

impl Message for Note {
    const TYPE: &'static str = "emitted-ids-test.note";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Noted(String);

impl Message for Noted {
    const TYPE: &'static str = "emitted-ids-test.noted";
}

/// The target every reactor writes to: the notes it was sent, in handling order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Journal {
    notes: Vec<String>,
}

impl Aggregate for Journal {
    const KIND: &'static str = "journal";
    type Command = Note;
    type Event = Noted;

    async fn handle(&self, c: &Note, _: &Context<'_>) -> Result<Vec<Noted>, HandlerError> {
        Ok(vec![Noted(c.0.clone())])
    }

    fn apply(&mut self, e: &Noted) {
        self.notes.push(e.0.clone());
    }
}

/// Writes "{kind}" to journal `shared` for every shipment.
macro_rules! reactor_to_shared_journal {
    ($name:ident, $kind:literal) => {
        struct $name;

        impl Reactor for $name {
            const KIND: &'static str = $kind;
            type Event = Shipped;

            async fn react(
                &self,
                _: &Shipped,
                _: &Context<'_>,
            ) -> Result<Vec<Outgoing>, HandlerError> {
                Ok(vec![Outgoing::command::<Journal>(
                    "shared",
                    &Note($kind.into()),
                )?])
            }
        }
    };
}

reactor_to_shared_journal!(Mailer, "mailer");
reactor_to_shared_journal!(Billing, "billing");

/// Routed to two instances per shipment; each writes "fanout:{its id}" to journal `fanned`.
struct Fanout;

impl Reactor for Fanout {
    const KIND: &'static str = "fanout";
    type Event = Shipped;

    fn route(_: &Shipped, source: &EventSource) -> Vec<String> {
        vec![format!("{}-a", source.id), format!("{}-b", source.id)]
    }

    async fn react(&self, _: &Shipped, cx: &Context<'_>) -> Result<Vec<Outgoing>, HandlerError> {
        Ok(vec![Outgoing::command::<Journal>(
            "fanned",
            &Note(format!("fanout:{}", cx.target_id)),
        )?])
    }
}

/// Serves every shard until a pass delivers nothing (what a stage emits lands in other
/// shards, perhaps ones this pass already served).
async fn deliver_until_idle(sb: &Shardbox) {
    for _ in 0..10 {
        if sb.deliver_all().await.expect("deliver").totals.delivered == 0 {
            return;
        }
    }
    panic!("still delivering after 10 passes");
}

async fn notes(sb: &Shardbox, id: &str) -> Vec<String> {
    let mut notes = sb
        .aggregate_state::<Journal>(id)
        .await
        .expect("state")
        .map(|j| j.notes)
        .unwrap_or_default();
    notes.sort();
    notes
}

/// Two reactor kinds and two routed instances of one reactor each send a command to one
/// target in reaction to one event: every command is applied, none is a write duplicate.
async fn commands_of_two_reactors_to_one_target_are_all_applied(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .aggregate::<Journal>()
        .reactor(Mailer)
        .reactor(Billing)
        .reactor(Fanout)
        .build()
        .await
        .expect("build");
    sb.post(EventSource::external("order-1"), &Shipped)
        .await
        .expect("post");
    deliver_until_idle(&sb).await;
    assert_eq!(
        (notes(&sb, "shared").await, notes(&sb, "fanned").await),
        (
            vec!["billing".to_owned(), "mailer".to_owned()],
            vec!["fanout:order-1-a".to_owned(), "fanout:order-1-b".to_owned()]
        ),
        "two kinds (shared), two instances of one kind (fanned)"
    );
    assert_eq!(sb.metrics().write_duplicates, 0, "{:?}", sb.metrics());

    // A second shipment: its commands are new signals, all applied again.
    sb.post(EventSource::external("order-1"), &Shipped)
        .await
        .expect("post");
    deliver_until_idle(&sb).await;
    assert_eq!(notes(&sb, "shared").await.len(), 4);
    assert_eq!(notes(&sb, "fanned").await.len(), 4);
}

/// One caller-chosen signal id sent to two aggregates: two events are stored, each applied
/// by the projection, and a catch-up of the projection rebuilds both views.
async fn one_signal_to_two_aggregates_stores_two_events(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .poll_interval(Duration::from_millis(50))
        .aggregate::<Tally>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build");
    let same = SendOptions::default().signal_id("order-7");
    sb.send_with::<Tally>("t-1", &TallyCommand::Add(1), same.clone())
        .await
        .expect("send");
    sb.send_with::<Tally>("t-2", &TallyCommand::Add(2), same)
        .await
        .expect("send");
    deliver_until_idle(&sb).await;

    let stored = sb
        .storage()
        .read_events(0, &["tally.event".to_owned()], None, 100)
        .await
        .expect("read events");
    let mut sources: Vec<&str> = stored.iter().map(|e| e.event.source.id.as_str()).collect();
    sources.sort();
    let view = |sum| TallyView { events: 1, sum };
    let views = |sb: Shardbox| async move {
        let mut got = Vec::new();
        for id in ["t-1", "t-2"] {
            got.push(sb.projection_state::<TallyView>(id).await.expect("state"));
        }
        got
    };
    assert_eq!(
        (sources, views(sb.clone()).await),
        (vec!["t-1", "t-2"], vec![Some(view(1)), Some(view(2))]),
        "two events stored, both applied by the projection: {stored:#?}"
    );
    assert_ne!(stored[0].event.id, stored[1].event.id);

    let job = sb
        .catch_up::<TallyView>(CatchUp::all())
        .await
        .expect("catch-up");
    let node = sb.start();
    let done = job.wait(Duration::from_secs(60)).await.expect("wait");
    assert_eq!(
        done.status,
        shardbox::core::storage::CatchUpStatus::Completed,
        "{done:?}"
    );
    assert_eq!(done.replayed, 2, "both events replayed: {done:?}");
    assert!(node.drain(Duration::from_secs(30)).await.expect("drain"));
    node.shutdown().await.expect("shutdown");
    assert_eq!(views(sb.clone()).await, [Some(view(1)), Some(view(2))]);
}

common::on_every_backend!("emitted_ids";
    commands_of_two_reactors_to_one_target_are_all_applied,
    one_signal_to_two_aggregates_stores_two_events,
);
