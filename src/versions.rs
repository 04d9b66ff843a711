//! Read models' versions from the facade: a new version built beside the served one and
//! switched to in one fenced step (blue/green), which kind serves, an old version retired.
//!
//! ```text
//!  build_version(model, kind) ─► a catch-up of `kind` over the whole history, marked as
//!     building `model`'s next version; the served kind keeps serving and receiving live events
//!  the job completes ─► the same stage commit switches `model` to `kind` (ReadModelVersion)
//!  served_kind(model) ─► what reads should use now · retire_version(model, old) ─► its states
//! ```

use crate::catch_up::CatchUpHandle;
use crate::shardbox::Shardbox;
use shardbox_core::catch_up::CatchUp;
use shardbox_core::storage::ReadModelVersion;
use shardbox_core::DeliveryError;

impl Shardbox {
    /// Builds a new version of read model `model` beside the one serving it (blue/green): the
    /// projection kind `kind` — registered on this node, following the events the model needs,
    /// with its own states or its own tables — is rebuilt from the whole history while the
    /// served kind keeps serving reads and receiving live events. The new kind's live events
    /// wait until the replay has passed them (as in any catch-up); the stage commit that
    /// completes the job releases them and switches the model to `kind` in the same
    /// transaction, so nothing is lost or applied twice across the switch. Until then
    /// [`Shardbox::served_kind`] names the old kind; a cancel of the job
    /// ([`CatchUpHandle::cancel`]) leaves it serving.
    ///
    /// A read model is named by the kind that served it first: until its first switch,
    /// `model` is served by the projection kind of that name. The build covers the default
    /// tenant. Refused with `StorageError::VersionRefused` while another build of `model` runs
    /// or for the kind serving it now; with [`DeliveryError::UnknownKind`] if `kind` is not
    /// registered. Watch it with the handle, `shardbox catch-up list` or the dashboard.
    pub async fn build_version(
        &self,
        model: &str,
        kind: &str,
    ) -> Result<CatchUpHandle, DeliveryError> {
        self.start_catch_up(kind, CatchUp::all(), Some(model.to_owned()))
            .await
    }

    /// The version record of `model`: the kind serving it, the one being built (and its job),
    /// the one served before the last switch.
    pub async fn read_model_version(&self, model: &str) -> Result<ReadModelVersion, DeliveryError> {
        Ok(self
            .read_model_versions()
            .await?
            .into_iter()
            .find(|v| v.model == model)
            .unwrap_or_else(|| ReadModelVersion::first(model)))
    }

    /// The projection kind that serves read model `model` now: the one reads should use.
    pub async fn served_kind(&self, model: &str) -> Result<String, DeliveryError> {
        Ok(self.read_model_version(model).await?.served)
    }

    /// Every read model that was ever built beside (a model never built has no record).
    pub async fn read_model_versions(&self) -> Result<Vec<ReadModelVersion>, DeliveryError> {
        Ok(self.env().storage.read_model_versions().await?)
    }

    /// Retires version `kind` of read model `model`, one it no longer serves: deletes the
    /// framework-kept states of that kind (every tenant) and forgets it as the previous
    /// version; returns how many states it deleted. Refused with
    /// `StorageError::VersionRefused` for the served kind and the one being built. A SQL
    /// projection's tables are the application's to drop; remove the kind's registration
    /// from the application too, or its live events keep coming.
    pub async fn retire_version(&self, model: &str, kind: &str) -> Result<u64, DeliveryError> {
        let deleted = self.env().storage.retire_version(model, kind).await?;
        tracing::info!(%model, %kind, deleted, "read model version retired");
        Ok(deleted)
    }
}
