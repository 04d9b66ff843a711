//! The station pipeline: an ordered, user-editable list of stations.
//!
//! The default pipeline is `catch-up`, `live-delivery`, then `cleanup`; user stations
//! (metrics, audit, rate limiting, filters) go anywhere.

use shardbox_core::Station;
use std::sync::Arc;

/// An ordered list of stations.
#[derive(Clone, Default)]
pub struct Pipeline {
    stations: Vec<Arc<dyn Station>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Pipeline {
    /// An empty pipeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// The station names, in order.
    pub fn names(&self) -> Vec<String> {
        self.stations.iter().map(|s| s.name().to_owned()).collect()
    }

    /// Appends a station.
    pub fn push(&mut self, station: impl Station) -> &mut Self {
        self.stations.push(Arc::new(station));
        self
    }

    /// Inserts a station before the one named `before` (appends if there is none).
    pub fn insert_before(&mut self, before: &str, station: impl Station) -> &mut Self {
        let at = self
            .stations
            .iter()
            .position(|s| s.name() == before)
            .unwrap_or(self.stations.len());
        self.stations.insert(at, Arc::new(station));
        self
    }

    /// Removes the stations named `name`; returns whether any was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.stations.len();
        self.stations.retain(|s| s.name() != name);
        before != self.stations.len()
    }

    pub(crate) fn into_stations(self) -> Vec<Arc<dyn Station>> {
        self.stations
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use shardbox_core::{Conveyor, DeliveryError};

    struct Named(&'static str);

    #[async_trait]
    impl Station for Named {
        fn name(&self) -> &str {
            self.0
        }
        async fn process(&self, _: &mut Conveyor) -> Result<(), DeliveryError> {
            Ok(())
        }
    }

    #[test]
    fn stations_can_be_inserted_and_removed_by_name() {
        let mut p = Pipeline::new();
        p.push(Named("live")).push(Named("cleanup"));
        p.insert_before("live", Named("catch-up"));
        p.insert_before("nowhere", Named("audit"));
        assert_eq!(p.names(), ["catch-up", "live", "cleanup", "audit"]);
        assert!(p.remove("audit"));
        assert!(!p.remove("audit"));
        assert_eq!(p.names(), ["catch-up", "live", "cleanup"]);
    }
}
