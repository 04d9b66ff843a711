//! The command line as clap sees it: the global options and one subcommand per operator
//! task. Parsing only; what each command does lives in its own module.

use crate::when::Since;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;

/// Operate a Shardbox database: see the shards and their depth, handle dead letters and
/// blocked targets, watch catch-ups, migrate the schema.
///
/// Exit codes: 0 ok; 1 a check failed, nothing matched what was asked for, a catch-up
/// overlaps a running one or has already ended, or a re-sharding was refused; 2 usage error;
/// 3 the database is unreachable or refused the operation.
#[derive(Debug, Parser)]
#[command(name = "shardbox", version)]
pub struct Cli {
    /// The database: a PostgreSQL URL (postgres://… or postgresql://…) or the path of a
    /// SQLite file; for a storage over several PostgreSQL databases, their URLs separated
    /// by spaces, the home database first, as the application lists them.
    #[arg(long, env = "SHARDBOX_DB", global = true, hide_env_values = true)]
    pub db: Option<String>,

    /// PostgreSQL schema holding the tables (the search path's first schema by default).
    #[arg(long, env = "SHARDBOX_PG_SCHEMA", global = true)]
    pub schema: Option<String>,

    /// Print JSON instead of tables (read commands).
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Nodes, shards with their lease and depth, lag, dead letters, blocked targets and
    /// running catch-ups, in one screen: a summary line, what needs attention, and the busy
    /// shards (idle ones are counted, not listed, unless --all-shards).
    Status {
        /// List every shard, idle ones too (the JSON output always has every shard).
        #[arg(long)]
        all_shards: bool,
    },
    /// Messages that exhausted their retries.
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(DeadLetterCommand),
    /// Targets stopped by a blocked message.
    #[command(subcommand)]
    Blocked(BlockedCommand),
    /// Entity kinds while the nodes run: list them, pause and resume one (its messages wait
    /// in the Inbox, in order, untouched), change its failure policy, handler timeout and
    /// limits. Stored: every node follows within its poll interval, and across restarts.
    #[command(subcommand)]
    Kinds(KindsCommand),
    /// Catch-up jobs: start, list, watch, cancel. The replay itself runs on the
    /// application's nodes (a node that has the projection).
    #[command(subcommand, name = "catch-up")]
    CatchUp(CatchUpCommand),
    /// Read models' versions (blue/green rebuilds): the projection kind serving each, the one
    /// being built beside it and its catch-up job (`catch-up progress ID --follow` shows its
    /// progress), the one served before the last switch.
    #[command(name = "read-models")]
    ReadModels,
    /// Changes the Inbox's shard count while the nodes run and traffic flows: the nodes hand
    /// their shards over and pause, every row moves to its target's shard among N in one
    /// transaction (sends wait for it), then the nodes serve the new layout. Start new nodes
    /// with the new count afterwards. Uses the stable hash strategy (an application with a
    /// custom ShardStrategy re-shards through `Shardbox::reshard`). Exit 1 if refused
    /// (another re-sharding runs, or the nodes did not hand over in time): nothing changed.
    Reshard {
        /// The new shard count (1..=65536). Checked before anything is read or announced.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(shardbox_core::MAX_SHARDS)))]
        shards: u32,
        /// How long to wait for the nodes to hand every shard over, in seconds.
        #[arg(long, default_value_t = 120)]
        timeout_secs: u64,
        #[command(flatten)]
        guard: Guard,
    },
    /// Brings the schema to this binary's version, or checks it with --check.
    Migrate {
        /// Only say whether the schema is current (exit 1 if not); change nothing.
        #[arg(long)]
        check: bool,
    },
    /// Prints the completion script of SHELL for this command line (needs no database):
    /// e.g. `shardbox completions bash > /etc/bash_completion.d/shardbox`, or
    /// `shardbox completions zsh > "${fpath[1]}/_shardbox"`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Serves the admin HTTP surface over the database until interrupted: the web dashboard
    /// at /, /health/live, /health/ready, /metrics (Prometheus text) and the JSON API at
    /// /api/. Prints "listening on http://ADDR/" once it accepts connections.
    Serve {
        /// Where to listen. Loopback by default: another address shows the database's
        /// contents to whoever reaches it (put it behind an authenticating proxy). Port 0
        /// picks a free port.
        #[arg(long, default_value = "127.0.0.1:9187")]
        listen: SocketAddr,
        /// Serve the operator actions (requeue, purge, unblock); without this flag they are
        /// refused with 403 and the dashboard is read-only.
        #[arg(long)]
        allow_actions: bool,
        /// Also answer requests addressed to this name or address (their Host header; the
        /// port is ignored); repeat for several. The loopback names and the address listened
        /// on are answered anyway; every other name gets 403, so that a web page cannot reach
        /// the server through a name of its own (DNS rebinding). "*" answers every name: only
        /// behind a proxy that checks the name itself.
        #[arg(long = "allowed-host", value_name = "NAME")]
        allowed_hosts: Vec<String>,
    },
}

/// `shardbox dead-letters …`
#[derive(Debug, Subcommand)]
pub enum DeadLetterCommand {
    /// The dead letters matching the filter, oldest first.
    List {
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One dead letter whole: origin, reason, payload, metadata.
    Show {
        /// Its id (from `list`).
        id: i64,
    },
    /// Puts dead letters back into the Inbox (a new row each, same signal, fresh attempts,
    /// due at once). Running nodes find them at their next poll.
    Requeue {
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// At most this many (all matching by default).
        #[arg(long)]
        limit: Option<usize>,
        /// Requeue into the shard the stable hash gives for this shard count, instead of the
        /// shard the message died in (after a change of shard count). An application with
        /// a custom ShardStrategy requeues through `Shardbox::requeue_dead_letters`.
        #[arg(long)]
        shards: Option<u32>,
        #[command(flatten)]
        guard: Guard,
    },
    /// Deletes dead letters for good.
    Purge {
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// At most this many (all matching by default).
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        guard: Guard,
    },
}

/// The guard of a command that changes many rows at once (requeue, purge, re-shard,
/// catch-up start): see first what it touches, then confirm.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct Guard {
    /// Only say what it would touch (how many, which kinds, which shards); change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do it without asking. Without it the command shows what it touches and asks on a
    /// terminal, and refuses (exit 2) when there is none to ask (a script must say --yes).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// The filters of `dead-letters` (those of the library's `DeadLetterFilter`).
#[derive(Debug, Args, Clone, Default)]
pub struct DeadLetterFilterArgs {
    /// Only these ids.
    #[arg(long = "id", value_name = "ID")]
    pub ids: Vec<i64>,
    /// Only of this target kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only of this target id (with --kind).
    #[arg(long, requires = "kind")]
    pub target: Option<String>,
    /// Only of this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only dead-lettered at or after this time (RFC 3339, or an age such as 30m, 2h, 7d,
    /// 1h30m, 2w; at most 36500d).
    #[arg(long)]
    pub since: Option<Since>,
    /// Only dead-lettered before this time (same forms as --since).
    #[arg(long)]
    pub until: Option<Since>,
    /// Only ids greater than this one (paging).
    #[arg(long)]
    pub after: Option<i64>,
    /// Required to requeue or purge every dead letter when no filter is given.
    #[arg(long)]
    pub all: bool,
}

/// `shardbox blocked …`
#[derive(Debug, Subcommand)]
pub enum BlockedCommand {
    /// The blocked targets, oldest block first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Lets a blocked target go on: its blocked message is requeued (default), dropped or
    /// dead-lettered, and the messages parked behind it become due.
    Unblock {
        /// The target's entity kind.
        kind: String,
        /// The target's id.
        id: String,
        /// The target's tenant.
        #[arg(long, default_value = "")]
        tenant: String,
        /// What to do with the blocked message.
        #[arg(long, value_enum, default_value_t = UnblockAction::Requeue)]
        action: UnblockAction,
    },
}

/// What `blocked unblock` does with the blocked message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnblockAction {
    /// Due again now with a fresh attempt count, before the target's later messages.
    Requeue,
    /// Delete it.
    Drop,
    /// Move it to the dead letters.
    DeadLetter,
}

/// `shardbox kinds …`
#[derive(Debug, Subcommand)]
pub enum KindsCommand {
    /// Every kind the live nodes register or the database holds controls for: its role, the
    /// nodes that register it, whether it is paused, its run-time settings.
    List,
    /// Pauses a kind on every node: its messages stay in the Inbox, in order, with no
    /// attempt spent, until `kinds resume`; other kinds go on. Nodes stop delivering it
    /// within their poll interval (a call already running finishes).
    Pause {
        /// The entity kind.
        kind: String,
        /// Pause a kind no live node registers (its nodes are down).
        #[arg(long)]
        force: bool,
    },
    /// Resumes a paused kind: its waiting messages are due at once, in order per target.
    Resume {
        /// The entity kind.
        kind: String,
        /// Resume a kind no live node registers.
        #[arg(long)]
        force: bool,
    },
    /// Changes a kind's run-time settings. Options not given keep their stored value
    /// (--clear first clears them all: the nodes' build-time configuration applies again).
    /// A failure policy is given whole: --max-attempts, --backoff and --on-exhausted.
    Set {
        /// The entity kind.
        kind: String,
        /// Attempts in all (failure policy).
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Back-off between attempts: fixed:<ms> or exponential:<base ms>:<cap ms>.
        #[arg(long)]
        backoff: Option<String>,
        /// What happens after the last attempt: dead_letter, drop or block.
        #[arg(long)]
        on_exhausted: Option<String>,
        /// The handler timeout, in milliseconds.
        #[arg(long)]
        handler_timeout_ms: Option<u64>,
        /// At most this many calls of the kind at once on a node.
        #[arg(long)]
        max_concurrent: Option<u32>,
        /// At most this many calls of the kind per second over the cluster.
        #[arg(long)]
        rate: Option<f64>,
        /// Clear the stored settings first.
        #[arg(long)]
        clear: bool,
        /// Change a kind no live node registers.
        #[arg(long)]
        force: bool,
    },
}

/// `shardbox catch-up …`
#[derive(Debug, Subcommand)]
pub enum CatchUpCommand {
    /// Starts rebuilding a projection from the event store (the library's own start: an
    /// overlapping running job refuses it; the targets' states are deleted at once and
    /// rebuilt by the replay). The application's nodes replay it; the estimate of events to
    /// replay is counted by its first step. Refused, unless --force, when no live node
    /// registers the kind as a projection (misspelled, another role's kind, or its nodes are
    /// down: the read model would stay empty until one runs). Ids are placed by the recorded
    /// strategy: an application with a custom ShardStrategy starts a catch-up of chosen ids
    /// through `Shardbox::catch_up`.
    Start {
        /// The projection kind (its `Projection::KIND`), checked against the kinds the live
        /// nodes register.
        projection: String,
        /// Only this instance id (repeat for several); every instance if none.
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
        /// The tenant of the instances.
        #[arg(long, default_value = "")]
        tenant: String,
        /// Replay only events that occurred at or after this time (RFC 3339, or an age such
        /// as 30m, 2h, 7d); all history by default.
        #[arg(long)]
        since: Option<Since>,
        /// Start it although no live node registers the kind as a projection.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        guard: Guard,
    },
    /// The running catch-up jobs.
    List,
    /// One job's progress: replayed of total, rate, ETA.
    Progress {
        /// The job id (from `list`).
        id: i64,
        /// Follow it until it completes or is cancelled: a progress bar on a terminal, a
        /// line per change when the output is a pipe or a file, a JSON line per read with
        /// --json.
        #[arg(long)]
        follow: bool,
    },
    /// Cancels a running job: it stops replaying at its next step on a node, its parked live
    /// messages are delivered in order, and it ends `cancelled`. Its targets stay rebuilt
    /// only as far as the replay got (start a new catch-up to finish them).
    Cancel {
        /// The job id (from `list`).
        id: i64,
        /// Wait until the job has ended (cancelled, or completed if its last step came
        /// first), at most this many seconds; exit 1 if it has not by then.
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
    },
}
