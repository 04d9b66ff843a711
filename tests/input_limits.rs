//! Id limits through the facade, on every backend: an empty, too long or NUL-holding id given
//! to a send or a post is a typed error at that call naming the field, and nothing is written;
//! ids at the limit are written and delivered (PostgreSQL indexes them).

mod common;

use common::{Tally, TallyCommand, TallyEvent, TallyView};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{DeliveryError, IdField, IdProblem, InvalidId, MAX_ID_BYTES};
use std::sync::Arc;

/// `len` bytes of hexadecimal noise from `seed`: an id PostgreSQL cannot compress below its
/// length in an index row.
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdef"[(x % 16) as usize])
        })
        .collect()
}

fn assert_invalid<T: std::fmt::Debug>(
    outcome: Result<T, DeliveryError>,
    field: IdField,
    is: fn(&IdProblem) -> bool,
) {
    match outcome {
        Err(DeliveryError::InvalidInput(InvalidId { field: f, problem })) if f == field => {
            assert!(is(&problem), "{field}: {problem:?}")
        }
        other => panic!("{field}: expected an invalid-input error, got {other:?}"),
    }
}

fn empty(p: &IdProblem) -> bool {
    matches!(p, IdProblem::Empty)
}

fn too_long(p: &IdProblem) -> bool {
    matches!(
        p,
        IdProblem::TooLong {
            max: MAX_ID_BYTES,
            ..
        }
    )
}

fn nul(p: &IdProblem) -> bool {
    matches!(p, IdProblem::Nul { .. })
}

async fn ids_outside_their_limits_are_refused_at_the_call(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .aggregate::<Tally>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build");
    let cmd = TallyCommand::Add(1);
    let over = noise(1, MAX_ID_BYTES + 1);
    let huge = "x".repeat(10 << 20);

    assert_invalid(sb.send::<Tally>("", &cmd).await, IdField::TargetId, empty);
    assert_invalid(
        sb.send::<Tally>(&over, &cmd).await,
        IdField::TargetId,
        too_long,
    );
    assert_invalid(sb.send::<Tally>("a\0b", &cmd).await, IdField::TargetId, nul);
    // The 10 MB id PostgreSQL's index refused at commit ("index row requires 10485824 bytes").
    let err = sb.send::<Tally>(&huge, &cmd).await;
    assert!(
        matches!(&err, Err(e) if e.to_string().contains("`target_id`") && e.to_string().contains("512")),
        "{err:?}"
    );
    assert_invalid(err, IdField::TargetId, too_long);

    let with = |o: SendOptions| sb.send_with::<Tally>("t-1", &cmd, o);
    let options = SendOptions::default();
    assert_invalid(
        with(options.clone().signal_id("")).await,
        IdField::SignalId,
        empty,
    );
    assert_invalid(
        with(options.clone().signal_id(over.clone())).await,
        IdField::SignalId,
        too_long,
    );
    assert_invalid(
        with(options.clone().signal_id("s\0")).await,
        IdField::SignalId,
        nul,
    );
    assert_invalid(
        with(options.clone().tenant(over.clone())).await,
        IdField::Tenant,
        too_long,
    );
    assert_invalid(
        with(options.clone().tenant("t\0")).await,
        IdField::Tenant,
        nul,
    );
    assert_invalid(
        sb.send_many::<Tally>(&[("t-1", cmd.clone()), ("", cmd.clone())])
            .await,
        IdField::TargetId,
        empty,
    );

    let event = TallyEvent::Added(1);
    assert_invalid(
        sb.post(EventSource::external("src\0"), &event).await,
        IdField::SourceId,
        nul,
    );
    assert_invalid(
        sb.post_with(
            EventSource::external("src"),
            &event,
            options.clone().signal_id(""),
        )
        .await,
        IdField::SignalId,
        empty,
    );
    assert_invalid(
        sb.post_many(&[(EventSource::external(over.clone()), event.clone())])
            .await,
        IdField::SourceId,
        too_long,
    );
    // The projection routes to the producer's id: an empty one is no target.
    let routed = sb.post(EventSource::external(""), &event).await;
    assert!(
        matches!(&routed, Err(DeliveryError::Unroutable { reason, .. }) if reason.contains("`target_id` is empty")),
        "{routed:?}"
    );

    let counts = storage.counts(None).await.expect("counts");
    assert_eq!(
        counts.pending() + counts.delivered,
        0,
        "nothing written: {counts:?}"
    );
    assert_eq!(storage.last_event_seq().await.expect("events"), 0);

    // At the limit, every id field of the unique key at once: written and delivered.
    let (tenant, target, signal) = (
        noise(2, MAX_ID_BYTES),
        noise(3, MAX_ID_BYTES),
        noise(4, MAX_ID_BYTES),
    );
    sb.send_with::<Tally>(
        &target,
        &cmd,
        options.clone().tenant(tenant.clone()).signal_id(signal),
    )
    .await
    .expect("ids at the limit are accepted");
    // The command, then its event's copy for the projection: the event's id is derived from a
    // signal id at the limit, so it is digested to stay within it.
    assert_eq!(sb.deliver_all().await.expect("deliver").totals.delivered, 2);
    let state: Option<Tally> = sb.state_of("tally", &tenant, &target).await.expect("state");
    assert_eq!(state.map(|s| s.sum), Some(1));
    let view: Option<TallyView> = sb
        .state_of("tally-view", &tenant, &target)
        .await
        .expect("view");
    assert_eq!(view.map(|v| v.sum), Some(1));
}

common::on_every_backend!("input_limits";ids_outside_their_limits_are_refused_at_the_call);

/// A reactor whose reaction holds a command to an invalid target sends none of it: the
/// reaction fails (its kind's failure policy dead-letters it, naming the field), and no row
/// for the empty target is written.
#[tokio::test]
async fn a_reactor_command_to_an_invalid_target_fails_its_reaction() {
    /// Every `Added(x)` of tally `a` makes a good command and one to an empty target.
    struct Careless;
    impl Reactor for Careless {
        const KIND: &'static str = "careless";
        type Event = TallyEvent;
        async fn react(
            &self,
            e: &TallyEvent,
            cx: &Context<'_>,
        ) -> Result<Vec<Outgoing>, HandlerError> {
            let TallyEvent::Added(x) = e else {
                return Ok(vec![]);
            };
            if cx.target_id != "a" {
                return Ok(vec![]);
            }
            Ok(vec![
                Outgoing::command::<Tally>("good", &TallyCommand::Add(*x))?,
                Outgoing::command::<Tally>("", &TallyCommand::Add(*x))?,
            ])
        }
    }
    let storage = common::memory();
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .aggregate::<Tally>()
        .reactor(Careless)
        .failure_policy(shardbox::FailurePolicy::new(
            1,
            shardbox::Backoff::Fixed(std::time::Duration::from_secs(1)),
            shardbox::ExhaustedOutcome::DeadLetter,
        ))
        .build()
        .await
        .expect("build");
    sb.send::<Tally>("a", &TallyCommand::Add(3)).await.unwrap();
    for _ in 0..3 {
        sb.deliver_all().await.unwrap();
    }
    let dead = storage
        .list_dead_letters(&Default::default())
        .await
        .expect("dead letters");
    assert_eq!(dead.len(), 1, "{dead:?}");
    let reason = &dead[0].letter.reason;
    assert!(
        reason.contains("reacted with an invalid command")
            && reason.contains("`target_id` is empty"),
        "{reason}"
    );
    assert_eq!(dead[0].letter.original.message.target_kind, "careless");
    assert!(
        sb.aggregate_state::<Tally>("good").await.unwrap().is_none(),
        "no command of the failed reaction was sent"
    );
    assert!(sb.aggregate_state::<Tally>("").await.unwrap().is_none());
}
