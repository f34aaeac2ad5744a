//! Record and replay end to end: the operator records a real replacement on the test bed;
//! `proxy-operator replay` finds every decision identical; a deliberately changed rule
//! diverges at the record where it first matters.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use proxy_core::Action;
use proxy_core::record::{Record, Recording};
use proxy_tests::operator::binary;
use serde_json::json;

use crate::operated::{Bed, provisioned};

#[tokio::test]
async fn a_recorded_replacement_replays_identically_and_a_changed_rule_diverges_where_it_matters() {
    let dir = proxy_tests::run_dir::subdir("replay");
    let file = dir.join("operator.jsonl");
    let file_arg = file.to_str().unwrap().to_owned();
    let mut bed = Bed::new_with("replay", &["--record-file", &file_arg]).await;
    bed.create("r1", json!({"mode": "Managed", "provider": "pods", "cloudInit": {"inline": "#cloud-config\n# secret-marker-4711\n"}}))
        .await;
    let before = bed.wait_for("r1", "Provisioned", provisioned).await;
    let old_ip = before.status.unwrap().ip;
    let patch = json!({"spec": {"port": 3129}});
    bed.proxies
        .patch("r1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    bed.wait_for("r1", "replaced", |p| {
        provisioned(p) && p.status.as_ref().unwrap().ip != old_ip
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains("secret-marker-4711"),
        "cloud-init content reached the recording"
    );
    // The CLI: the timeline, then the verdict.
    let out = std::process::Command::new(binary())
        .arg("replay")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "replay failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("every decision identical"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("/r1") && l.contains("Delete")),
        "the timeline shows the replacement:\n{stdout}"
    );

    // The same file through a core whose rule is changed: drift adopts instead of replacing
    // (as if the hash annotation were empty).
    let recording = Recording::parse(&text).unwrap();
    let first_delete = recording
        .records()
        .iter()
        .position(|r| matches!(r, Record::Decide(d) if d.output.actions().iter().any(|a| matches!(a, Action::Delete { .. }))))
        .expect("the recording holds the replacement's Delete");
    let report = recording
        .replay_with(|spec, status, observed| {
            let decision = proxy_core::decide(spec, status, observed);
            if !decision
                .actions()
                .iter()
                .any(|a| matches!(a, Action::Delete { .. }))
            {
                return decision;
            }
            let adopting = proxy_core::Observed {
                object: proxy_core::Metadata {
                    spec_hash_annotation: None,
                    created: None,
                    ..observed.object.clone()
                },
                ..observed.clone()
            };
            proxy_core::decide(spec, status, &adopting)
        })
        .unwrap();
    let divergence = report.divergence.expect("the changed rule diverges");
    assert_eq!(divergence.index, first_delete, "diverged at {divergence}");

    // The same recording is served from memory on the metrics port, to the token's holders.
    let admin = bed
        .operator
        .metrics
        .replace("/metrics", "/debug/recording?object=");
    let refused = reqwest::get(format!("{admin}{}/r1", bed.ns)).await.unwrap();
    assert_eq!(refused.status(), 401, "a recording without the token");
    let dump = bed
        .operator
        .recording(Some(&format!("{}/r1", bed.ns)))
        .await;
    assert!(
        Recording::parse(&dump)
            .unwrap()
            .replay()
            .unwrap()
            .is_identical()
    );
}
