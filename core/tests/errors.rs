//! Provider error classes, the permanent latch, and the blockers (unconfigured provider,
//! missing cloud-init). Each test asserts the whole decision where practical.

mod support;

use std::time::Duration;

use proxy_core::testing::{self, T0, managed_spec, status_of};
use proxy_core::{
    Action, CloudInitView, EventType, InstanceView, Observed, Outcome, ProviderCall, ProviderError,
    ProviderRequest, Requeue, decide,
};
use proxy_crd::{Phase, ProxyStatus};
use support::{
    DELETION_POLL, ID, IP, PROVISIONING_POLL, T1, creating_status, delete, deleting_status, event,
    no_address, not_provisioned, replacing_status, running_status,
};

const QUOTA_RETRY: Requeue = Requeue::After(Duration::from_secs(300));

fn create_failed(error: ProviderError) -> Outcome {
    Outcome::Failed {
        call: ProviderCall::Create,
        error,
    }
}

fn delete_failed(error: ProviderError) -> Outcome {
    Outcome::Failed {
        call: ProviderCall::Delete,
        error,
    }
}

/// `status` with the `Provisioned` condition's message replaced.
fn with_message(mut status: ProxyStatus, message: &str) -> ProxyStatus {
    status.conditions[0].message = message.to_owned();
    status
}

/// The status a permanent create error latches at `generation`.
fn latched_status(generation: i64) -> ProxyStatus {
    status_of(
        Phase::Failed,
        None,
        None,
        generation,
        [
            (
                "False",
                "PermanentError",
                "creating instance proxy-kbqzhquppopaia3n failed permanently: zone mars-1 does \
                 not exist (spec.placement.zone); nothing is retried until the spec changes",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (PermanentError)", T0),
        ],
    )
}

// ---- Transient ----------------------------------------------------------------------------

#[test]
fn transient_create_error_backs_off_and_shows_the_error() {
    let observed =
        Observed::test().outcome(create_failed(ProviderError::transient("connection reset")));
    let decision = decide(&managed_spec(), &creating_status(), &observed);
    let message =
        "creating instance proxy-kbqzhquppopaia3n failed, retrying with backoff: connection reset";
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(with_message(creating_status(), message)),
            event(EventType::Warning, "TransientError", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::Backoff);
}

#[test]
fn transient_lookup_error_keeps_the_running_proxy() {
    // A provider API hiccup says nothing new about the instance: it stays leasable.
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Error(ProviderError::transient("timeout")))
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message = "looking up instance crawl/proxy-kbqzhquppopaia3n failed, retrying with \
                   backoff: timeout";
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(with_message(running_status(), message)),
            event(EventType::Warning, "TransientError", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::Backoff);
}

#[test]
fn transient_delete_error_during_replacement_keeps_replacing() {
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .outcome(delete_failed(ProviderError::transient(
            "503 Service Unavailable",
        )));
    let decision = decide(&managed_spec(), &replacing_status(), &observed);
    let message = "deleting instance crawl/proxy-kbqzhquppopaia3n failed, retrying with \
                   backoff: 503 Service Unavailable";
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(with_message(replacing_status(), message)),
            event(EventType::Warning, "TransientError", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::Backoff);
}

// ---- Quota --------------------------------------------------------------------------------

#[test]
fn quota_on_create_is_a_condition_not_an_error() {
    let observed = Observed::test().outcome(create_failed(ProviderError::quota(
        "CPUS quota exceeded in europe-west1",
    )));
    let decision = decide(&managed_spec(), &creating_status(), &observed);
    let message = "creating instance proxy-kbqzhquppopaia3n failed, the provider's quota is \
                   used up; retrying at 2026-01-01T00:05:00Z (in 5m): CPUS quota exceeded in \
                   europe-west1";
    assert_waits_for_quota(&decision, message);
}

/// Asserts that `decision` waits for quota with no instance, saying `message`.
fn assert_waits_for_quota(decision: &proxy_core::Decision, message: &str) {
    let waiting = status_of(
        // Nothing exists yet: Pending, not Failed.
        Phase::Pending,
        None,
        None,
        1,
        [
            ("False", "QuotaExceeded", message, T0),
            no_address(T0),
            not_provisioned("not provisioned (QuotaExceeded)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(waiting),
            event(EventType::Warning, "QuotaExceeded", message),
        ]
    );
    assert_eq!(decision.requeue(), QUOTA_RETRY);
}

#[test]
fn quota_exceeded_creates_again_on_the_next_pass() {
    let observed =
        Observed::test().outcome(create_failed(ProviderError::quota("CPUS quota exceeded")));
    let waiting = decide(&managed_spec(), &creating_status(), &observed);
    let retry = decide(&managed_spec(), waiting.status(), &Observed::test().at(T1));
    assert!(matches!(
        retry.provider_call(),
        Some(ProviderRequest::Create(_))
    ));
    assert_eq!(retry.requeue(), PROVISIONING_POLL);
}

#[test]
fn quota_on_lookup_keeps_the_running_proxy_and_waits() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Error(ProviderError::quota(
            "read requests per minute",
        )))
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message = "looking up instance crawl/proxy-kbqzhquppopaia3n failed, retrying in 5m: \
                   read requests per minute";
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(with_message(running_status(), message)),
            event(EventType::Warning, "QuotaExceeded", message),
        ]
    );
    assert_eq!(decision.requeue(), QUOTA_RETRY);
}

#[test]
fn quota_on_delete_during_replacement_waits_with_the_instance_known() {
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .outcome(delete_failed(ProviderError::quota("operations per minute")));
    let decision = decide(&managed_spec(), &replacing_status(), &observed);
    let status = decision.status();
    assert_eq!(status.provider_id.as_deref(), Some(ID));
    assert_eq!(status.conditions[0].reason, "QuotaExceeded");
    // Something exists, so it is not Pending.
    assert_eq!(status.phase, Some(Phase::Provisioning));
    assert_eq!(decision.requeue(), QUOTA_RETRY);
}

// ---- Permanent and the latch ---------------------------------------------------------------

#[test]
fn permanent_create_error_fails_and_latches() {
    let observed = Observed::test().outcome(create_failed(ProviderError::permanent(
        "zone mars-1 does not exist (spec.placement.zone)",
    )));
    assert_latched_on_mars(&decide(&managed_spec(), &creating_status(), &observed));
}

/// Asserts that `decision` latches the create that failed because zone mars-1 does not exist.
fn assert_latched_on_mars(decision: &proxy_core::Decision) {
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(latched_status(1)),
            event(
                EventType::Warning,
                "PermanentError",
                "creating instance proxy-kbqzhquppopaia3n failed permanently: zone mars-1 does \
                 not exist (spec.placement.zone); nothing is retried until the spec changes",
            ),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn permanent_latch_makes_no_provider_call() {
    let decision = decide(
        &managed_spec(),
        &latched_status(1),
        &Observed::test().at(T1),
    );
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn permanent_latch_holds_with_an_instance_too() {
    // Latched by a failed lookup: the instance is still there, and is left alone.
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Stopped);
    let latched = ProxyStatus {
        provider_id: Some(ID.to_owned()),
        phase: Some(Phase::Failed),
        ..latched_status(1)
    };
    let decision = decide(&managed_spec(), &latched, &observed);
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn new_generation_releases_the_latch() {
    let observed = Observed::test().generation(2).at(T1);
    let decision = decide(&managed_spec(), &latched_status(1), &observed);
    // Provisioned stays False: its transition time stays.
    let creating = support::creating_status_for(2);
    assert!(matches!(
        decision.actions()[..],
        [Action::SetSpecHash { .. }, Action::Create(_), Action::PatchStatus(ref status), Action::Event(_)] if *status == creating
    ));
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
}

#[test]
fn permanent_lookup_error_latches() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Error(ProviderError::permanent(
            "malformed providerID",
        )))
        .health(IP, true)
        .at(T1);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message = "looking up instance crawl/proxy-kbqzhquppopaia3n failed permanently: \
                   malformed providerID; nothing is retried until the spec changes";
    let failed = status_of(
        Phase::Failed,
        Some(ID),
        None,
        1,
        [
            ("False", "PermanentError", message, T1),
            no_address(T1),
            not_provisioned("not provisioned (PermanentError)", T1),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(failed),
            event(EventType::Warning, "PermanentError", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn permanent_delete_error_during_deletion_never_latches() {
    let observed = Observed::test()
        .deleting()
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .outcome(delete_failed(ProviderError::permanent("permission denied")));
    let decision = decide(&managed_spec(), &deleting_status(), &observed);
    let message = "deleting instance crawl/proxy-kbqzhquppopaia3n failed, retrying with \
                   backoff: permission denied";
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(with_message(deleting_status(), message)),
            event(EventType::Warning, "PermanentError", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::Backoff);

    // The next pass deletes again.
    let observed = Observed::test()
        .deleting()
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let retry = decide(&managed_spec(), decision.status(), &observed);
    assert_eq!(
        retry.provider_call().cloned().map(Action::from),
        Some(delete())
    );
    assert_eq!(retry.requeue(), DELETION_POLL);
}

// ---- Blockers -----------------------------------------------------------------------------

#[test]
fn unconfigured_provider_fails_without_provider_calls() {
    let observed = Observed::test().provider_unconfigured();
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    let message = "provider \"pods\" is not in the operator's providers config";
    let failed = status_of(
        Phase::Failed,
        None,
        None,
        1,
        [
            ("False", "ProviderNotConfigured", message, T0),
            no_address(T0),
            not_provisioned("not provisioned (ProviderNotConfigured)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(failed),
            event(EventType::Warning, "ProviderNotConfigured", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn unconfigured_provider_blocks_deletion_instead_of_leaking_the_instance() {
    let observed = Observed::test().deleting().provider_unconfigured();
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message = "cannot delete instance crawl/proxy-kbqzhquppopaia3n: provider \"pods\" is \
                   not in the operator's providers config; configure the provider, or remove \
                   the finalizer crawl.example.com/instance by hand to abandon the instance";
    let blocked = status_of(
        Phase::Deleting,
        Some(ID),
        None,
        1,
        [
            ("False", "ProviderNotConfigured", message, T0),
            no_address(T0),
            not_provisioned("not provisioned (ProviderNotConfigured)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(blocked),
            event(EventType::Warning, "ProviderNotConfigured", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn unavailable_cloud_init_blocks_create() {
    let observed = Observed::test().cloud_init(CloudInitView::Unavailable {
        message: "Secret crawl/squid-init has no key user-data".to_owned(),
    });
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    let message = "cloud-init is unavailable: Secret crawl/squid-init has no key user-data; \
                   nothing is created or replaced until it is";
    let waiting = status_of(
        Phase::Pending,
        None,
        None,
        1,
        [
            ("False", "CloudInitUnavailable", message, T0),
            no_address(T0),
            not_provisioned("not provisioned (CloudInitUnavailable)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(waiting),
            event(EventType::Warning, "CloudInitUnavailable", message),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::After(Duration::from_secs(60)));
}

#[test]
fn unavailable_cloud_init_blocks_replacement() {
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .cloud_init(CloudInitView::Unavailable {
            message: "Secret crawl/squid-init not found".to_owned(),
        });
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.provider_call(), None);
    let status = decision.status();
    assert_eq!(status.conditions[0].reason, "CloudInitUnavailable");
    assert_eq!(status.provider_id.as_deref(), Some(ID));
    assert_eq!(status.ip, None);
    assert_eq!(status.phase, Some(Phase::Provisioning));
}

// ---- A create that failed after the provider accepted it ------------------------------------

/// The decision while the instance is being created, when `get` answers that its creation
/// failed with `error`.
fn creation_failed(error: ProviderError) -> proxy_core::Decision {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::CreateFailed(error));
    decide(&managed_spec(), &support::provisioning_status(), &observed)
}

#[test]
fn quota_that_failed_an_accepted_create_waits_with_no_instance_and_creates_again() {
    let decision = creation_failed(ProviderError::quota(
        "operation operation-1: Quota 'CPUS' exceeded. (QUOTA_EXCEEDED)",
    ));
    let message = "creating instance proxy-kbqzhquppopaia3n failed, the provider's quota is \
                   used up; retrying at 2026-01-01T00:05:00Z (in 5m): operation operation-1: \
                   Quota 'CPUS' exceeded. (QUOTA_EXCEEDED)";
    assert_waits_for_quota(&decision, message);
    // The next pass creates again: the providerID is gone.
    let retry = decide(&managed_spec(), decision.status(), &Observed::test().at(T1));
    assert!(matches!(
        retry.provider_call(),
        Some(ProviderRequest::Create(_))
    ));
}

#[test]
fn a_permanent_failure_of_an_accepted_create_latches_with_no_instance() {
    assert_latched_on_mars(&creation_failed(ProviderError::permanent(
        "zone mars-1 does not exist (spec.placement.zone)",
    )));
}

#[test]
fn a_transient_failure_of_an_accepted_create_backs_off_with_no_instance() {
    let decision = creation_failed(ProviderError::transient("ZONE_RESOURCE_POOL_EXHAUSTED"));
    let status = decision.status();
    assert_eq!(status.provider_id, None, "{status:?}");
    assert_eq!(status.ip, None);
    assert_eq!(
        status.conditions[0].message,
        "creating instance proxy-kbqzhquppopaia3n failed, retrying with backoff: \
         ZONE_RESOURCE_POOL_EXHAUSTED"
    );
    assert_eq!(decision.requeue(), Requeue::Backoff);
}

/// A creation failure that `get` reports for an instance the status last saw running: the
/// instance is gone, so its address goes with its providerID. Keeping the address would
/// keep `Provisioned` `True` (`Created`) for an instance that does not exist.
#[test]
fn a_failed_create_found_after_the_instance_ran_drops_its_address() {
    let failed =
        InstanceView::CreateFailed(ProviderError::transient("ZONE_RESOURCE_POOL_EXHAUSTED"));
    let observed = Observed::test().annotated(testing::hash()).instance(failed);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let status = decision.status();
    assert_eq!(status.provider_id, None, "{status:?}");
    assert_eq!(status.ip, None, "{status:?}");
    let provisioned = &status.conditions[0];
    assert_eq!(
        (provisioned.status.as_str(), provisioned.reason.as_str()),
        ("False", "Creating")
    );
    assert_eq!(decision.requeue(), Requeue::Backoff);
}

#[test]
fn a_failed_create_needs_no_delete_when_the_proxy_goes_or_is_replaced() {
    let failed = InstanceView::CreateFailed(ProviderError::quota("QUOTA_EXCEEDED"));
    let deleting = Observed::test()
        .annotated(testing::hash())
        .deleting()
        .instance(failed.clone());
    let decision = decide(&managed_spec(), &deleting_status(), &deleting);
    assert_eq!(decision.provider_call(), None);
    assert!(
        decision
            .actions()
            .iter()
            .any(|a| matches!(a, Action::RemoveFinalizer)),
        "{:?}",
        decision.actions()
    );
    let replacing = Observed::test().annotated("an-older-hash").instance(failed);
    let decision = decide(&managed_spec(), &replacing_status(), &replacing);
    assert_eq!(decision.provider_call(), None);
    assert_eq!(decision.status().provider_id, None);
}
