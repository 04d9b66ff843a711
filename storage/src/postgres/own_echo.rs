//! A storage instance's own writes, heard by its own listeners in process rather than by the
//! notification that comes back from PostgreSQL a moment later ([`OwnEcho`]).
//!
//! ```text
//!  commit through this instance ─► written(shards) / decided(shards)
//!      ─► every running listener of the instance: observer woken now
//!  its notification arrives     ─► listener: origin is this instance's ─► skipped
//! ```
//!
//! The listener (`listen`) asks [`OwnEcho::is_own`] and registers with [`OwnEcho::enter`];
//! the writers (`notify`, the storage) call `written` and `decided` after their commits.

use shardbox_core::storage::listener::new_origin;
use shardbox_core::sync::lock;
use shardbox_core::{ShardIndex, ShardObserver};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A storage instance's own writes: heard by its listeners in process, not by notification.
///
/// A write's notification comes back to the writing process's own listener a millisecond or
/// so after the commit. The node that wrote has usually woken those shards already
/// (`Delivery::notify`), so the echo was a second wake and a page read that found nothing
/// (about a quarter of all page reads in the two-node `latency` benchmark). Each instance
/// therefore names its notifications with an origin of its own; after a commit it wakes the
/// observers of its own running listeners at once (whoever made the write: a node, another
/// node sharing the instance, or a direct `Storage` call), and its listeners skip the
/// instance's notifications when they arrive.
#[derive(Clone)]
pub(crate) struct OwnEcho {
    origin: Arc<str>,
    local: Arc<Mutex<LocalObservers>>,
    registered: Arc<AtomicU64>,
}

impl std::fmt::Debug for OwnEcho {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnEcho")
            .field("origin", &self.origin)
            .field("listeners", &self.lock().len())
            .finish()
    }
}

impl OwnEcho {
    /// A fresh origin, no listeners.
    pub(crate) fn new() -> Self {
        OwnEcho {
            origin: Arc::from(new_origin()),
            local: Arc::new(Mutex::new(Vec::new())),
            registered: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The origin the instance's notifications carry.
    pub(crate) fn origin(&self) -> Arc<str> {
        self.origin.clone()
    }

    /// Rows were committed to `shards` through this instance: wakes its listeners' observers
    /// now, as the notification would a moment later.
    pub(crate) fn written(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        let observers: Vec<_> = self.lock().iter().map(|(_, o)| o.clone()).collect();
        for observer in observers {
            observer.on_write(shards);
        }
    }

    /// Stages of `shards` committed command outcomes through this instance: tells its
    /// listeners' observers now, as the notification would a moment later.
    pub(crate) fn decided(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        let observers: Vec<_> = self.lock().iter().map(|(_, o)| o.clone()).collect();
        for observer in observers {
            observer.on_outcomes(shards);
        }
    }

    /// Whether a notification from `origin` is this instance's own (its listeners heard the
    /// write in process already).
    pub(super) fn is_own(&self, origin: Option<&str>) -> bool {
        origin == Some(&*self.origin)
    }

    /// Registers a listener's observer for as long as the guard lives.
    pub(super) fn enter(&self, observer: Arc<dyn ShardObserver>) -> LocalListener {
        let id = self.registered.fetch_add(1, Ordering::SeqCst);
        self.lock().push((id, observer));
        LocalListener {
            echo: self.clone(),
            id,
        }
    }

    /// The observers of the running listeners (also read by the listener's tests).
    pub(super) fn lock(&self) -> MutexGuard<'_, LocalObservers> {
        // A list of observers: consistent whatever panicked while holding it.
        lock(&self.local)
    }
}

/// The observers of an instance's running listeners, by registration number.
pub(super) type LocalObservers = Vec<(u64, Arc<dyn ShardObserver>)>;

/// One running listener of an instance (see [`OwnEcho`]); unregistered when dropped.
pub(super) struct LocalListener {
    echo: OwnEcho,
    id: u64,
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        self.echo.lock().retain(|(id, _)| *id != self.id);
    }
}
