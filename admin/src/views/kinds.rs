//! The kinds view and the kind actions: every kind the live nodes register or the database
//! holds controls for, whether it is paused, its run-time settings; pause, resume and change
//! them (the library's `operator` actions).
//!
//! A tool has no registry to check a kind name against: an action is refused unless a live
//! node registers the kind or the database already holds controls for it (a misspelled kind
//! would pause nothing), and `force` lets it through (a kind whose nodes are all down).
//!
//! Shardbox's own kinds (names starting `shardbox.`, the catch-ups' ticks) are neither
//! listed nor steered: the library refuses them (`operator::check_steerable`), force or not.

use crate::error::AdminError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::operator;
use shardbox_core::storage::{KindControlStore, ResumeReport, WorkRegistry};
use shardbox_core::{
    exhausted_name, exhausted_of, is_internal_kind, Backoff, DeliveryError, FailurePolicy,
    KindControl, KindLimits, KindSettings,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// One kind, as operators see it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KindView {
    /// The entity kind.
    pub kind: String,
    /// Its role as the live nodes register it (`aggregate`, `projection`, …), if one does.
    pub role: Option<String>,
    /// The live nodes that register it.
    pub nodes: Vec<String>,
    /// Whether it is paused.
    pub paused: bool,
    /// Since when.
    pub paused_since: Option<DateTime<Utc>>,
    /// Its stored run-time settings (each unset field: the nodes' build-time value).
    pub settings: SettingsView,
    /// When its controls last changed, if it has any.
    pub updated_at: Option<DateTime<Utc>>,
}

/// Every kind, by name.
#[derive(Debug, Clone, Serialize)]
pub struct KindList {
    /// The kinds.
    pub kinds: Vec<KindView>,
}

/// Run-time settings as operators write and read them: durations in milliseconds, a back-off
/// as `fixed:<ms>` or `exponential:<base ms>:<cap ms>`. A failure policy is given whole
/// (`max_attempts`, `backoff` and `on_exhausted` together) or not at all.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SettingsView {
    /// Attempts in all (the failure policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The back-off between attempts: `fixed:<ms>` or `exponential:<base ms>:<cap ms>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    /// `dead_letter`, `drop` or `block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exhausted: Option<String>,
    /// The handler timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_timeout_ms: Option<u64>,
    /// At most this many calls of the kind at once on a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// At most this many calls per second over the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_second: Option<f64>,
}

impl SettingsView {
    /// The view of `s`.
    pub fn of(s: &KindSettings) -> Self {
        SettingsView {
            max_attempts: s.failure_policy.map(|p| p.max_attempts),
            backoff: s.failure_policy.map(|p| backoff_text(p.backoff)),
            on_exhausted: s
                .failure_policy
                .map(|p| exhausted_name(p.on_exhausted).to_owned()),
            handler_timeout_ms: s
                .handler_timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            max_concurrent: s.limits.max_concurrent,
            rate_per_second: s.limits.rate_per_second,
        }
    }

    /// The library's settings, checked: the error names the field at fault.
    pub fn to_settings(&self) -> Result<KindSettings, AdminError> {
        let failure_policy = match (&self.max_attempts, &self.backoff, &self.on_exhausted) {
            (None, None, None) => None,
            (Some(max_attempts), Some(backoff), Some(on_exhausted)) => Some(FailurePolicy::new(
                *max_attempts,
                parse_backoff(backoff)?,
                exhausted_of(on_exhausted).map_err(|e| refused("on_exhausted", &e))?,
            )),
            _ => {
                return Err(AdminError::Refused(
                    "a failure policy is given whole: max_attempts, backoff and on_exhausted \
                     together (or none of them, to keep the nodes' policy)"
                        .into(),
                ))
            }
        };
        let settings = KindSettings {
            failure_policy,
            handler_timeout: self.handler_timeout_ms.map(Duration::from_millis),
            limits: KindLimits {
                max_concurrent: self.max_concurrent,
                rate_per_second: self.rate_per_second,
            },
        };
        settings
            .validate()
            .map_err(|e| AdminError::Refused(e.to_string()))?;
        Ok(settings)
    }
}

/// A back-off in the view's words.
fn backoff_text(b: Backoff) -> String {
    match b {
        Backoff::Fixed(d) => format!("fixed:{}", d.as_millis()),
        Backoff::Exponential { base, cap } => {
            format!("exponential:{}:{}", base.as_millis(), cap.as_millis())
        }
    }
}

/// `fixed:<ms>` or `exponential:<base ms>:<cap ms>`.
fn parse_backoff(text: &str) -> Result<Backoff, AdminError> {
    let ms = |part: &str| {
        part.parse::<u64>().map(Duration::from_millis).map_err(|_| {
            refused(
                "backoff",
                &format!("`{part}` is not a number of milliseconds"),
            )
        })
    };
    let parts: Vec<&str> = text.split(':').collect();
    match parts.as_slice() {
        ["fixed", d] => Ok(Backoff::Fixed(ms(d)?)),
        ["exponential", base, cap] => Ok(Backoff::Exponential {
            base: ms(base)?,
            cap: ms(cap)?,
        }),
        _ => Err(refused(
            "backoff",
            &format!("`{text}`: expected fixed:<ms> or exponential:<base ms>:<cap ms>"),
        )),
    }
}

fn refused(field: &str, why: &str) -> AdminError {
    AdminError::Refused(format!("{field}: {why}"))
}

/// Every kind the live nodes register or the database holds controls for, but Shardbox's
/// own (see [`is_internal_kind`]).
pub async fn list<S>(storage: &S, now: DateTime<Utc>) -> Result<KindList, AdminError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    let controls: BTreeMap<String, KindControl> = storage
        .kind_controls()
        .await?
        .into_iter()
        .filter(|c| !is_internal_kind(&c.kind))
        .map(|c| (c.kind.clone(), c))
        .collect();
    let mut kinds: BTreeMap<String, KindView> = BTreeMap::new();
    for member in storage.members(now).await? {
        for k in member.kinds.iter().filter(|k| !is_internal_kind(&k.kind)) {
            let view = kinds
                .entry(k.kind.clone())
                .or_insert_with(|| empty(&k.kind));
            view.role = Some(k.role.as_str().to_owned());
            view.nodes.push(member.node_id.0.clone());
        }
    }
    for (kind, control) in controls {
        let view = kinds.entry(kind.clone()).or_insert_with(|| empty(&kind));
        view.paused = control.paused_since.is_some();
        view.paused_since = control.paused_since;
        view.settings = SettingsView::of(&control.settings);
        view.updated_at = Some(control.updated_at);
    }
    Ok(KindList {
        kinds: kinds.into_values().collect(),
    })
}

fn empty(kind: &str) -> KindView {
    KindView {
        kind: kind.to_owned(),
        role: None,
        nodes: Vec::new(),
        paused: false,
        paused_since: None,
        settings: SettingsView::default(),
        updated_at: None,
    }
}

/// Refuses an action on `kind` unless a live node registers it or it has stored controls
/// (unless `force`); refuses Shardbox's own kinds whatever `force` says.
async fn check_known<S>(
    storage: &S,
    kind: &str,
    force: bool,
    now: DateTime<Utc>,
) -> Result<(), AdminError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    operator::check_steerable(kind).map_err(DeliveryError::from)?;
    if force {
        return Ok(());
    }
    let known = list(storage, now).await?;
    if known.kinds.iter().any(|k| k.kind == kind) {
        return Ok(());
    }
    let names: Vec<&str> = known.kinds.iter().map(|k| k.kind.as_str()).collect();
    Err(AdminError::Refused(format!(
        "no live node registers a kind `{kind}` and it has no stored controls (misspelled, or \
         its nodes are down); known kinds: {}; force it to act anyway",
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    )))
}

/// What a pause did.
#[derive(Debug, Clone, Serialize)]
pub struct PauseOutcome {
    /// The kind.
    pub kind: String,
    /// Whether it was running (false: it was paused already).
    pub paused: bool,
}

/// Pauses `kind` (see `Shardbox::pause_kind`).
pub async fn pause<S>(
    storage: &S,
    kind: &str,
    force: bool,
    now: DateTime<Utc>,
) -> Result<PauseOutcome, AdminError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    check_known(storage, kind, force, now).await?;
    let paused = operator::pause_kind(storage, kind, now).await?;
    Ok(PauseOutcome {
        kind: kind.to_owned(),
        paused,
    })
}

/// What a resume did.
#[derive(Debug, Clone, Serialize)]
pub struct ResumeOutcome {
    /// The kind.
    pub kind: String,
    /// Whether it was paused.
    pub was_paused: bool,
    /// Its parked messages made due.
    pub released: usize,
    /// Their shards.
    #[serde(skip)]
    pub report: ResumeReport,
}

/// Resumes `kind` (see `Shardbox::resume_kind`).
pub async fn resume<S>(
    storage: &S,
    kind: &str,
    force: bool,
    now: DateTime<Utc>,
) -> Result<ResumeOutcome, AdminError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    check_known(storage, kind, force, now).await?;
    let report = operator::resume_kind(storage, kind, now).await?;
    Ok(ResumeOutcome {
        kind: kind.to_owned(),
        was_paused: report.was_paused,
        released: report.released,
        report,
    })
}

/// Stores `settings` as `kind`'s run-time settings (see `Shardbox::set_kind_settings`);
/// returns the kind's view after the change.
pub async fn set<S>(
    storage: &S,
    kind: &str,
    settings: &SettingsView,
    force: bool,
    now: DateTime<Utc>,
) -> Result<KindView, AdminError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    let checked = settings.to_settings()?;
    check_known(storage, kind, force, now).await?;
    operator::set_kind_settings(storage, kind, &checked, now).await?;
    list(storage, now)
        .await?
        .kinds
        .into_iter()
        .find(|k| k.kind == kind)
        .ok_or_else(|| AdminError::NotFound(format!("kind `{kind}` vanished after its change")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardbox_core::memory::MemoryStorage;
    use shardbox_core::{ExhaustedOutcome, KindRole, NodeId, RegisteredKind};

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn settings_read_as_operators_write_them_or_name_the_field() {
        let view = SettingsView {
            max_attempts: Some(3),
            backoff: Some("exponential:250:60000".into()),
            on_exhausted: Some("block".into()),
            handler_timeout_ms: Some(5000),
            max_concurrent: Some(8),
            rate_per_second: Some(2.5),
        };
        let settings = view.to_settings().unwrap();
        let policy = settings.failure_policy.unwrap();
        assert_eq!(policy.on_exhausted, ExhaustedOutcome::Block);
        assert_eq!(SettingsView::of(&settings), view);
        let text = |v: SettingsView| v.to_settings().unwrap_err().to_string();
        let half = text(SettingsView {
            max_attempts: Some(3),
            ..SettingsView::default()
        });
        assert!(half.contains("given whole"), "{half}");
        let bad = text(SettingsView {
            backoff: Some("linear:5".into()),
            ..view.clone()
        });
        assert!(bad.starts_with("backoff:"), "{bad}");
        let zero = text(SettingsView {
            max_concurrent: Some(0),
            ..view.clone()
        });
        assert!(zero.contains("limits"), "{zero}");
        let outcome = text(SettingsView {
            on_exhausted: Some("explode".into()),
            ..view
        });
        assert!(outcome.starts_with("on_exhausted:"), "{outcome}");
    }

    #[tokio::test]
    async fn unknown_kinds_are_refused_unless_forced_and_known_ones_listed() {
        let storage = MemoryStorage::new();
        let kinds = vec![RegisteredKind {
            kind: "mailer".into(),
            role: KindRole::Reactor,
        }];
        storage
            .beat(&NodeId("n1".into()), t(0), t(60), &kinds)
            .await
            .unwrap();
        let refused = pause(&storage, "mailr", false, t(1)).await.unwrap_err();
        assert!(
            refused.to_string().contains("known kinds: mailer"),
            "{refused}"
        );
        assert!(pause(&storage, "mailer", false, t(1)).await.unwrap().paused);
        assert!(pause(&storage, "ghost", true, t(2)).await.unwrap().paused);
        let list = list(&storage, t(3)).await.unwrap();
        let names: Vec<_> = list
            .kinds
            .iter()
            .map(|k| (k.kind.as_str(), k.paused))
            .collect();
        assert_eq!(names, [("ghost", true), ("mailer", true)]);
        assert_eq!(list.kinds[1].nodes, ["n1"]);
        assert_eq!(list.kinds[1].role.as_deref(), Some("reactor"));
        let resumed = resume(&storage, "mailer", false, t(4)).await.unwrap();
        assert!(resumed.was_paused);
    }

    #[tokio::test]
    async fn shardbox_s_own_kinds_are_neither_listed_nor_steered() {
        let storage = MemoryStorage::new();
        let kinds = vec![
            RegisteredKind {
                kind: "balances".into(),
                role: KindRole::Projection,
            },
            RegisteredKind {
                kind: shardbox_core::catch_up::TICK_KIND.into(),
                role: KindRole::Reactor,
            },
        ];
        storage
            .beat(&NodeId("n1".into()), t(0), t(60), &kinds)
            .await
            .unwrap();
        let names: Vec<String> = list(&storage, t(1))
            .await
            .unwrap()
            .kinds
            .into_iter()
            .map(|k| k.kind)
            .collect();
        assert_eq!(names, ["balances"]);
        let tick = shardbox_core::catch_up::TICK_KIND;
        for force in [false, true] {
            let paused = pause(&storage, tick, force, t(2)).await.unwrap_err();
            assert!(
                matches!(paused, AdminError::Refused(ref m) if m.contains("Shardbox's own kinds")),
                "{paused}"
            );
            let settings = set(&storage, tick, &SettingsView::default(), force, t(2)).await;
            assert!(settings.is_err());
            assert!(resume(&storage, tick, force, t(2)).await.is_err());
        }
        let refused = pause(&storage, "balancs", false, t(3)).await.unwrap_err();
        assert!(
            refused.to_string().contains("known kinds: balances;"),
            "the internal kind is not offered: {refused}"
        );
    }
}
