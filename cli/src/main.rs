//! # shardbox — the operator's command line
//!
//! ```text
//!  shardbox [--db URL|PATH] [--json] status
//!                                    dead-letters list|show|requeue|purge
//!                                    blocked list|unblock
//!                                    catch-up start|list|progress [--follow]|cancel
//!                                    reshard --shards N [--timeout-secs S]
//!                                    migrate [--check]
//!                                    serve [--listen ADDR] [--allow-actions] [--allowed-host NAME]…
//!  shardbox completions bash|zsh|fish|elvish|powershell
//! ```
//!
//! Each command opens the database (see [`db`]), calls the storage traits of
//! `shardbox-core` that the library itself uses, prints a table or JSON, and exits with a
//! code that means something (see [`error::CliError::exit_code`]). What each read shows,
//! and each action does, is the shared view of `shardbox_admin::views`, which `serve` also
//! offers over HTTP. It runs no delivery: requeued and unblocked messages are delivered by
//! the application's nodes.
#![forbid(unsafe_code)]

mod blocked;
mod catch_up;
mod cli;
mod confirm;
mod db;
mod dead_letters;
mod error;
mod kinds;
mod migrate;
mod output;
mod read_models;
mod reshard;
mod serve;
mod status;
mod table;
mod when;

use clap::Parser;
use cli::{Cli, Command};
use error::CliError;
use output::out;
use shardbox_core::storage::StorageReads;
use shardbox_storage::MigrationMode;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: could not start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader stopped reading (`| head -1`): it has what it wanted.
        Err(e) if e.is_closed_output() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Completions { shell } = cli.command {
        return completions(shell);
    }
    let db = cli.db.as_deref().ok_or(CliError::NoDatabase)?;
    let schema = cli.schema.as_deref();
    let json = cli.json;
    let verified = || db::open(db, schema, MigrationMode::Verify);
    let now = chrono::Utc::now();
    match cli.command {
        Command::Migrate { check } => migrate::run(db, schema, check, json).await,
        Command::Status { all_shards } => {
            let status =
                shardbox_admin::views::status::read(&StorageReads::new(verified().await?), now)
                    .await?;
            if json {
                output::print_json(&status)
            } else {
                out!("{}", status::render(&status, all_shards))?;
                Ok(())
            }
        }
        Command::DeadLetters(command) => {
            dead_letters::run(&*verified().await?, command, json, now).await
        }
        Command::Blocked(command) => blocked::run(&*verified().await?, command, json, now).await,
        Command::Kinds(command) => kinds::run(&*verified().await?, command, json, now).await,
        Command::CatchUp(command) => catch_up::run(&*verified().await?, command, json).await,
        Command::ReadModels => read_models::run(&*verified().await?, json).await,
        Command::Reshard {
            shards,
            timeout_secs,
            guard,
        } => {
            let timeout = std::time::Duration::from_secs(timeout_secs);
            reshard::run(verified().await?, shards, timeout, guard, json).await
        }
        Command::Serve {
            listen,
            allow_actions,
            allowed_hosts,
        } => serve::run(verified().await?, listen, allow_actions, allowed_hosts).await,
        Command::Completions { shell } => completions(shell),
    }
}

/// `completions SHELL`: the script, generated from the command line's own definition.
fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "shardbox", &mut script);
    output::write_text(format_args!("{}", String::from_utf8_lossy(&script)))
}
