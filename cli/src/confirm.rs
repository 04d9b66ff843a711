//! The confirmation of a command that changes many rows at once (see [`Guard`]): it has
//! shown what it touches; `--yes` goes on, a terminal is asked, anything else is refused.
//!
//! ```text
//!  --dry-run ─► the preview, exit 0 (1 if nothing matches)         nothing changed
//!  --yes     ─► act
//!  a terminal on stdin and stderr ─► "<question> [y/N] " ─► y/yes: act; else exit 1
//!  no terminal (a script, a pipe) ─► refused, exit 2: say --yes    nothing changed
//! ```

use crate::cli::Guard;
use crate::error::CliError;
use std::io::{BufRead, IsTerminal, Write};

/// Goes on if `guard.yes`, or if the operator answers yes to `question` on a terminal;
/// otherwise refuses, naming `--yes` and `--dry-run`.
pub fn confirm(question: &str, guard: &Guard) -> Result<(), CliError> {
    if guard.yes {
        return Ok(());
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::Usage(format!(
            "{question} Not without confirmation, and there is no terminal to ask: pass --yes \
             (--dry-run shows what it touches, changing nothing)"
        )));
    }
    let mut err = std::io::stderr().lock();
    write!(err, "{question} [y/N] ").map_err(CliError::Output)?;
    err.flush().map_err(CliError::Output)?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(CliError::Output)?;
    if is_yes(&answer) {
        Ok(())
    } else {
        Err(CliError::NotFound("not confirmed; nothing changed".into()))
    }
}

/// Whether `answer` (a line typed at the prompt) says yes.
fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_y_or_yes_confirms() {
        for yes in ["y\n", "Y", " yes \n", "YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n", "no", "yep", "y es"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }

    #[test]
    fn yes_goes_on_without_asking() {
        let guard = Guard {
            dry_run: false,
            yes: true,
        };
        assert!(confirm("Purge?", &guard).is_ok());
    }
}
