//! How driver failures become typed [`StorageError`]s.
//!
//! ```text
//!  diesel::result::Error ─┐
//!  r2d2 checkout error ───┼─► Failure ──(database name)──► StorageError
//!  LeaseLost / Corrupt ───┘        Unavailable | ReadOnly | Query | …
//! ```
//!
//! Work inside a blocking closure returns [`Failure`], which can hold a diesel error (so that
//! `?` and diesel transactions work) or an already typed [`StorageError`] (a lost lease, a
//! corrupt row, an overlapping catch-up). Only at the edge, where the database's name is known,
//! does a [`Failure`] become a [`StorageError`], so that every error names its database: the
//! file path, or the URL with its password redacted by [`redact`].
//!
//! Classification is by diesel's error kind where it has one, else by the driver's message
//! (SQLite and libpq report read-only files, full disks and lost connections only as text).

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use shardbox_core::StorageError;

/// A failure inside a unit of work, before it is given the database's name.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The driver failed.
    Db(DieselError),
    /// A typed outcome decided by the unit of work itself (rolls the transaction back).
    Storage(StorageError),
}

impl From<DieselError> for Failure {
    fn from(e: DieselError) -> Self {
        Failure::Db(e)
    }
}

impl From<StorageError> for Failure {
    fn from(e: StorageError) -> Self {
        Failure::Storage(e)
    }
}

impl Failure {
    /// A stored value that cannot be read back.
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Failure::Storage(StorageError::Corrupt(what.into()))
    }

    /// The typed error, naming `database`.
    pub(crate) fn into_storage_error(self, database: &str) -> StorageError {
        match self {
            Failure::Storage(e) => e,
            Failure::Db(e) => classify_diesel(e, database),
        }
    }
}

/// Maps a diesel error to the variant that tells the operator what to do.
pub(crate) fn classify_diesel(e: DieselError, database: &str) -> StorageError {
    let reason = e.to_string();
    let class = match &e {
        DieselError::DatabaseError(kind, _) => match kind {
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand => {
                Class::Unavailable
            }
            DatabaseErrorKind::ReadOnlyTransaction => Class::ReadOnly,
            _ => classify_message(&reason),
        },
        DieselError::BrokenTransactionManager => Class::Unavailable,
        _ => Class::Query,
    };
    class.into_error(database, reason)
}

/// Maps a failure to reach or open the database (pool checkout, connect, pool build).
pub(crate) fn classify_connect(reason: String, database: &str) -> StorageError {
    match classify_message(&reason) {
        Class::ReadOnly => Class::ReadOnly,
        _ => Class::Unavailable,
    }
    .into_error(database, reason)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unavailable,
    ReadOnly,
    Query,
}

impl Class {
    fn into_error(self, database: &str, reason: String) -> StorageError {
        let database = database.to_owned();
        match self {
            Class::Unavailable => StorageError::Unavailable { database, reason },
            Class::ReadOnly => StorageError::ReadOnly { database, reason },
            Class::Query => StorageError::Query { database, reason },
        }
    }
}

/// Sorts a driver message: SQLite and libpq report these conditions only as text.
fn classify_message(message: &str) -> Class {
    let m = message.to_ascii_lowercase();
    const READ_ONLY: &[&str] = &[
        "readonly database",           // SQLITE_READONLY
        "read-only",                   // PostgreSQL hot standby / read-only transaction
        "disk is full",                // SQLITE_FULL
        "no space left on device",     // PostgreSQL 53100 and friends
        "could not extend file",       // PostgreSQL disk full
        "permission denied",           // PostgreSQL 42501, file permissions
        "disk i/o error",              // SQLITE_IOERR, most often a full or vanished disk
        "attempt to write a readonly", // SQLITE_READONLY variants
        "authorization denied",        // SQLITE_AUTH
        "access permission denied",    // SQLITE_PERM
    ];
    const UNAVAILABLE: &[&str] = &[
        "unable to open database file", // SQLITE_CANTOPEN
        "could not connect",
        "connection refused",
        "connection to server",
        "server closed the connection",
        "terminating connection",
        "no connection to the server",
        "timed out waiting for connection",
        "the database system is starting up",
        "the database system is shutting down",
        "could not translate host name",
    ];
    if READ_ONLY.iter().any(|p| m.contains(p)) {
        Class::ReadOnly
    } else if UNAVAILABLE.iter().any(|p| m.contains(p)) {
        Class::Unavailable
    } else {
        Class::Query
    }
}

/// A database URL or connection string with its password replaced by `***`, fit for logs and
/// error messages.
///
/// Handles URLs (`postgres://user:secret@host/db`, also `?password=secret` in the query) and
/// libpq keyword/value strings (`host=h password=secret`). Anything else is returned unchanged.
///
/// ```
/// use shardbox_storage::redact;
/// assert_eq!(redact("postgres://app:s3cret@db:5432/prod"), "postgres://app:***@db:5432/prod");
/// assert_eq!(redact("host=db password=s3cret dbname=prod"), "host=db password=*** dbname=prod");
/// ```
pub fn redact(url: &str) -> String {
    match url.find("://") {
        Some(scheme_end) => redact_url(url, scheme_end + 3),
        None => redact_keyword_value(url),
    }
}

fn redact_url(url: &str, authority_start: usize) -> String {
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..authority_start]);
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let tail = &rest[authority_len..];
    match tail.find('?') {
        Some(q) => {
            out.push_str(&tail[..=q]);
            let (query, fragment) = match tail[q + 1..].find('#') {
                Some(h) => (&tail[q + 1..q + 1 + h], &tail[q + 1 + h..]),
                None => (&tail[q + 1..], ""),
            };
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_owned(),
                })
                .collect();
            out.push_str(&params.join("&"));
            out.push_str(fragment);
        }
        None => out.push_str(tail),
    }
    out
}

fn redact_keyword_value(conninfo: &str) -> String {
    let mut out = String::with_capacity(conninfo.len());
    let mut rest = conninfo;
    while let Some(pos) = find_password_key(rest) {
        out.push_str(&rest[..pos]);
        let after_key = &rest[pos..];
        let eq = after_key.find('=').map_or(after_key.len(), |e| e + 1);
        out.push_str(&after_key[..eq]);
        out.push_str("***");
        let value = after_key[eq..].trim_start();
        let skipped = after_key.len() - eq - value.len();
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            // A quoted value ends at the first unescaped quote.
            let mut escaped = false;
            let mut end = quoted.len();
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            1 + end
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        rest = &after_key[eq + skipped + value_len..];
    }
    out.push_str(rest);
    out
}

/// The byte offset of a `password` keyword (followed by `=`) at a word start.
fn find_password_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let at = from + i;
        let word_start = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let after = lower[at + "password".len()..].trim_start();
        if word_start && after.starts_with('=') {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_url_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db.example:5432/prod?sslmode=require"),
            "postgres://app:***@db.example:5432/prod?sslmode=require"
        );
        assert_eq!(
            redact("postgresql://app:p%40ss@db/prod"),
            "postgresql://app:***@db/prod"
        );
        // An `@` in the password (unescaped) still goes: the last `@` ends the user info.
        assert_eq!(redact("postgres://u:a@b@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://db/prod?user=app&password=s3cret&sslmode=disable"),
            "postgres://db/prod?user=app&password=***&sslmode=disable"
        );
    }

    #[test]
    fn leaves_urls_without_password_alone() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://127.0.0.1/test",
            "postgres:///test?host=/var/run/postgresql",
            "/var/lib/app/shardbox.db",
            "",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn redacts_keyword_value_passwords() {
        assert_eq!(
            redact("host=db password=s3cret dbname=prod"),
            "host=db password=*** dbname=prod"
        );
        assert_eq!(
            redact("host=db password = 's3 \\'cret' user=app"),
            "host=db password =*** user=app"
        );
        assert_eq!(redact("PASSWORD=x"), "PASSWORD=***");
        assert_eq!(redact("mypassword=x"), "mypassword=x");
        assert_eq!(
            redact("password=x1 password=y2"),
            "password=*** password=***"
        );
    }

    #[test]
    fn classifies_driver_messages() {
        assert_eq!(
            classify_message("attempt to write a readonly database"),
            Class::ReadOnly
        );
        assert_eq!(
            classify_message("database or disk is full"),
            Class::ReadOnly
        );
        assert_eq!(
            classify_message("could not extend file \"base/1/2\": No space left on device"),
            Class::ReadOnly
        );
        assert_eq!(
            classify_message("permission denied for table inbox_messages"),
            Class::ReadOnly
        );
        assert_eq!(
            classify_message("unable to open database file"),
            Class::Unavailable
        );
        assert_eq!(
            classify_message(
                "connection to server at \"127.0.0.1\", port 1 failed: Connection refused"
            ),
            Class::Unavailable
        );
        assert_eq!(
            classify_message("syntax error at or near \"SELEC\""),
            Class::Query
        );
    }

    #[test]
    fn errors_name_their_database() {
        let e = classify_diesel(DieselError::NotFound, "db.sqlite");
        assert!(matches!(&e, StorageError::Query { database, .. } if database == "db.sqlite"));
        let e = classify_connect(
            "timed out waiting for connection".into(),
            "postgres://u:***@h/d",
        );
        assert!(
            matches!(&e, StorageError::Unavailable { database, .. } if database == "postgres://u:***@h/d")
        );
        let e = classify_connect("attempt to write a readonly database".into(), "x.db");
        assert!(matches!(e, StorageError::ReadOnly { .. }));
    }
}
