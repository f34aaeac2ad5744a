//! Leadership with two operator processes on one namespace: only the leader acts; when it is
//! killed the other takes over within the claim's duration, and no Proxy gets two instances.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use proxy_tests::operator::Operator;
use serde_json::json;

use crate::operated::{Bed, provisioned, start_operator};

/// The holder of the namespace's leadership Lease.
pub async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("proxy-operator")
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

#[tokio::test]
async fn only_the_leader_acts_and_the_other_takes_over_when_it_dies() {
    let mut bed = Bed::new("leadership").await;
    let mut second = start_operator(&bed.ns, &bed.origin, &[]);
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    for name in ["a", "b", "c"] {
        bed.create(name, json!({"mode": "Managed", "provider": "pods"}))
            .await;
    }
    for name in ["a", "b", "c"] {
        bed.wait_for(name, "Provisioned", provisioned).await;
    }
    let leader = holder(&leases).await.expect("someone leads");
    let (first_creates, second_creates) = (
        bed.operator.provider_creates().await,
        second.provider_creates().await,
    );
    let (leading, following) = if leader == bed.operator.identity {
        (first_creates, second_creates)
    } else {
        (second_creates, first_creates)
    };
    assert!(
        leader == bed.operator.identity || leader == second.identity,
        "unknown holder {leader}"
    );
    assert_eq!(
        (leading, following),
        (3, 0),
        "the leader created every Pod and the follower none"
    );

    // Kill the leader; the follower must take over within the claim's duration (3 s) plus
    // one round (0.5 s), with room for a loaded machine.
    let survivor = if leader == bed.operator.identity {
        bed.operator.kill();
        second.identity.clone()
    } else {
        second.kill();
        bed.operator.identity.clone()
    };
    let killed_at = Instant::now();
    while holder(&leases).await.as_deref() != Some(survivor.as_str()) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(8),
            "no takeover 8 s after the leader died"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let takeover = killed_at.elapsed();
    assert!(
        takeover >= Duration::from_millis(1500),
        "took over after {takeover:?}: before the claim could have run out"
    );

    // The new leader acts, and no Proxy has two Pods.
    bed.create("d", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let survivor_op = if survivor == bed.operator.identity {
        &mut bed.operator
    } else {
        &mut second
    };
    assert!(survivor_op.is_running());
    bed.wait_for("d", "Provisioned by the new leader", provisioned)
        .await;
    let pods = bed.pods.list(&Default::default()).await.unwrap().items;
    let mut uids: Vec<String> = pods
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get("crawl.example.com/proxy-uid")
                .cloned()
        })
        .collect();
    uids.sort();
    let before = uids.len();
    uids.dedup();
    assert_eq!((before, uids.len()), (4, 4), "one Pod per Proxy");
    eprintln!("leadership moved {takeover:?} after the leader was killed");
}

/// Waits until `operator` holds the namespace's leadership Lease; fails with its log.
pub async fn until_leading(leases: &Api<Lease>, operator: &Operator) {
    let started = Instant::now();
    while holder(leases).await.as_deref() != Some(operator.identity.as_str()) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the operator never led; log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes a valid claim of `holder` for `seconds` over the namespace's leadership Lease, as
/// another replica would, and never renews it. A concurrent renew makes the replace conflict
/// (the resourceVersion read), so it retries.
pub async fn take_claim(leases: &Api<Lease>, holder: &str, seconds: i32) {
    loop {
        let mut lease = leases.get("proxy-operator").await.unwrap();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let spec = lease.spec.get_or_insert_default();
        spec.holder_identity = Some(holder.into());
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        spec.lease_duration_seconds = Some(seconds);
        match leases
            .replace("proxy-operator", &Default::default(), &lease)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => panic!("take the claim over: {e}"),
        }
    }
}

/// Waits until the operator's log has a line containing every one of `parts`, and returns
/// the log; fails with the log.
pub async fn logged(operator: &Operator, parts: &[&str]) -> String {
    for _ in 0..200 {
        let log = operator.log();
        if log.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no log line with {parts:?} within 20 s; operator log:\n{}",
        operator.log()
    );
}

#[tokio::test]
async fn a_leader_logs_losing_leadership_to_another_holder_and_regaining_it() {
    let bed = Bed::new("leadership-log").await;
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    until_leading(&leases, &bed.operator).await;
    logged(&bed.operator, &["acquired leadership"]).await;

    // Another replica writes a valid claim over ours, and never renews it.
    take_claim(&leases, "intruder", 3).await;
    let lost = [
        "lost leadership: another replica holds the claim",
        "intruder",
    ];
    logged(&bed.operator, &lost).await;
    // The intruder's claim runs out after 3 s; the operator takes it and says so.
    let log = logged(&bed.operator, &["regained leadership"]).await;
    let line = |parts: &[&str]| {
        log.lines()
            .position(|l| parts.iter().all(|p| l.contains(p)))
    };
    assert!(
        line(&lost) < line(&["regained leadership"]),
        "the loss is logged before the regain; log:\n{log}"
    );
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(bed.operator.identity.as_str())
    );
}
