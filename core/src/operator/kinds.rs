//! Steering a kind while nodes run: pause, resume, run-time settings — checked and logged
//! once here for the facade, the admin surface and the CLI.

use crate::model::error::{DeliveryError, StorageError};
use crate::model::kind_controls::{KindControl, KindSettings};
use crate::storage::{KindControlStore, ResumeReport};
use chrono::{DateTime, Utc};

/// Pauses `kind` (see `KindControlStore::pause_kind`); returns whether it was running.
pub async fn pause_kind<S>(store: &S, kind: &str, now: DateTime<Utc>) -> Result<bool, StorageError>
where
    S: KindControlStore + ?Sized,
{
    let paused = store.pause_kind(kind, now).await?;
    tracing::info!(kind, newly = paused, "kind paused");
    Ok(paused)
}

/// Resumes `kind` (see `KindControlStore::resume_kind`): its parked messages are due at once.
pub async fn resume_kind<S>(
    store: &S,
    kind: &str,
    now: DateTime<Utc>,
) -> Result<ResumeReport, StorageError>
where
    S: KindControlStore + ?Sized,
{
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
/// with an error naming the field, and nothing is stored.
pub async fn set_kind_settings<S>(
    store: &S,
    kind: &str,
    settings: &KindSettings,
    now: DateTime<Utc>,
) -> Result<(), DeliveryError>
where
    S: KindControlStore + ?Sized,
{
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
