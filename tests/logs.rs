//! What operators read in the logs: every message settled otherwise than by delivery — a dead
//! letter, a block, a drop — is logged exactly once, with its target and reason, at the level
//! its urgency calls for (WARN for a dead letter and a block, INFO for a drop). On SQLite.
//!
//! The test installs a global subscriber writing into a buffer, so this file holds one test.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::{Backoff, ExhaustedOutcome, FailurePolicy};
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Everything logged, as text.
static LOGGED: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGGED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged_lines() -> Vec<String> {
    let text = LOGGED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fail(String);
impl Message for Fail {
    const TYPE: &'static str = "logs-test.fail";
}
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Never;
impl Message for Never {
    const TYPE: &'static str = "logs-test.never";
}

macro_rules! failing_kind {
    ($name:ident, $kind:literal) => {
        #[derive(Debug, Default, Serialize, Deserialize)]
        struct $name;
        impl Aggregate for $name {
            const KIND: &'static str = $kind;
            type Command = Fail;
            type Event = Never;
            async fn handle(&self, c: &Fail, _: &Context<'_>) -> Result<Vec<Never>, HandlerError> {
                Err(HandlerError::new(c.0.clone()))
            }
            fn apply(&mut self, _: &Never) {}
        }
    };
}
failing_kind!(Letters, "letters");
failing_kind!(Blocks, "blocks");
failing_kind!(Drops, "drops");

fn after(attempts: u32, outcome: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(attempts, Backoff::Fixed(Duration::from_millis(1)), outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_blocks_and_drops_are_logged_once_with_target_and_reason() {
    tracing_subscriber::fmt()
        .with_writer(|| Capture)
        .with_ansi(false)
        .with_env_filter("info")
        .init();
    let (storage, _dir) = common::sqlite().await;
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .kind_policy(Letters::KIND, after(2, ExhaustedOutcome::DeadLetter))
        .kind_policy(Blocks::KIND, after(1, ExhaustedOutcome::Block))
        .kind_policy(Drops::KIND, after(1, ExhaustedOutcome::Drop))
        .aggregate::<Letters>()
        .aggregate::<Blocks>()
        .aggregate::<Drops>()
        .build()
        .await
        .expect("build");
    sb.send::<Letters>("letter-1", &Fail("ink ran out".into()))
        .await
        .expect("send");
    sb.send::<Blocks>("block-1", &Fail("door jammed".into()))
        .await
        .expect("send");
    sb.send::<Drops>("drop-1", &Fail("slipped".into()))
        .await
        .expect("send");
    // The dead letter takes two attempts, a millisecond apart.
    for _ in 0..20 {
        sb.deliver_all().await.expect("deliver");
        if sb
            .count_dead_letters(shardbox::DeadLetterFilter::all())
            .await
            .expect("count")
            == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // More stages over the settled targets log nothing more.
    sb.deliver_all().await.expect("deliver");

    let lines = logged_lines();
    let about = |target: &str| -> Vec<&String> {
        lines
            .iter()
            // Each failed attempt has a line of its own ("handler failed"); the settled
            // message's fate has exactly one.
            .filter(|l| l.contains(&format!("target={target}")) && !l.contains("handler failed"))
            .collect()
    };
    let letter = about("letter-1");
    assert_eq!(letter.len(), 1, "one line for the dead letter: {lines:#?}");
    assert!(
        letter[0].contains("WARN")
            && letter[0].contains("dead-lettered")
            && letter[0].contains("kind=letters")
            && letter[0].contains("reason=ink ran out")
            && letter[0].contains("attempts=2"),
        "{}",
        letter[0]
    );
    let block = about("block-1");
    assert_eq!(block.len(), 1, "one line for the block: {lines:#?}");
    assert!(
        block[0].contains("WARN")
            && block[0].contains("blocked its target")
            && block[0].contains("reason=door jammed"),
        "{}",
        block[0]
    );
    let dropped = about("drop-1");
    assert_eq!(dropped.len(), 1, "one line for the drop: {lines:#?}");
    assert!(
        dropped[0].contains("INFO")
            && dropped[0].contains("dropped")
            && dropped[0].contains("reason=slipped"),
        "{}",
        dropped[0]
    );
}
