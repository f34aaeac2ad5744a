//! The gcp provider against a Compute Engine that answers as unkindly as the real one
//! (issue 38): the operator binary against the local Compute Engine API (`proxy_tests::gce`,
//! written from Google's public REST reference because no usable emulator exists), with
//! quota and stockouts reported inside accepted operations, rate limits said in `details`,
//! VMs invisible for a moment after their insert, deletes refused while a VM stops, refused
//! credentials and missing images. Each VM is a real squid, probed for real.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams};
use proxy_crd::{Phase, ProviderHealth, Proxy};
use proxy_tests::gce::{Durations, Fault, InsertFault, Method};
use serde_json::json;

use crate::gcp::{gcp_spec, ip, phase, provider_id, ready, until_gce, vm_of};
use crate::operated::{Bed, GCP, condition};

/// The gaps between the inserts of one VM name, in the order they came.
fn insert_gaps(bed: &Bed, name_of: &str) -> Vec<Duration> {
    let times: Vec<Instant> = bed
        .gce()
        .inserts()
        .into_iter()
        .filter(|(name, _, _)| name == name_of)
        .map(|(_, at, _)| at)
        .collect();
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// The `Provisioned` reasons `name` showed while `until` did not hold, sampled every 100 ms
/// for at most 30 s; fails if the Proxy was ever `Failed`.
async fn reasons_until(bed: &mut Bed, name: &str, until: impl Fn(&Proxy) -> bool) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..300 {
        let proxy = bed.proxies.get(name).await.unwrap();
        assert_ne!(
            phase(&proxy),
            Some(Phase::Failed),
            "{name} went Failed: {:?}; operator log:\n{}",
            proxy.status,
            bed.operator.log()
        );
        if let Some((_, reason)) = condition(&proxy, "Provisioned")
            && seen.last() != Some(&reason)
        {
            seen.push(reason);
        }
        if until(&proxy) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{name}: not there within 30 s (reasons seen: {seen:?}); operator log:\n{}",
        bed.operator.log()
    );
}

/// The instance name of the Proxy `name`.
async fn instance_of(bed: &Bed, name: &str) -> String {
    let proxy = bed.proxies.get(name).await.unwrap();
    proxy_core::naming::instance_name(proxy.metadata.uid.as_deref().unwrap())
}

#[tokio::test]
async fn quota_in_the_operation_gives_one_insert_per_retry_interval() {
    // Each insert is accepted (HTTP 200) and its operation ends DONE with QUOTA_EXCEEDED:
    // how GCE reports most quota. Before issue 38 the Proxy's own status write woke it at
    // once, and inserts came 8-9 a minute with a 30 s quota delay.
    let retry = Duration::from_secs(3);
    let mut bed = Bed::with_gce("gcp-opq", &["--quota-retry-seconds", "3"]).await;
    bed.gce().fail_next_inserts(3, InsertFault::OperationQuota);
    bed.create("q", gcp_spec(&bed, json!({}))).await;
    let reasons = reasons_until(&mut bed, "q", ready).await;
    assert!(
        reasons.iter().any(|r| r == "QuotaExceeded"),
        "the wait was never visible: {reasons:?}"
    );
    let name = instance_of(&bed, "q").await;
    let gaps = insert_gaps(&bed, &name);
    assert_eq!(
        gaps.len(),
        3,
        "three refused inserts, then the VM: {gaps:?}"
    );
    for gap in &gaps {
        assert!(
            *gap >= retry - Duration::from_millis(100),
            "an insert came {gap:?} after the one before, inside the {retry:?} quota delay: \
             {gaps:?}; operator log:\n{}",
            bed.operator.log()
        );
    }
    let notes = bed.event_notes("q", "QuotaExceeded", "retrying at").await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("QUOTA_EXCEEDED") && n.contains("retrying at")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn a_stockout_in_the_operation_waits_and_moves_to_the_next_zone() {
    let retry = Duration::from_secs(2);
    let mut bed = Bed::with_gce("gcp-stock", &["--quota-retry-seconds", "2"]).await;
    bed.gce().fail_next_inserts(1, InsertFault::ZoneExhausted);
    // No placement.zone: the provider's first zone, then the next.
    bed.create("z", gcp_spec(&bed, json!({}))).await;
    let reasons = reasons_until(&mut bed, "z", ready).await;
    assert!(
        reasons.iter().any(|r| r == "ZoneResourcesExhausted"),
        "{reasons:?}"
    );
    let name = instance_of(&bed, "z").await;
    let zones: Vec<String> = bed
        .gce()
        .inserts()
        .into_iter()
        .filter(|(n, _, _)| *n == name)
        .map(|(_, _, zone)| zone)
        .collect();
    assert_eq!(
        zones,
        ["europe-west1-b", "europe-west1-c"],
        "the retry moved zones"
    );
    let gaps = insert_gaps(&bed, &name);
    assert!(gaps[0] >= retry - Duration::from_millis(100), "{gaps:?}");
    let proxy = bed.proxies.get("z").await.unwrap();
    assert!(
        provider_id(&proxy).is_some_and(|id| id.starts_with("zones/europe-west1-c/")),
        "{:?}",
        proxy.status
    );
    assert_eq!(
        proxy.status.as_ref().and_then(|s| s.zone.as_deref()),
        Some("europe-west1-c"),
        "the status says where it landed"
    );
    let notes = bed
        .event_notes("z", "ZoneResourcesExhausted", "europe-west1-b")
        .await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("europe-west1-b has no capacity")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn rate_limit_bursts_of_both_body_shapes_leave_every_ready_proxy_ready() {
    let mut bed = Bed::with_gce("gcp-rate", &[]).await;
    for name in ["r1", "r2", "r3"] {
        bed.create(name, gcp_spec(&bed, json!({}))).await;
    }
    for name in ["r1", "r2", "r3"] {
        bed.wait_for(name, "Ready", ready).await;
    }
    let methods = [
        Method::Get,
        Method::AggregatedList,
        Method::Insert,
        Method::OperationsGet,
    ];
    // Counted from the fault: the rate-limit answers the bursts gave, and every call made
    // during them.
    let limited_before: u64 = methods.iter().map(|m| bed.gce().rate_limited(*m)).sum();
    let calls_before: u64 = Method::ALL.iter().map(|m| bed.gce().calls(*m)).sum();
    let mut samples = 0;
    for fault in [Fault::RateLimitWithDetails, Fault::RateLimitDetailsOnly] {
        for method in methods {
            bed.gce().set_outage_with(method, Some(fault));
        }
        if fault == Fault::RateLimitWithDetails {
            // A new Proxy in the middle of it: it waits, and never fails.
            bed.create("r4", gcp_spec(&bed, json!({}))).await;
        }
        let burst = Instant::now();
        while burst.elapsed() < Duration::from_secs(4) {
            for proxy in bed.proxies.list(&Default::default()).await.unwrap() {
                let name = proxy.metadata.name.clone().unwrap_or_default();
                assert_ne!(
                    phase(&proxy),
                    Some(Phase::Failed),
                    "{name}: {:?}",
                    proxy.status
                );
                if name != "r4" {
                    assert!(ready(&proxy), "{name} left Ready: {:?}", proxy.status);
                }
            }
            samples += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for method in methods {
        bed.gce().set_outage_with(method, None);
    }
    assert!(samples > 40, "{samples} samples");
    let limited = methods
        .iter()
        .map(|m| bed.gce().rate_limited(*m))
        .sum::<u64>()
        - limited_before;
    let calls = Method::ALL.iter().map(|m| bed.gce().calls(*m)).sum::<u64>() - calls_before;
    eprintln!("8 s of rate limits: {calls} calls, {limited} answered with a rate limit");
    assert!(
        limited > 0,
        "the bursts were never met: no call was answered with a rate limit ({calls} calls)"
    );
    // Issue 50: the limit paces every call of the provider, not each Proxy on its own, and
    // GCE refills a rate quota as a minute of the clock starts: in 8 s of rate limits, at
    // most 2 reads and 2 writes meet them (one as they begin, one if a minute starts within
    // them); a pause of 1 s doubling made up to 4 of each, and before issue 50 each of the
    // four Proxies looked its VM up on its own backoff.
    assert!(
        calls <= 4,
        "{calls} calls during 8 s of rate limits ({limited} of them answered with one); \
         operator log:\n{}",
        bed.operator.log()
    );
    // The pause ends 2 s after the next minute starts: up to 62 s, then the VM's start.
    bed.wait_for_within(
        "r4",
        "Ready once the limit lifted",
        Duration::from_secs(100),
        ready,
    )
    .await;
    for name in ["r1", "r2", "r3"] {
        assert!(ready(&bed.proxies.get(name).await.unwrap()), "{name}");
    }
}

#[tokio::test]
async fn a_vm_deleted_out_of_band_is_replaced_never_failed() {
    let mut bed = Bed::with_gce("gcp-oob", &[]).await;
    // It stops for 3 s before it is gone: the operator's deletes meanwhile are refused with
    // 400 resourceNotReady.
    bed.gce().set_durations(Durations {
        deleting: Duration::from_secs(3),
        ..Durations::default()
    });
    bed.create("o1", gcp_spec(&bed, json!({}))).await;
    let before = bed.wait_for("o1", "Ready", ready).await;
    let old = vm_of(&bed, &before).unwrap();
    let not_ready_before = bed.gce().not_ready_answers();
    bed.gce().delete_out_of_band(&old.zone, &old.name).unwrap();
    let deletes_before = bed.gce().calls(Method::Delete);
    let old_ip = ip(&before);
    reasons_until(&mut bed, "o1", |p| ready(p) && ip(p) != old_ip).await;
    let after = bed.proxies.get("o1").await.unwrap();
    let new = vm_of(&bed, &after).expect("the Proxy's VM");
    assert_ne!(new.id, old.id, "a new VM");
    assert_eq!(ip(&after), new.nat_ip.map(|ip| ip.to_string()));
    assert!(
        bed.gce().calls(Method::Delete) > deletes_before,
        "the operator deleted the stopped VM"
    );
    // The case this test is about: a delete refused with 400 resourceNotReady while the VM
    // stops, counted from the out-of-band delete (before issue 53 nothing asserted that any
    // delete met it).
    assert!(
        bed.gce().not_ready_answers() > not_ready_before,
        "no delete of the operator met the stopping VM (resourceNotReady); operator log:\n{}",
        bed.operator.log()
    );
}

#[tokio::test]
async fn a_proxy_deleted_right_after_its_insert_leaves_no_vm() {
    let bed = Bed::with_gce("gcp-early", &[]).await;
    // The VM is invisible for 2 s after its insert, and takes 1.5 s to run.
    bed.gce().set_durations(Durations {
        invisible_after_insert: Duration::from_secs(2),
        provisioning: Duration::from_millis(1_000),
        staging: Duration::from_millis(500),
        ..Durations::default()
    });
    let created = bed.create("e1", gcp_spec(&bed, json!({}))).await;
    let uid = created.metadata.uid.clone().unwrap();
    for _ in 0..300 {
        if !bed.gce().inserts().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bed.gce().inserts().len(), 1, "the insert went out");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let deleted = Instant::now();
    bed.proxies
        .delete("e1", &DeleteParams::default())
        .await
        .unwrap();
    let gone = kube::runtime::wait::await_condition(
        bed.proxies.clone(),
        "e1",
        kube::runtime::wait::conditions::is_deleted(&uid),
    );
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .unwrap_or_else(|_| panic!("the Proxy stayed; operator log:\n{}", bed.operator.log()))
        .unwrap();
    // The finalizer went only once the VM was on its way out.
    assert!(
        bed.gce()
            .instances()
            .iter()
            .all(|vm| vm.status == "STOPPING"),
        "the Proxy went while its VM lives: {:#?}; operator log:\n{}",
        bed.gce().instances(),
        bed.operator.log()
    );
    until_gce(&bed, "no VM left", <[_]>::is_empty).await;
    assert!(
        deleted.elapsed() < Duration::from_secs(30),
        "{:?}",
        deleted.elapsed()
    );
}

#[tokio::test]
async fn refused_credentials_make_the_provider_unhealthy_and_nothing_latches() {
    let mut bed = Bed::with_gce(
        "gcp-auth",
        &[
            "--quota-retry-seconds",
            "3",
            "--provider-check-interval-seconds",
            "1",
        ],
    )
    .await;
    bed.create("a1", gcp_spec(&bed, json!({}))).await;
    bed.wait_for("a1", "Ready", ready).await;
    // The key is revoked: every call answers 401.
    let methods = [
        Method::Get,
        Method::AggregatedList,
        Method::List,
        Method::Insert,
        Method::OperationsGet,
    ];
    for method in methods {
        bed.gce()
            .set_outage_with(method, Some(Fault::Unauthenticated));
    }
    bed.create("a2", gcp_spec(&bed, json!({}))).await;
    let waiting = bed
        .wait_for("a2", "waiting for its provider", |p| {
            condition(p, "Provisioned").is_some_and(|(_, r)| r == "ProviderUnhealthy")
        })
        .await;
    assert_ne!(phase(&waiting), Some(Phase::Failed));
    let health: Api<ProviderHealth> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let mut unhealthy = false;
    for _ in 0..100 {
        let object = health.get_opt(GCP).await.unwrap();
        let condition = object
            .and_then(|o| o.status)
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Healthy"));
        if condition.is_some_and(|c| c.status == "False") {
            unhealthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(unhealthy, "the ProviderHealth never said Healthy=False");
    for _ in 0..20 {
        for name in ["a1", "a2"] {
            let proxy = bed.proxies.get(name).await.unwrap();
            assert_ne!(
                phase(&proxy),
                Some(Phase::Failed),
                "{name}: {:?}",
                proxy.status
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready(&bed.proxies.get("a1").await.unwrap()),
        "a serving proxy stays Ready"
    );
    // The key is fixed: the waiting Proxy goes on by itself.
    for method in methods {
        bed.gce().set_outage_with(method, None);
    }
    bed.wait_for("a2", "Ready once the credentials work", ready)
        .await;
}

#[tokio::test]
async fn a_missing_image_fails_the_proxy_naming_the_field() {
    let mut bed = Bed::with_gce("gcp-image", &[]).await;
    let image = "projects/debian-cloud/global/images/family/debian-99";
    bed.gce().set_image_missing(image);
    bed.create("i1", gcp_spec(&bed, json!({"placement": {"image": image}})))
        .await;
    let failed = bed
        .wait_for("i1", "Failed", |p| phase(p) == Some(Phase::Failed))
        .await;
    let message = failed
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Provisioned"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("spec.placement.image:") && message.contains("debian-99"),
        "{message}"
    );
    assert_eq!(bed.gce().inserts().len(), 1, "refused once, not retried");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        bed.gce().inserts().len(),
        1,
        "a latched Proxy makes no call"
    );
}
