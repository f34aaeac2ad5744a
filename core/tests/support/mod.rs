//! Fixtures shared by the table tests: the canonical statuses of a Managed proxy at each
//! stage, as `decide` writes them, and shorthands for the conditions that repeat.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::time::Duration;

use proxy_core::testing::{Cond, PROVIDER, T0, status_of};
use proxy_core::{Action, Event, EventType, Requeue};
use proxy_crd::{Phase, ProxyStatus};

/// `Timing::default().provisioning_poll`.
pub const PROVISIONING_POLL: Requeue = Requeue::After(Duration::from_secs(10));
/// `Timing::default().drift_poll`.
pub const DRIFT_POLL: Requeue = Requeue::After(Duration::from_secs(60));
/// `Timing::default().deletion_poll`.
pub const DELETION_POLL: Requeue = Requeue::After(Duration::from_secs(10));
/// `Timing::default().requeue_soon`.
pub const SOON: Requeue = Requeue::After(Duration::from_secs(1));

/// An `Action::Event`.
pub fn event(type_: EventType, reason: &str, message: &str) -> Action {
    Action::Event(Event {
        type_,
        reason: reason.to_owned(),
        message: message.to_owned(),
    })
}

/// The delete of the fixture instance.
pub fn delete() -> Action {
    Action::Delete {
        provider: PROVIDER.to_owned(),
        provider_id: ID.to_owned(),
    }
}

/// The providerID the kubernetes provider returns for the fixture proxy.
pub const ID: &str = "crawl/proxy-kbqzhquppopaia3n";
/// The address of the fixture instance once it runs.
pub const IP: &str = "10.0.0.7";
/// Five minutes after [`T0`].
pub const T1: &str = "2026-01-01T00:05:00Z";

/// `Healthy=Unknown/NoAddress`.
pub fn no_address(time: &str) -> Cond<'_> {
    (
        "Unknown",
        "NoAddress",
        "nothing to probe until the proxy has an address",
        time,
    )
}

/// `Healthy=Unknown/AwaitingProbe`.
pub fn awaiting_probe(time: &str) -> Cond<'_> {
    (
        "Unknown",
        "AwaitingProbe",
        "waiting for the first probe through the proxy",
        time,
    )
}

/// `Provisioned=True/Created`: the instance runs at [`IP`].
pub fn created(time: &str) -> Cond<'_> {
    (
        "True",
        "Created",
        "instance crawl/proxy-kbqzhquppopaia3n is running at 10.0.0.7",
        time,
    )
}

/// `Healthy=True/ProbeSucceeded`.
pub fn probe_succeeded(time: &str) -> Cond<'_> {
    (
        "True",
        "ProbeSucceeded",
        "probes through the proxy succeed",
        time,
    )
}

/// `Ready=False/NotProvisioned`, with the message naming the `Provisioned` reason.
pub fn not_provisioned<'a>(message: &'a str, time: &'a str) -> Cond<'a> {
    ("False", "NotProvisioned", message, time)
}

/// `Ready=True/Ready`.
pub fn ready(time: &str) -> Cond<'_> {
    (
        "True",
        "Ready",
        "provisioned and healthy: it can be leased",
        time,
    )
}

/// The instance was created and boots (what the second call after a create writes, a poll
/// later).
pub fn provisioning_status() -> ProxyStatus {
    provisioning_status_since(T0)
}

/// [`provisioning_status`], its conditions changed at `time`.
pub fn provisioning_status_since(time: &str) -> ProxyStatus {
    status_of(
        Phase::Provisioning,
        Some(ID),
        None,
        1,
        [
            (
                "False",
                "Provisioning",
                "instance crawl/proxy-kbqzhquppopaia3n is starting",
                time,
            ),
            no_address(time),
            not_provisioned("not provisioned (Provisioning)", time),
        ],
    )
}

/// The instance runs at [`IP`] and passes its probes (probed at [`T0`], 42 ms).
pub fn running_status() -> ProxyStatus {
    ready_status_since(T0)
}

/// As [`running_status`], with `Healthy` and `Ready` turned `True` at `turned`.
pub fn ready_status_since(turned: &str) -> ProxyStatus {
    ProxyStatus {
        last_probe_latency_ms: Some(42),
        last_health_check_time: Some(T0.to_owned()),
        ..status_of(
            Phase::Ready,
            Some(ID),
            Some(IP),
            1,
            [created(T0), probe_succeeded(turned), ready(turned)],
        )
    }
}

/// What the first call of a reconcile writes when it asks for a create.
pub fn creating_status() -> ProxyStatus {
    creating_status_for(1)
}

/// [`creating_status`] for generation `generation` of the spec.
pub fn creating_status_for(generation: i64) -> ProxyStatus {
    status_of(
        Phase::Provisioning,
        None,
        None,
        generation,
        [
            (
                "False",
                "Creating",
                "creating instance proxy-kbqzhquppopaia3n with provider pods",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (Creating)", T0),
        ],
    )
}

/// What the first call writes when the spec changed under a running instance.
pub fn replacing_status() -> ProxyStatus {
    status_of(
        Phase::Provisioning,
        Some(ID),
        None,
        1,
        [
            (
                "False",
                "Replacing",
                "the spec changed: deleting instance crawl/proxy-kbqzhquppopaia3n to replace it; \
                 the replacement reuses its name, so it is created once the old one is gone",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (Replacing)", T0),
        ],
    )
}

/// What the first call writes when it deletes the instance of a Proxy being deleted.
pub fn deleting_status() -> ProxyStatus {
    status_of(
        Phase::Deleting,
        Some(ID),
        None,
        1,
        [
            (
                "False",
                "Deleting",
                "deleting instance crawl/proxy-kbqzhquppopaia3n",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (Deleting)", T0),
        ],
    )
}
