//! The operator's metrics endpoint, scraped from the real process.

use std::time::Duration;

use kube::api::DeleteParams;
use proxy_crd::Phase;
use serde_json::json;

use proxy_tests::operator::DISCOVERY_TOKEN;

use crate::operated::Bed;

/// One scrape of the metrics at `url`. An operator that was just started may not listen yet
/// (its start-up builds the providers first): a refused connection is tried again for 20 s.
pub(crate) async fn scrape(url: &str) -> String {
    let mut refused = None;
    for _ in 0..100 {
        match reqwest::get(url).await {
            Ok(response) => return response.text().await.unwrap(),
            Err(error) if error.is_connect() => refused = Some(error),
            Err(error) => panic!("the metrics endpoint answers: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the metrics endpoint never listened: {refused:?}")
}

/// Waits until the scrape satisfies `check`; returns the last scrape.
async fn scrape_until(url: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = scrape(url).await;
        if check(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("metrics never showed {what}:\n{text}");
}

#[tokio::test]
async fn the_metrics_name_what_happens_and_forget_deleted_proxies() {
    let mut bed = Bed::new("metrics").await;
    let spec = json!({"mode": "Managed", "provider": "pods", "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    bed.create("m1", spec).await;
    bed.wait_for("m1", "Ready", |p| {
        p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
    })
    .await;
    let url = bed.operator.metrics.clone();
    let ns = bed.ns.clone();
    let probe_line =
        format!(r#"proxy_operator_probes_total{{namespace="{ns}",proxy="m1",result="success"}}"#);
    let text = scrape_until(&url, "a successful probe of m1", |t| {
        t.contains(&probe_line)
    })
    .await;
    // Shown with --nocapture: one real scrape, for the docs and the curious.
    eprintln!("one scrape of {url}:\n{text}");
    for expected in [
        r#"proxy_operator_proxies{phase="Ready"} 1"#,
        r#"proxy_operator_proxies{phase="Failed"} 0"#,
        "proxy_operator_leases_active 0",
        "proxy_operator_leases_retained 0",
        r#"proxy_operator_provider_requests_total{provider="pods",op="create",result="ok"} 1"#,
        "# TYPE proxy_operator_reconcile_duration_seconds histogram",
        "# TYPE proxy_operator_probe_latency_seconds histogram",
        "# TYPE proxy_operator_probes counter",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(text.contains(&format!(
        r#"proxy_operator_probe_latency_seconds_count{{namespace="{ns}"}}"#
    )));
    assert!(text.lines().any(|l| l.starts_with(
        r#"proxy_operator_provider_requests_total{provider="pods",op="get",result="ok"}"#
    )));
    // m1's decide calls are kept, packed, within the budget.
    let value = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    };
    assert!(value("proxy_operator_recording_records") > 0);
    let lines = value(r#"proxy_operator_recording_bytes{part="lines"}"#);
    let dictionaries = value(r#"proxy_operator_recording_bytes{part="dictionaries"}"#);
    assert!(lines > 0 && dictionaries > 0, "{lines} + {dictionaries}");

    // A lease taken and released: active while held, then kept for late reports.
    let lease = bed.lease(json!({"ttlSeconds": 60})).await;
    let id = lease["leaseID"].as_str().unwrap();
    scrape_until(&url, "one active lease", |t| {
        t.contains("proxy_operator_leases_active 1\n")
    })
    .await;
    let released = reqwest::Client::new()
        .delete(format!("{}/v1/leases/{id}", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(released.status().as_u16(), 204);
    let text = scrape(&url).await;
    for expected in [
        "proxy_operator_leases_active 0\n",
        "proxy_operator_leases_retained 1\n",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    bed.proxies
        .delete("m1", &DeleteParams::default())
        .await
        .unwrap();
    let text = scrape_until(&url, "m1's series removed", |t| {
        !t.contains(r#"proxy="m1""#)
    })
    .await;
    assert!(
        text.contains(
            r#"proxy_operator_provider_requests_total{provider="pods",op="delete",result="ok"}"#
        ),
        "{text}"
    );
}
