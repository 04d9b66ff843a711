//! Reads for debugging, tests and admin tools on [`Shardbox`]: an entity's framework-kept
//! state in any tenant, and one aggregate instance's own events, typed, in `seq` order.
//!
//! ```text
//!  aggregate_state_in / projection_state_in ─► EntityStore::load_states (kind, tenant, id)
//!                        ─► upcast to the type's STATE_VERSION, decoded (a named error)
//!  aggregate_events(_in) ─► EventStore::read_source_events, pages of EVENTS_PAGE by seq
//!                        ─► each event's payload as A::Event (type name checked), upcast
//!                           to A::Event::VERSION by the application's upcasters
//! ```
//!
//! The default-tenant reads (`aggregate_state`, `projection_state`) are in `shardbox.rs`.

use crate::shardbox::Shardbox;
use shardbox_core::{Aggregate, DeliveryError, EventSource, Projection};

/// Events read per storage call by [`Shardbox::aggregate_events_in`].
const EVENTS_PAGE: usize = 500;

impl Shardbox {
    /// The framework-kept state of aggregate `A` instance `id` of `tenant` (`None` if it has
    /// none yet). [`Shardbox::aggregate_state`] reads the default tenant (`""`).
    pub async fn aggregate_state_in<A: Aggregate>(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<A>, DeliveryError> {
        self.state_at(A::KIND, Some(A::STATE_VERSION), tenant, id)
            .await
    }

    /// The framework-kept state of projection `P` instance `id` of `tenant`.
    /// [`Shardbox::projection_state`] reads the default tenant (`""`).
    pub async fn projection_state_in<P: Projection>(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<P>, DeliveryError> {
        self.state_at(P::KIND, Some(P::STATE_VERSION), tenant, id)
            .await
    }

    /// The events aggregate `A` instance `id` (default tenant) emitted, in `seq` order, each
    /// with its `seq`: its own stream, for debugging and tests. See
    /// [`Shardbox::aggregate_events_in`].
    ///
    /// ```no_run
    /// # async fn run<A: shardbox::Aggregate>(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError>
    /// # where A::Event: std::fmt::Debug {
    /// for (seq, event) in shardbox.aggregate_events::<A>("acc-1").await? {
    ///     println!("#{seq} {event:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn aggregate_events<A: Aggregate>(
        &self,
        id: &str,
    ) -> Result<Vec<(i64, A::Event)>, DeliveryError> {
        self.aggregate_events_in::<A>("", id).await
    }

    /// The events aggregate `A` instance `id` of `tenant` emitted, in `seq` order, each with
    /// its `seq` (read in pages by `seq`, all of them: meant for one instance's history, not
    /// for a stream of millions). An event stored at an older version of its type is upcast
    /// (see [`ShardboxBuilder::upcast`](crate::ShardboxBuilder::upcast)); one an upcaster split
    /// comes as several entries with the same `seq`. A stored event of another type, one
    /// that cannot be upcast, or one that no longer deserializes, is
    /// [`DeliveryError::Payload`], naming the types and versions.
    pub async fn aggregate_events_in<A: Aggregate>(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Vec<(i64, A::Event)>, DeliveryError> {
        let source = EventSource {
            kind: A::KIND.to_owned(),
            id: id.to_owned(),
        };
        let storage = self.storage();
        let upcasters = self.upcasters();
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = storage
                .read_source_events(tenant, &source, after, EVENTS_PAGE)
                .await?;
            for stored in &page {
                // Upcast to the code's version: a split event gives several, with one seq.
                for event in stored.event.upcast_as::<A::Event>(upcasters)? {
                    events.push((stored.seq, event));
                }
            }
            match page.last() {
                Some(last) if page.len() == EVENTS_PAGE => after = last.seq,
                _ => return Ok(events),
            }
        }
    }
}
