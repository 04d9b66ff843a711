//! The cleanup station: purges delivered rows whose deduplication window (`keep_until`) has
//! passed, at most one page of them per stage so that a stage stays O(page), and only when
//! the page read saw one (a stage with nothing to purge costs no purge query).

use async_trait::async_trait;
use shardbox_core::{Conveyor, DeliveryError, Station};

/// Purges delivered rows past their window, a page at a time.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cleanup;

impl Cleanup {
    /// The station.
    pub fn new() -> Self {
        Cleanup
    }
}

#[async_trait]
impl Station for Cleanup {
    fn name(&self) -> &str {
        "cleanup"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        if conveyor.purge_due() {
            let limit = conveyor.context().config().page_size;
            conveyor.purge_delivered(limit);
        }
        Ok(())
    }
}
