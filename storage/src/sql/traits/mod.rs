//! The storage traits of shardbox-core for a diesel backend, written once.
//!
//! Each async method moves its arguments into one closure that runs on the blocking pool
//! (checkout, transaction and queries together, see [`crate::pool`]) and calls the matching
//! unit of work of the backend's `units` module.

pub(crate) mod catch_up;
pub(crate) mod dead_letters;
pub(crate) mod entities;
pub(crate) mod events;
pub(crate) mod inbox;
pub(crate) mod inspect;
pub(crate) mod kind_controls;
pub(crate) mod outbox;
pub(crate) mod registry;

/// Implements `InboxStore`, `WorkRegistry`, `EventStore`, `EntityStore`, `CatchUpStore`,
/// `DeadLetterStore`, `KindControlStore`, `OutboxStore`, `Storage` and [`crate::Inspect`] for `$storage` (which implements
/// `SchemaCheck` itself; a struct with a
/// `db: Db<Conn>` field and
/// `describe_backend()`, `written_backend(&[ShardIndex])` — told of every committed write —,
/// `decided_backend(&[ShardIndex])` — told of every commit that decided command outcomes —,
/// `write_listener_backend()` and `async node_stopped_backend()` methods) over the unit
/// functions of module `$units`.
macro_rules! storage_impls {
    ($storage:ty, $units:ident) => {
        $crate::sql::traits::inbox::inbox_store_impl!($storage, $units);
        $crate::sql::traits::dead_letters::dead_letter_store_impl!($storage, $units);
        $crate::sql::traits::kind_controls::kind_control_store_impl!($storage, $units);
        $crate::sql::traits::outbox::outbox_store_impl!($storage, $units);
        $crate::sql::traits::registry::work_registry_impl!($storage, $units);
        $crate::sql::traits::events::event_store_impl!($storage, $units);
        $crate::sql::traits::entities::entity_store_impl!($storage, $units);
        $crate::sql::traits::catch_up::catch_up_store_impl!($storage, $units);
        $crate::sql::traits::inspect::storage_and_inspect_impl!($storage, $units);
    };
}
pub(crate) use storage_impls;
