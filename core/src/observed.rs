//! The input vocabulary: everything the shell gathered before calling [`decide`](fn@crate::decide).
//!
//! An [`Observed`] holds every value `decide` depends on besides the spec and the status,
//! including the values that make a run non-deterministic elsewhere: the current time, what the
//! provider answered, what the health engine concluded, and the timing policy. Recording it
//! next to the spec and status is enough to replay a decision exactly.

use std::time::Duration;

use jiff::Timestamp;
use proxy_crd::ProxyStatus;
use serde::{Deserialize, Serialize};

use crate::banned::BlockedSites;
use crate::error::ProviderError;
use crate::probe_failure::ProbeFailure;
use crate::provider_health::ProviderDown;

/// Everything the shell observed for one reconcile of one `Proxy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// The time of the observation, read once by the shell. The core has no clock: every
    /// `lastTransitionTime` it writes is this value.
    pub now: Timestamp,
    /// The parts of the object's metadata that decide anything.
    pub object: Metadata,
    /// The cloud-init user data, as the shell resolved it from the spec.
    pub cloud_init: CloudInitView,
    /// Whether `spec.provider` names a provider in the operator's providers config.
    pub provider_configured: bool,
    /// What the provider refuses in `spec.placement`, as the Proxy is to be told, naming the
    /// field first (`spec.placement.parameters.gpu: the kubernetes provider takes no
    /// parameters`): a key of `parameters` its type does not use. The API server cannot
    /// refuse it (which parameters count depends on the provider the Proxy names), and
    /// every key enters the spec hash, so an ignored one would replace a machine for
    /// nothing. `decide` creates nothing from such a spec and replaces no serving machine
    /// with it. Left out of a recording when `None`, so recordings made before it existed
    /// replay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_problem: Option<String>,
    /// What the provider health monitor concluded about `spec.provider`, when its last
    /// check failed: new machines wait (see [`ProviderDown`]). `None` while the check
    /// passes, before the first check and for a provider without one. Left out of a
    /// recording when `None`, so recordings made before it existed replay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_down: Option<ProviderDown>,
    /// Whether the proxy's instance enforces credentials of its own (squid basic auth, from
    /// the Secret [`credentials_secret_name`](crate::naming::credentials_secret_name)): true
    /// for a Managed proxy whose provider applies them (the kubernetes provider always, gcp
    /// and kvm when the Proxy brings no cloud-init of its own, which would configure its own
    /// squid). `decide` then issues the credentials before each create and revokes them
    /// once the instance is gone. Left out of a recording when false, so recordings made
    /// before credentials existed replay unchanged.
    #[serde(default, skip_serializing_if = "is_false")]
    pub credentials: bool,
    /// The other proxies of the fleet that the health engine saw leave from the same egress
    /// address as this one ([`EgressBook::shared_with`](crate::egress::EgressBook::shared_with)),
    /// in key order. Left out of a recording when empty, so recordings made before egress
    /// checks replay unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_shared_with: Vec<crate::key::ProxyKey>,
    /// What the provider's `get(status.providerID)` answered.
    pub instance: InstanceView,
    /// The zone (or host) the instance of `status.providerID` runs in, as its provider reads
    /// it from the ID: `status.zone`, where a Proxy without `placement.zone` landed. Left
    /// out of a recording when `None`, so recordings made before it existed replay
    /// unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_zone: Option<String>,
    /// The type of `spec.provider` ([`ProviderType::External`](crate::topology::ProviderType::External)
    /// for an External proxy), which says the [`topology`](crate::topology) labels; `None`
    /// for a provider the config does not name. Left out of a recording when `None`, so
    /// recordings made before the labels replay unchanged: without it (or without
    /// [`Metadata::labels`]) no label is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_type: Option<crate::topology::ProviderType>,
    /// The outcome of the provider call the previous [`Decision`](crate::Decision) of this
    /// same reconcile asked for, or `None` on the first call. See the driving contract on
    /// [`decide`](fn@crate::decide).
    pub outcome: Option<Outcome>,
    /// The health engine's current verdict for this object's UID, if it has one.
    pub health: Option<HealthVerdict>,
    /// How many distinct sites blocked the proxy lately, from the lease book, when this
    /// replica owns the book (see [`crate::banned`]); `None` otherwise, and the `Banned`
    /// condition stays as it is. Left out of a recording when `None`, so recordings made
    /// before it existed replay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_sites: Option<BlockedSites>,
    /// How long to wait before looking again, per situation.
    pub timing: Timing,
    /// How many reconciles of this object in a row failed before this one (the shell keeps
    /// the count that [`Followup`](crate::reconcile::Followup) gives it). `decide` does not
    /// read it; the driver's plan turns a [`Requeue::Backoff`](crate::Requeue::Backoff)
    /// into a delay with it. Left out of a recording when 0, so recordings made before it
    /// existed replay unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The provider call held back by the last decision about this object, which the shell
    /// keeps per object as it keeps [`Observed::failures`] (see [`Hold`]). Left out of a
    /// recording when `None`, so recordings made before holds existed replay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
}

/// A provider call held back until a time: the wait a failed call earned (a quota, a
/// stockout, a backoff) binds every reconcile before it, whatever woke the object (its own
/// status write, a probe's report, its Pod, a leadership change). Only a change a user made
/// lifts it early: a new generation (a spec edit), or a deletion requested since.
///
/// [`decide`](fn@crate::decide) returns the hold to keep ([`Decision::hold`](crate::Decision::hold)),
/// the driver hands it to the shell ([`Followup::hold`](crate::Followup::hold)), and the
/// shell gives it back in the next observation. It lives in memory only: after a restart or
/// a leader handover, the first reconcile of each object may retry once early.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// The call held back.
    pub call: ProviderCall,
    /// Not before this time.
    pub until: Timestamp,
    /// The generation it was decided for: a spec edit lifts it.
    pub generation: i64,
    /// Whether the object was being deleted when it was decided: a deletion requested since
    /// lifts it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub deleting: bool,
    /// Zones that had no capacity for this proxy's machine, oldest first: the next create of
    /// a Proxy without `placement.zone` avoids them
    /// ([`CreateRequest::avoid_zones`](crate::CreateRequest::avoid_zones)). Kept past
    /// `until`, so that the create the hold let through still knows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stocked_out: Vec<String>,
}

impl Hold {
    /// How long it still binds an observation of `object` made at `now`: `None` when it has
    /// run out, or a user's change lifted it.
    pub fn binds(&self, object: &Metadata, now: Timestamp) -> Option<Duration> {
        if self.generation != object.generation || self.deleting != object.deletion_requested {
            return None;
        }
        Duration::try_from(self.until.duration_since(now))
            .ok()
            .filter(|left| !left.is_zero())
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The instance `status` names: `status.providerID`, unless it is missing or empty (an
/// empty ID names no instance). The shell looks this one up with the provider's `get`
/// (when the provider is configured) and [`decide`](fn@crate::decide) reads the same, so
/// the two never disagree about whether there is an instance.
pub fn instance_id(status: &ProxyStatus) -> Option<&str> {
    status.provider_id.as_deref().filter(|id| !id.is_empty())
}

/// The parts of the `Proxy`'s metadata that decide anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// `metadata.namespace`: where the kubernetes provider creates the proxy's Pod.
    pub namespace: String,
    /// `metadata.name`, for messages and for the provider's labels.
    pub name: String,
    /// `metadata.uid`: the instance name derives from it
    /// ([`instance_name`](crate::naming::instance_name)), so it survives spec changes.
    pub uid: String,
    /// `metadata.generation`, written to `status.observedGeneration` and to every condition.
    /// A permanent provider error is retried when it changes.
    pub generation: i64,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deletion_requested: bool,
    /// Whether `metadata.finalizers` holds [`proxy_crd::FINALIZER`].
    pub has_finalizer: bool,
    /// The value of the [`proxy_crd::SPEC_HASH_ANNOTATION`] annotation: the spec hash the
    /// current instance was created from. `None` or empty means the instance predates the
    /// annotation (or someone removed it), and is adopted rather than replaced.
    pub spec_hash_annotation: Option<String>,
    /// `metadata.creationTimestamp`. A new External proxy waits a bounded time after it for
    /// its first verdict, so that its first status write is its last one (see
    /// [`decide`](fn@crate::decide)). Left out of a recording when `None`, so recordings
    /// made before it existed replay unchanged; `None` never waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<Timestamp>,
    /// `metadata.labels`: which [`topology`](crate::topology) labels it carries already.
    /// Left out of a recording when `None`, so recordings made before the labels replay
    /// unchanged (`None` writes none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<crate::lease::Labels>,
}

/// The cloud-init user data, as the shell resolved it from `spec.cloudInit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum CloudInitView {
    /// `spec.cloudInit` is not set: the machine boots without user data.
    NotSet,
    /// The content: `inline`, or the referenced key of the referenced Secret.
    Resolved {
        /// The user data itself.
        content: String,
    },
    /// `spec.cloudInit.secretRef` names a Secret or a key that does not exist (or a Secret
    /// without the cloud-init label). Nothing is created or replaced until it does.
    Unavailable {
        /// Which Secret or key is missing, for the `Provisioned` condition.
        message: String,
    },
}

/// What the provider's `get(status.providerID)` answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum InstanceView {
    /// The shell did not call `get`: `status.providerID` is not set, or the provider is not
    /// configured. Anything else is a shell bug, which `decide` treats like a failed lookup.
    NotLookedUp,
    /// The instance exists but does not serve yet (booting, or running without an address).
    Provisioning,
    /// The instance runs and serves at `ip`.
    Running {
        /// The address crawlers connect to. An empty string counts as
        /// [`InstanceView::Provisioning`]: the core never publishes an empty address.
        ip: String,
    },
    /// The instance exists but is stopped.
    Stopped,
    /// The instance was terminated or failed (a Pod that `Succeeded` or `Failed`, a VM that
    /// is being deleted).
    Terminated,
    /// No instance with that providerID exists.
    NotFound,
    /// No instance with that providerID exists because its creation failed after the
    /// provider had accepted it (a cloud that creates asynchronously: GCE's insert operation
    /// ended with a quota error). Handled as the create's own failure.
    CreateFailed(ProviderError),
    /// The lookup failed; the instance's state is unknown.
    Error(ProviderError),
}

/// The provider calls a [`Decision`](crate::Decision) can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProviderCall {
    /// [`Action::Create`](crate::Action::Create).
    Create,
    /// [`Action::Delete`](crate::Action::Delete).
    Delete,
}

/// What happened when the shell executed the provider call a decision asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum Outcome {
    /// `create` succeeded, or found the instance a previous attempt created under the same
    /// deterministic name.
    Created {
        /// The provider's identifier of the instance, for `status.providerID`.
        provider_id: String,
    },
    /// `delete` was accepted, or the instance was already gone. The instance may take a
    /// while to disappear: only a later `get` answering
    /// [`InstanceView::NotFound`] says it is gone.
    Deleted,
    /// The call failed.
    Failed {
        /// Which call.
        call: ProviderCall,
        /// How it failed.
        error: ProviderError,
    },
}

/// The health engine's verdict on one proxy.
///
/// The engine owns the probing and the thresholds; the core only represents the verdict in
/// status. A verdict is used only while `host` is the address the status publishes, so a
/// replacement machine never wears its predecessor's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthVerdict {
    /// The address that was probed (`status.ip` when the probe was scheduled).
    pub host: String,
    /// Whether the proxy passes its probes, after the failure and success thresholds.
    pub healthy: bool,
    /// Latency of the last reported probe, in milliseconds.
    pub latency_ms: u32,
    /// When that probe ran.
    pub probed_at: Timestamp,
    /// Why that probe failed, when it failed and the prober said why. `None` for a verdict
    /// seeded from status (the message the status shows is kept) and in recordings made
    /// before causes were recorded, which therefore still replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<ProbeFailure>,
    /// The egress address a site sees for this proxy, as the last good probe of the health
    /// check's `egressURL` learned it (kept through probes that learned nothing). `None`
    /// without an `egressURL`, before it answered, and in recordings made before egress
    /// checks, which therefore still replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ip: Option<String>,
}

/// How long to wait before reconciling again, per situation.
///
/// A value rather than constants, so that tests can shrink it and recordings capture it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// While an instance is being created or boots.
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub provisioning_poll: Duration,
    /// While an instance runs: how soon a stopped or vanished machine is noticed, and how
    /// soon a missing cloud-init Secret is looked for again (provider state and unlabelled
    /// Secrets cannot be watched).
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub drift_poll: Duration,
    /// While an instance is being deleted, until the provider reports it gone.
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub deletion_poll: Duration,
    /// After a step whose next step should follow promptly (an instance found gone).
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub requeue_soon: Duration,
    /// After the provider's quota was exceeded.
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub quota_retry: Duration,
}

impl Default for Timing {
    /// 10 s provisioning and deletion polls, a 1 min drift poll, 1 s "soon", 5 min quota retry.
    fn default() -> Self {
        Self {
            provisioning_poll: Duration::from_secs(10),
            drift_poll: Duration::from_secs(60),
            deletion_poll: Duration::from_secs(10),
            requeue_soon: Duration::from_secs(1),
            quota_retry: Duration::from_secs(5 * 60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;

    #[test]
    fn round_trips_through_json_in_a_readable_shape() {
        let observed = Observed {
            outcome: Some(Outcome::Created {
                provider_id: "crawl/proxy-x".to_owned(),
            }),
            instance: InstanceView::Running {
                ip: "10.0.0.7".to_owned(),
            },
            ..Observed::test()
        };
        let json = serde_json::to_value(&observed).unwrap();
        assert_eq!(json["now"], "2026-01-01T00:00:00Z");
        assert_eq!(
            json["object"]["specHashAnnotation"],
            serde_json::Value::Null
        );
        assert_eq!(json["instance"]["Running"]["ip"], "10.0.0.7");
        assert_eq!(json["outcome"]["Created"]["providerId"], "crawl/proxy-x");
        assert_eq!(json["timing"]["quotaRetry"], "5m");
        let back: Observed = serde_json::from_value(json).unwrap();
        assert_eq!(back, observed);

        let failed = Outcome::Failed {
            call: ProviderCall::Delete,
            error: ProviderError::permanent("denied"),
        };
        let json = serde_json::to_value(&failed).unwrap();
        assert_eq!(json["Failed"]["error"]["class"], "Permanent");
        assert_eq!(serde_json::from_value::<Outcome>(json).unwrap(), failed);
        assert_eq!(ErrorClass::Permanent.reason(), "PermanentError");
    }
}
