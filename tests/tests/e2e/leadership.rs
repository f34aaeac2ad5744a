//! Leadership with two operator processes on one namespace: only the leader acts; when it is
//! killed the other takes over within the claim's duration, and no Proxy gets two instances.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use proxy_tests::operator::Operator;
use serde_json::json;

use crate::operated::{Bed, provisioned, start_operator};

/// The holder of the namespace's leadership Lease.
async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("proxy-operator")
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

async fn creates(operator: &Operator) -> u64 {
    let text = reqwest::get(&operator.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("proxy_operator_provider_requests_total{") && l.contains(r#"op="create""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
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
    let (first_creates, second_creates) = (creates(&bed.operator).await, creates(&second).await);
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
