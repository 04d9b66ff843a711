//! A message's way from send to handler: with `SHARDBOX_BENCH_TIMELINE=<file>`, the
//! `latency` workload records Shardbox's latency trace points (`TRACE` events of target
//! `shardbox::latency`, see `shardbox-core`'s telemetry module) and the handler's start, and
//! writes them to the file as CSV lines `micros,point,node,shard,key` for its measured span.
//! `scripts/latency-breakdown.py <file>` turns them into a breakdown per segment.
//!
//! Both nodes of the workload run in this process, so one clock times the whole way.

use shardbox::core::sync::lock;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// One trace point: µs since the epoch, point, node, shard, key.
type Point = (i64, String, String, u64, i64);

static POINTS: Mutex<Vec<Point>> = Mutex::new(Vec::new());
/// Whether points are kept (the measured span only).
static RECORDING: AtomicBool = AtomicBool::new(false);

/// The file to write, if asked for.
fn path() -> Option<std::ffi::OsString> {
    std::env::var_os("SHARDBOX_BENCH_TIMELINE")
}

/// Installs the recorder when a timeline is asked for (before the runtime starts).
pub fn install() {
    if path().is_none() {
        return;
    }
    let filter = tracing_subscriber::EnvFilter::new("shardbox::latency=trace");
    let subscriber = tracing_subscriber::registry().with(Recorder.with_filter(filter));
    if tracing::subscriber::set_global_default(subscriber).is_err() {
        eprintln!("timeline: a tracing subscriber is installed already; nothing recorded");
    }
}

/// Starts keeping points (what came before is dropped).
pub fn start() {
    lock(&POINTS).clear();
    RECORDING.store(path().is_some(), Ordering::SeqCst);
}

/// Records a point of the benchmark's own (the handler's start).
pub fn mark(point: &str, key: i64) {
    if RECORDING.load(Ordering::Relaxed) {
        let now = chrono::Utc::now().timestamp_micros();
        lock(&POINTS).push((now, point.to_owned(), String::new(), 0, key));
    }
}

/// Stops keeping points and writes them to the file.
pub fn finish() -> Result<(), String> {
    RECORDING.store(false, Ordering::SeqCst);
    let Some(path) = path() else {
        return Ok(());
    };
    let points = std::mem::take(&mut *lock(&POINTS));
    let mut out = String::new();
    for (t, point, node, shard, key) in &points {
        let _ = writeln!(out, "{t},{point},{node},{shard},{key}");
    }
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(out.as_bytes()))
        .map_err(|e| format!("timeline: cannot write {path:?}: {e}"))?;
    eprintln!("timeline: {} points written to {path:?}", points.len());
    Ok(())
}

struct Recorder;

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !RECORDING.load(Ordering::Relaxed) {
            return;
        }
        let now = chrono::Utc::now().timestamp_micros();
        let mut fields = Fields::default();
        event.record(&mut fields);
        lock(&POINTS).push((now, fields.point, fields.node, fields.shard, fields.key));
    }
}

#[derive(Default)]
struct Fields {
    point: String,
    node: String,
    shard: u64,
    key: i64,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "point" => self.point = value.to_owned(),
            "node" => self.node = value.to_owned(),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "shard" => self.shard = value,
            "key" => self.key = value as i64,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "shard" => self.shard = value as u64,
            "key" => self.key = value,
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `node = %id` arrives here (Display through Debug).
        if field.name() == "node" {
            self.node = format!("{value:?}");
        }
    }
}
