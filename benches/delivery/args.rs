//! Command-line flags of the benchmark.

/// How to run the benchmark.
pub const USAGE: &str =
    "usage: cargo bench --bench delivery -- [--backend memory|sqlite|postgres] \
[--workload live|latency|scale|catch-up|cluster|jobs|reshard|soak|read-model|relay|databases|databases-catch-up] [--n N] [--targets T] [--shards S] \
[--dbs N --cross-db-fraction F (databases: N of SHARDBOX_PG_DATABASES' URLs, default 3; the fraction of messages copied to another database, default 0)] [--page-size P] [--nodes K] [--rate R] [--secs D] [--warmup W (latency: seconds at the rate \
before measuring, default 1)] [--rounds R (cluster: 1-node and K-node runs, alternating, \
default 2)] [--batch B (default: page size)] \
[--cache-capacity C (default: the framework's)] [--workers W (live, latency, scale, jobs: \
workers per node, default 4)] [--handler-concurrency C (jobs: the node's total, each worker \
may use all of it, default 64)] [--work-ms W (jobs: each handler's awaited work, default 1)] \
[--paced (jobs: producers offer --rate msgs/s instead of sending as fast as they can)] \
[--kind-limit K (jobs: at most K calls of the job kind at once, a kind_limits concurrency limit)] \
[--minutes M (soak: length of the run, default 30)] [--sample-secs S (soak: default 60)] \
[--vacuum-secs V (soak, PostgreSQL: VACUUM (ANALYZE) of the schema every V s; default 60 when \
the server's autovacuum is off, else 0 = none)] [--hold-xmin-minutes N --hold-xmin-after M \
(soak, PostgreSQL: a snapshot held open elsewhere for N minutes from minute M)]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Live,
    Latency,
    Scale,
    CatchUp,
    Cluster,
    Jobs,
    Reshard,
    Soak,
    ReadModel,
    Relay,
    Databases,
    DatabasesCatchUp,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Live => "live",
            Workload::Latency => "latency",
            Workload::Scale => "scale",
            Workload::CatchUp => "catch-up",
            Workload::Cluster => "cluster",
            Workload::Reshard => "reshard",
            Workload::Jobs => "jobs",
            Workload::Soak => "soak",
            Workload::ReadModel => "read-model",
            Workload::Relay => "relay",
            Workload::Databases => "databases",
            Workload::DatabasesCatchUp => "databases-catch-up",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Args {
    pub backend: Backend,
    pub workload: Workload,
    pub n: usize,
    pub targets: usize,
    pub shards: u32,
    pub page_size: usize,
    pub nodes: usize,
    pub rate: u64,
    pub secs: u64,
    /// `latency`: seconds of sends at the offered rate before the measured ones (node start:
    /// connections, prepared statements, shards spread over the nodes), reported apart.
    pub warmup: u64,
    /// `cluster`: rounds of one 1-node run and one `--nodes` run, alternating, so that the
    /// machine's drift during a series weighs on both sides alike.
    pub rounds: usize,
    /// Commands per send (`send_many`); 1 sends one by one.
    pub batch: usize,
    /// Entries of the deduplication cache (`None`: the framework's default).
    pub cache_capacity: Option<u64>,
    /// Workers per node (`live`, `latency`, `scale`, `jobs`).
    pub workers: usize,
    /// `jobs`: handler calls in flight on the node (`max_in_flight_handlers`; each worker may
    /// use all of them).
    pub handler_concurrency: usize,
    /// `jobs`: the producers offer `rate` msgs/s (in batches of `batch`) instead of sending
    /// as fast as they can, to measure the claim latency below saturation.
    pub paced: bool,
    /// `jobs`: milliseconds each handler awaits.
    pub work_ms: f64,
    /// `jobs`: a concurrency limit on the job kind (`kind_limits`), if any.
    pub kind_limit: Option<u32>,
    /// Hidden: run as one node process of the `cluster` workload, with this node id (see
    /// the `cluster` module), instead of running a workload.
    pub node_process: Option<String>,
    /// Hidden: the PostgreSQL schema a node process serves (with `--node-process`).
    pub schema: Option<String>,
    /// `soak`: length of the run, minutes.
    pub minutes: f64,
    /// `soak`: seconds between samples.
    pub sample_secs: u64,
    /// `soak`, PostgreSQL: seconds between the workload's own `VACUUM (ANALYZE)` of the schema
    /// (`None`: every 60 s if the server's autovacuum is off, else never; 0: never).
    pub vacuum_secs: Option<u64>,
    /// `soak`, PostgreSQL: minutes a snapshot is held open on a connection of its own
    /// (0: none), and the minute of the run it is taken at.
    pub hold_xmin_minutes: f64,
    pub hold_xmin_after: f64,
    /// `databases`: how many of `SHARDBOX_PG_DATABASES`' databases the storage spans.
    pub dbs: usize,
    /// `databases`: the fraction of deposits whose event is copied to another database.
    pub cross_db_fraction: f64,
}

fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let v = value.ok_or_else(|| format!("{flag} needs a value"))?;
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: `{v}` is not a valid number"))
}

impl Args {
    pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args::defaults();
        let mut n = None;
        let mut rate = None;
        while let Some(flag) = it.next() {
            match flag.as_str() {
                "--bench" => {} // cargo bench passes it to harness = false targets
                "--backend" => a.backend = Backend::parse(it.next().as_deref())?,
                "--workload" => a.workload = Workload::parse(it.next().as_deref())?,
                "--n" => n = Some(number("--n", it.next())?),
                "--targets" => a.targets = number("--targets", it.next())?,
                "--shards" => a.shards = number("--shards", it.next())?,
                "--page-size" => a.page_size = number("--page-size", it.next())?,
                "--workers" => a.workers = number("--workers", it.next())?,
                "--nodes" => a.nodes = number("--nodes", it.next())?,
                "--rate" => rate = Some(number("--rate", it.next())?),
                "--secs" => a.secs = number("--secs", it.next())?,
                "--warmup" => a.warmup = number("--warmup", it.next())?,
                "--rounds" => a.rounds = number("--rounds", it.next())?,
                "--handler-concurrency" => {
                    a.handler_concurrency = number("--handler-concurrency", it.next())?
                }
                "--work-ms" => a.work_ms = number("--work-ms", it.next())?,
                "--batch" => a.batch = number("--batch", it.next())?,
                "--paced" => a.paced = true,
                "--kind-limit" => a.kind_limit = Some(number("--kind-limit", it.next())?),
                "--cache-capacity" => {
                    a.cache_capacity = Some(number("--cache-capacity", it.next())?)
                }
                "--node-process" => {
                    a.node_process = Some(it.next().ok_or("--node-process needs a node id")?)
                }
                "--schema" => a.schema = Some(it.next().ok_or("--schema needs a schema name")?),
                "--minutes" => a.minutes = number("--minutes", it.next())?,
                "--sample-secs" => a.sample_secs = number("--sample-secs", it.next())?,
                "--vacuum-secs" => a.vacuum_secs = Some(number("--vacuum-secs", it.next())?),
                "--hold-xmin-minutes" => {
                    a.hold_xmin_minutes = number("--hold-xmin-minutes", it.next())?
                }
                "--dbs" => a.dbs = number("--dbs", it.next())?,
                "--cross-db-fraction" => {
                    a.cross_db_fraction = number("--cross-db-fraction", it.next())?
                }
                "--hold-xmin-after" => a.hold_xmin_after = number("--hold-xmin-after", it.next())?,
                other => return Err(format!("unknown flag `{other}`")),
            }
        }
        a.n = n.unwrap_or(match a.workload {
            Workload::CatchUp => 200_000,
            _ => 100_000,
        });
        // The soak offers a steady mixed load well below saturation: it measures growth.
        a.rate = rate.unwrap_or(match a.workload {
            Workload::Soak => 300,
            _ => 1_000,
        });
        if a.batch == 0 {
            a.batch = a.page_size;
        }
        a.check()?;
        Ok(a)
    }

    /// Every setting's default; `n`, `rate` and `batch` are settled after the flags (their
    /// defaults depend on the workload and the page size).
    fn defaults() -> Args {
        Args {
            backend: Backend::Sqlite,
            workload: Workload::Live,
            n: 0,
            targets: 1_000,
            shards: 16,
            page_size: 256,
            nodes: 3,
            rate: 1_000,
            secs: 10,
            warmup: 1,
            rounds: 2,
            batch: 0,
            paced: false,
            kind_limit: None,
            cache_capacity: None,
            workers: 4,
            handler_concurrency: 64,
            work_ms: 1.0,
            node_process: None,
            schema: None,
            minutes: 30.0,
            sample_secs: 60,
            vacuum_secs: None,
            hold_xmin_minutes: 0.0,
            hold_xmin_after: 0.0,
            dbs: 3,
            cross_db_fraction: 0.0,
        }
    }

    /// Refuses arguments out of range: every count must be > 0, every time within its bounds.
    fn check(&self) -> Result<(), String> {
        if self.n == 0
            || self.targets == 0
            || self.shards == 0
            || self.page_size == 0
            || self.nodes == 0
            || self.rounds == 0
            || self.workers == 0
            || self.handler_concurrency == 0
            || !(self.work_ms >= 0.0 && self.work_ms <= 60_000.0)
            || !(self.minutes > 0.0 && self.minutes <= 10_000.0)
            || self.sample_secs == 0
            || !(self.hold_xmin_minutes >= 0.0 && self.hold_xmin_after >= 0.0)
            || !(1..=8).contains(&self.dbs)
            || !(0.0..=1.0).contains(&self.cross_db_fraction)
        {
            return Err(
                "--n, --targets, --shards, --page-size, --nodes, --rounds, --workers, --handler-concurrency, --minutes and --sample-secs must be > 0, --work-ms 0..=60000, the --hold-xmin-* values >= 0, --dbs 1..=8, --cross-db-fraction 0..=1".into(),
            );
        }
        Ok(())
    }
}

impl Backend {
    /// The `--backend` value.
    fn parse(value: Option<&str>) -> Result<Backend, String> {
        match value {
            Some("memory") => Ok(Backend::Memory),
            Some("sqlite") => Ok(Backend::Sqlite),
            Some("postgres") => Ok(Backend::Postgres),
            other => Err(format!("--backend: unknown backend {other:?}")),
        }
    }
}

impl Workload {
    /// The `--workload` value.
    fn parse(value: Option<&str>) -> Result<Workload, String> {
        match value {
            Some("live") => Ok(Workload::Live),
            Some("latency") => Ok(Workload::Latency),
            Some("scale") => Ok(Workload::Scale),
            Some("catch-up") => Ok(Workload::CatchUp),
            Some("cluster") => Ok(Workload::Cluster),
            Some("reshard") => Ok(Workload::Reshard),
            Some("jobs") => Ok(Workload::Jobs),
            Some("soak") => Ok(Workload::Soak),
            Some("read-model") => Ok(Workload::ReadModel),
            Some("relay") => Ok(Workload::Relay),
            Some("databases") => Ok(Workload::Databases),
            Some("databases-catch-up") => Ok(Workload::DatabasesCatchUp),
            other => Err(format!("--workload: unknown workload {other:?}")),
        }
    }
}
