//! The health engine end to end: the real operator probes real squid proxies, through them,
//! against the local HTTPS origin; hangs and kills come from the pod runner.

use std::time::{Duration, Instant};

use proxy_crd::{Phase, Proxy};
use serde_json::{Value, json};

use crate::operated::{Bed, condition};

/// A Managed proxy probed through itself at `path` of the origin, as often as its timeout
/// allows (the API server wants the timeout below the interval).
fn probed(bed: &Bed, path: &str, timeout_seconds: u32, failure_threshold: u32) -> Value {
    json!({"mode": "Managed", "provider": "pods", "healthCheck": {
        "probeURL": bed.origin.url(path), "intervalSeconds": timeout_seconds + 1, "timeoutSeconds": timeout_seconds,
        "failureThreshold": failure_threshold, "successThreshold": 1
    }})
}

fn phase(proxy: &Proxy) -> Option<Phase> {
    proxy.status.as_ref().and_then(|s| s.phase)
}

/// The message of the proxy's `Healthy` condition.
fn healthy_message(proxy: &Proxy) -> String {
    proxy
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == "Healthy")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Asserts that the `Healthy` condition of `proxy` and a `ProbeFailed` event about it both
/// say `says`.
async fn assert_cause(bed: &Bed, proxy: &Proxy, says: &str) {
    let name = proxy.metadata.name.as_deref().unwrap();
    let message = healthy_message(proxy);
    assert!(
        message.starts_with("probes through the proxy fail: ") && message.contains(says),
        "{name}: the Healthy condition says {message:?}, not {says:?}"
    );
    let notes = bed.event_notes(name, "ProbeFailed", says).await;
    assert!(
        notes.contains(&message),
        "{name}: no ProbeFailed event saying {message:?}: {notes:?}"
    );
}

fn pod_of(proxy: &Proxy) -> String {
    proxy_core::naming::instance_name(proxy.metadata.uid.as_deref().unwrap())
}

#[tokio::test]
async fn a_proxy_becomes_ready_unhealthy_when_hung_and_ready_again_when_resumed() {
    let mut bed = Bed::new("health-hang").await;
    let created = bed
        .create("h1", probed(&bed, "/generate_204?p=h1", 1, 3))
        .await;
    let ready = bed
        .wait_for("h1", "Ready", |p| phase(p) == Some(Phase::Ready))
        .await;
    assert_eq!(
        condition(&ready, "Healthy").unwrap(),
        ("True".into(), "ProbeSucceeded".into())
    );
    assert!(
        ready
            .status
            .as_ref()
            .unwrap()
            .last_probe_latency_ms
            .is_some()
    );
    let probes_before = bed
        .origin
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("p=h1"))
        .count();
    assert!(
        probes_before >= 1,
        "the probe went through squid to the origin"
    );

    let pod = pod_of(&created);
    bed.runner.with_squid(&pod, |s| s.hang()).unwrap();
    let hung_at = Instant::now();
    let unhealthy = bed
        .wait_for("h1", "Unhealthy", |p| phase(p) == Some(Phase::Unhealthy))
        .await;
    assert_cause(&bed, &unhealthy, "no answer within timeoutSeconds").await;
    // Three failed probes at a 2 s interval cannot all have happened in under 4 s.
    assert!(
        hung_at.elapsed() >= Duration::from_secs(4),
        "Unhealthy before failureThreshold probes failed"
    );

    bed.runner.with_squid(&pod, |s| s.resume()).unwrap();
    let back = bed
        .wait_for("h1", "Ready again", |p| phase(p) == Some(Phase::Ready))
        .await;
    assert_eq!(condition(&back, "Ready").unwrap().0, "True");
}

#[tokio::test]
async fn a_killed_squid_makes_its_proxy_unhealthy() {
    let mut bed = Bed::new("health-kill").await;
    let created = bed
        .create("k1", probed(&bed, "/generate_204?p=k1", 1, 2))
        .await;
    bed.wait_for("k1", "Ready", |p| phase(p) == Some(Phase::Ready))
        .await;
    bed.runner
        .with_squid(&pod_of(&created), |s| s.kill())
        .unwrap();
    let unhealthy = bed
        .wait_for("k1", "Unhealthy", |p| phase(p) == Some(Phase::Unhealthy))
        .await;
    assert_eq!(
        condition(&unhealthy, "Healthy").unwrap(),
        ("False".into(), "ProbeFailed".into())
    );
    assert_eq!(condition(&unhealthy, "Ready").unwrap().0, "False");
    assert_cause(&bed, &unhealthy, "connection refused by the proxy").await;
}

#[tokio::test]
async fn a_probe_url_answering_500_makes_the_proxy_unhealthy() {
    let mut bed = Bed::new("health-500").await;
    bed.create("s1", probed(&bed, "/status/500?p=s1", 1, 1))
        .await;
    let unhealthy = bed
        .wait_for("s1", "Unhealthy", |p| phase(p) == Some(Phase::Unhealthy))
        .await;
    assert_eq!(condition(&unhealthy, "Healthy").unwrap().0, "False");
    assert!(
        bed.origin
            .requests()
            .iter()
            .any(|r| r.path == "/status/500?p=s1"),
        "the origin answered the probes"
    );
    assert_cause(
        &bed,
        &unhealthy,
        "the probe URL answered 500, which is not in expectedStatusCodes",
    )
    .await;
}

#[tokio::test]
async fn a_proxy_that_cannot_connect_to_the_probe_url_says_it_refused_the_tunnel() {
    let mut bed = Bed::new("health-tunnel").await;
    // Nothing listens on port 1 of the origin's host: squid answers the CONNECT with 503.
    let spec = json!({"mode": "Managed", "provider": "pods", "healthCheck": {
        "probeURL": "https://probe.test:1/generate_204", "intervalSeconds": 2, "timeoutSeconds": 1,
        "failureThreshold": 1
    }});
    bed.create("t1", spec).await;
    let unhealthy = bed
        .wait_for("t1", "Unhealthy", |p| phase(p) == Some(Phase::Unhealthy))
        .await;
    assert_cause(
        &bed,
        &unhealthy,
        "the proxy refused to CONNECT to the probe URL's host",
    )
    .await;
}

#[tokio::test]
async fn a_hung_proxy_never_delays_the_probes_of_another() {
    let mut bed = Bed::new("health-isolation").await;
    // The hung proxy's probes each wait 5 s for their timeout; a prober that waited for them
    // would probe the healthy proxy (every 2 s) at most every 5 s.
    let hung = bed
        .create("slow", probed(&bed, "/generate_204?p=slow", 5, 3))
        .await;
    bed.create("fast", probed(&bed, "/generate_204?p=fast", 1, 3))
        .await;
    bed.wait_for("slow", "Ready", |p| phase(p) == Some(Phase::Ready))
        .await;
    bed.wait_for("fast", "Ready", |p| phase(p) == Some(Phase::Ready))
        .await;
    bed.runner.with_squid(&pod_of(&hung), |s| s.hang()).unwrap();
    let hung_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(14)).await;

    let times: Vec<Instant> = bed
        .origin
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("p=fast") && r.at > hung_at)
        .map(|r| r.at)
        .collect();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let worst = gaps.iter().max().copied().unwrap_or_default();
    // Configured period 2 s; the bound leaves room for a loaded machine but not for a
    // probe queued behind a 5 s timeout.
    assert!(
        times.len() >= 5,
        "only {} probes of the healthy proxy in 14 s: {gaps:?}",
        times.len()
    );
    assert!(
        worst < Duration::from_millis(4000),
        "a gap of {worst:?} between probes of the healthy proxy: {gaps:?}"
    );
    let fast = bed.proxies.get("fast").await.unwrap();
    assert_eq!(phase(&fast), Some(Phase::Ready));
}
