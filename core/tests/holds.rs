//! Waits are binding (issue 38): a failed provider call earns a [`Hold`] that every decision
//! before its time keeps, whatever woke the object; only a spec edit or a deletion requested
//! since lifts it. And the new error classes: a stockout moves zones, a refusal never
//! latches.

mod support;

use std::time::Duration;

use proxy_core::testing::{at, managed_spec};
use proxy_core::{
    ErrorClass, Hold, InstanceView, Observed, Outcome, ProviderCall, ProviderError,
    ProviderRequest, Reconcile, Requeue, decide,
};
use proxy_crd::{Phase, ProxySpec, ProxyStatus};
use support::{ID, IP, creating_status, running_status};

fn failed(call: ProviderCall, error: ProviderError) -> Outcome {
    Outcome::Failed { call, error }
}

/// The decision of the create that failed with `error`, as the second call of a reconcile.
fn create_failed_with(error: ProviderError) -> proxy_core::Decision {
    let observed = Observed::test().outcome(failed(ProviderCall::Create, error));
    decide(&managed_spec(), &creating_status(), &observed)
}

fn quota_hold() -> Hold {
    Hold {
        call: ProviderCall::Create,
        until: at("2026-01-01T00:05:00Z"),
        generation: 1,
        deleting: false,
        stocked_out: Vec::new(),
    }
}

fn unpinned() -> ProxySpec {
    let mut spec = managed_spec();
    if let Some(placement) = spec.placement.as_mut() {
        placement.zone = None;
    }
    spec
}

#[test]
fn a_quota_failure_holds_the_create_for_the_quota_delay() {
    let decision = create_failed_with(ProviderError::quota("Quota 'CPUS' exceeded."));
    assert_eq!(decision.hold(), Some(&quota_hold()));
    assert_eq!(decision.requeue(), Requeue::After(Duration::from_secs(300)));
    let message = &decision.status().conditions[0].message;
    assert!(
        message.contains("retrying at 2026-01-01T00:05:00Z (in 5m)"),
        "{message}"
    );
}

#[test]
fn whatever_wakes_a_held_proxy_before_its_time_no_create_goes_out() {
    let quota = create_failed_with(ProviderError::quota("Quota 'CPUS' exceeded."));
    // Its own status write, a second later; a probe, a Pod, a leadership change later on:
    // each is a reconcile with the same object.
    for (now, left) in [
        ("2026-01-01T00:00:01Z", 299),
        ("2026-01-01T00:02:00Z", 180),
        ("2026-01-01T00:04:59Z", 1),
    ] {
        let observed = Observed::test().at(now).hold(quota_hold());
        let decision = decide(&managed_spec(), quota.status(), &observed);
        assert_eq!(decision.provider_call(), None, "at {now}");
        assert_eq!(decision.metadata(), [], "at {now}");
        assert_eq!(decision.status_write(), None, "at {now}");
        assert_eq!(decision.events(), [], "at {now}");
        assert_eq!(
            decision.requeue(),
            Requeue::Held(Duration::from_secs(left)),
            "at {now}"
        );
        assert_eq!(decision.hold(), Some(&quota_hold()), "kept at {now}");
    }
    // At the retry time, the create goes out.
    let observed = Observed::test()
        .at("2026-01-01T00:05:00Z")
        .hold(quota_hold());
    let decision = decide(&managed_spec(), quota.status(), &observed);
    assert!(matches!(
        decision.provider_call(),
        Some(ProviderRequest::Create(_))
    ));
}

#[test]
fn a_held_reconcile_keeps_the_failure_count() {
    let observed = Observed {
        failures: 4,
        ..Observed::test()
            .at("2026-01-01T00:01:00Z")
            .hold(quota_hold())
    };
    let status = create_failed_with(ProviderError::quota("q"))
        .status()
        .clone();
    let started = Reconcile::start(managed_spec(), status, observed);
    let proxy_core::Next::Done(plan) = started.metadata_written() else {
        panic!("a held reconcile makes no call");
    };
    let followup = plan.followup();
    assert_eq!(followup.failures, 4, "a held wait is not a new attempt");
    assert_eq!(followup.hold, Some(quota_hold()));
}

#[test]
fn a_spec_edit_or_a_deletion_lifts_a_hold() {
    let status = create_failed_with(ProviderError::quota("q"))
        .status()
        .clone();
    let edited = Observed::test()
        .at("2026-01-01T00:01:00Z")
        .generation(2)
        .hold(quota_hold());
    assert!(matches!(
        decide(&managed_spec(), &status, &edited).provider_call(),
        Some(ProviderRequest::Create(_))
    ));
    // Deleted: nothing was created, so the finalizer goes at once instead of waiting.
    let deleted = Observed::test()
        .at("2026-01-01T00:01:00Z")
        .deleting()
        .hold(quota_hold());
    let decision = decide(&managed_spec(), &status, &deleted);
    assert!(
        decision
            .metadata()
            .contains(&proxy_core::MetadataWrite::RemoveFinalizer),
        "{decision:?}"
    );
}

#[test]
fn a_failed_delete_holds_the_delete_for_its_backoff() {
    // A replacement's delete fails transiently, for the third time in a row.
    let observed = Observed {
        failures: 2,
        ..Observed::test()
            .annotated("an-older-hash")
            .instance(InstanceView::Running { ip: IP.to_owned() })
            .outcome(failed(
                ProviderCall::Delete,
                ProviderError::transient("connection reset"),
            ))
    };
    let first = decide(
        &managed_spec(),
        &running_status(),
        &Observed {
            outcome: None,
            ..observed.clone()
        },
    );
    let decision = decide(&managed_spec(), first.status(), &observed);
    let hold = decision.hold().cloned().expect("held");
    assert_eq!(hold.call, ProviderCall::Delete);
    assert_eq!(
        hold.until,
        at("2026-01-01T00:00:02Z"),
        "0.5 s doubled twice"
    );
    // A probe's report a second later: no delete.
    let early = Observed {
        failures: 3,
        ..Observed::test()
            .at("2026-01-01T00:00:01Z")
            .annotated("an-older-hash")
            .instance(InstanceView::Running { ip: IP.to_owned() })
            .health(IP, true)
            .hold(hold.clone())
    };
    let held = decide(&managed_spec(), decision.status(), &early);
    assert_eq!(held.provider_call(), None);
    assert_eq!(held.requeue(), Requeue::Held(Duration::from_secs(1)));
}

#[test]
fn a_stockout_waits_and_the_next_create_avoids_the_zone_unless_the_proxy_names_it() {
    let stockout = ProviderError::stockout(
        Some("europe-west1-b".to_owned()),
        "The zone 'projects/p/zones/europe-west1-b' does not have enough resources available",
    );
    let observed = Observed::test().outcome(failed(ProviderCall::Create, stockout.clone()));
    let decision = decide(&unpinned(), &creating_status(), &observed);
    let condition = &decision.status().conditions[0];
    assert_eq!(condition.reason, "ZoneResourcesExhausted");
    assert!(
        condition
            .message
            .contains("europe-west1-b has no capacity for it")
            && condition
                .message
                .contains("retrying at 2026-01-01T00:05:00Z"),
        "{}",
        condition.message
    );
    assert_eq!(decision.status().phase, Some(Phase::Pending));
    let hold = decision.hold().cloned().expect("held");
    assert_eq!(hold.stocked_out, ["europe-west1-b"]);
    assert_eq!(hold.until, at("2026-01-01T00:05:00Z"));

    let retry = Observed::test()
        .at("2026-01-01T00:05:00Z")
        .hold(hold.clone());
    let Some(ProviderRequest::Create(request)) = decide(&unpinned(), decision.status(), &retry)
        .provider_call()
        .cloned()
    else {
        panic!("the retry creates");
    };
    assert_eq!(request.avoid_zones, ["europe-west1-b"]);
    // A Proxy that names its zone stays there.
    let Some(ProviderRequest::Create(pinned)) = decide(&managed_spec(), decision.status(), &retry)
        .provider_call()
        .cloned()
    else {
        panic!("the retry creates");
    };
    assert_eq!(pinned.avoid_zones, Vec::<String>::new());

    // A second stockout elsewhere remembers both, most recent last.
    let again = Observed::test()
        .at("2026-01-01T00:05:00Z")
        .hold(hold)
        .outcome(failed(
            ProviderCall::Create,
            ProviderError::stockout(Some("europe-west1-c".to_owned()), "out again"),
        ));
    let second = decide(&unpinned(), &creating_status(), &again);
    assert_eq!(
        second.hold().map(|h| h.stocked_out.clone()),
        Some(vec![
            "europe-west1-b".to_owned(),
            "europe-west1-c".to_owned()
        ])
    );
    // A create that succeeds forgets them.
    let created = Observed::test().outcome(Outcome::Created {
        provider_id: ID.to_owned(),
    });
    assert_eq!(
        decide(&unpinned(), &creating_status(), &created).hold(),
        None
    );
}

#[test]
fn a_refusal_never_latches_and_the_proxy_waits_for_its_provider() {
    let decision = create_failed_with(ProviderError::refused(
        "the compute API refused the operator: Required 'compute.instances.create' permission",
    ));
    let condition = &decision.status().conditions[0];
    assert_eq!(condition.reason, "ProviderUnhealthy");
    assert_eq!(decision.status().phase, Some(Phase::Pending));
    assert_ne!(decision.status().phase, Some(Phase::Failed));
    assert_eq!(decision.requeue(), Requeue::After(Duration::from_secs(60)));
    // The monitor marks the provider down: the next reconcile waits, and creates once it
    // is back.
    let waiting = Observed::test()
        .at("2026-01-01T00:01:00Z")
        .provider_down("provider pods refused the operator");
    assert_eq!(
        decide(&managed_spec(), decision.status(), &waiting).provider_call(),
        None
    );
    let back = Observed::test().at("2026-01-01T00:06:00Z");
    assert!(matches!(
        decide(&managed_spec(), decision.status(), &back).provider_call(),
        Some(ProviderRequest::Create(_))
    ));
}

#[test]
fn a_refused_lookup_keeps_a_serving_proxy_serving() {
    let observed = Observed::test()
        .annotated(proxy_core::testing::hash())
        .instance(InstanceView::Error(ProviderError::refused(
            "401 Unauthorized",
        )))
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.status().phase, Some(Phase::Ready));
    assert_eq!(decision.status().ip.as_deref(), Some(IP));
    assert_eq!(decision.requeue(), Requeue::Backoff);
}

#[test]
fn every_class_is_handled_without_a_latch_but_permanent() {
    for class in [
        ErrorClass::Transient,
        ErrorClass::Quota,
        ErrorClass::Stockout,
        ErrorClass::Refused,
        ErrorClass::Permanent,
    ] {
        let decision = create_failed_with(ProviderError::new(class, "no"));
        let latched = decision.status().phase == Some(Phase::Failed);
        assert_eq!(latched, class == ErrorClass::Permanent, "{class:?}");
    }
}

#[test]
fn a_replacement_at_its_predecessors_address_starts_with_no_verdict() {
    // The old machine was healthy at IP (probed at T0); its replacement comes up at the same
    // address five minutes later. The old verdict says nothing about it.
    let replaced = support::replacing_status();
    let observed = Observed::test()
        .at(support::T1)
        .annotated(proxy_core::testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(
        &managed_spec(),
        &ProxyStatus {
            provider_id: Some(ID.to_owned()),
            ..replaced
        },
        &observed,
    );
    let status = decision.status();
    assert_eq!(status.ip.as_deref(), Some(IP));
    let healthy = proxy_core::conditions::find(status, "Healthy").unwrap();
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("Unknown", "AwaitingProbe")
    );
    assert_eq!(status.phase, Some(Phase::Provisioning));
    // A probe of the new machine counts.
    let probed = Observed {
        health: Some(proxy_core::HealthVerdict {
            probed_at: at(support::T1),
            ..observed.health.clone().unwrap()
        }),
        ..observed
    };
    let decision = decide(&managed_spec(), decision.status(), &probed);
    assert_eq!(decision.status().phase, Some(Phase::Ready));
}

#[test]
fn the_status_says_where_the_machine_landed() {
    let observed = Observed {
        instance_zone: Some("europe-west1-c".to_owned()),
        ..Observed::test()
            .annotated(proxy_core::testing::hash())
            .instance(InstanceView::Running { ip: IP.to_owned() })
    };
    let decision = decide(&unpinned(), &support::provisioning_status(), &observed);
    assert_eq!(decision.status().zone.as_deref(), Some("europe-west1-c"));
    // Once the instance is gone, so is its zone.
    let gone = Observed {
        instance: InstanceView::NotFound,
        ..observed
    };
    let decision = decide(&unpinned(), decision.status(), &gone);
    assert_eq!(decision.status().provider_id, None);
    assert_eq!(decision.status().zone, None);
}

#[test]
fn an_external_proxys_first_status_carries_the_verdict_probed_before_it() {
    // The health engine probes an External proxy from its spec: by its first reconcile the
    // verdict is often in, and one status write says Ready.
    let observed = Observed::test()
        .at(support::T1)
        .cloud_init(proxy_core::CloudInitView::NotSet)
        .health(proxy_core::testing::EXTERNAL_HOST, true);
    let decision = decide(
        &proxy_core::testing::external_spec(),
        &ProxyStatus::default(),
        &observed,
    );
    assert_eq!(decision.status().phase, Some(Phase::Ready));
}
