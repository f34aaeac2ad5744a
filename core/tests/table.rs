//! The reconcile action table, one test per row: Managed (seed 000, Step 4), deletion and
//! External. Each test feeds `decide` one situation and asserts the whole decision: every
//! action in order, and the requeue.

mod support;

use std::time::Duration;

use proxy_core::testing::{
    self, CLOUD_INIT, EXTERNAL_HOST, INSTANCE, NAME, NAMESPACE, PROVIDER, T0, UID, at,
    external_spec, managed_spec, status_of,
};
use proxy_core::{
    Action, CreateRequest, EventType, FIRST_VERDICT_SLACK, InstanceView, MetadataWrite, Observed,
    Outcome, ProviderError, ProviderRequest, Requeue, decide,
};
use proxy_crd::{Phase, ProxyStatus};
use support::{
    DELETION_POLL, DRIFT_POLL, ID, IP, PROVISIONING_POLL, SOON, awaiting_probe, created,
    creating_status, delete, deleting_status, event, no_address, not_provisioned, probe_succeeded,
    provisioning_status, ready, replacing_status, running_status,
};

fn create_request() -> CreateRequest {
    CreateRequest {
        provider: PROVIDER.to_owned(),
        instance_name: INSTANCE.to_owned(),
        namespace: NAMESPACE.to_owned(),
        name: NAME.to_owned(),
        uid: UID.to_owned(),
        placement: managed_spec().placement,
        cloud_init: Some(CLOUD_INIT.to_owned()),
        port: 3128,
        credentials_secret: None,
        avoid_zones: Vec::new(),
    }
}

/// What the first call writes when a stopped or terminated instance is deleted.
fn recreating_status(reason: &str, message: &str) -> ProxyStatus {
    let ready_message = format!("not provisioned ({reason})");
    status_of(
        Phase::Provisioning,
        Some(ID),
        None,
        1,
        [
            ("False", reason, message, T0),
            no_address(T0),
            not_provisioned(&ready_message, T0),
        ],
    )
}

// ---- Managed ------------------------------------------------------------------------------

#[test]
fn managed_without_finalizer_adds_it_first_and_creates_in_the_same_decision() {
    let observed = Observed::test().without_finalizer();
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(
        decision.actions(),
        [
            Action::AddFinalizer,
            Action::SetSpecHash {
                hash: testing::hash()
            },
            Action::Create(create_request()),
            Action::PatchStatus(creating_status()),
            event(
                EventType::Normal,
                "Creating",
                "creating instance proxy-kbqzhquppopaia3n with provider pods",
            ),
        ]
    );
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
}

#[test]
fn managed_without_finalizer_adds_it_before_whatever_else_the_row_decides() {
    // The finalizer comes first in every row, also in one that makes no provider call.
    let observed = Observed::test()
        .without_finalizer()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let decision = decide(&managed_spec(), &provisioning_status(), &observed);
    assert_eq!(decision.actions()[0], Action::AddFinalizer);
    assert_eq!(decision.provider_call(), None);
    assert_eq!(decision.status().ip.as_deref(), Some(IP));
}

#[test]
fn no_provider_id_creates_with_the_deterministic_name() {
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &Observed::test());
    assert_eq!(
        decision.actions(),
        [
            Action::SetSpecHash {
                hash: testing::hash()
            },
            Action::Create(create_request()),
            Action::PatchStatus(creating_status()),
            event(
                EventType::Normal,
                "Creating",
                "creating instance proxy-kbqzhquppopaia3n with provider pods",
            ),
        ]
    );
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
    assert!(decision.provider_call().is_some());
}

#[test]
fn no_provider_id_with_a_matching_annotation_creates_without_rewriting_it() {
    // A retried create: the first attempt wrote the annotation already.
    let observed = Observed::test().annotated(testing::hash());
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.metadata(), []);
    assert_eq!(
        decision.provider_call(),
        Some(&ProviderRequest::Create(create_request()))
    );
}

#[test]
fn no_provider_id_creates_whatever_the_annotation_says() {
    // Status lost, or a replacement whose old instance is gone: the annotation names an older
    // spec, and the create path rewrites it before the call.
    let observed = Observed::test().annotated("an-older-hash");
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(
        decision.metadata(),
        [MetadataWrite::SetSpecHash {
            hash: testing::hash()
        }]
    );
    assert_eq!(
        decision.provider_call(),
        Some(&ProviderRequest::Create(create_request()))
    );
}

#[test]
fn create_outcome_sets_provider_id() {
    let observed = Observed::test().outcome(Outcome::Created {
        provider_id: ID.to_owned(),
    });
    let decision = decide(&managed_spec(), &creating_status(), &observed);
    let provisioning = status_of(
        Phase::Provisioning,
        Some(ID),
        None,
        1,
        [
            (
                "False",
                "Provisioning",
                "created instance crawl/proxy-kbqzhquppopaia3n: waiting for it to run",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (Provisioning)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(provisioning),
            event(
                EventType::Normal,
                "Provisioning",
                "created instance crawl/proxy-kbqzhquppopaia3n: waiting for it to run",
            ),
        ]
    );
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
}

#[test]
fn an_instance_still_starting_after_its_create_writes_nothing() {
    // The next reconcile (the Pod watch, the poll) finds the instance still starting: the
    // status says so already, in the create's words, and is not reworded.
    let created = decide(
        &managed_spec(),
        &creating_status(),
        &Observed::test().outcome(Outcome::Created {
            provider_id: ID.to_owned(),
        }),
    );
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Provisioning);
    let decision = decide(&managed_spec(), created.status(), &observed);
    assert_eq!(decision.status_write(), None, "{:?}", decision.actions());
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
}

#[test]
fn the_provisioning_poll_backs_off_with_the_time_waited() {
    // Provisioned turned False at T0 (00:00); the polls are 10 s, the drift poll 1 min.
    for (now, poll) in [
        ("2026-01-01T00:00:05Z", 10), // a quarter of 5 s is below the poll: the poll
        ("2026-01-01T00:02:00Z", 30), // a quarter of 2 min
        ("2026-01-01T01:00:00Z", 60), // at most the drift poll
        ("2025-12-31T23:59:00Z", 10), // a clock behind the condition: the poll
    ] {
        let observed = Observed::test()
            .at(now)
            .annotated(testing::hash())
            .instance(InstanceView::Provisioning);
        let decision = decide(&managed_spec(), &provisioning_status(), &observed);
        assert_eq!(
            decision.requeue(),
            Requeue::After(std::time::Duration::from_secs(poll)),
            "at {now}"
        );
    }
}

#[test]
fn create_outcome_leaves_the_annotation_to_the_first_decision() {
    // The first decision wrote the annotation before the call; the observation still shows
    // the one from before the reconcile, which must not cause a second write.
    let observed = Observed::test()
        .annotated("an-older-hash")
        .outcome(Outcome::Created {
            provider_id: ID.to_owned(),
        });
    let decision = decide(&managed_spec(), &creating_status(), &observed);
    assert!(
        !decision
            .actions()
            .iter()
            .any(|action| matches!(action, Action::SetSpecHash { .. })),
        "{:?}",
        decision.actions()
    );
}

#[test]
fn provisioning_clears_ip_and_reports_provisioning() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Provisioning);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(provisioning_status()),
            event(
                EventType::Normal,
                "Provisioning",
                "instance crawl/proxy-kbqzhquppopaia3n is starting",
            ),
        ]
    );
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
}

#[test]
fn running_without_an_address_is_still_provisioning() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: String::new() });
    let decision = decide(&managed_spec(), &provisioning_status(), &observed);
    // Nothing changed, so nothing is written.
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.requeue(), PROVISIONING_POLL);
    assert_eq!(decision.status().ip, None);
}

#[test]
fn running_sets_ip_and_provisioned_true() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let decision = decide(&managed_spec(), &provisioning_status(), &observed);
    let running = status_of(
        // Provisioned, but nobody probed it yet: not Ready.
        Phase::Provisioning,
        Some(ID),
        Some(IP),
        1,
        [
            created(T0),
            awaiting_probe(T0),
            (
                "False",
                "AwaitingProbe",
                "provisioned, waiting for its first probe",
                T0,
            ),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(running),
            event(
                EventType::Normal,
                "Created",
                "instance crawl/proxy-kbqzhquppopaia3n is running at 10.0.0.7",
            ),
        ]
    );
    assert_eq!(decision.requeue(), DRIFT_POLL);
}

#[test]
fn running_and_unchanged_writes_nothing() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.requeue(), DRIFT_POLL);
    assert_eq!(decision.status(), &running_status());
}

#[test]
fn stopped_instance_is_deleted_to_be_recreated() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Stopped);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message =
        "instance crawl/proxy-kbqzhquppopaia3n stopped: deleting it to create a fresh one";
    assert_eq!(
        decision.actions(),
        [
            delete(),
            Action::PatchStatus(recreating_status("InstanceStopped", message)),
            event(EventType::Warning, "InstanceStopped", message),
        ]
    );
    assert_eq!(decision.requeue(), DELETION_POLL);
}

#[test]
fn terminated_instance_is_deleted_to_be_recreated() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Terminated);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message =
        "instance crawl/proxy-kbqzhquppopaia3n was terminated: deleting it to create a fresh one";
    assert_eq!(
        decision.actions(),
        [
            delete(),
            Action::PatchStatus(recreating_status("InstanceTerminated", message)),
            event(EventType::Warning, "InstanceTerminated", message),
        ]
    );
    assert_eq!(decision.requeue(), DELETION_POLL);
}

#[test]
fn delete_outcome_keeps_the_status_and_polls_until_gone() {
    let message =
        "instance crawl/proxy-kbqzhquppopaia3n stopped: deleting it to create a fresh one";
    let stopped = recreating_status("InstanceStopped", message);
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Stopped)
        .outcome(Outcome::Deleted);
    let decision = decide(&managed_spec(), &stopped, &observed);
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.status(), &stopped);
    assert_eq!(decision.requeue(), DELETION_POLL);
}

#[test]
fn instance_gone_clears_provider_id_and_ip() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let message = "instance crawl/proxy-kbqzhquppopaia3n no longer exists: creating a new one";
    let gone = status_of(
        Phase::Provisioning,
        None,
        None,
        1,
        [
            ("False", "InstanceGone", message, T0),
            no_address(T0),
            not_provisioned("not provisioned (InstanceGone)", T0),
        ],
    );
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(gone),
            event(EventType::Warning, "InstanceGone", message),
        ]
    );
    assert_eq!(decision.requeue(), SOON);
}

#[test]
fn stopped_instance_gone_keeps_the_reason_for_its_deletion() {
    let stopped = recreating_status(
        "InstanceStopped",
        "instance crawl/proxy-kbqzhquppopaia3n stopped: deleting it to create a fresh one",
    );
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &stopped, &observed);
    let gone = status_of(
        Phase::Provisioning,
        None,
        None,
        1,
        [
            (
                "False",
                "InstanceStopped",
                "instance crawl/proxy-kbqzhquppopaia3n is gone: creating a new one",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (InstanceStopped)", T0),
        ],
    );
    // Expected, so no Warning: the reason did not change.
    assert_eq!(decision.actions(), [Action::PatchStatus(gone)]);
    assert_eq!(decision.requeue(), SOON);
}

#[test]
fn drift_with_hash_annotation_replaces() {
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.actions(),
        [
            delete(),
            Action::PatchStatus(replacing_status()),
            event(
                EventType::Normal,
                "Replacing",
                "the spec changed: deleting instance crawl/proxy-kbqzhquppopaia3n to replace \
                 it; the replacement reuses its name, so it is created once the old one is gone",
            ),
        ]
    );
    assert_eq!(decision.requeue(), DELETION_POLL);
}

#[test]
fn replacement_keeps_deleting_while_the_old_instance_exists() {
    // The old instance is still shutting down: delete again (idempotent), never create.
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Terminated);
    let decision = decide(&managed_spec(), &replacing_status(), &observed);
    assert_eq!(decision.actions(), [delete()]);
    assert_eq!(decision.requeue(), DELETION_POLL);
}

#[test]
fn replacement_clears_provider_id_once_the_old_instance_is_gone() {
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &replacing_status(), &observed);
    let cleared = status_of(
        Phase::Provisioning,
        None,
        None,
        1,
        [
            (
                "False",
                "Replacing",
                "the old instance crawl/proxy-kbqzhquppopaia3n is gone: creating its replacement",
                T0,
            ),
            no_address(T0),
            not_provisioned("not provisioned (Replacing)", T0),
        ],
    );
    // No create in this pass: the next one creates, and its outcome sets the annotation.
    assert_eq!(decision.actions(), [Action::PatchStatus(cleared)]);
    assert_eq!(decision.requeue(), SOON);
}

#[test]
fn replacement_creates_on_the_next_pass() {
    let cleared = ProxyStatus {
        provider_id: None,
        ..replacing_status()
    };
    let observed = Observed::test().annotated("an-older-hash");
    let decision = decide(&managed_spec(), &cleared, &observed);
    assert_eq!(
        decision.actions()[..2],
        [
            Action::SetSpecHash {
                hash: testing::hash()
            },
            Action::Create(create_request())
        ]
    );
    let observed = observed.outcome(Outcome::Created {
        provider_id: ID.to_owned(),
    });
    let second = decide(&managed_spec(), decision.status(), &observed);
    assert_eq!(second.metadata(), []);
    assert_eq!(second.provider_call(), None);
}

#[test]
fn empty_annotation_adopts_without_replacing() {
    let observed = Observed::test()
        .annotated("")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.actions(),
        [
            Action::SetSpecHash {
                hash: testing::hash()
            },
            event(
                EventType::Normal,
                "Adopted",
                "instance crawl/proxy-kbqzhquppopaia3n had no spec hash annotation: recorded \
                 the current spec hash and kept the instance",
            ),
        ]
    );
    assert_eq!(decision.requeue(), DRIFT_POLL);
}

#[test]
fn absent_annotation_adopts_without_replacing() {
    let observed = Observed::test()
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.actions()[0],
        Action::SetSpecHash {
            hash: testing::hash()
        }
    );
    assert_eq!(decision.provider_call(), None);
    assert_eq!(decision.status(), &running_status());
}

#[test]
fn adopting_a_gone_instance_records_the_hash_and_clears_it() {
    let observed = Observed::test().instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    let actions = decision.actions();
    let kinds: Vec<_> = actions
        .iter()
        .map(|action| match action {
            Action::SetSpecHash { .. } => "SetSpecHash",
            Action::PatchStatus(_) => "PatchStatus",
            Action::Event(event) => event.reason.as_str(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["SetSpecHash", "PatchStatus", "Adopted", "InstanceGone"]
    );
    assert_eq!(decision.status().provider_id, None);
    assert_eq!(decision.requeue(), SOON);
}

// ---- Deletion -----------------------------------------------------------------------------

#[test]
fn deletion_without_provider_id_removes_finalizer() {
    let observed = Observed::test().deleting();
    let decision = decide(&managed_spec(), &creating_status(), &observed);
    assert_eq!(
        decision.actions(),
        [
            Action::RemoveFinalizer,
            event(
                EventType::Normal,
                "FinalizerRemoved",
                "no instance was created: removed the finalizer",
            ),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn deletion_with_instance_gone_removes_finalizer() {
    let observed = Observed::test()
        .deleting()
        .annotated(testing::hash())
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &deleting_status(), &observed);
    // No status write: the object may be gone as soon as the finalizer is.
    assert_eq!(
        decision.actions(),
        [
            Action::RemoveFinalizer,
            event(
                EventType::Normal,
                "FinalizerRemoved",
                "instance crawl/proxy-kbqzhquppopaia3n is gone: removed the finalizer",
            ),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn deletion_with_instance_present_deletes_it() {
    let observed = Observed::test()
        .deleting()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.actions(),
        [
            delete(),
            Action::PatchStatus(deleting_status()),
            event(
                EventType::Normal,
                "Deleting",
                "deleting instance crawl/proxy-kbqzhquppopaia3n",
            ),
        ]
    );
    assert_eq!(decision.requeue(), DELETION_POLL);
}

#[test]
fn deletion_keeps_deleting_until_the_instance_is_gone() {
    let observed = Observed::test()
        .deleting()
        .instance(InstanceView::Terminated);
    let decision = decide(&managed_spec(), &deleting_status(), &observed);
    assert_eq!(decision.actions(), [delete()]);
    let observed = observed.outcome(Outcome::Deleted);
    let second = decide(&managed_spec(), decision.status(), &observed);
    assert_eq!(second.actions(), []);
    assert_eq!(second.requeue(), DELETION_POLL);
}

#[test]
fn deletion_with_permanent_get_error_still_deletes() {
    let observed =
        Observed::test()
            .deleting()
            .instance(InstanceView::Error(ProviderError::permanent(
                "permission denied",
            )));
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.provider_call().cloned().map(Action::from),
        Some(delete())
    );
    assert_eq!(decision.status().phase, Some(Phase::Deleting));
}

#[test]
fn deletion_without_finalizer_does_nothing() {
    let observed = Observed::test().deleting().without_finalizer();
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn deletion_ignores_drift() {
    // A spec change during deletion does not start a replacement.
    let observed = Observed::test()
        .deleting()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() });
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(
        decision.provider_call().cloned().map(Action::from),
        Some(delete())
    );
    assert_eq!(decision.status().phase, Some(Phase::Deleting));
}

// ---- External -----------------------------------------------------------------------------

fn external_status(phase: Phase) -> ProxyStatus {
    status_of(
        phase,
        None,
        Some(EXTERNAL_HOST),
        1,
        [
            (
                "True",
                "ExternalEndpoint",
                "external proxy at proxy.example.net:8080",
                T0,
            ),
            awaiting_probe(T0),
            (
                "False",
                "AwaitingProbe",
                "provisioned, waiting for its first probe",
                T0,
            ),
        ],
    )
}

#[test]
fn external_publishes_its_endpoint_without_provider_calls() {
    let observed = Observed::test().without_finalizer();
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(external_status(Phase::Provisioning)),
            event(
                EventType::Normal,
                "ExternalEndpoint",
                "external proxy at proxy.example.net:8080",
            ),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

/// A new External proxy created at T0, with the default 5 s health check timeout: it may
/// wait for its first verdict until 10 s after T0.
const NEW_EXTERNAL_DEADLINE_S: u64 = 5 + FIRST_VERDICT_SLACK.as_secs();

#[test]
fn a_new_external_proxy_waits_for_its_first_verdict_before_it_writes() {
    let observed = Observed::test()
        .without_finalizer()
        .created(T0)
        .at("2026-01-01T00:00:03Z");
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.actions(), []);
    assert_eq!(decision.status_write(), None);
    assert_eq!(
        decision.requeue(),
        Requeue::After(Duration::from_secs(NEW_EXTERNAL_DEADLINE_S - 3))
    );
}

#[test]
fn a_new_external_proxy_writes_its_first_verdict_in_its_first_write() {
    let observed = Observed::test()
        .without_finalizer()
        .created(T0)
        .health(EXTERNAL_HOST, true);
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.status().phase, Some(Phase::Ready));
    assert!(decision.status_write().is_some());
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn a_new_external_proxy_whose_verdict_is_late_writes_without_it() {
    let late = jiff::Timestamp::from_second(
        at(T0).as_second() + i64::try_from(NEW_EXTERNAL_DEADLINE_S).unwrap(),
    )
    .unwrap()
    .to_string();
    let observed = Observed::test().without_finalizer().created(T0).at(&late);
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.status().phase, Some(Phase::Provisioning));
    assert!(decision.status_write().is_some());
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn an_external_proxy_with_a_status_never_waits_for_a_verdict() {
    // A new endpoint of a proxy already written says so at once: only the very first write
    // waits.
    let observed = Observed::test().without_finalizer().created(T0);
    let decision = decide(&external_spec(), &external_status(Phase::Ready), &observed);
    assert_eq!(decision.status().phase, Some(Phase::Provisioning));
    assert!(decision.status_write().is_some());
}

#[test]
fn external_with_a_healthy_verdict_is_ready() {
    let observed = Observed::test()
        .without_finalizer()
        .health(EXTERNAL_HOST, true);
    let decision = decide(
        &external_spec(),
        &external_status(Phase::Provisioning),
        &observed,
    );
    let healthy = ProxyStatus {
        last_probe_latency_ms: Some(42),
        last_health_check_time: Some(T0.to_owned()),
        ..status_of(
            Phase::Ready,
            None,
            Some(EXTERNAL_HOST),
            1,
            [
                (
                    "True",
                    "ExternalEndpoint",
                    "external proxy at proxy.example.net:8080",
                    T0,
                ),
                probe_succeeded(T0),
                ready(T0),
            ],
        )
    };
    assert_eq!(
        decision.actions(),
        [
            Action::PatchStatus(healthy),
            event(
                EventType::Normal,
                "ProbeSucceeded",
                "probes through the proxy succeed",
            ),
        ]
    );
    assert_eq!(decision.requeue(), Requeue::AwaitChange);
}

#[test]
fn external_with_our_finalizer_removes_it() {
    let observed = Observed::test();
    let decision = decide(
        &external_spec(),
        &external_status(Phase::Provisioning),
        &observed,
    );
    assert_eq!(decision.actions(), [Action::RemoveFinalizer]);
}

#[test]
fn external_being_deleted_removes_a_stray_finalizer() {
    let observed = Observed::test().deleting();
    let decision = decide(
        &external_spec(),
        &external_status(Phase::Provisioning),
        &observed,
    );
    assert_eq!(
        decision.actions(),
        [
            Action::RemoveFinalizer,
            event(
                EventType::Normal,
                "FinalizerRemoved",
                "an External proxy has no instance to delete: removed the finalizer",
            ),
        ]
    );
}

#[test]
fn external_ignores_provider_observations() {
    // Even a (buggy) observation of an instance never makes an External proxy call a provider.
    let observed = Observed::test()
        .without_finalizer()
        .annotated("an-older-hash")
        .instance(InstanceView::Stopped);
    let decision = decide(&external_spec(), &running_status(), &observed);
    assert_eq!(decision.provider_call(), None);
    assert_eq!(decision.status().provider_id, None);
    assert_eq!(decision.status().ip.as_deref(), Some(EXTERNAL_HOST));
}
