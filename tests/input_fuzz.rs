//! Hostile input through every public entry point, as property tests on memory and SQLite
//! and fixed hostile cases on PostgreSQL: payloads (empty, large, not JSON, NUL bytes, not
//! UTF-8), payload and event type names (empty, too long, NUL), metadata (empty keys, NUL,
//! large values) and ids, through `send`, `send_with`, `send_many`, `post`, `post_many`,
//! `post_with`, raw `send_message`/`post_event`, catch-up requests, dead-letter requeues,
//! unblocks and the storage calls the CLI makes.
//!
//! Every call returns: `Ok`, or a typed error naming the field at fault
//! (`DeliveryError::InvalidInput`), an unknown kind, or an unroutable event; never a panic
//! and never a storage error (which would mean a backend refused what the call let through).
//! A payload its handler cannot deserialize follows the failure policy: it dead-letters
//! with a reason saying so.

mod common;

use common::{Tally, TallyCommand, TallyView};
use proptest::prelude::*;
use shardbox::core::{MessageKind, Metadata, NewEvent, NewMessage, SignalId, Storage};
use shardbox::prelude::*;
use shardbox::{DeliveryError, IdField, ManualClock, MAX_ID_BYTES};
use std::sync::Arc;
use std::time::Duration;

/// A hostile string: empty, short noise, NUL inside, at and over the id limit, multi-byte.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9]{1,12}",
        "[a-z]{0,4}\0[a-z]{0,4}",
        Just("é".repeat(MAX_ID_BYTES / 2)),
        Just("x".repeat(MAX_ID_BYTES + 1)),
        Just("y".repeat(64 << 10)),
        any::<String>(),
    ]
}

/// A payload: a valid command, nothing, noise (often not UTF-8), NULs, or a large blob.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(serde_json::to_vec(&TallyCommand::Add(1)).expect("json")),
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 1..256),
        Just(vec![0u8; 64]),
        Just(vec![b'{'; 1 << 20]),
    ]
}

fn metadata() -> impl Strategy<Value = Metadata> {
    proptest::collection::btree_map(hostile_text(), hostile_text(), 0..3)
}

/// An error a hostile call may return: a typed refusal naming what is wrong (or an overlap
/// with a running catch-up).
fn typed(e: &DeliveryError) -> bool {
    matches!(
        e,
        DeliveryError::InvalidInput(_)
            | DeliveryError::UnknownKind { .. }
            | DeliveryError::Unroutable { .. }
            // A catch-up of the same projection still runs (an earlier case's).
            | DeliveryError::Storage(shardbox::StorageError::CatchUpOverlap { .. })
    )
}

fn check<T: std::fmt::Debug>(call: &str, r: &Result<T, DeliveryError>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if typed(e) => {
            if let DeliveryError::InvalidInput(invalid) = e {
                let shown = e.to_string();
                if !shown.contains(invalid.field.name()) {
                    return Err(format!(
                        "{call}: the error does not name its field: {shown}"
                    ));
                }
            }
            Ok(())
        }
        Err(e) => Err(format!("{call}: not a typed refusal: {e:?}")),
    }
}

async fn node(storage: Arc<dyn Storage>, clock: Arc<ManualClock>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .clock(clock)
        .shards(4)
        .failure_policy(FailurePolicy::new(
            1,
            Backoff::Fixed(Duration::from_millis(1)),
            ExhaustedOutcome::DeadLetter,
        ))
        .aggregate::<Tally>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build")
}

fn t0() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_900_000_000, 0).expect("a valid time")
}

#[derive(Debug, Clone)]
struct Hostile {
    kind: String,
    target: String,
    signal: String,
    payload: Vec<u8>,
    payload_type: String,
    tenant: String,
    metadata: Metadata,
    source: String,
    catch_up_id: String,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    (
        prop_oneof![Just(Tally::KIND.to_owned()), hostile_text()],
        hostile_text(),
        hostile_text(),
        payload(),
        prop_oneof![Just("tally.command".to_owned()), hostile_text()],
        prop_oneof![Just(String::new()), hostile_text()],
        metadata(),
        hostile_text(),
        hostile_text(),
    )
        .prop_map(
            |(kind, target, signal, payload, payload_type, tenant, metadata, source, c)| Hostile {
                kind,
                target,
                signal,
                payload,
                payload_type,
                tenant,
                metadata,
                source,
                catch_up_id: c,
            },
        )
}

/// One hostile input through every entry point; then delivery, requeue, unblock and the
/// operator's reads. Returns what went wrong.
async fn through_every_entry_point(
    sb: &Shardbox,
    clock: &ManualClock,
    h: &Hostile,
    n: usize,
) -> Result<(), String> {
    let cmd = TallyCommand::Add(1);
    let signal = format!("{}{n}", h.signal);
    let mut options = SendOptions::default()
        .signal_id(signal.clone())
        .tenant(h.tenant.clone());
    for (k, v) in &h.metadata {
        options = options.meta(k.clone(), v.clone());
    }
    check("send", &sb.send::<Tally>(&h.target, &cmd).await)?;
    check(
        "send_with",
        &sb.send_with::<Tally>(&h.target, &cmd, options.clone())
            .await,
    )?;
    let many = [(h.target.as_str(), cmd.clone())];
    check("send_many", &sb.send_many::<Tally>(&many).await)?;
    check(
        "send_many (options)",
        &sb.inbox().send_many::<Tally>(&many, options.clone()).await,
    )?;
    let event = common::TallyEvent::Added(1);
    let source = EventSource {
        kind: h.source.clone(),
        id: h.target.clone(),
    };
    check("post", &sb.post(source.clone(), &event).await)?;
    check(
        "post_with",
        &sb.post_with(source.clone(), &event, options.clone()).await,
    )?;
    let events = [(source.clone(), event.clone())];
    check("post_many", &sb.post_many(&events).await)?;
    check(
        "post_many (options)",
        &sb.inbox().post_many(&events, options.clone()).await,
    )?;
    let now = clock_now(clock);
    let raw = NewMessage {
        signal_id: SignalId(format!("raw-{signal}")),
        kind: MessageKind::Command,
        target_kind: h.kind.clone(),
        target_id: h.target.clone(),
        tenant: h.tenant.clone(),
        payload: h.payload.clone(),
        payload_type: h.payload_type.clone(),
        payload_version: 1,
        metadata: h.metadata.clone(),
        received_at: now,
        deliver_after: None,
        expires_at: None,
    };
    check("send_message", &sb.inbox().send_message(raw).await)?;
    let raw_event = NewEvent {
        id: SignalId(format!("ev-{signal}")),
        event_type: h.payload_type.clone(),
        source,
        tenant: h.tenant.clone(),
        occurred_at: now,
        payload: h.payload.clone(),
        version: 1,
        metadata: h.metadata.clone(),
    };
    check(
        "post_event",
        &sb.inbox()
            .post_event(raw_event, SendOptions::default())
            .await,
    )?;
    check(
        "catch_up",
        &sb.catch_up::<TallyView>(CatchUp::ids([h.catch_up_id.clone()]))
            .await,
    )?;
    // Delivery: a payload that does not deserialize dead-letters, saying why.
    for _ in 0..3 {
        sb.deliver_all()
            .await
            .map_err(|e| format!("deliver_all: {e:?}"))?;
        clock.advance(chrono::Duration::milliseconds(50));
    }
    let dead = sb
        .dead_letters(DeadLetterFilter::all().target(h.kind.clone(), h.target.clone()))
        .await
        .map_err(|e| format!("dead_letters: {e:?}"))?;
    for d in &dead {
        let reason = &d.letter.reason;
        let clear = ["does not deserialize", "is not accepted here", "no handler"];
        if !clear.iter().any(|c| reason.contains(c)) {
            return Err(format!("dead letter without a clear reason: {reason}"));
        }
    }
    check(
        "requeue_dead_letters",
        &sb.requeue_dead_letters(DeadLetterFilter::all().tenant(h.tenant.clone()))
            .await,
    )?;
    let key = shardbox::core::storage::EntityKey::new(&h.kind, &h.tenant, &h.target);
    check("unblock", &sb.unblock(&key, Unblock::Requeue).await)?;
    // The CLI's reads.
    let storage = sb.storage();
    let filter = DeadLetterFilter::all()
        .kind(h.kind.clone())
        .tenant(h.tenant.clone())
        .limit(10);
    storage
        .list_dead_letters(&filter)
        .await
        .map_err(|e| format!("list_dead_letters: {e:?}"))?;
    storage
        .count_dead_letters(&filter)
        .await
        .map_err(|e| format!("count_dead_letters: {e:?}"))?;
    storage
        .depths(now)
        .await
        .map_err(|e| format!("depths: {e:?}"))?;
    storage
        .blocked_targets(usize::MAX)
        .await
        .map_err(|e| format!("blocked_targets: {e:?}"))?;
    Ok(())
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<chrono::Utc> {
    shardbox::Clock::now(clock)
}

fn run_property(backend: &'static str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = rt.block_on(async {
        match backend {
            "memory" => common::memory(),
            _ => Arc::new(
                shardbox::storage::SqliteStorage::open(dir.path().join("fuzz.db"))
                    .await
                    .expect("open SQLite"),
            ),
        }
    });
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = rt.block_on(node(storage, clock.clone()));
    let n = std::cell::Cell::new(0usize);
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(h in hostile())| {
        n.set(n.get() + 1);
        let outcome = rt.block_on(through_every_entry_point(&sb, &clock, &h, n.get()));
        prop_assert!(outcome.is_ok(), "{backend}: {}", outcome.unwrap_err());
    });
}

#[test]
fn hostile_input_on_memory() {
    run_property("memory");
}

#[test]
fn hostile_input_on_sqlite() {
    run_property("sqlite");
}

/// Fixed hostile cases, including the ones PostgreSQL's text columns refuse (a NUL in a type
/// name), on every backend.
async fn fixed_hostile_cases(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = node(storage, clock.clone()).await;
    let base = Hostile {
        kind: Tally::KIND.to_owned(),
        target: "t".into(),
        signal: "s".into(),
        payload: b"not json".to_vec(),
        payload_type: "tally.command".into(),
        tenant: String::new(),
        metadata: Metadata::new(),
        source: "src".into(),
        catch_up_id: "t".into(),
    };
    let cases = [
        Hostile {
            payload_type: "a\0b".into(),
            ..base.clone()
        },
        Hostile {
            payload_type: String::new(),
            ..base.clone()
        },
        Hostile {
            payload_type: "p".repeat(MAX_ID_BYTES + 1),
            ..base.clone()
        },
        Hostile {
            payload: vec![0xff, 0xfe, 0x00, 0x80],
            ..base.clone()
        },
        Hostile {
            metadata: [("k\0".to_owned(), "v\0".repeat(1000))].into(),
            ..base.clone()
        },
        Hostile {
            catch_up_id: String::new(),
            ..base.clone()
        },
        Hostile {
            catch_up_id: "c\0".into(),
            ..base.clone()
        },
        Hostile {
            target: "é".repeat(MAX_ID_BYTES / 2),
            ..base.clone()
        },
        base.clone(),
    ];
    for (n, h) in cases.iter().enumerate() {
        if let Err(e) = through_every_entry_point(&sb, &clock, h, n).await {
            panic!("case {n} ({h:?}): {e}");
        }
    }
    // A NUL in a type name is refused at the call, naming the field.
    let raw = NewMessage {
        signal_id: SignalId("nul-type".into()),
        kind: MessageKind::Command,
        target_kind: Tally::KIND.into(),
        target_id: "t".into(),
        tenant: String::new(),
        payload: b"{}".to_vec(),
        payload_type: "a\0b".into(),
        payload_version: 1,
        metadata: Metadata::new(),
        received_at: t0(),
        deliver_after: None,
        expires_at: None,
    };
    match sb.inbox().send_message(raw).await {
        Err(DeliveryError::InvalidInput(e)) => assert_eq!(e.field, IdField::PayloadType),
        other => panic!("a NUL in payload_type: {other:?}"),
    }
    // The non-JSON payload sent to `t` dead-lettered, saying why (again, after the last
    // case's requeue).
    sb.deliver_all().await.expect("deliver");
    let dead = sb
        .dead_letters(DeadLetterFilter::all().target(Tally::KIND, "t"))
        .await
        .expect("dead letters");
    assert!(
        dead.iter()
            .any(|d| d.letter.reason.contains("does not deserialize")),
        "{dead:?}"
    );
}

#[tokio::test]
async fn fixed_hostile_cases_on_memory() {
    fixed_hostile_cases(common::memory()).await;
}

#[tokio::test]
async fn fixed_hostile_cases_on_sqlite() {
    let (storage, _dir) = common::sqlite().await;
    fixed_hostile_cases(storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_hostile_cases_on_postgres() {
    let Some(url) = common::pg_url("input_fuzz::fixed_hostile_cases") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "input_fuzz");
    fixed_hostile_cases(Arc::new(schema.connect(4).await)).await;
}
