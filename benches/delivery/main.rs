//! The delivery benchmark: how close Shardbox's delivery comes to the least work any durable
//! inbox must do on the same database, plus latency, scale, catch-up and cluster workloads.
//!
//! ```text
//! cargo bench --bench delivery -- --backend sqlite --workload live [--n 100000]
//!     [--targets 1000] [--shards 16] [--page-size 256] [--nodes 3] [--rate 1000] [--secs 10]
//!     [--handler-concurrency 64] [--work-ms 1]   (the `jobs` workload)
//!     [--minutes 30] [--sample-secs 60] [--hold-xmin-minutes N --hold-xmin-after M]  (`soak`)
//!     --workload read-model [--rounds 3]   (JSON-state vs SQL projection, alternating)
//!     --workload relay [--n 100000] [--batch 500]   (outbox commits and the relay's copy)
//!     --workload databases [--dbs 3] [--cross-db-fraction 0.1] [--rounds 2]   (PostgreSQL:
//!         one database against several, and messages between them; SHARDBOX_PG_DATABASES)
//!     --workload databases-catch-up [--dbs 3] [--n 20000] [--rounds 2]   (PostgreSQL: a
//!         catch-up over several databases against one; SHARDBOX_PG_DATABASES)
//! ```
//!
//! Prints a table, and as its last line one JSON object with at least `workload`, `backend`,
//! `n`, `msgs_per_s`, `floor_per_s`, `ratio`, `p50_ms`, `p99_ms`, `peak_rss_mib`,
//! `duplicates`, `lost`. PostgreSQL runs read `SHARDBOX_PG_URL` and work in a schema of their
//! own, dropped at the end. The `cluster` workload runs its nodes as processes of this same
//! binary (a hidden `--node-process` mode, see the `cluster` module).

mod args;
mod backend;
mod cluster;
mod databases;
mod floor;
mod jobs;
mod model;
mod read_model;
mod relay;
mod report;
mod reshard;
mod soak;
mod statements;
mod timeline;
mod traffic;
mod workloads;

use args::{Args, Workload};
use report::Report;

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n\n{}", args::USAGE);
            std::process::exit(2);
        }
    };
    statements::install();
    timeline::install();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    // A node process of the `cluster` workload, started by the workload itself.
    if let Some(node) = &args.node_process {
        if let Err(e) = runtime.block_on(cluster::serve_node(&args, node)) {
            eprintln!("error: node process {node}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let result: Result<Report, String> = runtime.block_on(async {
        match args.workload {
            Workload::Live => workloads::live(&args).await,
            Workload::Latency => workloads::latency(&args).await,
            Workload::Scale => workloads::scale(&args).await,
            Workload::CatchUp => workloads::catch_up(&args).await,
            Workload::Cluster => cluster::run(&args).await,
            Workload::Jobs => jobs::jobs(&args).await,
            Workload::Reshard => reshard::reshard(&args).await,
            Workload::Soak => soak::soak(&args).await,
            Workload::ReadModel => read_model::read_model(&args).await,
            Workload::Relay => relay::relay(&args).await,
            Workload::Databases => databases::databases(&args).await,
            Workload::DatabasesCatchUp => databases::databases_catch_up(&args).await,
        }
    });
    match result {
        Ok(report) => report.print(),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
