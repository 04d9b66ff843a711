//! Steering a kind at run time from the application: pause and resume it, change its failure
//! policy, handler timeout and limits — stored, so every node follows within a poll interval
//! (this one at once) and the change holds across restarts.

use crate::shardbox::Shardbox;
use shardbox_core::operator;
use shardbox_core::storage::ResumeReport;
use shardbox_core::{DeliveryError, EntityKind, KindControl, KindSettings};

impl Shardbox {
    /// Pauses `kind` on every node: its messages stay in the Inbox, in order, untouched (no
    /// attempt spent) until [`resume_kind`](Self::resume_kind); other kinds go on. Stored, so
    /// it holds across restarts. This node stops delivering the kind at once, the others
    /// within a poll interval (a handler call already running finishes). A message whose TTL
    /// runs out while paused is still expired. Returns whether the kind was running.
    ///
    /// `kind` must be registered here ([`DeliveryError::UnknownKind`] otherwise: a misspelled
    /// kind would pause nothing), and not one of Shardbox's own (`shardbox.…`,
    /// `ConfigError::InternalKind`; as for every kind action). A tool without the application
    /// pauses any other kind with `shardbox kinds pause`.
    ///
    /// ```no_run
    /// # async fn run(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError> {
    /// shardbox.pause_kind("mailer").await?; // the mail provider is down
    /// // … later
    /// let resumed = shardbox.resume_kind("mailer").await?;
    /// println!("{} messages due again", resumed.released);
    /// # Ok(()) }
    /// ```
    pub async fn pause_kind(&self, kind: &str) -> Result<bool, DeliveryError> {
        let env = self.env();
        env.registry.check_registered(kind)?;
        let paused = operator::pause_kind(&*env.storage, kind, env.clock.now()).await?;
        env.refresh_kind_controls().await?;
        Ok(paused)
    }

    /// [`pause_kind`](Self::pause_kind) with `E`'s `KIND` (write the family as `_`).
    pub async fn pause<E: EntityKind<F>, F>(&self) -> Result<bool, DeliveryError> {
        self.pause_kind(E::KIND).await
    }

    /// Resumes `kind`: its parked messages are due at once, in `seq` order per target, and
    /// running workers are woken (other nodes by notification on PostgreSQL, else within a
    /// poll interval). Resuming a running kind changes nothing.
    pub async fn resume_kind(&self, kind: &str) -> Result<ResumeReport, DeliveryError> {
        let env = self.env();
        env.registry.check_registered(kind)?;
        let report = operator::resume_kind(&*env.storage, kind, env.clock.now()).await?;
        env.refresh_kind_controls().await?;
        env.notify(&report.shards);
        Ok(report)
    }

    /// [`resume_kind`](Self::resume_kind) with `E`'s `KIND`.
    pub async fn resume<E: EntityKind<F>, F>(&self) -> Result<ResumeReport, DeliveryError> {
        self.resume_kind(E::KIND).await
    }

    /// Stores `settings` as `kind`'s run-time failure policy, handler timeout and limits: each
    /// set field overrides the build-time value (`kind_policy`, `kind_handler_timeout`,
    /// `kind_limits`, the defaults); `KindSettings::default()` puts the kind back on them.
    /// Every node follows within a poll interval, this one at once; stages already running
    /// finish under the old values. A value out of range is refused with
    /// [`DeliveryError::Config`] naming the field, and nothing is stored.
    ///
    /// ```no_run
    /// # async fn run(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError> {
    /// use shardbox::{KindLimits, KindSettings};
    /// shardbox
    ///     .set_kind_settings("mailer", KindSettings {
    ///         limits: KindLimits { max_concurrent: Some(8), rate_per_second: Some(50.0) },
    ///         ..KindSettings::default()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_kind_settings(
        &self,
        kind: &str,
        settings: KindSettings,
    ) -> Result<(), DeliveryError> {
        let env = self.env();
        env.registry.check_registered(kind)?;
        operator::set_kind_settings(&*env.storage, kind, &settings, env.clock.now()).await?;
        env.refresh_kind_controls().await?;
        Ok(())
    }

    /// The stored controls of every kind that has some (paused, or with run-time settings),
    /// by kind name, as the database holds them now.
    pub async fn kind_controls(&self) -> Result<Vec<KindControl>, DeliveryError> {
        Ok(operator::kind_controls(&*self.env().storage).await?)
    }
}
