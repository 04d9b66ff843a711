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

/// A payload as text when it is UTF-8 (JSON payloads are), else as `hex:…`.
pub fn text_or_hex(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("hex:{hex}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_print_as_text_or_hex() {
        assert_eq!(text_or_hex(b"{\"a\":1}"), "{\"a\":1}");
        assert_eq!(text_or_hex(&[0xff, 0x01]), "hex:ff01");
    }
}
