//! The reconcile driver (`proxy_core::reconcile`): the protocol between the two `decide`
//! calls of a reconcile, and the policies that used to live in the shell: which status is
//! written, which events are emitted, when to look again, and how failures back off.

mod support;

use std::time::Duration;

use proxy_core::testing::{self, managed_spec};
use proxy_core::{
    Followup, Hold, InstanceView, Interruption, MetadataWrite, Next, Observed, Outcome,
    ProviderCall, ProviderError, ProviderRequest, Reconcile, Requeue, Wake, instance_id,
};
use proxy_crd::ProxyStatus;
use support::{
    DELETION_POLL, DRIFT_POLL, ID, IP, PROVISIONING_POLL, creating_status, replacing_status,
    running_status,
};

/// Runs a reconcile through the driver, answering a provider call with `outcome`.
fn run(
    status: ProxyStatus,
    observed: Observed,
    outcome: impl FnOnce(&ProviderRequest) -> Outcome,
) -> (Vec<Vec<MetadataWrite>>, proxy_core::Plan) {
    let started = Reconcile::start(managed_spec(), status, observed);
    let mut writes = vec![started.metadata().to_vec()];
    let plan = match started.metadata_written() {
        Next::Done(plan) => plan,
        Next::Call(pending) => {
            let outcome = outcome(pending.request());
            let second = pending.after(outcome);
            writes.push(second.metadata().to_vec());
            second.metadata_written()
        }
    };
    (writes, plan)
}

#[test]
fn a_reconcile_without_a_provider_call_is_one_decision() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let (writes, plan) = run(running_status(), observed, |call| {
        panic!("no call expected: {call:?}")
    });
    assert_eq!(writes, [vec![]]);
    assert_eq!(plan.status_write(), None);
    assert!(plan.events().is_empty());
    assert_eq!(plan.requeue(), DRIFT_POLL);
}

#[test]
fn a_new_proxy_gets_its_finalizer_and_its_instance_in_one_reconcile() {
    let observed = Observed::test().without_finalizer();
    let (writes, plan) = run(ProxyStatus::default(), observed, |call| {
        assert!(matches!(call, ProviderRequest::Create(_)), "{call:?}");
        Outcome::Created {
            provider_id: ID.to_owned(),
        }
    });
    // The finalizer and the hash before the call (one patch in the shell), nothing after.
    let hash = MetadataWrite::SetSpecHash {
        hash: testing::hash(),
    };
    assert_eq!(writes, [vec![MetadataWrite::AddFinalizer, hash], vec![]]);
    assert_eq!(plan.status().provider_id.as_deref(), Some(ID));
    assert!(plan.status_write().is_some());
}

#[test]
fn a_create_feeds_its_outcome_to_the_second_decision_and_writes_its_status_once() {
    let (writes, plan) = run(ProxyStatus::default(), Observed::test(), |call| {
        assert!(matches!(call, ProviderRequest::Create(_)), "{call:?}");
        Outcome::Created {
            provider_id: ID.to_owned(),
        }
    });
    assert_eq!(writes.len(), 2, "two decisions");
    // The first decision wrote Creating, the second the created instance: one write, the
    // last, which is what the whole reconcile wants.
    assert_eq!(plan.status_write(), Some(plan.status()));
    assert_eq!(plan.status().provider_id.as_deref(), Some(ID));
    assert_ne!(plan.status(), &creating_status());
    // One event for the one change written: the first decision's Creating was never
    // written, so it is not announced.
    let reasons: Vec<_> = plan.events().iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["Provisioning"]);
    assert_eq!(plan.requeue(), PROVISIONING_POLL);
    assert_eq!(
        plan.followup(),
        Followup {
            wake: Wake::After(Duration::from_secs(10)),
            failures: 0,
            hold: None,
        }
    );
}

#[test]
fn the_first_decisions_status_is_written_when_the_second_changes_nothing() {
    // A replacement: the first decision writes Replacing and deletes; the second, fed the
    // accepted delete, wants the same status, so the first decision's is the one written.
    let observed = Observed::test()
        .annotated("an-older-hash")
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let (_, plan) = run(running_status(), observed, |call| {
        assert!(matches!(call, ProviderRequest::Delete { .. }), "{call:?}");
        Outcome::Deleted
    });
    assert_eq!(plan.status_write(), Some(&replacing_status()));
    assert_eq!(plan.requeue(), DELETION_POLL);
}

#[test]
fn a_transient_failure_backs_off_from_the_failures_observed() {
    let observed = Observed {
        failures: 2,
        ..Observed::test()
    };
    let (_, plan) = run(ProxyStatus::default(), observed, |call| Outcome::Failed {
        call: call.call(),
        error: ProviderError::transient("connection reset"),
    });
    assert_eq!(plan.requeue(), Requeue::Backoff);
    // The third failure in a row: 0.5 s doubled twice, and the create is held back as long.
    let followup = plan.followup();
    assert_eq!(
        (followup.wake, followup.failures),
        (Wake::After(Duration::from_secs(2)), 3)
    );
    assert_eq!(
        followup.hold,
        Some(Hold {
            call: ProviderCall::Create,
            until: "2026-01-01T00:00:02Z".parse().unwrap(),
            generation: 1,
            deleting: false,
            stocked_out: Vec::new(),
        })
    );
}

#[test]
fn an_unchanged_status_is_not_written() {
    let observed = Observed::test()
        .annotated(testing::hash())
        .instance(InstanceView::Running { ip: IP.to_owned() })
        .health(IP, true);
    let (writes, plan) = run(running_status(), observed, |call| {
        panic!("no call expected: {call:?}")
    });
    assert_eq!(writes, [Vec::<MetadataWrite>::new()]);
    assert_eq!(plan.status(), &running_status());
    assert_eq!(plan.status_write(), None);
}

#[test]
fn the_followup_resets_on_success_backs_off_on_failure_and_waits_when_not_leader() {
    let after = |seconds| Wake::After(Duration::from_secs(seconds));
    let half = Wake::After(Duration::from_millis(500));
    let cases = [
        // (requeue, or the interruption, failures before, followup)
        (Ok(Requeue::After(Duration::from_secs(60))), 4, after(60), 0),
        (Ok(Requeue::AwaitChange), 4, Wake::OnChange, 0),
        // A wait that binds is no new attempt: the count stays.
        (Ok(Requeue::Held(Duration::from_secs(5))), 3, after(5), 3),
        (Ok(Requeue::Backoff), 0, half, 1),
        (Ok(Requeue::Backoff), 1, after(1), 2),
        (Ok(Requeue::Backoff), 30, after(300), 31),
        (Ok(Requeue::Backoff), u32::MAX, after(300), u32::MAX),
        (Err(Interruption::Failed), 0, half, 1),
        (Err(Interruption::Failed), 3, after(4), 4),
        // Losing the leadership is not the object's failure: the count stays, and the
        // object waits for the next leader (this replica again, when it is re-elected).
        (Err(Interruption::NotLeader), 0, Wake::OnChange, 0),
        (Err(Interruption::NotLeader), 3, Wake::OnChange, 3),
    ];
    for (end, before, wake, failures) in cases {
        let followup = match end {
            Ok(requeue) => Followup::after(requeue, before),
            Err(interruption) => Followup::interrupted(interruption, before, None),
        };
        assert_eq!(
            (followup.wake, followup.failures),
            (wake, failures),
            "{end:?} after {before} failures"
        );
    }
}

#[test]
fn an_empty_provider_id_names_no_instance() {
    let with = |id: Option<&str>| ProxyStatus {
        provider_id: id.map(str::to_owned),
        ..ProxyStatus::default()
    };
    assert_eq!(instance_id(&with(None)), None);
    assert_eq!(instance_id(&with(Some(""))), None);
    assert_eq!(instance_id(&with(Some(ID))), Some(ID));

    // And `decide` agrees: a Managed proxy whose status has an empty ID creates, as one
    // with none does, instead of waiting for a lookup the shell never makes.
    let started = Reconcile::start(managed_spec(), with(Some("")), Observed::test());
    assert!(
        matches!(
            started.decided().decision.provider_call(),
            Some(ProviderRequest::Create(_))
        ),
        "{:?}",
        started.decided().decision
    );
}

#[test]
fn a_reconcile_ignores_an_outcome_left_in_the_observation() {
    // The first decision of a reconcile never sees an outcome, whatever the caller passed.
    let stale = Observed {
        outcome: Some(Outcome::Deleted),
        ..Observed::test()
    };
    let started = Reconcile::start(managed_spec(), ProxyStatus::default(), stale);
    assert_eq!(started.decided().observed.outcome, None);
    assert!(started.decided().decision.provider_call().is_some());
}
