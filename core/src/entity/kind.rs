//! `EntityKind`: an entity type's `KIND`, whichever entity trait declares it, so that a
//! setting keyed by kind can name the type instead of a string the compiler cannot check.
//!
//! ```text
//!  Aggregate::KIND ─────┐
//!  Projection::KIND ────┤ EntityKind<Family>::KIND ──► builder.kind_policy_of::<T, _>(…)
//!  Reactor::KIND ───────┤                              builder.kind_handler_timeout_of::<T, _>(…)
//!  ProcessManager::KIND ┘
//! ```
//!
//! Each entity trait declares its own `KIND`, and one type could implement several of them,
//! so the trait carries a `Family` marker ([`family`]) that tells the four blanket
//! implementations apart. Callers never name it: they write `_` and the compiler finds the
//! one family the type belongs to.

use crate::entity::process::ProcessManager;
use crate::entity::traits::{Aggregate, Projection, Reactor};

/// The entity families of [`EntityKind`]: markers that tell its blanket implementations
/// apart, never built (written `_` where a family is asked for).
pub mod family {
    /// An [`Aggregate`](crate::Aggregate).
    #[derive(Debug)]
    pub enum OfAggregate {}
    /// A [`Projection`](crate::Projection).
    #[derive(Debug)]
    pub enum OfProjection {}
    /// A [`Reactor`](crate::Reactor).
    #[derive(Debug)]
    pub enum OfReactor {}
    /// A [`ProcessManager`](crate::ProcessManager).
    #[derive(Debug)]
    pub enum OfProcessManager {}
}

/// The `KIND` of an entity type of family `Family` (an aggregate, a projection, a reactor or
/// a process manager). Implemented for every such type; write the family as `_`:
///
/// ```
/// # use shardbox_core::{Aggregate, Context, HandlerError, Message};
/// # use shardbox_core::EntityKind;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)] struct Pay;
/// # impl Message for Pay { const TYPE: &'static str = "pay"; }
/// #[derive(Default, Serialize, Deserialize)]
/// struct Payments;
/// impl Aggregate for Payments {
///     const KIND: &'static str = "payments";
///     // …
/// #   type Command = Pay; type Event = Pay;
/// #   async fn handle(&self, _: &Pay, _: &Context<'_>) -> Result<Vec<Pay>, HandlerError> { Ok(vec![]) }
/// #   fn apply(&mut self, _: &Pay) {}
/// }
///
/// fn kind_of<T: EntityKind<F>, F>() -> &'static str {
///     T::KIND
/// }
/// assert_eq!(kind_of::<Payments, _>(), "payments");
/// ```
pub trait EntityKind<Family> {
    /// The type's stable kind name, as its entity trait declares it.
    const KIND: &'static str;
    /// The version of its state's shape, as its entity trait declares it (1 for a reactor,
    /// which keeps none).
    const STATE_VERSION: u32 = crate::entity::upcast::FIRST_VERSION;
}

impl<A: Aggregate> EntityKind<family::OfAggregate> for A {
    const KIND: &'static str = <A as Aggregate>::KIND;
    const STATE_VERSION: u32 = <A as Aggregate>::STATE_VERSION;
}

impl<P: Projection> EntityKind<family::OfProjection> for P {
    const KIND: &'static str = <P as Projection>::KIND;
    const STATE_VERSION: u32 = <P as Projection>::STATE_VERSION;
}

impl<R: Reactor> EntityKind<family::OfReactor> for R {
    const KIND: &'static str = <R as Reactor>::KIND;
}

impl<P: ProcessManager> EntityKind<family::OfProcessManager> for P {
    const KIND: &'static str = <P as ProcessManager>::KIND;
    const STATE_VERSION: u32 = <P as ProcessManager>::STATE_VERSION;
}
