//! A placement the Proxy's provider refuses (issue 50: `placement.parameters` keys the
//! kubernetes and kvm providers do not use entered the spec hash and were ignored): nothing
//! is created from it, and no serving machine is deleted to replace it; the Proxy says
//! which key, first in its `Provisioned` message.

mod support;

use proxy_core::testing::{hash, managed_spec};
use proxy_core::{InstanceView, Observed, ProviderRequest, Requeue, decide};
use proxy_crd::{Phase, ProxyStatus};
use support::{IP, running_status};

const PROBLEM: &str = "spec.placement.parameters.gpu: not a kubernetes parameter (it takes none)";

fn refused() -> Observed {
    Observed::test().placement_problem(PROBLEM)
}

fn running() -> InstanceView {
    InstanceView::Running { ip: IP.to_owned() }
}

#[test]
fn nothing_is_created_and_the_proxy_says_which_key() {
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &refused());
    assert_eq!(decision.provider_call(), None);
    let status = decision.status();
    assert_eq!(status.phase, Some(Phase::Failed));
    let provisioned = &status.conditions[0];
    assert_eq!(
        (provisioned.status.as_str(), provisioned.reason.as_str()),
        ("False", "PermanentError")
    );
    assert_eq!(
        provisioned.message,
        format!("{PROBLEM}; nothing is created until the spec changes")
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
    assert!(
        decision
            .events()
            .iter()
            .any(|e| e.reason == "PermanentError" && e.message.starts_with(PROBLEM)),
        "{:?}",
        decision.events()
    );
    // The spec fixed (a new generation, no problem): the create goes out.
    let fixed = decide(
        &managed_spec(),
        decision.status(),
        &Observed::test().generation(2),
    );
    assert!(matches!(
        fixed.provider_call(),
        Some(ProviderRequest::Create(_))
    ));
}

#[test]
fn a_serving_machine_is_not_replaced_by_one_the_provider_refuses() {
    for instance in [running(), InstanceView::Provisioning] {
        let observed = refused()
            .annotated("the-hash-before-the-edit")
            .instance(instance.clone())
            .health(IP, true);
        let decision = decide(&managed_spec(), &running_status(), &observed);
        assert_eq!(decision.provider_call(), None, "{instance:?}: kept");
        let provisioned = &decision.status().conditions[0];
        assert!(
            provisioned.message.starts_with(PROBLEM)
                && provisioned
                    .message
                    .ends_with("the instance is replaced once the spec is fixed"),
            "{instance:?}: {}",
            provisioned.message
        );
    }
}

#[test]
fn a_machine_that_no_longer_serves_is_cleared_away_and_nothing_replaces_it() {
    let observed = refused()
        .annotated("the-hash-before-the-edit")
        .instance(InstanceView::Stopped);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert!(matches!(
        decision.provider_call(),
        Some(ProviderRequest::Delete { .. })
    ));
}

#[test]
fn the_machine_of_an_unchanged_spec_is_left_alone() {
    // Made before the provider refused the key: it serves as it did.
    let observed = refused()
        .annotated(hash())
        .instance(running())
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.provider_call(), None);
    assert_eq!(decision.status_write(), None, "nothing changes");
    assert_eq!(decision.status().phase, Some(Phase::Ready));
}

#[test]
fn a_deleted_proxy_is_deleted_whatever_its_placement() {
    let observed = refused().deleting().instance(running());
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert!(matches!(
        decision.provider_call(),
        Some(ProviderRequest::Delete { .. })
    ));
}
