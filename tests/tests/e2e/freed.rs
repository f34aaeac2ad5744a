//! Every piece of per-Proxy state the operator keeps is freed when the Proxy goes: the
//! recorder's rings, the counts of consecutive failures, the last known versions, the health
//! engine's verdicts, the lease book and the metric series labelled with a proxy. Read from the real process:
//! `proxy_operator_tracked_proxies{store}` on its metrics port, its series, and
//! `/debug/recording`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use proxy_crd::Phase;
use proxy_tests::control_plane::ControlPlane;
use serde_json::json;

use crate::metrics::scrape;
use crate::operated::Bed;

/// The stores of `proxy_operator_tracked_proxies`, and how many Proxies each holds.
fn tracked(scrape: &str) -> BTreeMap<String, u64> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("proxy_operator_tracked_proxies{store=\""))
        .filter_map(|rest| rest.split_once("\"} "))
        .filter_map(|(store, count)| Some((store.to_owned(), count.parse().ok()?)))
        .collect()
}

/// Scrapes until `check` holds for the tracked counts; fails with the last scrape.
async fn tracked_until(
    bed: &Bed,
    what: &str,
    check: impl Fn(&BTreeMap<String, u64>, &str) -> bool,
) -> BTreeMap<String, u64> {
    let mut text = String::new();
    for _ in 0..300 {
        text = scrape(&bed.operator.metrics).await;
        let counts = tracked(&text);
        if check(&counts, &text) {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the operator never showed {what}; last tracked counts {:?}; operator log tail:\n{}",
        tracked(&text),
        tail(&bed.operator.log())
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Refuses the deletion of one Pod (a cloud that refuses to delete an instance), until
/// dropped. A ValidatingAdmissionPolicy is cluster-scoped: it matches only `pod` in `ns`.
struct RefusedPodDeletion {
    name: String,
}

impl RefusedPodDeletion {
    async fn install(client: &kube::Client, ns: &str, pod: &str) -> Self {
        let name = format!("refuse-pod-delete-{ns}");
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["DELETE"], "resources": ["pods"]}]},
                "validations": [{"expression": format!("oldObject.metadata.name != '{pod}'"),
                    "message": "the test bed refuses to delete this Pod"}]}
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]}
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        Self { name }
    }
}

impl Drop for RefusedPodDeletion {
    fn drop(&mut self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            ControlPlane::shared().kubectl(&["delete", kind, &self.name, "--ignore-not-found"]);
        }
    }
}

#[tokio::test]
async fn deleted_proxies_leave_no_state_in_any_store() {
    let mut bed = Bed::new("freed").await;
    let probed = json!({"mode": "Managed", "provider": "pods", "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    let ready = ["ready-1", "ready-2", "stuck"];
    for name in ready {
        bed.create(name, probed.clone()).await;
    }
    // Recorded, but never gets an instance: its provider is not configured.
    bed.create(
        "unconfigured",
        json!({"mode": "Managed", "provider": "nowhere"}),
    )
    .await;
    for name in ready {
        bed.wait_for(name, "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    }
    // Every store holds them: 4 recorded and read, 3 probed, 3 in the lease book, 3 with
    // series.
    tracked_until(&bed, "every store filled", |counts, text| {
        let at_least = |store: &str, n: u64| counts.get(store).is_some_and(|c| *c >= n);
        at_least("recorder", 4)
            && at_least("versions", 4)
            && at_least("health", 3)
            && at_least("leases", 3)
            && at_least("metrics", 3)
            && ready
                .iter()
                .all(|name| text.contains(&format!("proxy=\"{name}\"")))
    })
    .await;

    // The cloud refuses to delete stuck's instance: its deletion is retried with backoff,
    // and each failure is counted.
    let stuck = bed.proxies.get("stuck").await.unwrap();
    let provider_id = stuck.status.and_then(|s| s.provider_id).unwrap();
    let pod = provider_id.rsplit('/').next().unwrap().to_owned();
    let client = ControlPlane::shared().client().await;
    let refusal = RefusedPodDeletion::install(&client, &bed.ns, &pod).await;
    // Effective once a dry-run delete of the Pod is refused (admission runs on dry runs).
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let mut refused = false;
    for _ in 0..300 {
        if bed.pods.delete(&pod, &dry_run).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        refused,
        "the admission policy never refused the Pod's deletion"
    );

    for name in ready.iter().chain(&["unconfigured"]) {
        bed.proxies
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    tracked_until(&bed, "stuck's failed deletions counted", |counts, _| {
        counts.get("failures").is_some_and(|c| *c >= 1)
    })
    .await;
    // An administrator abandons the instance, as the status says one may: the finalizer is
    // removed by hand, and the Proxy goes while its failures are counted (and maybe while a
    // reconcile of it runs).
    let abandon = json!({"metadata": {"finalizers": null}});
    bed.proxies
        .patch("stuck", &PatchParams::default(), &Patch::Merge(&abandon))
        .await
        .unwrap();
    drop(refusal);

    for _ in 0..300 {
        if bed
            .proxies
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = bed.proxies.list(&Default::default()).await.unwrap().items;
    assert!(left.is_empty(), "{} Proxies are still there", left.len());

    // Every store is empty, and no series or recording names a Proxy that is gone.
    let ns = bed.ns.clone();
    let counts = tracked_until(&bed, "every store empty", |counts, text| {
        counts.len() == 6 && counts.values().all(|c| *c == 0) && !text.contains(&ns)
    })
    .await;
    assert_eq!(
        counts.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "failures", "health", "leases", "metrics", "recorder", "versions"
        ]
    );
    let recording = bed.operator.recording(None).await;
    assert!(
        !recording.contains(&format!("\"{ns}\"")),
        "the recording still holds a gone Proxy:\n{recording}"
    );
}
