//! Output helpers shared by the commands.
//!
//! Every line goes through [`outln!`] or [`out!`], which return a failed write as
//! [`CliError::Output`] instead of panicking as `println!` does: a reader that stops early
//! (`shardbox … | head -1`) closes the pipe, the next write fails with `BrokenPipe`, and
//! `main` ends quietly with exit 0 (see [`CliError::is_closed_output`]).

use crate::error::CliError;
use serde::Serialize;
use std::io::Write;

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out).map_err(CliError::Output)?;
    out.flush().map_err(CliError::Output)
}

/// Writes `text` to stdout and flushes it, so that a closed pipe is seen at this write.
pub fn write_text(text: std::fmt::Arguments<'_>) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(text).map_err(CliError::Output)?;
    out.flush().map_err(CliError::Output)
}

/// `text` with a capital first letter (a question built from a verb).
pub fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// `println!` that returns a failed write (`Result<(), CliError>`) instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_text(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns a failed write (`Result<(), CliError>`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_text(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};
