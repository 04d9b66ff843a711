//! The payload size limit (`max_payload_bytes`, defect 6 of issue 37), on every backend: a
//! send or a post whose payload is over it is a typed error at the call naming the size and
//! the limit, and nothing is written; one at the limit is written and delivered; a handler
//! that emits an event or a command over it fails its message permanently, which its failure
//! policy dead-letters, and nothing of that handling is written.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{DeliveryError, PayloadTooLarge};
use std::sync::Arc;

/// The limit of these tests.
const LIMIT: usize = 1024;

/// Keeps blobs, or makes a big event out of a small command.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Blob {
    kept: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum BlobCommand {
    /// Keep this text (the command is as big as it).
    Store(String),
    /// Emit an event holding `n` bytes of text (the command is small).
    Inflate(usize),
    /// Make the `blower` reactor send a command holding `n` bytes of text.
    Blow(usize),
}

impl Message for BlobCommand {
    const TYPE: &'static str = "blob.command";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum BlobEvent {
    Stored(usize),
    Inflated(String),
    Blown(usize),
}

impl Message for BlobEvent {
    const TYPE: &'static str = "blob.event";
}

impl Aggregate for Blob {
    const KIND: &'static str = "blob";
    type Command = BlobCommand;
    type Event = BlobEvent;

    async fn handle(
        &self,
        c: &BlobCommand,
        _: &Context<'_>,
    ) -> Result<Vec<BlobEvent>, HandlerError> {
        Ok(vec![match c {
            BlobCommand::Store(text) => BlobEvent::Stored(text.len()),
            BlobCommand::Inflate(n) => BlobEvent::Inflated("x".repeat(*n)),
            BlobCommand::Blow(n) => BlobEvent::Blown(*n),
        }])
    }

    fn apply(&mut self, e: &BlobEvent) {
        if let BlobEvent::Stored(n) = e {
            self.kept += n;
        }
    }
}

/// Reacts to `Blown(n)` with a `Store` of `n` bytes to blob `blown`.
struct Blower;

impl Reactor for Blower {
    const KIND: &'static str = "blower";
    type Event = BlobEvent;

    async fn react(&self, e: &BlobEvent, _: &Context<'_>) -> Result<Vec<Outgoing>, HandlerError> {
        match e {
            BlobEvent::Blown(n) => Ok(vec![Outgoing::command::<Blob>(
                "blown",
                &BlobCommand::Store("x".repeat(*n)),
            )?]),
            _ => Ok(vec![]),
        }
    }
}

/// `{"Store":"…"}` of exactly `bytes` bytes.
fn store(bytes: usize) -> BlobCommand {
    BlobCommand::Store("x".repeat(bytes - r#"{"Store":""}"#.len()))
}

fn assert_too_large<T: std::fmt::Debug>(
    outcome: Result<T, DeliveryError>,
    payload_type: &str,
    size: usize,
) {
    match outcome {
        Err(DeliveryError::PayloadTooLarge(e)) => {
            assert_eq!(
                e,
                PayloadTooLarge {
                    payload_type: payload_type.into(),
                    size,
                    limit: LIMIT
                }
            );
            let text = DeliveryError::PayloadTooLarge(e).to_string();
            for words in [
                format!("{size} bytes"),
                format!("limit of {LIMIT} bytes"),
                "max_payload_bytes".into(),
                "nothing was written".into(),
            ] {
                assert!(text.contains(&words), "{text}");
            }
        }
        other => panic!("expected PayloadTooLarge of {size} bytes, got {other:?}"),
    }
}

async fn payloads_over_the_limit_are_refused_and_emissions_over_it_dead_letter(
    storage: Arc<dyn Storage>,
) {
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .max_payload_bytes(LIMIT)
        .aggregate::<Blob>()
        .reactor(Blower)
        .build()
        .await
        .expect("build");

    // Sends and posts over the limit: refused at the call, nothing written.
    assert_too_large(
        sb.send::<Blob>("b-1", &store(LIMIT + 1)).await,
        "blob.command",
        LIMIT + 1,
    );
    assert_too_large(
        sb.send_many::<Blob>(&[("b-1", store(20)), ("b-2", store(5000))])
            .await,
        "blob.command",
        5000,
    );
    let big_event = BlobEvent::Inflated("x".repeat(2 * LIMIT));
    let size = serde_json::to_vec(&big_event).expect("json").len();
    assert_too_large(
        sb.post(EventSource::external("src"), &big_event).await,
        "blob.event",
        size,
    );
    assert_too_large(
        sb.post_many(&[
            (EventSource::external("src"), BlobEvent::Stored(1)),
            (EventSource::external("src"), big_event.clone()),
        ])
        .await,
        "blob.event",
        size,
    );
    let counts = storage.counts(None).await.expect("counts");
    assert_eq!(
        counts.pending() + counts.delivered,
        0,
        "nothing written: {counts:?}"
    );
    assert_eq!(storage.last_event_seq().await.expect("events"), 0);

    // At the limit: written and delivered.
    sb.send::<Blob>("b-1", &store(LIMIT))
        .await
        .expect("at the limit");
    sb.deliver_all().await.expect("deliver");
    let kept = sb.aggregate_state::<Blob>("b-1").await.expect("state");
    assert_eq!(kept.map(|b| b.kept), Some(LIMIT - r#"{"Store":""}"#.len()));

    // A handler's emissions over the limit: its message fails at once (no retries: it would
    // emit the same again) and is dead-lettered, naming the size and the limit; nothing of
    // that handling is written.
    sb.send::<Blob>("b-2", &BlobCommand::Inflate(2 * LIMIT))
        .await
        .expect("small command");
    sb.send::<Blob>("b-3", &BlobCommand::Blow(2 * LIMIT))
        .await
        .expect("small command");
    for _ in 0..3 {
        sb.deliver_all().await.expect("deliver");
    }
    let mut dead = storage
        .list_dead_letters(&Default::default())
        .await
        .expect("dead letters");
    dead.sort_by_key(|d| d.letter.original.message.target_kind.clone());
    let reasons: Vec<(&str, &str, u32)> = dead
        .iter()
        .map(|d| {
            let m = &d.letter.original.message;
            (
                m.target_kind.as_str(),
                d.letter.reason.as_str(),
                d.letter.attempts,
            )
        })
        .collect();
    assert_eq!(dead.len(), 2, "{reasons:#?}");
    let inflated = serde_json::to_vec(&BlobEvent::Inflated("x".repeat(2 * LIMIT)))
        .unwrap()
        .len();
    let blown = serde_json::to_vec(&BlobCommand::Store("x".repeat(2 * LIMIT)))
        .unwrap()
        .len();
    for ((kind, reason, attempts), (want_kind, payload_type, size)) in reasons.iter().zip([
        ("blob", "blob.event", inflated),
        ("blower", "blob.command", blown),
    ]) {
        assert_eq!(*kind, want_kind);
        assert_eq!(*attempts, 1, "{kind}: not retried");
        for words in [
            format!("`{payload_type}` is {size} bytes"),
            format!("limit of {LIMIT} bytes"),
            "max_payload_bytes".into(),
        ] {
            assert!(reason.contains(&words), "{kind}: {reason}");
        }
    }
    let b2 = sb.aggregate_state::<Blob>("b-2").await.expect("state");
    assert!(b2.is_none(), "the inflating command left no state: {b2:?}");
    assert!(sb
        .aggregate_state::<Blob>("blown")
        .await
        .expect("state")
        .is_none());
    // The one stored event is b-1's; b-3's `Blown` (small) was stored, its reaction was not.
    let events = storage.last_event_seq().await.expect("events");
    assert_eq!(events, 2, "b-1's Stored and b-3's Blown only");
}

common::on_every_backend!("payload_limit";
    payloads_over_the_limit_are_refused_and_emissions_over_it_dead_letter,
);

/// The default limit is 1 MiB, documented; the builder refuses one out of range, naming it.
#[tokio::test]
async fn the_default_limit_is_one_mib_and_a_bad_one_is_refused_at_build() {
    let sb = Shardbox::builder().memory().build().await.expect("build");
    assert_eq!(sb.config().max_payload_bytes, 1 << 20);
    assert_eq!(shardbox::DEFAULT_MAX_PAYLOAD_BYTES, 1 << 20);
    for bad in [0, 255, (256 << 20) + 1] {
        let err = Shardbox::builder()
            .memory()
            .max_payload_bytes(bad)
            .build()
            .await
            .map(|_| ())
            .expect_err("out of range");
        assert!(err.to_string().contains("`max_payload_bytes`"), "{err}");
    }
}
