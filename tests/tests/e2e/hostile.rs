//! Proxies whose cloud-init content is a string the operator itself writes (a phase, a
//! reason, a condition status, an action name, the provider's name): the recorder redacts
//! cloud-init by type, so they reconcile like any other Proxy, and the operator stays up.
//!
//! Before the redaction was by type, each of these panicked the first reconcile (the
//! operator exited with 101 and restarted into the same object); with the panic boundary
//! alone (`shell/src/supervise.rs`) the operator survived but the objects never got a
//! status. Nothing may panic now: every loop's `proxy_operator_panics_total` stays at 0.

use serde_json::json;

use crate::operated::{Bed, provisioned};

/// `(Proxy name, cloudInit.inline)`: each content is a string a recorded decision holds.
const HOSTILE: [(&str, &str); 7] = [
    ("phase", "Provisioning"),
    ("health-reason", "AwaitingProbe"),
    ("condition-status", "True"),
    ("action", "Create"),
    ("metadata-action", "SetSpecHash"),
    ("requeue", "AwaitChange"),
    ("provider", "pods"),
];

#[tokio::test]
async fn proxies_whose_cloud_init_is_a_recorded_string_reconcile_and_the_operator_stays_up() {
    let mut bed = Bed::new("op-hostile").await;
    bed.create("normal", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    for (name, inline) in HOSTILE {
        bed.create(
            name,
            json!({"mode": "Managed", "provider": "pods", "cloudInit": {"inline": inline}}),
        )
        .await;
    }
    let names = std::iter::once("normal").chain(HOSTILE.map(|(name, _)| name));
    for name in names {
        let proxy = bed
            .wait_for(name, "Provisioned with an IP", provisioned)
            .await;
        let status = proxy.status.unwrap();
        assert_eq!(
            status.observed_generation, proxy.metadata.generation,
            "{name}: status is for the current spec"
        );
        assert!(
            status.provider_id.is_some(),
            "{name}: an instance was created"
        );
    }
    let log = bed.operator.log();
    assert!(
        bed.operator.is_running(),
        "the operator exited; its log:\n{log}"
    );
    assert!(
        !log.contains("panicked"),
        "the operator panicked; its log:\n{log}"
    );
    let text = reqwest::get(&bed.operator.metrics)
        .await
        .expect("the metrics endpoint answers")
        .text()
        .await
        .expect("a metrics body");
    for part in [
        "reconcile",
        "pool",
        "health",
        "gc",
        "discovery_sync",
        "leadership",
        "lease_book",
    ] {
        let series = format!(r#"proxy_operator_panics_total{{loop="{part}"}} 0"#);
        assert!(
            text.lines().any(|l| l == series),
            "missing {series:?} in:\n{text}"
        );
    }
}
