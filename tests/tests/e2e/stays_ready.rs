//! Ready proxies stay Ready across an operator restart (kill -9, then a new process), across
//! a leader handover between two replicas, and across a lapse of leadership that the same
//! process regains (what an etcd outage longer than the renew deadline does), while their
//! squids stay up.
//!
//! The new leader starts with an empty health book. Until it has seeded the verdicts the
//! statuses show, a reconcile of a Ready proxy would see "no verdict" and write
//! `Healthy=Unknown` (`AwaitingProbe`): the proxy would leave `Ready` and stop being leased
//! until its next probe. So the watch reads every Proxy's `Ready` condition from the API
//! server every 100 ms, from before the old operator dies until the new leader has
//! reconciled and probed every one of them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use proxy_crd::Phase;
use serde_json::json;

use crate::leadership::holder;
use crate::operated::{Bed, condition, start_operator};

const PROXIES: usize = 5;

fn name(i: usize) -> String {
    format!("ready-{i}")
}

/// Creates the proxies, probed every 10 s through themselves, and waits until all are Ready.
async fn ready_fleet(bed: &mut Bed) {
    for i in 0..PROXIES {
        let spec = json!({"mode": "Managed", "provider": "pods", "healthCheck": {
            "probeURL": bed.origin.url(&format!("/generate_204?p={}", name(i))),
            "intervalSeconds": 10, "timeoutSeconds": 2}});
        bed.create(&name(i), spec).await;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = bed
            .proxies
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
            .count();
        if ready == PROXIES {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ready} of {PROXIES} Ready after 90 s; operator log:\n{}",
            bed.operator.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads every Proxy's `Ready` condition every 100 ms from `since` until `leader` holds the
/// leadership Lease (after the watch saw another holder) and has probed every proxy since
/// (it reconciles every object the moment it leads, before any probe), then two more
/// seconds for the status writes that follow. When a Proxy was seen not `Ready=True`,
/// returns what every read saw change.
async fn watch_ready(bed: &Bed, leader: &str, since: Instant) -> Option<Vec<String>> {
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let deadline = since + Duration::from_secs(60);
    // When `leader` holds the Lease after the watch saw it held by another (or by nobody).
    let (mut seen_another, mut led_at) = (false, None::<Instant>);
    let mut settled_at: Option<Instant> = None;
    // Each change of a proxy's (Ready, Healthy, phase) as read, and whether it left Ready.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut changes = Vec::new();
    let mut left_ready = false;
    let mut reads = 0usize;
    loop {
        let proxies = bed
            .proxies
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        reads += 1;
        assert_eq!(proxies.len(), PROXIES);
        for proxy in &proxies {
            let ready = condition(proxy, "Ready");
            let state = format!(
                "Ready={ready:?} Healthy={:?} phase={:?}",
                condition(proxy, "Healthy"),
                proxy.status.as_ref().and_then(|s| s.phase),
            );
            let name = proxy.metadata.name.clone().unwrap_or_default();
            if seen.get(&name) != Some(&state) {
                changes.push(format!("{name} at +{:?}: {state}", since.elapsed()));
                seen.insert(name, state);
            }
            left_ready |= ready.as_ref().map(|(s, _)| s.as_str()) != Some("True");
        }
        if led_at.is_none() {
            let holds = holder(&leases).await.as_deref() == Some(leader);
            seen_another |= !holds;
            if holds && seen_another {
                led_at = Some(Instant::now());
            }
        }
        if let Some(led_at) = led_at
            && settled_at.is_none()
        {
            let probed: BTreeMap<String, usize> = bed
                .origin
                .requests()
                .into_iter()
                .filter(|r| r.at > led_at)
                .filter_map(|r| Some((r.path.split_once("?p=")?.1.to_owned(), 1)))
                .collect();
            if (0..PROXIES).all(|i| probed.contains_key(&name(i))) {
                settled_at = Some(Instant::now());
            }
        }
        if settled_at.is_some_and(|at| at.elapsed() > Duration::from_secs(2)) {
            eprintln!(
                "{reads} reads of every Ready condition over {:?}",
                since.elapsed()
            );
            return left_ready.then_some(changes);
        }
        assert!(
            Instant::now() < deadline,
            "{leader} did not lead and probe every proxy within 60 s; log:\n{}",
            bed.operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn ready_proxies_stay_ready_when_the_operator_is_killed_and_restarted() {
    let mut bed = Bed::new("ready-restart").await;
    ready_fleet(&mut bed).await;
    let killed_at = Instant::now();
    bed.restart_operator();
    let leader = bed.operator.identity.clone();
    if let Some(changes) = watch_ready(&bed, &leader, killed_at).await {
        panic!(
            "Ready proxies left Ready across the restart:\n{}\nnew operator's log:\n{}",
            changes.join("\n"),
            bed.operator.log()
        );
    }
    assert!(bed.operator.is_running());
}

#[tokio::test]
async fn ready_proxies_stay_ready_when_leadership_moves_to_another_replica() {
    let mut bed = Bed::new("ready-handover").await;
    let mut second = start_operator(&bed.ns, &bed.origin, &[]);
    ready_fleet(&mut bed).await;
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let leader = holder(&leases).await.expect("someone leads");
    let killed_at = Instant::now();
    let survivor = if leader == bed.operator.identity {
        bed.operator.kill();
        second.identity.clone()
    } else {
        assert_eq!(leader, second.identity, "unknown holder");
        second.kill();
        bed.operator.identity.clone()
    };
    if let Some(changes) = watch_ready(&bed, &survivor, killed_at).await {
        panic!(
            "Ready proxies left Ready across the handover:\n{}\nboth replicas' log:\n{}",
            changes.join("\n"),
            bed.operator.log()
        );
    }
}

/// The lapse an etcd outage longer than the renew deadline causes, without one: another
/// holder takes the Lease for 5 s (as a replica would), so the operator's claim runs out and
/// its health engine forgets every verdict; then it acquires the Lease again in the same
/// process and reconciles every object at once.
#[tokio::test]
async fn ready_proxies_stay_ready_when_the_leader_loses_and_regains_leadership() {
    let mut bed = Bed::new("ready-regain").await;
    ready_fleet(&mut bed).await;
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let leader = bed.operator.identity.clone();
    assert_eq!(holder(&leases).await.as_deref(), Some(leader.as_str()));
    let stolen_at = Instant::now();
    // A MicroTime: RFC 3339 with exactly six fractional digits.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let steal = json!({"spec": {"holderIdentity": "another-replica", "leaseDurationSeconds": 5,
        "acquireTime": now, "renewTime": now}});
    leases
        .patch(
            "proxy-operator",
            &PatchParams::default(),
            &Patch::Merge(&steal),
        )
        .await
        .unwrap();
    if let Some(changes) = watch_ready(&bed, &leader, stolen_at).await {
        panic!(
            "Ready proxies left Ready when leadership lapsed and came back:\n{}\nlog:\n{}",
            changes.join("\n"),
            bed.operator.log()
        );
    }
    // The lapse happened: the operator acquired the Lease at its start, lost it to the
    // stolen claim, and regained it.
    let log = bed.operator.log();
    for line in [
        "acquired leadership",
        "lost leadership",
        "regained leadership",
    ] {
        assert_eq!(log.matches(line).count(), 1, "{line:?} once in:\n{log}");
    }
    assert!(bed.operator.is_running());
}
