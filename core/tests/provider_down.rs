//! What a provider that failed its health check means for the Proxies that use it: new
//! machines wait, with the reason `ProviderUnhealthy`; serving machines are not deleted for a
//! replacement; lookups and deletions go on.

mod support;

use proxy_core::testing::{self, T0, managed_spec, status_of};
use proxy_core::{Action, EventType, InstanceView, Observed, ProviderRequest, decide};
use proxy_crd::{Phase, ProxyStatus};
use support::{
    DELETION_POLL, DRIFT_POLL, ID, IP, PROVISIONING_POLL, T1, delete, event, no_address,
    not_provisioned, running_status,
};

const DOWN: &str = "provider pods failed its check: connection refused";

fn down() -> Observed {
    Observed::test().provider_down(DOWN)
}

#[test]
fn a_proxy_without_an_instance_waits_and_says_why() {
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &down());
    let message = "provider pods failed its check: connection refused; instance \
                   proxy-kbqzhquppopaia3n is created once a check passes";
    let waiting = status_of(
        // Nothing exists yet: Pending, not Failed (nothing is wrong with the Proxy).
        Phase::Pending,
        None,
        None,
        1,
        [
            ("False", "ProviderUnhealthy", message, T0),
            no_address(T0),
            not_provisioned("not provisioned (ProviderUnhealthy)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(waiting),
            event(EventType::Warning, "ProviderUnhealthy", message),
        ]
    );
    assert_eq!(decision.provider_call(), None, "no create while it is down");
    assert_eq!(decision.requeue(), DRIFT_POLL);
}

#[test]
fn the_create_goes_out_once_a_check_passes() {
    let waiting = decide(&managed_spec(), &ProxyStatus::default(), &down());
    let retry = decide(&managed_spec(), waiting.status(), &Observed::test().at(T1));
    assert!(matches!(
        retry.provider_call(),
        Some(ProviderRequest::Create(_))
    ));
    assert_eq!(retry.status().conditions[0].reason, "Creating");
    assert_eq!(retry.requeue(), PROVISIONING_POLL);
}

#[test]
fn a_serving_instance_is_not_deleted_for_a_replacement() {
    let observed = down()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.provider_call(), None, "the old machine stays");
    let status = decision.status();
    assert_eq!(status.phase, Some(Phase::Ready), "and goes on serving");
    assert_eq!(status.ip.as_deref(), Some(IP));
    let provisioned = &status.conditions[0];
    assert_eq!(
        (provisioned.status.as_str(), provisioned.reason.as_str()),
        ("True", "Created")
    );
    assert_eq!(
        provisioned.message,
        "provider pods failed its check: connection refused; the spec changed, and the \
         instance is replaced once a check passes"
    );
    assert_eq!(decision.requeue(), DRIFT_POLL);
}

#[test]
fn the_replacement_starts_once_a_check_passes() {
    let held = decide(
        &managed_spec(),
        &running_status(),
        &down()
            .annotated("an-older-hash")
            .instance(InstanceView::Running { ip: IP.to_owned() })
            .health(IP, true),
    );
    let observed = Observed::test()
        .at(T1)
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let replacing = decide(&managed_spec(), held.status(), &observed);
    assert!(replacing.actions().contains(&delete()));
    assert_eq!(replacing.status().conditions[0].reason, "Replacing");
    assert_eq!(replacing.requeue(), DELETION_POLL);
}

#[test]
fn dead_or_gone_instances_are_still_cleared_away() {
    // A stopped or terminated machine holds no capacity: it is deleted as usual, and its
    // successor waits.
    for instance in [InstanceView::Stopped, InstanceView::Terminated] {
        for annotation in [testing::hash(), "an-older-hash".to_owned()] {
            let observed = down().annotated(annotation).instance(instance.clone());
            let decision = decide(&managed_spec(), &running_status(), &observed);
            assert!(decision.actions().contains(&delete()), "{instance:?}");
        }
    }
    // An old instance that is gone lets the replacement forget it; the create then waits.
    let observed = down()
        .annotated("an-older-hash")
        .instance(InstanceView::NotFound);
    let forgotten = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(forgotten.status().provider_id, None);
    let next = decide(&managed_spec(), forgotten.status(), &down().at(T1));
    assert_eq!(next.provider_call(), None);
    assert_eq!(next.status().conditions[0].reason, "ProviderUnhealthy");
}

/// A dead or gone machine of an old spec is cleared away as a replacement, not as a machine
/// that died under the current spec: the Proxy says that its spec changed (`Replacing`),
/// whether or not a successor can be created yet. Only a machine that serves or may serve
/// is kept while the provider is down.
#[test]
fn a_dead_machine_of_an_old_spec_is_cleared_away_as_a_replacement() {
    for instance in [InstanceView::Stopped, InstanceView::Terminated] {
        let observed = down().annotated("an-older-hash").instance(instance.clone());
        let decision = decide(&managed_spec(), &running_status(), &observed);
        assert!(decision.actions().contains(&delete()), "{instance:?}");
        let provisioned = &decision.status().conditions[0];
        assert_eq!(provisioned.reason, "Replacing", "{instance:?}");
        assert_eq!(decision.requeue(), DELETION_POLL, "{instance:?}");
    }
    let observed = down()
        .annotated("an-older-hash")
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let provisioned = &decision.status().conditions[0];
    assert_eq!(provisioned.reason, "Replacing");
    assert_eq!(
        provisioned.message,
        "the old instance crawl/proxy-kbqzhquppopaia3n is gone: creating its replacement"
    );
}

#[test]
fn deletion_of_the_proxy_goes_ahead() {
    let observed = down()
        .deleting()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert!(decision.actions().contains(&delete()));
    assert_eq!(decision.status().phase, Some(Phase::Deleting));
}

#[test]
fn a_running_instance_of_the_current_spec_is_left_alone() {
    let observed = down()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.actions(), [], "nothing to write, nothing to call");
    assert_eq!(decision.status().provider_id.as_deref(), Some(ID));
}

#[test]
fn a_replacement_whose_delete_went_out_goes_on() {
    // The delete was sent before the provider went down: the machine is on its way, and
    // the replacement does not pretend it serves again.
    let observed = down()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let decision = decide(&managed_spec(), &support::replacing_status(), &observed);
    assert!(decision.actions().contains(&delete()));
    assert_eq!(decision.status().conditions[0].reason, "Replacing");
    assert_eq!(decision.status().ip, None);
}

#[test]
fn a_held_replacement_keeps_the_message_of_a_failed_lookup() {
    let observed = down()
        .annotated("an-older-hash")
        .instance(InstanceView::Error(proxy_core::ProviderError::permanent(
            "access denied",
        )));
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let provisioned = &decision.status().conditions[0];
    assert_eq!(provisioned.reason, "PermanentError");
    assert!(
        !provisioned.message.contains("replaced once a check passes"),
        "a latched message must not promise a retry: {}",
        provisioned.message
    );
}
