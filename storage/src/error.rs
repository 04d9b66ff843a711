//! How driver failures become typed [`StorageError`]s.
//!
//! ```text
//!  diesel::result::Error ─┐
//!  r2d2 checkout error ───┼─► Failure ──(DbName: name + secrets)──► StorageError
//!  LeaseLost / Corrupt ───┘      Unavailable | AuthenticationFailed | UnknownRole |
//!                                UnknownDatabase | InvalidUrl | ReadOnly | Query |
//!                                OutcomeUnknown (a send's write lost with its connection) | …
//! ```
//!
//! Work inside a blocking closure returns [`Failure`], which can hold a diesel error (so that
//! `?` and diesel transactions work) or an already typed [`StorageError`] (a lost lease, a
//! corrupt row, an overlapping catch-up). Only at the edge, where the database's [`DbName`] is
//! known, does a [`Failure`] become a [`StorageError`], so that every error names its
//! database (the file path, or the URL with its password redacted), carries the driver's
//! message scrubbed of the password and trimmed of libpq's trailing newline, and keeps the
//! driver error itself as its `source()` (see [`DbName::cause`]).
//!
//! Classification is by diesel's error kind where it has one, else by the driver's message:
//! SQLite and libpq report read-only files, full disks and lost connections only as text, and
//! libpq gives no SQLSTATE for a failed connection attempt, only the server's message (in
//! English unless the server's `lc_messages` says otherwise; a translated one is still
//! reported, as `Unavailable`).

use crate::redact::DbName;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use shardbox_core::StorageError;

/// A failure inside a unit of work, before it is given the database's name.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The driver failed.
    Db(DieselError),
    /// A typed outcome decided by the unit of work itself (rolls the transaction back).
    Storage(StorageError),
    /// The connection was lost while a write was sent or committed (see
    /// [`Failure::at_commit`]): whether it committed is not known.
    OutcomeUnknown(DieselError),
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
    pub(crate) fn into_storage_error(self, database: &DbName) -> StorageError {
        match self {
            Failure::Storage(e) => e,
            Failure::Db(e) => classify_diesel(e, database),
            Failure::OutcomeUnknown(e) => StorageError::OutcomeUnknown {
                reason: database.scrub(&e.to_string()),
                source: Some(database.cause(e)),
                database: database.as_str().to_owned(),
            },
        }
    }

    /// A failure of a write whose statements (or `COMMIT`) may have reached the server: a lost
    /// connection makes its outcome unknown ([`Failure::OutcomeUnknown`]); any other failure
    /// is kept (the database answered, so it did not commit).
    pub(crate) fn at_commit(self) -> Self {
        match self {
            Failure::Db(e) if lost_connection(&e) => Failure::OutcomeUnknown(e),
            other => other,
        }
    }

    /// Whether this failure says the connection itself is gone (the server closed it, or the
    /// driver could not send on it), so that it must not be used again.
    pub(crate) fn lost_connection(&self) -> bool {
        match self {
            Failure::Db(e) => lost_connection(e),
            Failure::Storage(e) => matches!(
                e,
                StorageError::Unavailable { .. } | StorageError::OutcomeUnknown { .. }
            ),
            Failure::OutcomeUnknown(_) => true,
        }
    }
}

/// Whether `e` says the connection itself is gone. diesel marks what libpq reports on a dead
/// connection `ClosedConnection` (the connection's status is bad) or `UnableToSendCommand`
/// (libpq returned no result), a transaction it could not roll back
/// `BrokenTransactionManager`; the server's own farewell (`terminating connection due to
/// administrator command`, SQLSTATE 57P01) may come as `Unknown` with its text only.
pub(crate) fn lost_connection(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        )
        | DieselError::BrokenTransactionManager => true,
        DieselError::DatabaseError(_, info) => {
            classify_message(info.message()) == Class::Unavailable
        }
        _ => false,
    }
}

/// Maps a diesel error to the variant that tells the operator what to do.
pub(crate) fn classify_diesel(e: DieselError, database: &DbName) -> StorageError {
    let reason = database.scrub(&e.to_string());
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
    class.into_error(database, reason, Some(database.cause(e)))
}

/// Maps a failure to reach or open the database (connect, pool build, pool checkout): a
/// server that cannot be reached, a login it refuses, a role or database it does not have, a
/// URL libpq cannot parse, a file that cannot be written.
pub(crate) fn classify_connect(
    e: impl std::error::Error + Send + Sync + 'static,
    database: &DbName,
) -> StorageError {
    let reason = database.scrub(&e.to_string());
    let class = match classify_login(&reason) {
        Some(class) => class,
        None => match classify_message(&reason) {
            Class::ReadOnly => Class::ReadOnly,
            _ => Class::Unavailable,
        },
    };
    class.into_error(database, reason, Some(database.cause(e)))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Class {
    Unavailable,
    ReadOnly,
    Query,
    Authentication,
    UnknownRole(String),
    UnknownDatabase(String),
    InvalidUrl,
}

impl Class {
    fn into_error(
        self,
        database: &DbName,
        reason: String,
        source: Option<shardbox_core::Cause>,
    ) -> StorageError {
        let file = database.is_file();
        let database = database.as_str().to_owned();
        match self {
            Class::Unavailable => StorageError::Unavailable {
                advice: unavailable_advice(file, &reason),
                database,
                reason,
                source,
            },
            Class::ReadOnly => StorageError::ReadOnly {
                database,
                reason,
                source,
            },
            Class::Query => StorageError::Query {
                database,
                reason,
                source,
            },
            Class::Authentication => StorageError::AuthenticationFailed {
                database,
                reason,
                source,
            },
            Class::UnknownRole(role) => StorageError::UnknownRole {
                database,
                role,
                reason,
                source,
            },
            Class::UnknownDatabase(name) => StorageError::UnknownDatabase {
                database,
                name,
                reason,
                source,
            },
            Class::InvalidUrl => StorageError::InvalidUrl {
                database,
                reason,
                source,
            },
        }
    }
}

/// What to do about an unavailable database: a server's connection is checked, a file's path.
/// SQLite opens any file lazily and says `file is not a database` (SQLITE_NOTADB) at its first
/// read of another kind of file.
fn unavailable_advice(file: bool, reason: &str) -> &'static str {
    if !file {
        StorageError::CHECK_SERVER
    } else if reason
        .to_ascii_lowercase()
        .contains("file is not a database")
    {
        StorageError::NOT_A_DATABASE
    } else {
        StorageError::CHECK_PATH
    }
}

/// Sorts what libpq says when a login fails: the server's FATAL (SQLSTATE 28P01, 28000,
/// 3D000, in their English text) or libpq's own complaint about the URL. `None` for anything
/// else.
fn classify_login(message: &str) -> Option<Class> {
    let m = message.to_ascii_lowercase();
    if let Some(role) = quoted_before(message, "role \"", "\" does not exist") {
        return Some(Class::UnknownRole(role)); // 28000 invalid_authorization_specification
    }
    if let Some(name) = quoted_before(message, "database \"", "\" does not exist") {
        return Some(Class::UnknownDatabase(name)); // 3D000 invalid_catalog_name
    }
    const AUTHENTICATION: &[&str] = &[
        "authentication failed for user", // 28P01: password, scram, md5; 28000: peer, ident
        "no pg_hba.conf entry",           // 28000
        "pg_hba.conf rejects connection", // 28000
        "permission denied for database", // 42501: no CONNECT privilege
        "no password supplied",           // libpq: the server asked, the URL has none
        "password is required",           // ditto, newer libpq wording
        "server requested",               // require_auth refused the server's method
    ];
    if AUTHENTICATION.iter().any(|p| m.contains(p)) {
        return Some(Class::Authentication);
    }
    const INVALID_URL: &[&str] = &[
        "invalid percent-encoded token",
        "forbidden value %00 in percent-encoded value",
        "invalid uri query parameter",
        "key/value separator",
        "invalid integer value",
        "invalid port number",
        "missing \"=\" after",
        "invalid connection option",
        "unterminated quoted string",
        "invalid uri",
        "unexpected character",
        "ipv6 host address",
        "nul byte found", // diesel: the URL holds a NUL and cannot go to libpq
    ];
    if INVALID_URL.iter().any(|p| m.contains(p))
        || (m.starts_with("invalid ") && m.contains(" value: \""))
    {
        return Some(Class::InvalidUrl);
    }
    None
}

/// The text between `open` and the first `close` after it, as in `role "x" does not exist`.
fn quoted_before(message: &str, open: &str, close: &str) -> Option<String> {
    let start = message.find(open)? + open.len();
    let len = message[start..].find(close)?;
    Some(message[start..start + len].to_owned())
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
        "could not receive data from server",
        "could not send data to server",
        "ssl connection has been closed",
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = classify_diesel(DieselError::NotFound, &DbName::path("db.sqlite"));
        assert!(matches!(&e, StorageError::Query { database, .. } if database == "db.sqlite"));
        let e = classify_connect(
            std::io::Error::other("timed out waiting for connection"),
            &DbName::url("postgres://u:pw@h/d"),
        );
        assert!(
            matches!(&e, StorageError::Unavailable { database, .. } if database == "postgres://u:***@h/d")
        );
        let e = classify_connect(
            std::io::Error::other("attempt to write a readonly database"),
            &DbName::path("x.db"),
        );
        assert!(matches!(e, StorageError::ReadOnly { .. }));
    }

    /// libpq's messages, as this machine's libpq 18 and PostgreSQL 15 print them (the
    /// trailing newline included), each to its own variant.
    #[test]
    fn login_failures_are_told_apart() {
        let db = DbName::url("postgres://postgres:S3c%zzret@127.0.0.1:5432/test");
        let connect = |m: &str| classify_connect(std::io::Error::other(m.to_owned()), &db);
        let e = connect("connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  password authentication failed for user \"postgres\"\n");
        assert!(
            matches!(&e, StorageError::AuthenticationFailed { reason, .. } if reason.ends_with("for user \"postgres\"")),
            "{e:?}"
        );
        let e = connect("connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  role \"nosuchrole\" does not exist\n");
        assert!(
            matches!(&e, StorageError::UnknownRole { role, .. } if role == "nosuchrole"),
            "{e:?}"
        );
        assert!(e.to_string().contains("CREATE ROLE \"nosuchrole\""), "{e}");
        let e = connect("connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  database \"nosuchdb\" does not exist\n");
        assert!(
            matches!(&e, StorageError::UnknownDatabase { name, .. } if name == "nosuchdb"),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("CREATE DATABASE \"nosuchdb\""),
            "{e}"
        );
        for malformed in [
            "invalid percent-encoded token: \"S3c%zzret\"\n",
            "invalid integer value \"notaport\" for connection option \"port\"\n",
            "invalid URI query parameter: \"bogus\"\n",
            "missing \"=\" after \"cret\" in connection info string\n",
            "invalid sslmode value: \"sometimes\"\n",
            "nul byte found in provided data at position: 3",
        ] {
            let e = connect(malformed);
            assert!(
                matches!(&e, StorageError::InvalidUrl { .. }),
                "{malformed}: {e:?}"
            );
            let shown = e.to_string();
            assert!(!shown.contains("S3c"), "{shown}");
            assert!(
                !shown.contains("\n."),
                "the trailing newline is trimmed: {shown}"
            );
        }
        for refused in [
            "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  no pg_hba.conf entry for host \"10.0.0.1\", user \"app\", database \"prod\", no encryption\n",
            "connection to server at \"127.0.0.1\", port 5432 failed: fe_sendauth: no password supplied\n",
            "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  permission denied for database \"test\"\nDETAIL:  User does not have CONNECT privilege.\n",
        ] {
            let e = connect(refused);
            assert!(matches!(&e, StorageError::AuthenticationFailed { .. }), "{refused}: {e:?}");
        }
        let e = connect("connection to server at \"127.0.0.1\", port 5433 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n");
        assert!(
            matches!(&e, StorageError::Unavailable { reason, .. } if reason.ends_with("connections?")),
            "{e:?}"
        );
    }

    #[test]
    fn lost_connections_are_recognised() {
        let db = |kind, m: &str| DieselError::DatabaseError(kind, Box::new(m.to_owned()));
        assert!(lost_connection(&db(
            DatabaseErrorKind::ClosedConnection,
            "server closed the connection unexpectedly"
        )));
        assert!(lost_connection(&db(
            DatabaseErrorKind::UnableToSendCommand,
            "no connection to the server\n"
        )));
        assert!(lost_connection(&db(
            DatabaseErrorKind::Unknown,
            "terminating connection due to administrator command"
        )));
        assert!(lost_connection(&DieselError::BrokenTransactionManager));
        assert!(!lost_connection(&db(
            DatabaseErrorKind::UniqueViolation,
            "duplicate key value violates unique constraint"
        )));
        assert!(!lost_connection(&DieselError::NotFound));
    }

    #[test]
    fn query_errors_keep_the_driver_error_as_their_source() {
        let e = classify_diesel(DieselError::NotFound, &DbName::path("db.sqlite"));
        let source = std::error::Error::source(&e).expect("a source");
        assert!(matches!(
            source.downcast_ref::<DieselError>(),
            Some(DieselError::NotFound)
        ));
        assert_eq!(
            e.to_string(),
            "database db.sqlite: query failed: Record not found"
        );
    }
}
