//! The parent's check that a run is done: rows still waiting for delivery in the run's
//! schema, over a connection of the parent's own (asked only once the nodes' counts add up,
//! see the `cluster` module).

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, RunQueryDsl};

/// Rows waiting for delivery: a connection of the parent's own to the run's schema.
pub(super) struct Pending {
    conn: Option<PgConnection>,
    shards: u32,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

impl Pending {
    pub(super) fn connect(url: &str, schema: &str, shards: u32) -> Result<Pending, String> {
        let mut conn = PgConnection::establish(url).map_err(|e| format!("connect: {e}"))?;
        conn.batch_execute(&format!("SET search_path TO \"{schema}\""))
            .map_err(|e| format!("search_path: {e}"))?;
        Ok(Pending {
            conn: Some(conn),
            shards,
        })
    }

    /// Runs a counting query on a blocking thread.
    async fn count(&mut self, sql: String) -> Result<i64, String> {
        let mut conn = self.conn.take().ok_or("the polling connection was lost")?;
        let (conn, n) = tokio::task::spawn_blocking(move || {
            let n = diesel::sql_query(sql).get_result::<Count>(&mut conn);
            (conn, n)
        })
        .await
        .map_err(|e| e.to_string())?;
        self.conn = Some(conn);
        n.map(|c| c.n)
            .map_err(|e| format!("polling the inbox: {e}"))
    }

    /// Shards with at least one row waiting for delivery: one probe of the `(shard, status,
    /// seq)` index per shard.
    pub(super) async fn shards(&mut self) -> Result<i64, String> {
        let sql = format!(
            "SELECT count(*) AS n FROM generate_series(0, {}) AS s(shard) WHERE EXISTS \
             (SELECT 1 FROM inbox_messages m WHERE m.shard = s.shard \
             AND m.status IN ('to_deliver', 'to_catch_up'))",
            self.shards.saturating_sub(1)
        );
        self.count(sql).await
    }

    /// Rows waiting for delivery (for the error message of a run that does not finish).
    pub(super) async fn rows(&mut self) -> Result<i64, String> {
        self.count(
            "SELECT count(*) AS n FROM inbox_messages \
             WHERE status IN ('to_deliver', 'to_catch_up')"
                .into(),
        )
        .await
    }
}
