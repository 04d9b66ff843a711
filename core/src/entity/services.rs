//! The application's own services (an HTTP client, a pool, a clock, a counter) as handlers
//! reach them: a type map given to the builder once and read through
//! [`Context::service`](crate::entity::context::Context::service), so no handler needs a
//! process-wide static.
//!
//! One value per type: registering a second value of a type replaces the first. Wrap a
//! service in a newtype to register two of the same type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// The services handlers may reach, by type.
#[derive(Default, Clone)]
pub struct Services {
    by_type: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("count", &self.by_type.len())
            .finish()
    }
}

impl Services {
    /// No services.
    pub fn new() -> Self {
        Services::default()
    }

    /// Makes `service` reachable as `T` (replacing an earlier `T`).
    pub fn insert<T: Send + Sync + 'static>(&mut self, service: Arc<T>) {
        self.by_type.insert(TypeId::of::<T>(), service);
    }

    /// The service of type `T`, if one was given.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.by_type
            .get(&TypeId::of::<T>())
            .and_then(|s| s.downcast_ref::<T>())
    }

    /// The service of type `T` as a shared handle (to move into a spawned task).
    pub fn get_arc<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.by_type
            .get(&TypeId::of::<T>())
            .and_then(|s| s.clone().downcast::<T>().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mailer(&'static str);

    #[test]
    fn a_service_is_found_by_its_type_only() {
        let mut services = Services::new();
        assert!(services.get::<Mailer>().is_none());
        services.insert(Arc::new(Mailer("smtp")));
        assert_eq!(services.get::<Mailer>().map(|m| m.0), Some("smtp"));
        assert_eq!(services.get_arc::<Mailer>().map(|m| m.0), Some("smtp"));
        assert!(services.get::<String>().is_none());
        services.insert(Arc::new(Mailer("ses")));
        assert_eq!(services.get::<Mailer>().map(|m| m.0), Some("ses"));
    }
}
