//! SQL projections: read models in the application's own tables, written through the stage's
//! transaction.
//!
//! A [`SqlProjection`] gets the connection of the commit that delivers its events, inside
//! that commit's transaction. Its writes land together with the Inbox rows they handle and
//! the framework's own state, fenced by the shard's lease, or not at all: a node that lost
//! its lease lands none of them, a crash leaves none half-written, and a redelivery never
//! meets its own earlier write. The application creates the tables with its own migrations
//! and queries them as it likes (see docs/read-models.md).
//!
//! ```text
//!  events of the projection's set ─► routed to instances (route) ─► Inbox rows ─► a page
//!  live delivery: decoded (upcast), kept ─► the stage's commit: fence ─► per target, in a
//!  savepoint: apply(conn, event) for each in seq order ─► the Inbox rows delivered
//!  an apply fails ─► that target's writes rolled back, its message retried / dead-lettered
//!                    by the kind's failure policy; the page's other targets commit
//! ```
//!
//! ```no_run
//! use diesel::prelude::*;
//! use serde::{Deserialize, Serialize};
//! use shardbox_core::{Context, Message, RebuildScope};
//! use shardbox_storage::{SqlConnection, SqlProjection, SqlResult};
//!
//! #[derive(Serialize, Deserialize)]
//! pub struct OrderPlaced { pub customer: String, pub total: i64 }
//! impl Message for OrderPlaced { const TYPE: &'static str = "order.placed"; }
//!
//! diesel::table! {
//!     order_list (order_id) {
//!         order_id -> Text,
//!         customer -> Text,
//!         total -> BigInt,
//!     }
//! }
//!
//! struct OrderList;
//!
//! impl SqlProjection for OrderList {
//!     const KIND: &'static str = "order-list";
//!     type Event = OrderPlaced;
//!
//!     fn apply(&self, conn: SqlConnection<'_>, e: &OrderPlaced, cx: &Context<'_>) -> SqlResult {
//!         let row = (
//!             order_list::order_id.eq(cx.target_id),
//!             order_list::customer.eq(&e.customer),
//!             order_list::total.eq(e.total),
//!         );
//!         match conn {
//!             SqlConnection::Sqlite(c) => {
//!                 diesel::replace_into(order_list::table).values(row).execute(c)?
//!             }
//!             SqlConnection::Postgres(c) => diesel::insert_into(order_list::table)
//!                 .values(row)
//!                 .on_conflict(order_list::order_id)
//!                 .do_nothing()
//!                 .execute(c)?,
//!         };
//!         Ok(())
//!     }
//!
//!     // A rebuild empties the table first (in the transaction of its first replayed page).
//!     fn reset(&self, conn: SqlConnection<'_>, _: &RebuildScope) -> SqlResult {
//!         conn.batch_execute("DELETE FROM order_list")?;
//!         Ok(())
//!     }
//! }
//! ```

use shardbox_core::{
    Context, EventSet, EventSource, HandlerError, RebuildScope, TransactionalProjection,
};
use std::any::Any;

/// What [`SqlProjection::apply`] returns: `?` takes a diesel error (a transient failure: the
/// kind's policy retries it) and a [`HandlerError`] (as the handler says: permanent,
/// redeliver, …).
pub type SqlResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The connection a [`SqlProjection`] writes through: the stage commit's own, inside its
/// transaction (and inside a savepoint for the target's writes). Use it for the statements of
/// the write only: do not commit, roll back or open a transaction on it.
pub enum SqlConnection<'a> {
    /// The SQLite backend's connection.
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut diesel::SqliteConnection),
    /// The PostgreSQL backend's connection.
    #[cfg(feature = "postgres")]
    Postgres(&'a mut diesel::PgConnection),
}

impl std::fmt::Debug for SqlConnection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.backend())
    }
}

impl<'a> SqlConnection<'a> {
    /// The backend's name: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            SqlConnection::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            SqlConnection::Postgres(_) => "postgres",
        }
    }

    /// Runs `sql` as it is (no bind parameters): for a statement written for both backends.
    pub fn batch_execute(self, sql: &str) -> Result<(), diesel::result::Error> {
        use diesel::connection::SimpleConnection;
        match self {
            #[cfg(feature = "sqlite")]
            SqlConnection::Sqlite(c) => c.batch_execute(sql),
            #[cfg(feature = "postgres")]
            SqlConnection::Postgres(c) => c.batch_execute(sql),
        }
    }

    /// The connection a SQL backend's commit hands to the writes inside its transaction
    /// (`TransactionalWork::apply`), if `conn` is one.
    pub fn from_any(conn: &'a mut dyn Any) -> Option<Self> {
        #[cfg(feature = "sqlite")]
        if conn.is::<diesel::SqliteConnection>() {
            return conn
                .downcast_mut::<diesel::SqliteConnection>()
                .map(SqlConnection::Sqlite);
        }
        #[cfg(feature = "postgres")]
        if conn.is::<diesel::PgConnection>() {
            return conn
                .downcast_mut::<diesel::PgConnection>()
                .map(SqlConnection::Postgres);
        }
        None
    }
}

/// A read model kept in the application's own tables, written inside the transaction of the
/// stage that delivers its events. Registered with `.sql_projection(..)` on the builder, on
/// SQLite or PostgreSQL (the in-memory backend refuses it at build).
///
/// Each instance (id) receives its events in `seq` order; `apply` writes one of them. It is
/// synchronous because it runs on the commit's connection, inside the transaction: it is not
/// under the kind's `handler_timeout` or limits, and must do nothing but the write (no calls
/// to other systems; a reactor does those).
pub trait SqlProjection: Send + Sync + 'static {
    /// Stable name of this projection kind.
    const KIND: &'static str;
    /// The events it follows: one [`Message`](shardbox_core::Message) type, or several as an
    /// [`event_set!`](shardbox_core::event_set) enum (a multi-stream view).
    type Event: EventSet;

    /// Which instances (ids) of this projection receive `event`. By default the one with the
    /// producer's id; a view keyed by something else (a customer, a day) routes by it.
    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        let _ = event;
        vec![source.id.clone()]
    }

    /// Writes `event` to the application's tables through `conn`. An error rolls back this
    /// target's writes of the stage (the other targets of the page still commit), and the
    /// message follows the kind's failure policy.
    fn apply(&self, conn: SqlConnection<'_>, event: &Self::Event, cx: &Context<'_>) -> SqlResult;

    /// Deletes, through `conn`, what a rebuild (a catch-up) of `scope` writes again: the rows
    /// of `scope.tenant`'s instances (all, or `scope.ids`), built by events from `scope.since`
    /// on. It runs inside the transaction of the catch-up's first step, so readers see the
    /// old rows until the replay's first page replaces them. An error fails that step; it is
    /// tried again at the next pass (cancelling the catch-up stops it).
    fn reset(&self, conn: SqlConnection<'_>, scope: &RebuildScope) -> SqlResult;
}

/// A [`SqlProjection`] as the engine sees it (a
/// [`TransactionalProjection`](shardbox_core::TransactionalProjection) over the SQL backends'
/// connections).
pub struct Sql<P>(pub P);

impl<P: SqlProjection> TransactionalProjection for Sql<P> {
    const KIND: &'static str = P::KIND;
    type Event = P::Event;

    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        P::route(event, source)
    }

    fn apply_in(
        &self,
        conn: &mut dyn Any,
        event: &Self::Event,
        cx: &Context<'_>,
    ) -> Result<(), HandlerError> {
        let Some(conn) = SqlConnection::from_any(conn) else {
            return Err(no_sql::<P>());
        };
        self.0.apply(conn, event, cx).map_err(handler_error::<P>)
    }

    fn reset_in(&self, conn: &mut dyn Any, scope: &RebuildScope) -> Result<(), HandlerError> {
        let Some(conn) = SqlConnection::from_any(conn) else {
            return Err(no_sql::<P>());
        };
        self.0.reset(conn, scope).map_err(handler_error::<P>)
    }
}

/// A SQL projection's error as the failure policy sees it: a [`HandlerError`] as it is, any
/// other (a driver's) transient, named after the projection.
fn handler_error<P: SqlProjection>(e: Box<dyn std::error::Error + Send + Sync>) -> HandlerError {
    match e.downcast::<HandlerError>() {
        Ok(e) => *e,
        Err(other) => HandlerError::new(format!("SQL projection `{}`: {other}", P::KIND)),
    }
}

/// The error of a SQL projection handed a connection that is no SQL backend's.
fn no_sql<P: SqlProjection>() -> HandlerError {
    HandlerError::new(format!(
        "SQL projection `{}` was given no SQL connection: its backend does not run SQL",
        P::KIND
    ))
}

/// Runs one body of diesel code on a [`SqlConnection`], whichever backend it is: the body is
/// compiled once per backend with `$c` bound to that backend's connection, so one typed
/// query serves both (a statement only one backend has goes in a `match` instead).
///
/// ```no_run
/// # use shardbox_storage::{on_connection, SqlConnection};
/// # fn f(conn: SqlConnection<'_>) -> Result<usize, diesel::result::Error> {
/// use diesel::prelude::*;
/// diesel::table! { totals (id) { id -> Text, total -> BigInt } }
/// on_connection!(conn, |c| diesel::update(totals::table.find("o-1"))
///     .set(totals::total.eq(totals::total + 5))
///     .execute(c))
/// # }
/// ```
#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[macro_export]
macro_rules! on_connection {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::SqlConnection::Sqlite($c) => $body,
            $crate::SqlConnection::Postgres($c) => $body,
        }
    };
}

/// Runs one body of diesel code on a [`SqlConnection`] (this build has SQLite only).
#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
#[macro_export]
macro_rules! on_connection {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::SqlConnection::Sqlite($c) => $body,
        }
    };
}

/// Runs one body of diesel code on a [`SqlConnection`] (this build has PostgreSQL only).
#[cfg(all(feature = "postgres", not(feature = "sqlite")))]
#[macro_export]
macro_rules! on_connection {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::SqlConnection::Postgres($c) => $body,
        }
    };
}
