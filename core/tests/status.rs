//! How `decide` writes status: `lastTransitionTime`, `observedGeneration`, health and
//! readiness, when it writes nothing, and the phase truth table.

mod support;

use proxy_core::phase::{Progress, compute_phase};
use proxy_core::testing::{self, EXTERNAL_HOST, T0, external_spec, managed_spec, status_of};
use proxy_core::{
    Action, CloudInitView, EventType, InstanceView, Observed, Outcome, ProbeFailure, ProviderError,
    decide,
};
use proxy_crd::{Phase, ProxyStatus};
use support::{
    ID, IP, T1, created, creating_status, event, provisioning_status, ready_status_since,
    running_status,
};

/// `(status, reason, lastTransitionTime)` of each condition, in order.
fn transitions(status: &ProxyStatus) -> Vec<(&str, &str, &str)> {
    status
        .conditions
        .iter()
        .map(|c| {
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.as_str(),
            )
        })
        .collect()
}

fn running(ip: &str) -> Observed {
    Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: ip.to_owned() })
}

// ---- lastTransitionTime and observedGeneration --------------------------------------------

#[test]
fn transition_time_is_kept_when_only_the_reason_changes() {
    let observed = Observed::test().at(T1).outcome(Outcome::Created {
        provider_id: ID.to_owned(),
    });
    let decision = decide(&managed_spec(), &creating_status(), &observed);
    assert_eq!(
        transitions(decision.status()),
        [
            ("False", "Provisioning", T0),
            ("Unknown", "NoAddress", T0),
            ("False", "NotProvisioned", T0),
        ]
    );
}

#[test]
fn transition_time_is_now_when_the_status_changes() {
    let decision = decide(&managed_spec(), &provisioning_status(), &running(IP).at(T1));
    assert_eq!(
        transitions(decision.status()),
        [
            ("True", "Created", T1),
            // Still Unknown, now for another reason: no transition.
            ("Unknown", "AwaitingProbe", T0),
            ("False", "AwaitingProbe", T0),
        ]
    );
}

#[test]
fn every_condition_carries_the_current_generation() {
    let observed = running(IP).health(IP, true).generation(3).at(T1);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let status = decision.status();
    assert_eq!(status.observed_generation, Some(3));
    for condition in &status.conditions {
        assert_eq!(condition.observed_generation, Some(3), "{condition:?}");
        assert_eq!(condition.last_transition_time, T0, "{condition:?}");
    }
    // Only the generations changed, and that is worth one write.
    assert!(matches!(decision.actions()[..], [Action::PatchStatus(_)]));
}

// ---- When nothing is written --------------------------------------------------------------

#[test]
fn deciding_again_from_its_own_status_writes_nothing() {
    let scenarios = [
        ("starting", provisioning_status(), running("")),
        ("running", running_status(), running(IP).health(IP, true)),
        (
            "lookup failed",
            running_status(),
            Observed::test()
                .annotated(testing::hash())
                .instance(InstanceView::Error(ProviderError::transient("timeout"))),
        ),
        (
            "cloud-init missing",
            ProxyStatus::default(),
            Observed::test().cloud_init(CloudInitView::Unavailable {
                message: "no Secret".to_owned(),
            }),
        ),
        (
            "provider unconfigured",
            ProxyStatus::default(),
            Observed::test().provider_unconfigured(),
        ),
    ];
    for (name, status, observed) in scenarios {
        let first = decide(&managed_spec(), &status, &observed);
        assert_eq!(first.provider_call(), None, "{name}");
        let again = decide(&managed_spec(), first.status(), &observed.at(T1));
        assert_eq!(again.status(), first.status(), "{name}");
        assert!(
            !again
                .actions()
                .iter()
                .any(|action| matches!(action, Action::PatchStatus(_))),
            "{name}: {:?}",
            again.actions()
        );
    }
    let external = Observed::test()
        .without_finalizer()
        .health(EXTERNAL_HOST, true);
    let first = decide(&external_spec(), &ProxyStatus::default(), &external);
    let again = decide(&external_spec(), first.status(), &external.at(T1));
    assert_eq!(again.actions(), []);
}

// ---- Health and readiness -----------------------------------------------------------------

#[test]
fn healthy_verdict_on_the_published_address_makes_it_ready() {
    let before = decide(&managed_spec(), &provisioning_status(), &running(IP));
    let observed = running(IP).health(IP, true).at(T1);
    let decision = decide(&managed_spec(), before.status(), &observed);
    let expected = ready_status_since(T1);
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(expected),
            event(
                EventType::Normal,
                "ProbeSucceeded",
                "probes through the proxy succeed",
            ),
        ]
    );
}

#[test]
fn unhealthy_verdict_makes_it_unhealthy() {
    let observed = running(IP).health(IP, false).at(T1);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let expected = ProxyStatus {
        last_probe_latency_ms: Some(42),
        last_health_check_time: Some(T0.to_owned()),
        ..status_of(
            Phase::Unhealthy,
            Some(ID),
            Some(IP),
            1,
            [
                created(T0),
                ("False", "ProbeFailed", "probes through the proxy fail", T1),
                (
                    "False",
                    "ProbeFailed",
                    "provisioned, but failing its probes",
                    T1,
                ),
            ],
        )
    };
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(expected),
            event(
                EventType::Warning,
                "ProbeFailed",
                "probes through the proxy fail",
            ),
        ]
    );
}

/// The `Healthy` condition's message of `decide` on a Ready proxy whose verdict is `observed`.
fn healthy_message(previous: &ProxyStatus, observed: &Observed) -> String {
    let decision = decide(&managed_spec(), previous, observed);
    let healthy = &decision.status().conditions[1];
    assert_eq!(
        (healthy.type_.as_str(), healthy.status.as_str()),
        ("Healthy", "False")
    );
    healthy.message.clone()
}

#[test]
fn a_failing_verdict_names_its_cause_in_the_condition_and_the_event() {
    let cases = [
        (
            ProbeFailure::ConnectionRefused,
            "probes through the proxy fail: connection refused by the proxy: nothing listens on its port",
        ),
        (
            ProbeFailure::UnexpectedStatus { status: 500 },
            "probes through the proxy fail: the probe URL answered 500, which is not in expectedStatusCodes",
        ),
        (
            ProbeFailure::Timeout,
            "probes through the proxy fail: no answer within timeoutSeconds",
        ),
        (
            ProbeFailure::TunnelRefused,
            "probes through the proxy fail: the proxy refused to CONNECT to the probe URL's host (not allowed by the proxy, or unreachable from it)",
        ),
        (
            ProbeFailure::ProxyAnswered { status: 403 },
            "probes through the proxy fail: the proxy answered 403 itself instead of fetching the probe URL (not allowed by the proxy, or unreachable from it)",
        ),
        (
            ProbeFailure::Tls,
            "probes through the proxy fail: TLS with the probe URL's host failed (certificate not trusted or for another name)",
        ),
        (
            ProbeFailure::ProxyNameNotResolved,
            "probes through the proxy fail: the proxy's host name does not resolve",
        ),
    ];
    for (failure, message) in cases {
        let observed = running(IP).failing(IP, failure).at(T1);
        assert_eq!(
            healthy_message(&running_status(), &observed),
            message,
            "{failure:?}"
        );
        let decision = decide(&managed_spec(), &running_status(), &observed);
        assert_eq!(
            decision.actions().last(),
            Some(&event(EventType::Warning, "ProbeFailed", message)),
            "{failure:?}"
        );
    }
}

#[test]
fn a_seeded_failing_verdict_keeps_the_cause_the_status_shows() {
    // Written by the previous leader, with the cause it knew.
    let unhealthy = decide(
        &managed_spec(),
        &running_status(),
        &running(IP).failing(IP, ProbeFailure::Timeout).at(T1),
    )
    .status()
    .clone();
    // The new leader's verdict, seeded from that status, has no cause: the message stays.
    let seeded = running(IP).health(IP, false).at(T1);
    let decision = decide(&managed_spec(), &unhealthy, &seeded);
    assert_eq!(
        decision.status().conditions[1].message,
        "probes through the proxy fail: no answer within timeoutSeconds"
    );
    assert!(decision.actions().is_empty(), "{:?}", decision.actions());
    // Without a cause in the status either, the message says only that probes fail.
    assert_eq!(
        healthy_message(&running_status(), &seeded),
        "probes through the proxy fail"
    );
    // A new cause replaces the old one.
    assert_eq!(
        healthy_message(
            &unhealthy,
            &running(IP)
                .failing(IP, ProbeFailure::ConnectionRefused)
                .at(T1)
        ),
        "probes through the proxy fail: connection refused by the proxy: nothing listens on its port"
    );
}

#[test]
fn verdict_about_another_address_is_ignored() {
    // The replacement runs at a new address; the engine's verdict is about the old one.
    let observed = running("10.0.0.8").health(IP, true).at(T1);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let status = decision.status();
    assert_eq!(status.ip.as_deref(), Some("10.0.0.8"));
    assert_eq!(
        transitions(status)[1..],
        [
            ("Unknown", "AwaitingProbe", T1),
            ("False", "AwaitingProbe", T1)
        ]
    );
    assert_eq!(status.phase, Some(Phase::Provisioning));
    assert_eq!(status.last_probe_latency_ms, None);
    assert_eq!(status.last_health_check_time, None);
}

#[test]
fn losing_the_address_drops_the_verdict() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Provisioning)
        .health(IP, true)
        .at(T1);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let expected = support::provisioning_status_since(T1);
    assert_eq!(decision.status(), &expected);
}

#[test]
fn external_endpoint_is_the_address_probed() {
    let observed = Observed::test().without_finalizer();
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(
        transitions(decision.status())[1],
        ("Unknown", "AwaitingProbe", T0)
    );
    let observed = observed.health(EXTERNAL_HOST, false);
    let decision = decide(&external_spec(), decision.status(), &observed);
    assert_eq!(decision.status().phase, Some(Phase::Unhealthy));
}

// ---- Phase ----------------------------------------------------------------------------------

#[test]
fn phase_truth_table() {
    use Phase::*;
    use Progress::*;
    #[rustfmt::skip]
    let table = [
        // deleting, progress,     verdict,      phase
        (true,  NotStarted,  None,        Deleting),
        (true,  NotStarted,  Some(true),  Deleting),
        (true,  NotStarted,  Some(false), Deleting),
        (true,  InProgress,  None,        Deleting),
        (true,  InProgress,  Some(true),  Deleting),
        (true,  InProgress,  Some(false), Deleting),
        (true,  Provisioned, None,        Deleting),
        (true,  Provisioned, Some(true),  Deleting),
        (true,  Provisioned, Some(false), Deleting),
        // Deletion never shows Failed.
        (true,  Progress::Failed, None,        Deleting),
        (true,  Progress::Failed, Some(true),  Deleting),
        (true,  Progress::Failed, Some(false), Deleting),
        (false, NotStarted,  None,        Pending),
        (false, NotStarted,  Some(true),  Pending),
        (false, NotStarted,  Some(false), Pending),
        (false, InProgress,  None,        Provisioning),
        (false, InProgress,  Some(true),  Provisioning),
        (false, InProgress,  Some(false), Provisioning),
        // Provisioned but never probed: not Ready.
        (false, Provisioned, None,        Provisioning),
        (false, Provisioned, Some(true),  Ready),
        (false, Provisioned, Some(false), Unhealthy),
        (false, Progress::Failed, None,        Phase::Failed),
        (false, Progress::Failed, Some(true),  Phase::Failed),
        (false, Progress::Failed, Some(false), Phase::Failed),
    ];
    for (deleting, progress, verdict, phase) in table {
        assert_eq!(
            compute_phase(deleting, progress, verdict),
            phase,
            "deleting={deleting} progress={progress:?} verdict={verdict:?}"
        );
    }
}

#[test]
fn deletion_of_a_failed_proxy_shows_deleting() {
    let failed = decide(
        &managed_spec(),
        &running_status(),
        &Observed::test()
            .annotated(testing::hash())
            .instance(InstanceView::Error(ProviderError::permanent("gone wrong"))),
    );
    assert_eq!(failed.status().phase, Some(Phase::Failed));
    let observed = Observed::test()
        .deleting()
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let deleting = decide(&managed_spec(), failed.status(), &observed);
    assert!(deleting.provider_call().is_some());
    assert_eq!(deleting.status().phase, Some(Phase::Deleting));
}

// ---- Banned: many distinct sites blocked the proxy ------------------------------------------

/// The lease book's count of blocked sites reaches the status as a `Banned` condition, which
/// is written when it flips and never because the count moved (no status-write storm).
#[test]
fn banned_is_written_when_it_flips_and_only_then() {
    let healthy = || running(IP).health(IP, true);
    let banned_of = |status: &ProxyStatus| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Banned")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    // Below the threshold, or with nothing known: no condition, no write.
    for observed in [healthy(), healthy().blocked_sites(2, 3)] {
        let decision = decide(&managed_spec(), &running_status(), &observed);
        assert_eq!(decision.status_write(), None, "{observed:?}");
    }
    // Reaching it: one write, with the count.
    let decision = decide(
        &managed_spec(),
        &running_status(),
        &healthy().at(T1).blocked_sites(3, 3),
    );
    let banned = decision
        .status_write()
        .expect("the flip is written")
        .clone();
    assert_eq!(
        banned_of(&banned),
        Some((
            "True".to_owned(),
            "BlockedOnManySites".to_owned(),
            "blocked on 3 distinct sites within the last 3600 s (banned from 3)".to_owned()
        ))
    );
    // The other conditions are as before: a banned proxy still serves other sites.
    assert_eq!(banned.phase, Some(Phase::Ready));
    // More sites, or a replica that knows nothing: no write, the condition stays.
    for observed in [healthy().blocked_sites(5, 3), healthy()] {
        let decision = decide(&managed_spec(), &banned, &observed);
        assert_eq!(decision.status_write(), None, "{observed:?}");
        assert_eq!(banned_of(decision.status()), banned_of(&banned));
    }
    // Falling below: one write, False.
    let decision = decide(&managed_spec(), &banned, &healthy().blocked_sites(1, 3));
    let cleared = decision.status_write().expect("the flip back is written");
    assert_eq!(
        banned_of(cleared).map(|(status, reason, _)| (status, reason)),
        Some(("False".to_owned(), "FewSitesBlock".to_owned()))
    );
}
