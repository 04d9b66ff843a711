//! Output helpers shared by the commands.

use crate::error::CliError;
use serde::Serialize;
use std::io::Write;

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out).map_err(CliError::Output)
}
