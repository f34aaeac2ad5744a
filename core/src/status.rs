//! Completing the desired status from what one branch of the action table decided.
//!
//! A branch of [`decide`](fn@crate::decide) only states the provisioning facts ([`Provisioning`]):
//! the providerID, the address, and why the `Provisioned` condition says what it says.
//! Everything else in the status follows from those facts, the health verdict and the
//! metadata, in one place: the `Healthy` and `Ready` conditions, the egress address and the
//! `EgressVerified` condition (when the health check has an `egressURL`), every
//! `lastTransitionTime`, `observedGeneration`, the phase, and the events announcing what
//! changed.

use proxy_crd::{ProxySpec, ProxyStatus};

use crate::action::{Event, EventType};
use crate::banned::banned_condition;
use crate::conditions::{
    self, EGRESS_VERIFIED, HEALTHY, HealthyReason, PROVISIONED, ProvisionedReason, READY,
    ReadyReason,
};
use crate::egress;
use crate::observed::{HealthVerdict, Observed};
use crate::phase::compute_phase;

/// What a branch of the action table decided about provisioning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Provisioning {
    /// `status.providerID`.
    pub(crate) provider_id: Option<String>,
    /// `status.ip`: set only with a reason that [`is_provisioned`](ProvisionedReason::is_provisioned).
    pub(crate) ip: Option<String>,
    /// The `Provisioned` condition's reason, which also decides its status.
    pub(crate) reason: ProvisionedReason,
    /// The `Provisioned` condition's message.
    pub(crate) message: String,
}

/// The complete desired status, and the events announcing how it differs from `previous`.
///
/// Events follow changes of state, not of wording: one when the `Provisioned` condition's
/// status or reason changes, one when `Healthy` turns `True` or `False`, and one when the
/// `EgressVerified` condition's reason turns `Matches`, `Differs` or `Shared`.
pub(crate) fn complete(
    spec: &ProxySpec,
    previous: &ProxyStatus,
    observed: &Observed,
    facts: Provisioning,
) -> (ProxyStatus, Vec<Event>) {
    let Provisioning {
        provider_id,
        ip,
        reason,
        message,
    } = facts;
    let generation = observed.object.generation;
    let now = observed.now;

    // A verdict about another address (the machine this one replaced, an old endpoint) says
    // nothing about this one.
    let verdict = observed
        .health
        .as_ref()
        .filter(|verdict| ip.as_deref() == Some(verdict.host.as_str()));
    let healthy = match (&ip, verdict) {
        (None, _) => HealthyReason::NoAddress,
        (Some(_), None) => HealthyReason::AwaitingProbe,
        (Some(_), Some(verdict)) if verdict.healthy => HealthyReason::ProbeSucceeded,
        (Some(_), Some(_)) => HealthyReason::ProbeFailed,
    };
    let ready = match (reason.is_provisioned(), healthy) {
        (false, _) => ReadyReason::NotProvisioned,
        (true, HealthyReason::ProbeSucceeded) => ReadyReason::Ready,
        (true, HealthyReason::ProbeFailed) => ReadyReason::ProbeFailed,
        (true, HealthyReason::AwaitingProbe | HealthyReason::NoAddress) => {
            ReadyReason::AwaitingProbe
        }
    };

    let provisioned_status = if reason.is_provisioned() {
        conditions::TRUE
    } else {
        conditions::FALSE
    };
    let provisioned_condition = conditions::condition(
        previous,
        PROVISIONED,
        provisioned_status,
        reason.as_str(),
        message,
        generation,
        now,
    );
    let healthy_condition = conditions::condition(
        previous,
        HEALTHY,
        healthy.status(),
        healthy.as_str(),
        healthy_message(healthy, verdict, previous),
        generation,
        now,
    );
    let ready_condition = conditions::condition(
        previous,
        READY,
        ready.status(),
        ready.as_str(),
        ready_message(ready, reason),
        generation,
        now,
    );

    let mut events = Vec::new();
    let provisioned_changed = conditions::find(previous, PROVISIONED).is_none_or(|before| {
        before.status != provisioned_condition.status || before.reason != reason.as_str()
    });
    if provisioned_changed {
        events.push(Event {
            type_: reason.event_type(),
            reason: reason.as_str().to_owned(),
            message: provisioned_condition.message.clone(),
        });
    }
    let healthy_changed = conditions::find(previous, HEALTHY)
        .is_none_or(|before| before.status != healthy_condition.status);
    let health_event_type = match healthy {
        HealthyReason::ProbeSucceeded => Some(EventType::Normal),
        HealthyReason::ProbeFailed => Some(EventType::Warning),
        HealthyReason::AwaitingProbe | HealthyReason::NoAddress => None,
    };
    if let (true, Some(type_)) = (healthy_changed, health_event_type) {
        events.push(Event {
            type_,
            reason: healthy.as_str().to_owned(),
            message: healthy_condition.message.clone(),
        });
    }

    // Only with an egress URL: without one there is nothing to verify, and the statuses of
    // proxies (and recordings) from before egress checks stay as they were.
    let check = spec.health_check_or_default();
    let egress_ip = verdict
        .and_then(|verdict| verdict.egress_ip.clone())
        .filter(|_| check.egress_url.is_some());
    let mut conditions = vec![provisioned_condition, healthy_condition, ready_condition];
    if check.egress_url.is_some() {
        let (reason, message) = egress::verify(
            egress_ip.as_deref(),
            ip.as_deref(),
            &check.egress_cidrs,
            &observed.egress_shared_with,
        );
        let condition = conditions::condition(
            previous,
            EGRESS_VERIFIED,
            reason.status(),
            reason.as_str(),
            message,
            generation,
            now,
        );
        // One event per change of the verdict (not of its wording); learning nothing yet
        // is no news.
        let changed = conditions::find(previous, EGRESS_VERIFIED)
            .is_none_or(|before| before.reason != condition.reason);
        let type_ = match reason {
            egress::EgressReason::Matches => Some(EventType::Normal),
            egress::EgressReason::Differs | egress::EgressReason::Shared => {
                Some(EventType::Warning)
            }
            egress::EgressReason::Unknown => None,
        };
        if let (true, Some(type_)) = (changed, type_) {
            events.push(Event {
                type_,
                reason: format!("Egress{}", reason.as_str()),
                message: condition.message.clone(),
            });
        }
        conditions.push(condition);
    }

    let phase = compute_phase(
        observed.object.deletion_requested,
        reason.progress(provider_id.is_some()),
        verdict.map(|verdict| verdict.healthy),
    );
    let status = ProxyStatus {
        phase: Some(phase),
        provider_id,
        ip,
        observed_generation: Some(generation),
        last_probe_latency_ms: verdict.map(|verdict| i64::from(verdict.latency_ms)),
        last_health_check_time: verdict.map(|verdict| conditions::format_time(verdict.probed_at)),
        egress_ip,
        conditions: conditions
            .into_iter()
            .chain(banned_condition(
                previous,
                observed.blocked_sites.as_ref(),
                generation,
                now,
            ))
            .collect(),
    };
    (status, events)
}

/// The `Healthy` condition's message. A failing verdict names its cause
/// ([`ProbeFailure::describe`](crate::ProbeFailure::describe)). One without a cause was
/// seeded from this very status after a restart or a leader handover, so the message the
/// status already shows (with the cause the previous leader reported) is kept rather than
/// replaced by a vaguer one.
fn healthy_message(
    reason: HealthyReason,
    verdict: Option<&HealthVerdict>,
    previous: &ProxyStatus,
) -> String {
    const FAILING: &str = "probes through the proxy fail";
    match (reason, verdict.and_then(|verdict| verdict.failure)) {
        (HealthyReason::ProbeFailed, Some(failure)) => {
            format!("{FAILING}: {}", failure.describe())
        }
        (HealthyReason::ProbeFailed, None) => conditions::find(previous, HEALTHY)
            .filter(|before| {
                before.reason == reason.as_str() && before.message.starts_with(FAILING)
            })
            .map_or_else(|| FAILING.to_owned(), |before| before.message.clone()),
        (HealthyReason::ProbeSucceeded, _) => "probes through the proxy succeed".to_owned(),
        (HealthyReason::AwaitingProbe, _) => {
            "waiting for the first probe through the proxy".to_owned()
        }
        (HealthyReason::NoAddress, _) => {
            "nothing to probe until the proxy has an address".to_owned()
        }
    }
}

fn ready_message(reason: ReadyReason, provisioned: ProvisionedReason) -> String {
    match reason {
        ReadyReason::Ready => "provisioned and healthy: it can be leased".to_owned(),
        ReadyReason::NotProvisioned => format!("not provisioned ({})", provisioned.as_str()),
        ReadyReason::AwaitingProbe => "provisioned, waiting for its first probe".to_owned(),
        ReadyReason::ProbeFailed => "provisioned, but failing its probes".to_owned(),
    }
}
