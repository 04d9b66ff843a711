//! [`DbName`]: a database's printable name together with the secrets to scrub from whatever a
//! driver says about it, and [`RedactedError`], the text of a driver error that showed one.
//!
//! libpq quotes pieces of a malformed URL back in its messages (`invalid percent-encoded
//! token: "S3c%zz"`, `invalid integer value "S3c#ret" for connection option "port"`), so a
//! secret is scrubbed as written, percent-decoded, and piece by piece between the characters
//! a URL or connection string reserves.

use super::{percent_decode, read};
use shardbox_core::Cause;
use std::sync::Arc;

/// Characters that split a secret into the pieces libpq may quote on their own.
// Only the PostgreSQL backend names databases by URL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const PIECE_SEPARATORS: &[char] = &['/', '?', '#', '@', ':', '&', '=', '%', '\'', '"'];

/// Pieces shorter than this are not scrubbed on their own: a piece of one or two characters
/// would turn every message into asterisks and gives away little of the password.
// Only the PostgreSQL backend names databases by URL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const MIN_PIECE: usize = 3;

/// A database's printable name, with the secrets to scrub from whatever is said about it.
#[derive(Clone)]
pub(crate) struct DbName {
    shown: Arc<str>,
    /// Longest first, so that a piece never splits a longer secret before it is replaced.
    secrets: Arc<[String]>,
    /// Whether it names a file (SQLite), not a server (PostgreSQL).
    file: bool,
}

/// Shows the name only, never the secrets.
impl std::fmt::Debug for DbName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.shown, f)
    }
}

impl std::fmt::Display for DbName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl DbName {
    /// The name of the database at `url` (or connection string).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn url(url: &str) -> Self {
        let reading = read(url);
        DbName {
            shown: reading.shown(url).into(),
            secrets: scrubbed_forms(reading.secrets).into(),
            file: false,
        }
    }

    /// The name of a database that has no secrets (a file path).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // only SQLite names files
    pub(crate) fn path(path: impl Into<String>) -> Self {
        DbName {
            shown: path.into().into(),
            secrets: Arc::from(Vec::new()),
            file: true,
        }
    }

    /// Whether it names a file (SQLite), not a server (PostgreSQL).
    pub(crate) fn is_file(&self) -> bool {
        self.file
    }

    /// The name as shown.
    pub(crate) fn as_str(&self) -> &str {
        &self.shown
    }

    /// `message` with every secret replaced by `***` and libpq's trailing newline trimmed.
    pub(crate) fn scrub(&self, message: &str) -> String {
        let mut out = message.trim_end().to_owned();
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "***");
            }
        }
        out
    }

    /// Whether `text` shows a secret.
    fn shows_secret(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `error` kept as a cause if nothing it prints (Display or Debug, down its `source()`
    /// chain) shows a secret; otherwise a scrubbed copy of its text, which has no source.
    pub(crate) fn cause(&self, error: impl std::error::Error + Send + Sync + 'static) -> Cause {
        let mut leaks = false;
        let mut next: Option<&dyn std::error::Error> = Some(&error);
        while let Some(e) = next {
            leaks |= self.shows_secret(&e.to_string()) || self.shows_secret(&format!("{e:?}"));
            next = e.source();
        }
        if leaks {
            Cause::new(RedactedError {
                message: self.scrub(&error.to_string()),
            })
        } else {
            Cause::new(error)
        }
    }
}

/// Every form of `secrets` a message may show: each as found, percent-decoded, and their
/// pieces; longest first, without repeats.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn scrubbed_forms(secrets: Vec<String>) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for secret in secrets {
        let decoded = percent_decode(&secret).into_owned();
        for form in [secret, decoded] {
            let pieces = form
                .split(|c: char| PIECE_SEPARATORS.contains(&c) || c.is_whitespace())
                .filter(|piece| piece.chars().count() >= MIN_PIECE)
                .map(str::to_owned);
            all.extend(pieces);
            if !form.is_empty() {
                all.push(form);
            }
        }
    }
    all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    all.dedup();
    all
}

/// The text of a driver error that showed a password, with the password replaced by `***`.
#[derive(Debug)]
pub struct RedactedError {
    message: String,
}

impl std::fmt::Display for RedactedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RedactedError {}
