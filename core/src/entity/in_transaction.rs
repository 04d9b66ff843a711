//! What an entity's handling leaves for the stage commit's transaction: the writes of a
//! target's handled messages ([`InTransactionApply`]), and what a rebuild empties first
//! ([`RebuildScope`]). The backend runs them on its own connection (see
//! `storage::InTransaction`); this file knows neither the backend nor the adapters.

use crate::entity::handler_error::HandlerError;
use chrono::{DateTime, Utc};
use std::any::Any;
use std::sync::Arc;

/// One target's handled messages, to be written inside the stage's transaction.
pub trait TransactionalApply: Send + Sync {
    /// How many messages it writes.
    fn len(&self) -> usize;

    /// Whether it writes nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes message `index` through `conn` (the backend's connection).
    fn apply(&self, conn: &mut dyn Any, index: usize) -> Result<(), HandlerError>;
}

/// The writes a [`BatchResult`] leaves for the commit's transaction.
#[derive(Clone)]
pub struct InTransactionApply(pub Arc<dyn TransactionalApply>);

impl std::fmt::Debug for InTransactionApply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InTransactionApply")
            .field(&self.0.len())
            .finish()
    }
}

impl PartialEq for InTransactionApply {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What a catch-up rebuilds: the instances of one tenant, all of them or some, from all of
/// history or from a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildScope {
    /// The projection's kind.
    pub kind: String,
    /// The tenant of the instances.
    pub tenant: String,
    /// These instances only; `None`: every instance of the tenant.
    pub ids: Option<Vec<String>>,
    /// The replay starts with the events that occurred at or after this time (`None`: all of
    /// history): a reset should delete only what those events build.
    pub since: Option<DateTime<Utc>>,
}
