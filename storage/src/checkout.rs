//! [`Manager`]: the pool's connection manager, which pings only connections that may have
//! gone stale, and never hands out again one that lost its server.
//!
//! ```text
//!  checkout ─► broken (a unit of work on it lost the server)? ─► dropped, never handed out
//!           ─► returned to the pool in good order less than TRUSTED_FOR ago? ─► handed out
//!           ─► otherwise (idle for long, or its last unit of work failed) ─► SELECT 1
//!              ─► handed out, or replaced if the ping fails
//! ```
//!
//! r2d2 can only ping every connection at every checkout, and a stage checks a connection out
//! several times (page, states, commit, next due time): on PostgreSQL a fifth of all
//! statements the `latency` benchmark sent were those pings, three round trips per message.
//! A connection that came back healthy a moment ago is as likely to work as one just pinged
//! (a server can go away between the ping and the first query either way); one idle for
//! longer — the case of a restarted server dropping idle connections — is still pinged.
//!
//! Trusting a connection is only safe if "healthy" is true. diesel 2.3's `is_broken` looks at
//! its transaction manager alone: a statement that fails while diesel prepares it (the first
//! use of each statement on a connection) never updates that manager, so a connection whose
//! server terminated it came back "healthy", was trusted, and — r2d2 handing out the most
//! recently returned connection first — came back to the next unit of work, again and again:
//! sends failed with "no connection to the server" for as long as traffic kept it busy. So the
//! pool's caller reports each unit of work's outcome ([`Pooled::settle`]): a failure that lost
//! the connection breaks it for good whatever diesel thinks, and any other failure makes the
//! next checkout ping it.

use crate::error::Failure;
use diesel::r2d2::{ConnectionManager, ManageConnection, R2D2Connection};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// How long after its return in good order a connection is handed out without a ping.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_secs(1);

/// What the pool knows of a connection's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    /// It came back in good order at this instant.
    Returned(Instant),
    /// Its last unit of work failed: ping it before handing it out.
    Suspect,
    /// It lost its server: drop it.
    Broken,
}

/// A pooled connection and what the pool knows of its health.
pub(crate) struct Pooled<C> {
    conn: C,
    health: Health,
}

impl<C> Pooled<C> {
    /// Records how a unit of work on this connection ended: a failure that lost the
    /// connection breaks it (it is dropped as it goes back to the pool), any other failure
    /// has it pinged at its next checkout.
    pub(crate) fn settle<T>(&mut self, outcome: &Result<T, Failure>) {
        match outcome {
            Ok(_) => {}
            Err(failure) if failure.lost_connection() => self.health = Health::Broken,
            Err(Failure::Db(_) | Failure::OutcomeUnknown(_)) => {
                if self.health != Health::Broken {
                    self.health = Health::Suspect;
                }
            }
            // A typed outcome of the work itself (a lost lease, a corrupt row) says nothing
            // about the connection.
            Err(Failure::Storage(_)) => {}
        }
    }
}

impl<C> Deref for Pooled<C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.conn
    }
}

impl<C> DerefMut for Pooled<C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.conn
    }
}

/// Opens diesel connections for the pool and checks them as described above.
pub(crate) struct Manager<C: R2D2Connection + 'static> {
    inner: ConnectionManager<C>,
}

impl<C: R2D2Connection + Send + 'static> Manager<C> {
    /// A manager opening connections to `url`.
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Manager {
            inner: ConnectionManager::new(url),
        }
    }
}

impl<C: R2D2Connection + Send + 'static> ManageConnection for Manager<C> {
    type Connection = Pooled<C>;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<Pooled<C>, Self::Error> {
        Ok(Pooled {
            conn: self.inner.connect()?,
            health: Health::Returned(Instant::now()),
        })
    }

    fn is_valid(&self, conn: &mut Pooled<C>) -> Result<(), Self::Error> {
        match conn.health {
            Health::Returned(at) if at.elapsed() < TRUSTED_FOR => Ok(()),
            // Never handed out again (it does not come back to the pool broken; this is for
            // a caller that checks a connection it holds).
            Health::Broken => Err(diesel::r2d2::Error::QueryError(
                diesel::result::Error::BrokenTransactionManager,
            )),
            _ => {
                self.inner.is_valid(&mut conn.conn)?;
                conn.health = Health::Returned(Instant::now());
                Ok(())
            }
        }
    }

    /// Called as the connection goes back to the pool: a connection in good order is
    /// trusted from now on, unless its unit of work failed.
    fn has_broken(&self, conn: &mut Pooled<C>) -> bool {
        let broken = conn.health == Health::Broken || self.inner.has_broken(&mut conn.conn);
        if !broken && conn.health != Health::Suspect {
            conn.health = Health::Returned(Instant::now());
        }
        broken
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;
    use crate::test_schema::pg_url;
    use diesel::connection::SimpleConnection;
    use diesel::sql_types::Integer;
    use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};

    #[derive(QueryableByName)]
    struct Pid {
        #[diesel(sql_type = Integer)]
        pid: i32,
    }

    fn backend_pid(conn: &mut PgConnection) -> i32 {
        diesel::sql_query("SELECT pg_backend_pid() AS pid")
            .get_result::<Pid>(conn)
            .expect("pid")
            .pid
    }

    /// A connection the server dropped while it sat in the pool: within `TRUSTED_FOR` of its
    /// return it is handed out as it is (its first query fails and it is discarded); after
    /// that it is pinged at checkout and replaced.
    #[test]
    fn a_connection_idle_past_the_trust_is_pinged_and_replaced() {
        let Some(url) = pg_url("a_connection_idle_past_the_trust_is_pinged_and_replaced") else {
            return;
        };
        let pool = diesel::r2d2::Pool::builder()
            .max_size(1)
            .test_on_check_out(true)
            .build(Manager::<PgConnection>::new(url.clone()))
            .expect("pool");
        let mut admin = PgConnection::establish(&url).expect("admin");
        let kill = |admin: &mut PgConnection, pid: i32| {
            admin
                .batch_execute(&format!("SELECT pg_terminate_backend({pid})"))
                .expect("terminate");
            std::thread::sleep(Duration::from_millis(100));
        };

        let first = backend_pid(&mut pool.get().expect("checkout"));
        kill(&mut admin, first);
        let mut trusted = pool.get().expect("checkout");
        assert!(
            trusted.batch_execute("SELECT 1").is_err(),
            "handed out unpinged, the dropped connection fails its first query"
        );
        drop(trusted);
        let second = backend_pid(&mut pool.get().expect("checkout"));
        assert_ne!(second, first, "the broken connection was discarded");

        kill(&mut admin, second);
        std::thread::sleep(TRUSTED_FOR);
        let third = backend_pid(&mut pool.get().expect("checkout"));
        assert_ne!(third, second, "pinged at checkout and replaced");
    }
}
