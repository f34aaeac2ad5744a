//! Completing the desired status from what one branch of the action table decided.
//!
//! A branch of [`decide`](fn@crate::decide) only states the provisioning facts ([`Provisioning`]):
//! the providerID, the address, and why the `Provisioned` condition says what it says.
//! Everything else in the status follows from those facts, the health verdict and the
//! metadata, in one place: the `Healthy` and `Ready` conditions, the egress address and the
//! `EgressVerified` condition (when the health check has an `egressURL`), every
//! `lastTransitionTime`, `observedGeneration`, the phase, and the events announcing what
//! changed.

use jiff::Timestamp;
use proxy_crd::{Condition, ProxySpec, ProxyStatus};

use crate::banned::banned_condition;
use crate::conditions::{
    self, EGRESS_VERIFIED, HEALTHY, HealthyReason, PROVISIONED, ProvisionedReason, READY,
    ReadyReason,
};
use crate::egress::{self, EgressReason};
use crate::event::{Event, EventType};
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

/// The complete desired status, and the events announcing how it differs from `previous`
/// ([`transitions`]).
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
    // A verdict about another address (an old endpoint), or about a machine that served
    // there before this one (a replacement that reuses its predecessor's address: probed
    // before this one was provisioned), says nothing about this one.
    let serving_since = provisioned_condition
        .last_transition_time
        .parse::<Timestamp>()
        .ok()
        .filter(|_| reason.is_provisioned() && spec.mode == proxy_crd::Mode::Managed);
    let verdict = observed.health.as_ref().filter(|verdict| {
        ip.as_deref() == Some(verdict.host.as_str())
            && serving_since.is_none_or(|since| verdict.probed_at >= since)
    });
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
        conditions.push(condition);
    }

    let phase = compute_phase(
        observed.object.deletion_requested,
        reason.progress(provider_id.is_some()),
        verdict.map(|verdict| verdict.healthy),
    );
    // Where the instance runs, while the status names the instance the shell looked up.
    let zone = observed.instance_zone.clone().filter(|_| {
        provider_id.is_some() && provider_id.as_deref() == previous.provider_id.as_deref()
    });
    let status = ProxyStatus {
        phase: Some(phase),
        provider_id,
        zone,
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
    let events = transitions(previous, &status);
    (status, events)
}

/// The events announcing how `next` differs from `previous`: state changes, not wording.
///
/// One when the `Provisioned` condition's status or reason changes, one when `Healthy`
/// turns `True` or `False`, and one when the `EgressVerified` condition's reason turns
/// `Matches`, `Differs` or `Shared`. They follow from the two statuses alone, so a
/// reconcile of two decisions announces the change from the status it started with to the
/// one it writes ([`Plan`](crate::reconcile::Plan)), not the step in between that no one
/// ever saw.
pub(crate) fn transitions(previous: &ProxyStatus, next: &ProxyStatus) -> Vec<Event> {
    let mut events = Vec::new();
    // The condition `type_` of `next`, when `same` does not hold between it and the one
    // `previous` had (or `previous` had none).
    let changed = |type_: &str, same: fn(&Condition, &Condition) -> bool| {
        let now = conditions::find(next, type_)?;
        conditions::find(previous, type_)
            .is_none_or(|before| !same(before, now))
            .then_some(now)
    };
    if let Some(now) = changed(PROVISIONED, |a, b| {
        a.status == b.status && a.reason == b.reason
    }) && let Some(reason) = ProvisionedReason::parse(&now.reason)
    {
        events.push(Event {
            type_: reason.event_type(),
            reason: now.reason.clone(),
            message: now.message.clone(),
        });
    }
    if let Some(now) = changed(HEALTHY, |a, b| a.status == b.status) {
        let type_ = if now.reason == HealthyReason::ProbeSucceeded.as_str() {
            Some(EventType::Normal)
        } else if now.reason == HealthyReason::ProbeFailed.as_str() {
            Some(EventType::Warning)
        } else {
            None
        };
        events.extend(type_.map(|type_| Event {
            type_,
            reason: now.reason.clone(),
            message: now.message.clone(),
        }));
    }
    // Learning nothing about the egress yet is no news.
    if let Some(now) = changed(EGRESS_VERIFIED, |a, b| a.reason == b.reason) {
        let type_ = match now.reason.as_str() {
            r if r == EgressReason::Matches.as_str() => Some(EventType::Normal),
            r if r == EgressReason::Differs.as_str() || r == EgressReason::Shared.as_str() => {
                Some(EventType::Warning)
            }
            _ => None,
        };
        events.extend(type_.map(|type_| Event {
            type_,
            reason: format!("Egress{}", now.reason),
            message: now.message.clone(),
        }));
    }
    events
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
