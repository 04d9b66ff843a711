//! Steering a kind while nodes run: pause, resume, run-time settings — checked and logged
//! once here for the facade, the admin surface and the CLI.

use crate::model::error::{ConfigError, DeliveryError, StorageError};
use crate::model::kind_controls::{KindControl, KindSettings};
use crate::model::kind_role::is_internal_kind;
use crate::storage::{KindControlStore, ResumeReport};
use chrono::{DateTime, Utc};

/// Refuses `kind` if it is one of Shardbox's own ([`ConfigError::InternalKind`]): every kind
/// action checks it first.
pub fn check_steerable(kind: &str) -> Result<(), ConfigError> {
    if is_internal_kind(kind) {
        return Err(ConfigError::InternalKind {
            kind: kind.to_owned(),
        });
    }
    Ok(())
}

/// Pauses `kind` (see `KindControlStore::pause_kind`); returns whether it was running.
/// Shardbox's own kinds are refused ([`check_steerable`]).
pub async fn pause_kind<S>(store: &S, kind: &str, now: DateTime<Utc>) -> Result<bool, DeliveryError>
where
    S: KindControlStore + ?Sized,
{
    check_steerable(kind)?;
    let paused = store.pause_kind(kind, now).await?;
    tracing::info!(kind, newly = paused, "kind paused");
    Ok(paused)
}

/// Resumes `kind` (see `KindControlStore::resume_kind`): its parked messages are due at once.
/// Shardbox's own kinds are refused ([`check_steerable`]).
pub async fn resume_kind<S>(
    store: &S,
    kind: &str,
    now: DateTime<Utc>,
) -> Result<ResumeReport, DeliveryError>
where
    S: KindControlStore + ?Sized,
{
    check_steerable(kind)?;
    let report = store.resume_kind(kind, now).await?;
    tracing::info!(
        kind,
        was_paused = report.was_paused,
        released = report.released,
        "kind resumed"
    );
    Ok(report)
}

/// Checks and stores `settings` as `kind`'s run-time settings; an invalid value is refused
/// with an error naming the field, and nothing is stored; so are Shardbox's own kinds
/// ([`check_steerable`]).
pub async fn set_kind_settings<S>(
    store: &S,
    kind: &str,
    settings: &KindSettings,
    now: DateTime<Utc>,
) -> Result<(), DeliveryError>
where
    S: KindControlStore + ?Sized,
{
    check_steerable(kind)?;
    settings.validate()?;
    store.set_kind_settings(kind, settings, now).await?;
    tracing::info!(kind, settings = %settings.to_stored(), "kind settings changed");
    Ok(())
}

/// The stored controls of every kind that has some.
pub async fn kind_controls<S>(store: &S) -> Result<Vec<KindControl>, StorageError>
where
    S: KindControlStore + ?Sized,
{
    store.kind_controls().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStorage;

    #[tokio::test]
    async fn shardbox_s_own_kinds_are_not_steered() {
        let store = MemoryStorage::new();
        let now = Utc::now();
        let tick = crate::catch_up::TICK_KIND;
        for refused in [
            pause_kind(&store, tick, now).await.map(|_| ()),
            resume_kind(&store, tick, now).await.map(|_| ()),
            set_kind_settings(&store, tick, &KindSettings::default(), now).await,
        ] {
            let text = refused.unwrap_err().to_string();
            assert!(text.contains("Shardbox's own kinds"), "{text}");
        }
        assert!(
            store.kind_controls().await.unwrap().is_empty(),
            "nothing stored"
        );
        assert!(pause_kind(&store, "mailer", now).await.unwrap());
    }
}
