//! The `Station` trait: one step of the pipeline a Conveyor is carried through.
//!
//! A station reads the page on the [`Conveyor`] and records intents (deliver, hold, retry,
//! remove…) and effects (states, emitted events). It writes nothing itself: the delivery
//! commits everything the stations recorded in one fenced transaction after the last station.

use crate::model::error::DeliveryError;
use crate::stage::conveyor::Conveyor;
use async_trait::async_trait;

/// One step of the delivery pipeline.
///
/// ```
/// use async_trait::async_trait;
/// use shardbox_core::{Conveyor, DeliveryError, Station};
///
/// /// Counts pages, for illustration.
/// struct PageCounter(std::sync::atomic::AtomicUsize);
///
/// #[async_trait]
/// impl Station for PageCounter {
///     fn name(&self) -> &str { "page-counter" }
///     async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
///         self.0.fetch_add(conveyor.page().len(), std::sync::atomic::Ordering::Relaxed);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Station: Send + Sync + 'static {
    /// A short name for logs and errors.
    fn name(&self) -> &str;

    /// Works on the page. An error aborts the stage: nothing of it is committed and the page
    /// is read again at the next stage.
    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError>;
}
