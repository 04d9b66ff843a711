//! The soak's producer: a steady mix offered at `--rate` messages per second, in ticks of
//! 100 ms, until told to stop, and the tally of what it sent to each target (the audit's
//! expectation).
//!
//! Of every 100 messages: 70 plain commands (one `send_many` per tick), 10 events posted to
//! the view (one `post_many`), 8 commands delayed by 1–5 s, 3 with a TTL they outlive, 2
//! with a TTL shorter than their delay (they expire unseen), 5 that fail once and succeed on
//! their retry, 2 refused for good (dead letters). Each applied command also fans its event
//! out to the view, so the Inbox carries about 1.8 rows per message sent.

use super::model::{Add, Fate, Tallied, Tally};
use shardbox::core::sync::lock;
use shardbox::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the producer sent, per target and in all.
#[derive(Debug, Default)]
pub struct Sent {
    /// Commands each tally target should apply.
    pub tally: Vec<u64>,
    /// Events each view id should fold (the tally's applied commands and the posts).
    pub view: Vec<u64>,
    /// Messages accepted (commands and posted events).
    pub messages: u64,
    /// Commands refused for good (each should become one dead letter).
    pub refused: u64,
    /// Commands that should expire unseen.
    pub expiring: u64,
    /// Sends that failed (their messages are not counted above; reported).
    pub errors: u64,
}

impl Sent {
    pub fn new(targets: usize) -> Sent {
        Sent {
            tally: vec![0; targets],
            view: vec![0; targets],
            ..Sent::default()
        }
    }
}

/// The id of tally target (and view) `t`.
pub fn target(t: usize) -> String {
    format!("s-{t}")
}

/// A small deterministic generator for the targets (xorshift64*).
struct Pick(u64);

impl Pick {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % below.max(1)
    }
}

/// A message of the mix that is sent on its own (with options), and its target.
struct Single {
    t: usize,
    fate: Fate,
    options: SendOptions,
}

/// Offers the mix through `sb` at `rate` msgs/s over `targets` targets until `stop` is set.
pub async fn produce(
    sb: Shardbox,
    rate: u64,
    targets: usize,
    sent: Arc<Mutex<Sent>>,
    stop: Arc<AtomicBool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pick = Pick(0x9e37_79b9_7f4a_7c15);
    let (mut i, mut owed) = (0u64, 0.0f64);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        owed += rate as f64 / 10.0;
        let (mut plain, mut posts, mut singles) = (Vec::new(), Vec::new(), Vec::new());
        while owed >= 1.0 {
            owed -= 1.0;
            let t = pick.next(targets);
            let (fate, options) = match i % 100 {
                0..70 => {
                    plain.push(t);
                    i += 1;
                    continue;
                }
                70..80 => {
                    posts.push(t);
                    i += 1;
                    continue;
                }
                80..88 => (
                    Fate::Apply,
                    SendOptions::default().delay(Duration::from_secs(1 + i % 5)),
                ),
                88..91 => (
                    Fate::Apply,
                    SendOptions::default().ttl(Duration::from_secs(600)),
                ),
                91..93 => (
                    Fate::Expire,
                    SendOptions::default()
                        .delay(Duration::from_secs(3))
                        .ttl(Duration::from_secs(1)),
                ),
                93..98 => (Fate::FailOnce, SendOptions::default()),
                _ => (Fate::Refuse, SendOptions::default()),
            };
            singles.push(Single { t, fate, options });
            i += 1;
        }
        send_tick(&sb, plain, posts, singles, &sent).await;
    }
}

/// Sends one tick's messages (the batches, and the singles concurrently) and counts what
/// was accepted.
async fn send_tick(
    sb: &Shardbox,
    plain: Vec<usize>,
    posts: Vec<usize>,
    singles: Vec<Single>,
    sent: &Mutex<Sent>,
) {
    let mut sends = tokio::task::JoinSet::new();
    for s in singles {
        let sb = sb.clone();
        sends.spawn(async move {
            let command = Add {
                fate: s.fate,
                timed: false,
            };
            let r = sb
                .send_with::<Tally>(&target(s.t), &command, s.options)
                .await;
            (s.t, s.fate, r.map(|_| ()).map_err(|e| e.to_string()))
        });
    }
    if !plain.is_empty() {
        let ids: Vec<String> = plain.iter().map(|&t| target(t)).collect();
        let commands: Vec<(&str, Add)> = ids
            .iter()
            .map(|id| {
                let add = Add {
                    fate: Fate::Apply,
                    timed: true,
                };
                (id.as_str(), add)
            })
            .collect();
        let r = sb.send_many::<Tally>(&commands).await;
        let mut s = lock(sent);
        match r {
            Ok(_) => {
                for &t in &plain {
                    s.tally[t] += 1;
                    s.view[t] += 1;
                }
                s.messages += plain.len() as u64;
            }
            Err(e) => failed(&mut s, &e.to_string()),
        }
    }
    if !posts.is_empty() {
        let events: Vec<(EventSource, Tallied)> = posts
            .iter()
            .map(|&t| (EventSource::external(target(t)), Tallied { late: false }))
            .collect();
        let r = sb.post_many::<Tallied>(&events).await;
        let mut s = lock(sent);
        match r {
            Ok(_) => {
                for &t in &posts {
                    s.view[t] += 1;
                }
                s.messages += posts.len() as u64;
            }
            Err(e) => failed(&mut s, &e.to_string()),
        }
    }
    while let Some(done) = sends.join_next().await {
        let mut s = lock(sent);
        match done {
            Ok((t, fate, Ok(()))) => {
                s.messages += 1;
                match fate {
                    Fate::Apply | Fate::FailOnce => {
                        s.tally[t] += 1;
                        s.view[t] += 1;
                    }
                    Fate::Refuse => s.refused += 1,
                    Fate::Expire => s.expiring += 1,
                }
            }
            Ok((_, _, Err(e))) => failed(&mut s, &e),
            Err(e) => failed(&mut s, &e.to_string()),
        }
    }
}

/// Counts a failed send; the first few are shown.
fn failed(s: &mut Sent, error: &str) {
    s.errors += 1;
    if s.errors <= 5 {
        eprintln!("soak: a send failed: {error}");
    }
}
