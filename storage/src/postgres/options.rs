//! PostgreSQL settings: the options a user chooses and the `search_path` every pooled
//! connection gets when a schema is chosen.

use crate::checkout::Pooled;
use crate::migrate::MigrationMode;
use diesel::connection::SimpleConnection;
use diesel::r2d2::CustomizeConnection;
use diesel::PgConnection;
use std::time::Duration;

/// How to connect to a PostgreSQL database.
///
/// ```
/// use shardbox_storage::PostgresOptions;
/// let options = PostgresOptions::default().pool_size(20).schema("shardbox");
/// assert_eq!(options.schema.as_deref(), Some("shardbox"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// See [`PostgresOptions::pool_size`].
    pub pool_size: u32,
    /// See [`PostgresOptions::min_idle`].
    pub min_idle: Option<u32>,
    /// See [`PostgresOptions::schema`].
    pub schema: Option<String>,
    /// See [`PostgresOptions::connection_timeout`].
    pub connection_timeout: Duration,
    /// See [`PostgresOptions::migrations`].
    pub migrations: MigrationMode,
    /// See [`PostgresOptions::listen`].
    pub listen: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 10,
            min_idle: Some(1),
            schema: None,
            connection_timeout: Duration::from_secs(30),
            migrations: MigrationMode::Apply,
            listen: true,
        }
    }
}

impl PostgresOptions {
    /// Connections in the pool (default 10, at least 1). Size it with the server's
    /// `max_connections` shared by every node in mind.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Idle connections kept open (default 1; `None` keeps `pool_size` open).
    pub fn min_idle(mut self, idle: Option<u32>) -> Self {
        self.min_idle = idle;
        self
    }

    /// Keep Shardbox's tables in this schema (created if missing) instead of the connection's
    /// default (`public`): every pooled connection gets `SET search_path TO "<schema>"`. Lets
    /// several applications or test runs share one database.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// How long a unit of work waits for a free pooled connection, and how long opening the
    /// pool waits for its first connections (default 30 s). Add `connect_timeout=<seconds>` to
    /// the URL to bound a single connection attempt to an unreachable host.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Whether connecting may migrate the schema (default [`MigrationMode::Apply`]).
    pub fn migrations(mut self, mode: MigrationMode) -> Self {
        self.migrations = mode;
        self
    }

    /// Whether a running node listens for other nodes' writes (default `true`): one more
    /// connection per node, outside the pool, that `LISTEN`s for the notifications every
    /// write sends, so that the node serving a shard wakes at once. With `false` the node
    /// finds other nodes' writes by polling (`poll_interval`). Writes notify either way.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }
}

/// A schema name quoted as an SQL identifier (`"` doubled), so any name is safe to splice.
pub(crate) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Sets `search_path` on every pooled connection.
#[derive(Debug, Clone)]
pub(crate) struct SearchPath {
    pub(crate) schema: Option<String>,
}

impl SearchPath {
    /// Applies the setting (nothing without a schema).
    pub(crate) fn apply(&self, conn: &mut PgConnection) -> diesel::QueryResult<()> {
        match &self.schema {
            Some(schema) => {
                conn.batch_execute(&format!("SET search_path TO {}", quote_identifier(schema)))
            }
            None => Ok(()),
        }
    }
}

impl CustomizeConnection<Pooled<PgConnection>, diesel::r2d2::Error> for SearchPath {
    fn on_acquire(&self, conn: &mut Pooled<PgConnection>) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_identifier("app"), "\"app\"");
        assert_eq!(quote_identifier("a\"; DROP"), "\"a\"\"; DROP\"");
    }

    #[test]
    fn pool_size_is_at_least_one() {
        assert_eq!(PostgresOptions::default().pool_size(0).pool_size, 1);
    }
}
