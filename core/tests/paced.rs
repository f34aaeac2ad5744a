//! A rate limit slows the whole provider, not each Proxy on its own (issue 50): a lookup or a
//! call that met the provider's rate limit, or that its pacing held back
//! (`proxy_core::pacing`), waits for the provider's time, counts no failure of the Proxy's,
//! emits no Event and leaves what the status says about the instance as it is. A rate limit
//! that names no wait backs off as any transient failure, as before.

mod support;

use std::time::Duration;

use proxy_core::testing::{at, managed_spec};
use proxy_core::{
    Decision, ErrorClass, Hold, InstanceView, Observed, Outcome, ProviderCall, ProviderError,
    Reconcile, Requeue, decide,
};
use proxy_crd::{Phase, ProxyStatus};
use support::{ID, creating_status, provisioning_status, running_status};

/// A rate limit of the provider whose pacing says: again in `secs` seconds.
fn limited(secs: u64) -> ProviderError {
    ProviderError::rate_limited(
        "rate-limited: the provider's read calls wait after rate-limit answers",
        Some(Duration::from_secs(secs)),
    )
}

fn lookup(status: &ProxyStatus, error: ProviderError, failures: u32) -> Decision {
    let mut observed = Observed::test()
        .annotated(proxy_core::testing::hash())
        .instance(InstanceView::Error(error))
        .health(support::IP, true);
    observed.failures = failures;
    decide(&managed_spec(), status, &observed)
}

fn failed(call: ProviderCall, error: ProviderError) -> Observed {
    Observed::test().outcome(Outcome::Failed { call, error })
}

#[test]
fn a_ready_proxy_whose_lookup_met_the_providers_rate_limit_stays_ready_and_says_nothing() {
    // (the wait the pacing decided, the failures before)
    for (secs, failures) in [(1, 0), (16, 0), (60, 3), (90, 0)] {
        let decision = lookup(&running_status(), limited(secs), failures);
        assert_eq!(decision.status().phase, Some(Phase::Ready), "{secs} s");
        assert_eq!(decision.status_write(), None, "{secs} s: nothing to write");
        assert_eq!(decision.events(), [], "{secs} s: no Event per Proxy");
        assert_eq!(decision.provider_call(), None);
        assert_eq!(
            decision.requeue(),
            Requeue::Held(Duration::from_secs(secs.max(60))),
            "{secs} s: nothing waits on its answer: it looks again at its next drift poll \
             (60 s), or when the provider takes calls again if that is later"
        );
        assert_eq!(decision.hold(), None, "a lookup holds nothing");
    }
}

#[test]
fn a_starting_instance_whose_lookup_met_the_rate_limit_looks_again_when_the_pause_ends() {
    // A Proxy waiting for its machine to run cannot wait a drift poll: it looks again as
    // soon as the provider takes calls again.
    for secs in [1, 16, 60] {
        let decision = lookup(&provisioning_status(), limited(secs), 0);
        assert_eq!(decision.status_write(), None, "{secs} s: nothing to write");
        assert_eq!(decision.events(), [], "{secs} s");
        assert_eq!(
            decision.requeue(),
            Requeue::Held(Duration::from_secs(secs)),
            "{secs} s"
        );
    }
}

#[test]
fn the_proxys_failure_count_is_kept_not_raised() {
    let observed = Observed::test()
        .annotated(proxy_core::testing::hash())
        .instance(InstanceView::Error(limited(8)));
    let mut observed = observed.health(support::IP, true);
    observed.failures = 2;
    let plan = match Reconcile::start(managed_spec(), provisioning_status(), observed)
        .metadata_written()
    {
        proxy_core::Next::Done(plan) => plan,
        proxy_core::Next::Call(_) => panic!("a lookup that met a rate limit makes no call"),
    };
    let followup = plan.followup();
    assert_eq!(followup.failures, 2, "neither raised nor reset");
    assert_eq!(
        followup.wake,
        proxy_core::Wake::After(Duration::from_secs(8))
    );
}

#[test]
fn a_held_create_waits_for_the_provider_and_says_so_without_an_event() {
    let decision = decide(
        &managed_spec(),
        &creating_status(),
        &failed(ProviderCall::Create, limited(16)),
    );
    assert_eq!(decision.events(), [], "no Event per Proxy and attempt");
    assert_eq!(decision.requeue(), Requeue::Held(Duration::from_secs(16)));
    assert_eq!(
        decision.hold(),
        Some(&Hold {
            call: ProviderCall::Create,
            until: at("2026-01-01T00:00:16Z"),
            generation: 1,
            deleting: false,
            stocked_out: Vec::new(),
        })
    );
    let provisioned = &decision.status().conditions[0];
    assert_eq!(provisioned.reason, "Creating");
    assert!(
        provisioned.message.starts_with(
            "creating instance proxy-kbqzhquppopaia3n waits: the provider is rate-limited"
        ),
        "{}",
        provisioned.message
    );
    assert_eq!(decision.status().phase, Some(Phase::Provisioning));
    // Woken before its time (its own status write), it calls nothing.
    let mut observed = Observed::test().at("2026-01-01T00:00:05Z");
    observed.hold = decision.hold().cloned();
    let early = decide(&managed_spec(), decision.status(), &observed);
    assert_eq!(early.provider_call(), None);
    assert_eq!(early.requeue(), Requeue::Held(Duration::from_secs(11)));
    // At its time, the create goes out.
    let mut observed = Observed::test().at("2026-01-01T00:00:16Z");
    observed.hold = decision.hold().cloned();
    let due = decide(&managed_spec(), decision.status(), &observed);
    assert!(due.provider_call().is_some(), "{:?}", due.requeue());
}

#[test]
fn a_held_delete_of_a_deleted_proxy_waits_as_well() {
    let observed = failed(ProviderCall::Delete, limited(4)).deleting();
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.events(), []);
    assert_eq!(decision.requeue(), Requeue::Held(Duration::from_secs(4)));
    assert_eq!(
        decision.hold().map(|h| (h.call, h.deleting)),
        Some((ProviderCall::Delete, true))
    );
    assert!(
        decision.status().conditions[0]
            .message
            .starts_with(&format!(
                "deleting instance {ID} waits: the provider is rate-limited"
            )),
        "{:?}",
        decision.status().conditions[0]
    );
}

#[test]
fn a_wait_shorter_than_the_first_retry_is_the_first_retry() {
    let decision = lookup(&provisioning_status(), limited(0), 0);
    assert_eq!(
        decision.requeue(),
        Requeue::Held(proxy_core::backoff::FIRST_RETRY)
    );
}

#[test]
fn a_rate_limit_that_names_no_wait_and_any_other_transient_failure_back_off_as_before() {
    for error in [
        ProviderError::rate_limited("rate-limited: 429 TooManyRequests", None),
        ProviderError::transient("HTTP 503"),
        ProviderError::unreachable("connection refused"),
    ] {
        let decision = lookup(&running_status(), error.clone(), 0);
        assert_eq!(decision.requeue(), Requeue::Backoff, "{error:?}");
        assert_eq!(
            decision.events().len(),
            1,
            "{error:?}: the Warning as before"
        );
        assert_eq!(decision.status().phase, Some(Phase::Ready), "{error:?}");
    }
    // A quota of the provider is no rate limit: it waits the quota delay and says so.
    let quota = decide(
        &managed_spec(),
        &creating_status(),
        &failed(
            ProviderCall::Create,
            ProviderError::new(ErrorClass::Quota, "Quota 'CPUS' exceeded."),
        ),
    );
    assert_eq!(quota.requeue(), Requeue::After(Duration::from_secs(300)));
}
