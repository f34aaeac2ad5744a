//! The provider health monitor end to end: the operator binary checks each provider and
//! publishes one `ProviderHealth` per provider in its namespace. The gcp provider runs
//! against the local Compute Engine API (`proxy_tests::gce`, which speaks the real REST API:
//! no GCE can exist here), whose aggregated list is made to fail and recover.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use proxy_crd::{Phase, ProviderHealth, Proxy};
use proxy_tests::gce::{Fault, Method};
use proxy_tests::operator::Polls;
use serde_json::json;

use crate::metrics::scrape;
use crate::operated::{Bed, GCP};

/// The `Healthy` condition's status and reason of `name`'s ProviderHealth, when it has one.
async fn healthy(api: &Api<ProviderHealth>, name: &str) -> Option<(String, String, String)> {
    let object = api.get_opt(name).await.ok()??;
    let condition = object.status?.conditions.into_iter().next()?;
    Some((condition.status, condition.reason, condition.message))
}

/// Waits until `name`'s ProviderHealth says `status`; returns its reason and message.
async fn wait_healthy(
    bed: &Bed,
    api: &Api<ProviderHealth>,
    name: &str,
    status: &str,
) -> (String, String) {
    for _ in 0..300 {
        if let Some((s, reason, message)) = healthy(api, name).await
            && s == status
        {
            return (reason, message);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "ProviderHealth {name} did not turn Healthy={status} within 30 s (now: {:?}); operator log:\n{}",
        healthy(api, name).await,
        bed.operator.log()
    );
}

/// How often each reason was recorded about the ProviderHealth `name` (Kubernetes counts a
/// repeated event in the `series` of the first).
async fn event_counts(bed: &Bed, name: &str) -> BTreeMap<String, i32> {
    let events: Api<Event> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let mut listed: Vec<Event> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("ProviderHealth") && r.name.as_deref() == Some(name)
            })
        })
        .collect();
    let mut counts = BTreeMap::new();
    for event in listed.drain(..) {
        let times = event.series.map_or(1, |s| s.count);
        *counts.entry(event.reason.unwrap_or_default()).or_default() += times;
    }
    counts
}

fn phase(proxy: &Proxy) -> Option<Phase> {
    proxy.status.as_ref().and_then(|s| s.phase)
}

fn provisioned_reason(proxy: &Proxy) -> Option<String> {
    let conditions = &proxy.status.as_ref()?.conditions;
    Some(
        conditions
            .iter()
            .find(|c| c.type_ == "Provisioned")?
            .reason
            .clone(),
    )
}

#[tokio::test]
async fn provider_health_flips_with_the_provider_and_creates_wait_while_it_is_down() {
    // A drift poll of an hour: a waiting Proxy is reconciled again when its provider comes
    // back only because the monitor wakes it.
    let polls = Polls {
        drift: 3600.0,
        ..Polls::FAST
    };
    let mut bed =
        Bed::with_gce_polling("ph", polls, &["--provider-check-interval-seconds", "1"]).await;
    let api: Api<ProviderHealth> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);

    // One object per configured provider, both healthy.
    wait_healthy(&bed, &api, "pods", "True").await;
    let (reason, _) = wait_healthy(&bed, &api, GCP, "True").await;
    assert_eq!(reason, "CheckPassed");
    let gcp = api.get(GCP).await.unwrap();
    assert_eq!(gcp.spec.type_, "gcp");
    let status = gcp.status.unwrap();
    assert_eq!(status.instances, Some(0), "nothing created yet");
    assert!(status.latency_ms.is_some() && status.last_check_time.is_some());

    // The aggregated list fails: the check fails, and says why.
    bed.gce().set_outage(Method::AggregatedList, Some(503));
    let (reason, message) = wait_healthy(&bed, &api, GCP, "False").await;
    assert_eq!(reason, "CheckFailed");
    assert!(
        message.starts_with("provider gcp-eu failed its check: "),
        "{message}"
    );
    let metrics = scrape(&bed.operator.metrics).await;
    assert!(
        metrics.contains(r#"proxy_operator_provider_up{provider="gcp-eu"} 0"#)
            && metrics.contains(r#"proxy_operator_provider_up{provider="pods"} 1"#),
        "{metrics}"
    );

    // A Proxy applied now waits, without a single insert, and says why.
    let inserts = bed.gce().calls(Method::Insert);
    let spec = json!({"mode": "Managed", "provider": GCP, "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    bed.create("waits", spec).await;
    let waiting = bed
        .wait_for("waits", "waiting for its provider", |p| {
            provisioned_reason(p).as_deref() == Some("ProviderUnhealthy")
        })
        .await;
    assert_eq!(phase(&waiting), Some(Phase::Pending));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        bed.gce().calls(Method::Insert),
        inserts,
        "no create while it is down"
    );

    // The API recovers: the provider is healthy again, and the waiting Proxy, woken by the
    // monitor, gets its VM.
    bed.gce().set_outage(Method::AggregatedList, None);
    wait_healthy(&bed, &api, GCP, "True").await;
    bed.wait_for("waits", "Ready on its VM", |p| {
        phase(p) == Some(Phase::Ready)
    })
    .await;
    assert!(bed.gce().calls(Method::Insert) > inserts);

    // An Event on every flip, and only then.
    let want = BTreeMap::from([
        ("ProviderHealthy".to_owned(), 2),
        ("ProviderUnhealthy".to_owned(), 1),
    ]);
    let mut counts = BTreeMap::new();
    for _ in 0..100 {
        counts = event_counts(&bed, GCP).await;
        if counts == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(counts, want, "checks every second, but one Event per flip");
}

#[tokio::test]
async fn a_check_that_meets_a_rate_limit_leaves_the_provider_healthy_refused_credentials_do_not() {
    // Issue 50: a check that met a burst of rate limits marked the provider down, and new
    // Proxies waited a whole check interval. A rate limit is no outage: the provider
    // answered, and its calls are paced. Refused credentials are one: down at once.
    let bed = Bed::with_gce("ph-rate", &["--provider-check-interval-seconds", "1"]).await;
    let api: Api<ProviderHealth> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    wait_healthy(&bed, &api, GCP, "True").await;

    bed.gce().set_rate_limited(true);
    let limited_before = bed.gce().rate_limited(Method::AggregatedList);
    let (mut reasons, mut paused) = (Vec::new(), false);
    // Four checks' worth of rate limits: never down.
    for _ in 0..40 {
        let (status, reason, message) = healthy(&api, GCP).await.unwrap();
        assert_eq!(
            status,
            "True",
            "a rate limit marked the provider down: {reason}: {message}; operator log:\n{}",
            bed.operator.log()
        );
        if reasons.last() != Some(&reason) {
            reasons.push(reason);
        }
        let pacing = api.get(GCP).await.unwrap().status.unwrap().pacing;
        paused |= pacing
            .iter()
            .any(|s| s.scope == "read" && s.rate_limits > 0 && s.paused_until.is_some());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        bed.gce().rate_limited(Method::AggregatedList) > limited_before,
        "the checks never met the rate limit"
    );
    assert!(
        reasons.iter().any(|r| r == "CheckRateLimited"),
        "{reasons:?}"
    );
    assert!(
        paused,
        "the ProviderHealth never showed the read scope paused"
    );
    let metrics = scrape(&bed.operator.metrics).await;
    assert!(
        metrics.contains(r#"proxy_operator_provider_up{provider="gcp-eu"} 1"#),
        "{metrics}"
    );
    bed.gce().set_rate_limited(false);
    let (reason, _) = wait_passed(&bed, &api).await;
    assert_eq!(reason, "CheckPassed");

    // The key is revoked: the first check that meets it marks the provider down.
    bed.gce()
        .set_outage_with(Method::AggregatedList, Some(Fault::Unauthenticated));
    let (reason, message) = wait_healthy(&bed, &api, GCP, "False").await;
    assert_eq!(reason, "CheckFailed");
    assert!(message.contains("credentials"), "{message}");
    bed.gce().set_outage_with(Method::AggregatedList, None);
    wait_healthy(&bed, &api, GCP, "True").await;
}

/// Waits until the provider's last check passed again; its reason and message.
async fn wait_passed(bed: &Bed, api: &Api<ProviderHealth>) -> (String, String) {
    // The pacing tries GCE again 2 s after the next minute of the clock starts: up to 62 s.
    for _ in 0..800 {
        if let Some((_, reason, message)) = healthy(api, GCP).await
            && reason == "CheckPassed"
        {
            return (reason, message);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{GCP}: no passing check within 80 s of the rate limit lifting; operator log:\n{}",
        bed.operator.log()
    );
}
