//! The three conditions a `Proxy` carries, their reasons, and their `lastTransitionTime`.
//!
//! - `Provisioned`: whether the machine behind the proxy exists and serves (Managed), or the
//!   endpoint is known (External). Its reason is a [`ProvisionedReason`], and that reason
//!   alone decides the condition's status, the event type and the phase.
//! - `Healthy`: the health engine's verdict on the address status publishes.
//! - `Ready`: `Provisioned` and `Healthy` both `True`: the proxy can be leased.
//!
//! Every condition carries the generation it was computed for, and keeps its
//! `lastTransitionTime` for as long as its status does not change.

use jiff::Timestamp;
use proxy_crd::{Condition, ProxyStatus};

use crate::event::EventType;
use crate::phase::Progress;

/// Type of the condition saying whether the machine exists and serves.
pub const PROVISIONED: &str = "Provisioned";
/// Type of the condition carrying the health engine's verdict.
pub const HEALTHY: &str = "Healthy";
/// Type of the condition saying whether the proxy can be leased.
pub const READY: &str = "Ready";
/// Type of the condition saying whether sites see the proxy leave from the address it
/// publishes, alone ([`crate::egress`]); present only when the health check has an
/// `egressURL`.
pub const EGRESS_VERIFIED: &str = "EgressVerified";

/// Condition status `True`.
pub const TRUE: &str = "True";
/// Condition status `False`.
pub const FALSE: &str = "False";
/// Condition status `Unknown`.
pub const UNKNOWN: &str = "Unknown";

/// Why the `Provisioned` condition says what it says.
///
/// The reason is the state of provisioning: the condition's status
/// ([`ProvisionedReason::is_provisioned`]), the type of the event announcing it
/// ([`ProvisionedReason::event_type`]) and the phase ([`ProvisionedReason::progress`]) all
/// derive from it, so they cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProvisionedReason {
    /// A `create` was asked for (and is retried, if it failed transiently).
    Creating,
    /// The instance exists but does not serve yet.
    Provisioning,
    /// The instance runs and `status.ip` is its address.
    Created,
    /// The spec changed: the old instance is deleted, and the replacement is created once
    /// the provider reports the old one gone (it reuses the name).
    Replacing,
    /// The instance stopped: it is deleted and a fresh one created (cattle, not pets).
    InstanceStopped,
    /// The instance was terminated: it is deleted and a fresh one created.
    InstanceTerminated,
    /// The instance vanished without being asked to: a new one is created.
    InstanceGone,
    /// The provider's quota is used up: retried later.
    QuotaExceeded,
    /// The zone had no capacity for the machine (a stockout): retried later, in the
    /// provider's next zone when the Proxy names none.
    ZoneResourcesExhausted,
    /// The cloud-init Secret or key is missing: nothing is created or replaced until it exists.
    CloudInitUnavailable,
    /// The provider rejected the spec for good: nothing is tried again until the spec
    /// changes (the latch).
    PermanentError,
    /// `spec.provider` names no configured provider.
    ProviderNotConfigured,
    /// The provider failed its last health check: no machine is created (or replaced) until
    /// a check passes.
    ProviderUnhealthy,
    /// The `Proxy` is being deleted, and its instance with it.
    Deleting,
    /// An External proxy: `status.ip` is `spec.endpoint.host`.
    ExternalEndpoint,
    /// An External proxy without `spec.endpoint` (the API server's rules prevent it).
    EndpointMissing,
}

impl ProvisionedReason {
    /// Every reason. `parse` looks a string up here, so a new variant must be added here too.
    pub const ALL: [Self; 16] = [
        Self::Creating,
        Self::Provisioning,
        Self::Created,
        Self::Replacing,
        Self::InstanceStopped,
        Self::InstanceTerminated,
        Self::InstanceGone,
        Self::QuotaExceeded,
        Self::ZoneResourcesExhausted,
        Self::CloudInitUnavailable,
        Self::PermanentError,
        Self::ProviderNotConfigured,
        Self::ProviderUnhealthy,
        Self::Deleting,
        Self::ExternalEndpoint,
        Self::EndpointMissing,
    ];

    /// The reason as written in the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "Creating",
            Self::Provisioning => "Provisioning",
            Self::Created => "Created",
            Self::Replacing => "Replacing",
            Self::InstanceStopped => "InstanceStopped",
            Self::InstanceTerminated => "InstanceTerminated",
            Self::InstanceGone => "InstanceGone",
            Self::QuotaExceeded => "QuotaExceeded",
            Self::ZoneResourcesExhausted => "ZoneResourcesExhausted",
            Self::CloudInitUnavailable => "CloudInitUnavailable",
            Self::PermanentError => "PermanentError",
            Self::ProviderNotConfigured => "ProviderNotConfigured",
            Self::ProviderUnhealthy => "ProviderUnhealthy",
            Self::Deleting => "Deleting",
            Self::ExternalEndpoint => "ExternalEndpoint",
            Self::EndpointMissing => "EndpointMissing",
        }
    }

    /// The reason a condition carries, if it is one of ours.
    pub fn parse(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == reason)
    }

    /// Whether the condition is `True`: the proxy has an address to serve from.
    pub fn is_provisioned(self) -> bool {
        // Whether an instance exists does not change whether these reasons are provisioned.
        self.progress(false) == Progress::Provisioned
    }

    /// `Warning` for what went wrong or needs a human, `Normal` for expected progress.
    pub fn event_type(self) -> EventType {
        match self {
            Self::Creating
            | Self::Provisioning
            | Self::Created
            | Self::Replacing
            | Self::Deleting
            | Self::ExternalEndpoint => EventType::Normal,
            Self::InstanceStopped
            | Self::InstanceTerminated
            | Self::InstanceGone
            | Self::QuotaExceeded
            | Self::ZoneResourcesExhausted
            | Self::CloudInitUnavailable
            | Self::PermanentError
            | Self::ProviderNotConfigured
            | Self::ProviderUnhealthy
            | Self::EndpointMissing => EventType::Warning,
        }
    }

    /// How far provisioning got, for the phase. `has_instance` is whether
    /// `status.providerID` is set: waiting on quota or cloud-init is `Pending` only while
    /// nothing has been created.
    pub fn progress(self, has_instance: bool) -> Progress {
        match self {
            Self::Created | Self::ExternalEndpoint => Progress::Provisioned,
            Self::Creating
            | Self::Provisioning
            | Self::Replacing
            | Self::InstanceStopped
            | Self::InstanceTerminated
            | Self::InstanceGone
            | Self::Deleting => Progress::InProgress,
            Self::QuotaExceeded | Self::ZoneResourcesExhausted | Self::CloudInitUnavailable
                if has_instance =>
            {
                Progress::InProgress
            }
            // Only a Proxy without an instance waits for its provider's health (a serving
            // one keeps its own reason).
            Self::QuotaExceeded
            | Self::ZoneResourcesExhausted
            | Self::CloudInitUnavailable
            | Self::ProviderUnhealthy => Progress::NotStarted,
            Self::PermanentError | Self::ProviderNotConfigured | Self::EndpointMissing => {
                Progress::Failed
            }
        }
    }
}

/// Why the `Healthy` condition says what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthyReason {
    /// `True`: the proxy passes its probes.
    ProbeSucceeded,
    /// `False`: the proxy fails its probes.
    ProbeFailed,
    /// `Unknown`: the proxy has an address but no verdict on it yet.
    AwaitingProbe,
    /// `Unknown`: the proxy has no address, so there is nothing to probe.
    NoAddress,
}

impl HealthyReason {
    /// The reason as written in the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProbeSucceeded => "ProbeSucceeded",
            Self::ProbeFailed => "ProbeFailed",
            Self::AwaitingProbe => "AwaitingProbe",
            Self::NoAddress => "NoAddress",
        }
    }

    /// The condition status this reason stands for.
    pub fn status(self) -> &'static str {
        match self {
            Self::ProbeSucceeded => TRUE,
            Self::ProbeFailed => FALSE,
            Self::AwaitingProbe | Self::NoAddress => UNKNOWN,
        }
    }
}

/// Why the `Ready` condition says what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyReason {
    /// `True`: provisioned and healthy, so it can be leased.
    Ready,
    /// `False`: `Provisioned` is not `True`.
    NotProvisioned,
    /// `False`: provisioned, but not probed yet. A proxy nobody has probed is not advertised.
    AwaitingProbe,
    /// `False`: provisioned, but failing its probes.
    ProbeFailed,
}

impl ReadyReason {
    /// The reason as written in the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::NotProvisioned => "NotProvisioned",
            Self::AwaitingProbe => "AwaitingProbe",
            Self::ProbeFailed => "ProbeFailed",
        }
    }

    /// The condition status this reason stands for.
    pub fn status(self) -> &'static str {
        match self {
            Self::Ready => TRUE,
            Self::NotProvisioned | Self::AwaitingProbe | Self::ProbeFailed => FALSE,
        }
    }
}

/// The condition of type `type_` in `status`, if there is one.
pub fn find<'a>(status: &'a ProxyStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// A condition computed for `generation` at `now`. Its `lastTransitionTime` is the one of
/// the `previous` condition of the same type when that has the same status, and `now`
/// otherwise: a new reason or message is not a transition.
pub fn condition(
    previous: &ProxyStatus,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: i64,
    now: Timestamp,
) -> Condition {
    condition_among(
        &previous.conditions,
        type_,
        status,
        reason,
        message,
        generation,
        now,
    )
}

/// [`condition`] for any object's conditions (a `ProxyPool`'s too), given as `previous`.
pub fn condition_among(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: i64,
    now: Timestamp,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_)
        .filter(|c| c.status == status)
        .map_or_else(|| format_time(now), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: Some(generation),
        last_transition_time,
    }
}

/// `time` as Kubernetes writes times: RFC 3339 in UTC, whole seconds (`2026-01-02T03:04:05Z`).
pub fn format_time(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_parses_back() {
        for reason in ProvisionedReason::ALL {
            assert_eq!(ProvisionedReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(ProvisionedReason::parse("SomethingElse"), None);
    }

    #[test]
    fn only_created_and_external_endpoint_are_provisioned() {
        let provisioned: Vec<_> = ProvisionedReason::ALL
            .into_iter()
            .filter(|r| r.is_provisioned())
            .collect();
        assert_eq!(
            provisioned,
            [
                ProvisionedReason::Created,
                ProvisionedReason::ExternalEndpoint
            ]
        );
    }

    #[test]
    fn times_are_whole_seconds_in_utc() {
        let time: Timestamp = "2026-01-02T03:04:05.678+02:00".parse().unwrap();
        assert_eq!(format_time(time), "2026-01-02T01:04:05Z");
    }

    #[test]
    fn transition_time_follows_the_status_not_the_reason() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let before = ProxyStatus {
            conditions: vec![condition(
                &ProxyStatus::default(),
                PROVISIONED,
                FALSE,
                "Creating",
                "creating".into(),
                1,
                t0,
            )],
            ..ProxyStatus::default()
        };
        let same_status = condition(
            &before,
            PROVISIONED,
            FALSE,
            "Provisioning",
            "m".into(),
            2,
            t1,
        );
        assert_eq!(same_status.last_transition_time, "2026-01-01T00:00:00Z");
        assert_eq!(same_status.observed_generation, Some(2));
        let flipped = condition(&before, PROVISIONED, TRUE, "Created", "m".into(), 2, t1);
        assert_eq!(flipped.last_transition_time, "2026-01-01T00:05:00Z");
    }
}
