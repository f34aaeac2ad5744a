//! The panic boundary end to end: Proxies whose reconcile panics inside the operator do not
//! stop it, and every other Proxy keeps being served.
//!
//! The input is a real one that panics today: a Managed Proxy whose `cloudInit.inline`
//! equals a string of the serialised decision (the recorder's redaction replaces strings by
//! equality, then deserialises with `expect`, `core/src/record/redact.rs`). Without the
//! boundary the operator exits with 101 on the first reconcile of such an object.

use std::time::{Duration, Instant};

use proxy_crd::Phase;
use serde_json::json;

use crate::operated::{Bed, condition};

/// Inline cloud-init contents that are also strings of the first decision of a new Proxy
/// (a phase, an action).
const BAD: [(&str, &str); 3] = [
    ("bad-phase-1", "Provisioning"),
    ("bad-phase-2", "Provisioning"),
    ("bad-action", "AddFinalizer"),
];
const GOOD: [&str; 2] = ["good-1", "good-2"];

/// The value of the counter line `series` (e.g. `name{labels}`), 0 when absent.
fn counter(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The panic log lines that name `object` (`namespace/name`).
fn panics_of(log: &str, object: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("the operator goes on") && l.contains(object))
        .count()
}

#[tokio::test]
async fn proxies_that_panic_the_reconcile_neither_stop_the_operator_nor_the_others() {
    let mut bed = Bed::new("panics").await;
    for (name, inline) in BAD {
        bed.create(
            name,
            json!({"mode": "Managed", "provider": "pods", "cloudInit": {"inline": inline}}),
        )
        .await;
    }
    for name in GOOD {
        let spec = json!({"mode": "Managed", "provider": "pods", "healthCheck": {
            "probeURL": bed.origin.url(&format!("/generate_204?p={name}")),
            "intervalSeconds": 1, "timeoutSeconds": 1}});
        bed.create(name, spec).await;
    }
    for name in GOOD {
        let ready = bed
            .wait_for(name, "Ready next to Proxies that panic", |p| {
                p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
            })
            .await;
        assert_eq!(condition(&ready, "Ready").unwrap().0, "True");
    }
    assert!(
        bed.operator.is_running(),
        "the operator died; log:\n{}",
        bed.operator.log()
    );

    // Each panicking object is requeued with backoff (1 s, then 2 s, ...): within a bounded
    // wait, the log shows a second panic of each, named, and the counter counts them.
    let started = Instant::now();
    let objects: Vec<String> = BAD
        .iter()
        .map(|(name, _)| format!("{}/{name}", bed.ns))
        .collect();
    loop {
        let log = bed.operator.log();
        if objects.iter().all(|o| panics_of(&log, o) >= 2) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not every bad Proxy was retried after its panic; operator running: {}; log:\n{log}",
            bed.operator.is_running()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = reqwest::get(&bed.operator.metrics)
        .await
        .expect("the metrics endpoint answers")
        .text()
        .await
        .unwrap();
    let reconcile_panics = counter(&text, r#"proxy_operator_panics_total{loop="reconcile"}"#);
    assert!(
        reconcile_panics >= 2.0 * BAD.len() as f64,
        "proxy_operator_panics_total{{loop=\"reconcile\"}} is {reconcile_panics}:\n{text}"
    );
    for other in ["health", "gc", "discovery_sync", "leadership"] {
        assert_eq!(
            counter(
                &text,
                &format!(r#"proxy_operator_panics_total{{loop="{other}"}}"#)
            ),
            0.0,
            "{other}"
        );
    }
    assert!(bed.operator.is_running());
    eprintln!(
        "{reconcile_panics} reconcile panics caught; the operator served {} Ready Proxies",
        GOOD.len()
    );
}
