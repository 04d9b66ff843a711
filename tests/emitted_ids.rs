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
//!
//! And one that stood after it, until issue 37: an emitted id too long to be readable was a
//! digest that callers could make collide (two FNV-1a hashes), so two target ids crafted for
//! one long signal id lost an event the same way.

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

/// Two tally ids crafted so that, for the signal `"s" × 400`, the digest used until issue 37
/// (two unkeyed FNV-1a hashes) gave their events one id (found in seconds; see
/// `crafted_targets_that_collided_under_the_fnv_digest_emit_distinct_ids` in
/// core/src/model/ids.rs, which also checks that the old digests of the two are equal).
const CRAFTED_TARGETS: [&str; 2] = [
    "t-dI0\u{170}\u{f1}\u{471}\u{b3}B0C1\u{b0}B1\u{f0}\u{f0}C1D1\u{f3}\u{b0}\u{b0}\u{2f0}E0\u{f1}Q1\u{b3}\u{b0}C1B0\u{b1}C0\u{f0}C1\u{131}\u{f3}B0B0K0\u{170}C1Q1\u{b3}\u{b0}C1\u{b0}B1C0\u{f0}\u{f1}\u{131}\u{f3}\u{b0}B0\u{2f0}E0\u{f1}Q1B3\u{b0}C1B0",
    "t-d\u{270}E0\u{f1}\u{471}\u{b3}\u{b0}C1B0B1\u{f0}C0\u{f1}\u{131}C3B0B0K0E0\u{f1}\u{471}B3\u{b0}C1\u{b0}B1\u{f0}\u{f0}\u{f1}\u{131}C3\u{b0}B0K0\u{170}C1\u{471}\u{b3}\u{b0}\u{f1}B0\u{b1}\u{f0}C0C1D1\u{f3}B0\u{b0}K0\u{170}\u{f1}Q1B3B0\u{f1}\u{b0}",
];

/// A caller who chooses the signal id and the target ids cannot make two aggregates emit one
/// event id (defect 12 of issue 37): the crafted pair, sent one long signal id, stores two
/// events, each applied by the projection.
async fn crafted_targets_store_two_events(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .aggregate::<Tally>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build");
    let same = SendOptions::default().signal_id("s".repeat(400));
    for (n, id) in CRAFTED_TARGETS.iter().enumerate() {
        sb.send_with::<Tally>(id, &TallyCommand::Add(n as i64 + 1), same.clone())
            .await
            .expect("send");
    }
    deliver_until_idle(&sb).await;

    let stored = sb
        .storage()
        .read_events(0, &["tally.event".to_owned()], None, 100)
        .await
        .expect("read events");
    assert_eq!(stored.len(), 2, "both events stored: {stored:#?}");
    assert_ne!(stored[0].event.id, stored[1].event.id);
    for (n, id) in CRAFTED_TARGETS.iter().enumerate() {
        assert_eq!(
            sb.projection_state::<TallyView>(id).await.expect("state"),
            Some(TallyView {
                events: 1,
                sum: n as i64 + 1
            }),
            "{id}"
        );
    }
}

common::on_every_backend!("emitted_ids";
    commands_of_two_reactors_to_one_target_are_all_applied,
    one_signal_to_two_aggregates_stores_two_events,
    crafted_targets_store_two_events,
);
