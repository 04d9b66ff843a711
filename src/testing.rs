//! A test kit for application code: given / when / then over the memory backend and a manual
//! clock, running the real delivery (every stage, station and commit), so that a test reads
//! like the behaviour it checks and needs no database, no node and no sleeping.
//!
//! ```text
//!  TestKit::new(|b| b.aggregate::<A>()…)   memory storage, ManualClock at TestKit::START
//!  given::<A>(id, [commands])              sent and delivered, with all they caused
//!  when::<A>(id, command) ─► outcome       sent, then delivered until nothing is due
//!  then: events::<A>(id) / state::<A>(id) / projection::<P>(id) / process::<P>(id)
//!  advance(d)                              the clock moves; what became due is delivered
//! ```
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use shardbox::prelude::*;
//! use shardbox::testing::TestKit;
//!
//! #[derive(Debug, Default, Serialize, Deserialize)]
//! struct Counter { n: i64 }
//! #[derive(Debug, Serialize, Deserialize)]
//! struct Add(i64);
//! impl Message for Add { const TYPE: &'static str = "kit-doc.add"; }
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! struct Added(i64);
//! impl Message for Added { const TYPE: &'static str = "kit-doc.added"; }
//!
//! impl Aggregate for Counter {
//!     const KIND: &'static str = "counter";
//!     type Command = Add;
//!     type Event = Added;
//!     async fn handle(&self, c: &Add, _: &Context<'_>) -> Result<Vec<Added>, HandlerError> {
//!         if self.n + c.0 > 10 {
//!             return Err(HandlerError::permanent("over the limit"));
//!         }
//!         Ok(vec![Added(c.0)])
//!     }
//!     fn apply(&mut self, e: &Added) { self.n += e.0; }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), shardbox::DeliveryError> {
//! let kit = TestKit::new(|b| b.aggregate::<Counter>()).await?;
//! kit.given::<Counter>("c-1", &[Add(4), Add(5)]).await?;
//! let outcome = kit.when::<Counter>("c-1", &Add(2)).await?;
//! assert!(matches!(outcome, CommandOutcome::DeadLettered { .. }), "{outcome:?}");
//! assert_eq!(kit.events::<Counter>("c-1").await?, [Added(4), Added(5)]);
//! assert_eq!(kit.state::<Counter>("c-1").await?.map(|c| c.n), Some(9));
//! # Ok(())
//! # }
//! ```
//!
//! The kit's application is an ordinary [`Shardbox`] ([`TestKit::shardbox`]): anything the
//! kit does not wrap (a post, a catch-up, the operator API) is called on it directly, then
//! [`TestKit::settle`] delivers what it caused.

use crate::{Shardbox, ShardboxBuilder};
use chrono::{DateTime, Utc};
use shardbox_core::memory::MemoryStorage;
use shardbox_core::{
    Aggregate, CommandOutcome, DeliveryError, InvalidTime, ManualClock, ProcessManager, Projection,
    ShardIndex, TimeField, MAX_DELIVER_STAGES, MAX_SPAN,
};
use std::sync::Arc;
use std::time::Duration;

/// An application under test: its kinds on the memory backend, with a manual clock.
pub struct TestKit {
    shardbox: Shardbox,
    clock: Arc<ManualClock>,
}

impl std::fmt::Debug for TestKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestKit")
            .field("now", &shardbox_core::Clock::now(&*self.clock))
            .finish_non_exhaustive()
    }
}

impl TestKit {
    /// Where the kit's clock starts: 2030-01-01T00:00:00Z, the same in every run.
    pub const START: i64 = 1_893_456_000;

    /// The application `build` registers (its kinds, services, policies: any builder
    /// setting but the storage and the clock, which the kit sets), on a fresh memory backend
    /// with a [`ManualClock`] at [`TestKit::START`]. A build error (an unregistered kind's
    /// setting, an invalid configuration) is returned as the builder gives it.
    pub async fn new(
        build: impl FnOnce(ShardboxBuilder) -> ShardboxBuilder,
    ) -> Result<TestKit, DeliveryError> {
        let start = DateTime::from_timestamp(Self::START, 0).unwrap_or_default();
        let clock = Arc::new(ManualClock::new(start));
        let builder = Shardbox::builder()
            .storage(MemoryStorage::new())
            .clock(clock.clone());
        let shardbox = build(builder).build().await?;
        Ok(TestKit { shardbox, clock })
    }

    /// The application, for what the kit does not wrap.
    pub fn shardbox(&self) -> &Shardbox {
        &self.shardbox
    }

    /// The application's clock.
    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }

    /// The clock's time.
    pub fn now(&self) -> DateTime<Utc> {
        shardbox_core::Clock::now(&*self.clock)
    }

    /// Given: `commands` were sent to aggregate `A` instance `id`, in order, and delivered with
    /// everything they caused (events fanned out, reactions, process managers' steps).
    pub async fn given<A: Aggregate>(
        &self,
        id: &str,
        commands: &[A::Command],
    ) -> Result<(), DeliveryError> {
        for command in commands {
            self.shardbox.send::<A>(id, command).await?;
        }
        self.settle().await
    }

    /// When: sends `command` to aggregate `A` instance `id`, delivers until nothing is due,
    /// and returns what became of the command (`Handled` with the ids of its events,
    /// `DeadLettered`, `Dropped`, `Blocked`, `Expired`). A command still waiting (delayed,
    /// or retrying after a failure under a back-off) is `DeliveryError::OutcomeTimeout`:
    /// [`TestKit::advance`] the clock and ask the application for it again.
    pub async fn when<A: Aggregate>(
        &self,
        id: &str,
        command: &A::Command,
    ) -> Result<CommandOutcome, DeliveryError> {
        let receipt = self.shardbox.send::<A>(id, command).await?;
        self.settle().await?;
        self.shardbox.outcome(&receipt, Duration::ZERO).await
    }

    /// Delivers until a pass over every shard finds nothing due: what a stage wrote into a
    /// shard served earlier in the pass (a reactor's or a process manager's command) is
    /// delivered by the next pass; what is delayed, or waits for a retry, stays. Handlers that
    /// keep writing to each other forever end with [`DeliveryError::StageLimit`] after
    /// [`MAX_DELIVER_STAGES`] passes.
    pub async fn settle(&self) -> Result<(), DeliveryError> {
        let mut report = self.shardbox.deliver_all().await?;
        let mut passes = 1;
        while report.stages > 0 {
            if passes == MAX_DELIVER_STAGES {
                return Err(DeliveryError::StageLimit {
                    shard: report.shard.unwrap_or(ShardIndex(0)),
                    stages: report.stages,
                });
            }
            report = self.shardbox.deliver_all().await?;
            passes += 1;
        }
        Ok(())
    }

    /// Moves the clock by `by` and delivers what became due: delayed messages, retries after
    /// their back-off, process managers' timeouts.
    /// A step past the framework's time limits (over [`MAX_SPAN`], or beyond 9999) is
    /// [`DeliveryError::InvalidTime`], and the clock stays.
    pub async fn advance(&self, by: Duration) -> Result<(), DeliveryError> {
        let invalid = || InvalidTime {
            field: TimeField::Advance,
            value: format!("{by:?}"),
        };
        let step = chrono::Duration::from_std(by).map_err(|_| invalid())?;
        if by > MAX_SPAN || self.now().checked_add_signed(step).is_none() {
            return Err(invalid().into());
        }
        self.clock.advance(step);
        self.settle().await
    }

    /// Then: the events aggregate `A` instance `id` emitted, in order.
    pub async fn events<A: Aggregate>(&self, id: &str) -> Result<Vec<A::Event>, DeliveryError> {
        let events = self.shardbox.aggregate_events::<A>(id).await?;
        Ok(events.into_iter().map(|(_, event)| event).collect())
    }

    /// Then: aggregate `A` instance `id`'s state (`None` before its first event).
    pub async fn state<A: Aggregate>(&self, id: &str) -> Result<Option<A>, DeliveryError> {
        self.shardbox.aggregate_state::<A>(id).await
    }

    /// Then: projection `P` instance `id`'s state (`None` before it applied an event).
    pub async fn projection<P: Projection>(&self, id: &str) -> Result<Option<P>, DeliveryError> {
        self.shardbox.projection_state::<P>(id).await
    }

    /// Then: process manager `P` instance `id`'s state (`None` before it started and after
    /// it finished).
    pub async fn process<P: ProcessManager>(&self, id: &str) -> Result<Option<P>, DeliveryError> {
        self.shardbox.process_state::<P>(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_step_past_the_time_limits_is_refused_and_the_clock_stays() {
        let kit = TestKit::new(|b| b).await.expect("kit");
        let before = kit.now();
        for by in [Duration::MAX, MAX_SPAN + Duration::from_secs(1)] {
            match kit.advance(by).await {
                Err(DeliveryError::InvalidTime(InvalidTime { field, .. })) => {
                    assert_eq!(field, TimeField::Advance)
                }
                other => panic!("{by:?}: {other:?}"),
            }
        }
        assert_eq!(kit.now(), before);
        kit.advance(Duration::from_secs(90))
            .await
            .expect("a minute and a half");
        assert_eq!(kit.now(), before + chrono::Duration::seconds(90));
        assert_eq!(before.timestamp(), TestKit::START);
    }
}
