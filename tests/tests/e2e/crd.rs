//! The Proxy CRD against a real API server: CEL rules with the server's own messages,
//! defaults, immutability, the status subresource, printer columns and `kubectl explain`.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use proxy_crd::{Proxy, rules};
use proxy_tests::control_plane::ControlPlane;
use serde_json::{Value, json};

struct Bed {
    client: kube::Client,
    ns: String,
}

impl Bed {
    async fn new(prefix: &str) -> Self {
        let plane = ControlPlane::shared();
        let client = plane.client().await;
        let ns = plane.namespace(&client, prefix).await;
        Self { client, ns }
    }

    fn proxies(&self) -> Api<Proxy> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Proxies as raw JSON, so that Rust-side serde defaults cannot hide what the server stored.
    fn raw(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &ApiResource::erase::<Proxy>(&()),
        )
    }

    /// Creates a Proxy from raw JSON; the server's error message on refusal.
    async fn create(&self, name: &str, spec: Value) -> Result<DynamicObject, String> {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.raw()
            .create(&PostParams::default(), &object)
            .await
            .map_err(message)
    }

    async fn patch_spec(&self, name: &str, spec: Value) -> Result<DynamicObject, String> {
        self.raw()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .map_err(message)
    }
}

fn message(error: kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message,
        other => panic!("expected the API server to refuse, got {other}"),
    }
}

fn managed() -> Value {
    json!({"mode": "Managed", "provider": "pods"})
}

fn external() -> Value {
    json!({"mode": "External", "endpoint": {"host": "203.0.113.10", "port": 8080}})
}

fn assert_refused(result: Result<DynamicObject, String>, rule_message: &str) {
    match result {
        Ok(object) => panic!(
            "the API server accepted {:?}; expected {rule_message:?}",
            object.metadata.name
        ),
        Err(message) => assert!(
            message.contains(rule_message),
            "{message:?} does not say {rule_message:?}"
        ),
    }
}

#[tokio::test]
async fn valid_managed_and_external_proxies_are_accepted() {
    let bed = Bed::new("crd-valid").await;
    bed.create("managed", managed()).await.unwrap();
    bed.create("external", external()).await.unwrap();
    let inline =
        json!({"mode": "Managed", "provider": "pods", "cloudInit": {"inline": "#cloud-config\n"}});
    bed.create("inline", inline).await.unwrap();
    let secret = json!({"mode": "Managed", "provider": "pods", "cloudInit": {"secretRef": {"name": "ci", "key": "user-data"}}});
    bed.create("secret", secret).await.unwrap();
}

#[tokio::test]
async fn provider_is_required_when_managed() {
    let bed = Bed::new("crd-provider-required").await;
    assert_refused(
        bed.create("p", json!({"mode": "Managed"})).await,
        rules::PROVIDER_REQUIRED_MSG,
    );
}

#[tokio::test]
async fn provider_is_forbidden_when_external() {
    let bed = Bed::new("crd-provider-forbidden").await;
    let mut spec = external();
    spec["provider"] = json!("pods");
    assert_refused(bed.create("p", spec).await, rules::PROVIDER_FORBIDDEN_MSG);
}

#[tokio::test]
async fn endpoint_is_required_when_external() {
    let bed = Bed::new("crd-endpoint-required").await;
    assert_refused(
        bed.create("p", json!({"mode": "External"})).await,
        rules::ENDPOINT_REQUIRED_MSG,
    );
}

#[tokio::test]
async fn endpoint_is_forbidden_when_managed() {
    let bed = Bed::new("crd-endpoint-forbidden").await;
    let mut spec = managed();
    spec["endpoint"] = json!({"host": "203.0.113.10", "port": 8080});
    assert_refused(bed.create("p", spec).await, rules::ENDPOINT_FORBIDDEN_MSG);
}

#[tokio::test]
async fn cloud_init_needs_exactly_one_source() {
    let bed = Bed::new("crd-cloud-init").await;
    let both = json!({"mode": "Managed", "provider": "pods",
        "cloudInit": {"inline": "#cloud-config\n", "secretRef": {"name": "ci", "key": "user-data"}}});
    assert_refused(
        bed.create("both", both).await,
        rules::CLOUD_INIT_EXACTLY_ONE_MSG,
    );
    let neither = json!({"mode": "Managed", "provider": "pods", "cloudInit": {}});
    assert_refused(
        bed.create("neither", neither).await,
        rules::CLOUD_INIT_EXACTLY_ONE_MSG,
    );
    let empty_inline = json!({"mode": "Managed", "provider": "pods", "cloudInit": {"inline": ""}});
    assert_refused(
        bed.create("empty", empty_inline).await,
        "should be at least 1 chars long",
    );
}

#[tokio::test]
async fn mode_is_immutable() {
    let bed = Bed::new("crd-mode-immutable").await;
    bed.create("p", external()).await.unwrap();
    let to_managed = json!({"mode": "Managed", "provider": "pods", "endpoint": null});
    assert_refused(
        bed.patch_spec("p", to_managed).await,
        rules::MODE_IMMUTABLE_MSG,
    );
}

#[tokio::test]
async fn provider_is_immutable() {
    let bed = Bed::new("crd-provider-immutable").await;
    bed.create("p", managed()).await.unwrap();
    assert_refused(
        bed.patch_spec("p", json!({"provider": "gcp-eu"})).await,
        rules::PROVIDER_IMMUTABLE_MSG,
    );
    // Other fields stay editable: a port change is the normal way to ask for a replacement.
    let patched = bed.patch_spec("p", json!({"port": 3129})).await.unwrap();
    assert_eq!(patched.data["spec"]["port"], 3129);
}

#[tokio::test]
async fn defaults_materialise_including_every_nested_health_check_default() {
    let bed = Bed::new("crd-defaults").await;
    let created = bed.create("p", managed()).await.unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["port"], 3128);
    assert_eq!(spec["maxLeases"], 5);
    assert_eq!(
        spec["healthCheck"],
        json!({
            "probeURL": "https://www.gstatic.com/generate_204",
            "intervalSeconds": 30, "timeoutSeconds": 5,
            "failureThreshold": 3, "successThreshold": 1,
            "expectedStatusCodes": [200, 204]
        })
    );
    // A partial health check keeps what was given and gets the rest.
    let partial =
        json!({"mode": "Managed", "provider": "pods", "healthCheck": {"failureThreshold": 7}});
    let created = bed.create("partial", partial).await.unwrap();
    assert_eq!(created.data["spec"]["healthCheck"]["failureThreshold"], 7);
    assert_eq!(created.data["spec"]["healthCheck"]["intervalSeconds"], 30);
}

#[tokio::test]
async fn explicit_zero_max_leases_stays_zero() {
    let bed = Bed::new("crd-max-leases-zero").await;
    let spec = json!({"mode": "Managed", "provider": "pods", "maxLeases": 0});
    bed.create("drained", spec).await.unwrap();
    let stored = bed.raw().get("drained").await.unwrap();
    assert_eq!(stored.data["spec"]["maxLeases"], 0);
    let typed = bed.proxies().get("drained").await.unwrap();
    assert_eq!(typed.spec.max_leases_or_default(), 0);
}

#[tokio::test]
async fn status_is_only_written_through_the_status_subresource() {
    let bed = Bed::new("crd-status").await;
    bed.create("p", managed()).await.unwrap();
    // A status sent with the main resource is dropped.
    let through_main = json!({"status": {"phase": "Ready", "ip": "10.9.9.9"}});
    let patched = bed
        .raw()
        .patch("p", &PatchParams::default(), &Patch::Merge(&through_main))
        .await
        .unwrap();
    assert!(
        patched.data.get("status").is_none_or(Value::is_null),
        "{:?}",
        patched.data
    );
    // The status subresource takes it.
    let through_status = json!({"status": {"phase": "Provisioning", "ip": "10.9.9.9"}});
    let patched = bed
        .raw()
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&through_status))
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["ip"], "10.9.9.9");
    // And a status write leaves the spec alone.
    assert_eq!(patched.data["spec"]["provider"], "pods");
}

#[tokio::test]
async fn kubectl_get_shows_the_printer_columns() {
    let bed = Bed::new("crd-columns").await;
    bed.create("managed", managed()).await.unwrap();
    let status = json!({"status": {"phase": "Ready", "ip": "10.1.2.3", "conditions": [
        {"type": "Healthy", "status": "True", "reason": "ProbeSucceeded", "message": "", "lastTransitionTime": "2026-11-30T12:00:00Z"}
    ]}});
    bed.raw()
        .patch_status("managed", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let out = ControlPlane::shared().kubectl(&["get", "px", "-n", &bed.ns]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "MODE", "PROVIDER", "PHASE", "IP", "HEALTHY", "AGE"]
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..6],
        ["managed", "Managed", "pods", "Ready", "10.1.2.3", "True"]
    );
}

#[tokio::test]
async fn kubectl_explain_shows_the_descriptions() {
    let plane = ControlPlane::shared();
    // Published OpenAPI can lag the CRD by a moment; explain is what a user runs.
    let mut text = String::new();
    for _ in 0..50 {
        let out = plane.kubectl(&["explain", "proxy.spec"]);
        // kubectl wraps to its own width: compare with whitespace collapsed.
        text = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if out.status.success() && text.contains("healthCheck") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for expected in [
        "Desired state of one HTTP forward proxy",
        "Required when mode is Managed, forbidden when it is External",
        "0 keeps the",
        "healthCheck",
    ] {
        assert!(
            text.contains(expected),
            "`kubectl explain proxy.spec` lacks {expected:?}:\n{text}"
        );
    }
    let out = plane.kubectl(&["explain", "proxy.spec.healthCheck.failureThreshold"]);
    let text = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("Consecutive failed probes that turn a healthy proxy unhealthy"),
        "{text}"
    );
}

#[tokio::test]
async fn the_deploy_manifests_are_accepted_by_the_api_server() {
    let plane = ControlPlane::shared();
    let manifest = proxy_tests::bins::repo_root().join("deploy/operator.yaml");
    // Applied for real, the namespace first (a dry run cannot create the namespace the rest
    // goes into); without controllers the Deployment only sits in etcd.
    let created = plane.kubectl(&["create", "namespace", "proxy-operator"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let out = plane.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "deploy/operator.yaml refused: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in [
        "clusterrole.rbac.authorization.k8s.io/proxy-operator",
        "deployment.apps/proxy-operator",
        "configmap/providers",
    ] {
        assert!(stdout.contains(kind), "{kind} missing from:\n{stdout}");
    }
}

#[test]
fn the_deployed_providers_config_is_valid() {
    let manifest =
        std::fs::read_to_string(proxy_tests::bins::repo_root().join("deploy/operator.yaml"))
            .unwrap();
    let config = manifest
        .split("providers.yaml: |\n")
        .nth(1)
        .unwrap()
        .split("\n---")
        .next()
        .unwrap();
    let config: String = config
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let out = std::process::Command::new(proxy_tests::operator::binary())
        .arg("check-config")
        .arg("/dev/stdin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(config.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{config}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
