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

/// One bad value of one field: the spec carrying it, the path the API server must name,
/// and what it must say about it.
struct BadField {
    name: &'static str,
    spec: Value,
    path: &'static str,
    says: &'static str,
}

fn bad(name: &'static str, spec: Value, path: &'static str, says: &'static str) -> BadField {
    BadField {
        name,
        spec,
        path,
        says,
    }
}

fn with_health_check(health_check: Value) -> Value {
    json!({"mode": "Managed", "provider": "pods", "healthCheck": health_check})
}

fn with_host(host: &str) -> Value {
    json!({"mode": "External", "endpoint": {"host": host, "port": 8080}})
}

fn with_secret_ref(name: &str, key: &str) -> Value {
    json!({"mode": "Managed", "provider": "pods", "cloudInit": {"secretRef": {"name": name, "key": key}}})
}

/// Every field a user can get wrong, each refused with a message naming it: the CEL rules of
/// `proxy_crd::rules` with their own messages, and the OpenAPI ranges and lengths with the
/// API server's.
fn bad_fields() -> Vec<BadField> {
    let timeout = rules::TIMEOUT_BELOW_INTERVAL_MSG;
    let url = rules::PROBE_URL_VALID_MSG;
    let host = rules::ENDPOINT_HOST_VALID_MSG;
    vec![
        bad(
            "timeout-equal",
            with_health_check(json!({"intervalSeconds": 5, "timeoutSeconds": 5})),
            "spec.healthCheck.timeoutSeconds",
            timeout,
        ),
        bad(
            "timeout-longer",
            with_health_check(json!({"intervalSeconds": 2, "timeoutSeconds": 10})),
            "spec.healthCheck.timeoutSeconds",
            timeout,
        ),
        bad(
            "timeout-default",
            with_health_check(json!({"intervalSeconds": 3})),
            "spec.healthCheck.timeoutSeconds",
            timeout,
        ),
        bad(
            "url-no-scheme",
            with_health_check(json!({"probeURL": "www.gstatic.com/generate_204"})),
            "spec.healthCheck.probeURL",
            url,
        ),
        bad(
            "url-relative",
            with_health_check(json!({"probeURL": "/generate_204"})),
            "spec.healthCheck.probeURL",
            url,
        ),
        bad(
            "url-ftp",
            with_health_check(json!({"probeURL": "ftp://probe.test/file"})),
            "spec.healthCheck.probeURL",
            url,
        ),
        bad(
            "url-no-host",
            with_health_check(json!({"probeURL": "https:///generate_204"})),
            "spec.healthCheck.probeURL",
            url,
        ),
        bad(
            "url-space",
            with_health_check(json!({"probeURL": "https://probe .test/"})),
            "spec.healthCheck.probeURL",
            url,
        ),
        bad(
            "url-port",
            with_health_check(json!({"probeURL": "https://probe.test:70000/"})),
            "spec.healthCheck.probeURL",
            url,
        ),
        bad(
            "host-url",
            with_host("http://203.0.113.10"),
            "spec.endpoint.host",
            host,
        ),
        bad(
            "host-port",
            with_host("203.0.113.10:8080"),
            "spec.endpoint.host",
            host,
        ),
        bad(
            "host-space",
            with_host("proxy example.net"),
            "spec.endpoint.host",
            host,
        ),
        bad(
            "host-path",
            with_host("proxy.example.net/squid"),
            "spec.endpoint.host",
            host,
        ),
        bad(
            "host-bad-ip",
            with_host("999.0.113.10"),
            "spec.endpoint.host",
            host,
        ),
        bad(
            "host-empty",
            with_host(""),
            "spec.endpoint.host",
            "at least 1 chars long",
        ),
        bad(
            "provider-name",
            json!({"mode": "Managed", "provider": "GCP_EU"}),
            "spec.provider",
            rules::PROVIDER_NAME_VALID_MSG,
        ),
        bad(
            "provider-empty",
            json!({"mode": "Managed", "provider": ""}),
            "spec.provider",
            "at least 1 chars long",
        ),
        bad(
            "secret-name",
            with_secret_ref("Cloud_Init", "user-data"),
            "spec.cloudInit.secretRef.name",
            rules::SECRET_NAME_VALID_MSG,
        ),
        bad(
            "secret-key",
            with_secret_ref("ci", "user data"),
            "spec.cloudInit.secretRef.key",
            rules::SECRET_KEY_VALID_MSG,
        ),
        bad(
            "secret-name-empty",
            with_secret_ref("", "user-data"),
            "spec.cloudInit.secretRef.name",
            "at least 1 chars long",
        ),
        bad(
            "secret-key-empty",
            with_secret_ref("ci", ""),
            "spec.cloudInit.secretRef.key",
            "at least 1 chars long",
        ),
        bad(
            "port-zero",
            json!({"mode": "Managed", "provider": "pods", "port": 0}),
            "spec.port",
            "greater than or equal to 1",
        ),
        bad(
            "port-high",
            json!({"mode": "Managed", "provider": "pods", "port": 65536}),
            "spec.port",
            "less than or equal to 65535",
        ),
        bad(
            "endpoint-port-zero",
            json!({"mode": "External", "endpoint": {"host": "203.0.113.10", "port": 0}}),
            "spec.endpoint.port",
            "greater than or equal to 1",
        ),
        bad(
            "endpoint-port-high",
            json!({"mode": "External", "endpoint": {"host": "203.0.113.10", "port": 70000}}),
            "spec.endpoint.port",
            "less than or equal to 65535",
        ),
        bad(
            "max-leases-negative",
            json!({"mode": "Managed", "provider": "pods", "maxLeases": -1}),
            "spec.maxLeases",
            "greater than or equal to 0",
        ),
        bad(
            "interval-zero",
            with_health_check(json!({"intervalSeconds": 0, "timeoutSeconds": 1})),
            "spec.healthCheck.intervalSeconds",
            "greater than or equal to 1",
        ),
        bad(
            "timeout-zero",
            with_health_check(json!({"timeoutSeconds": 0})),
            "spec.healthCheck.timeoutSeconds",
            "greater than or equal to 1",
        ),
        bad(
            "failure-threshold-zero",
            with_health_check(json!({"failureThreshold": 0})),
            "spec.healthCheck.failureThreshold",
            "greater than or equal to 1",
        ),
        bad(
            "success-threshold-zero",
            with_health_check(json!({"successThreshold": 0})),
            "spec.healthCheck.successThreshold",
            "greater than or equal to 1",
        ),
        bad(
            "status-codes-empty",
            with_health_check(json!({"expectedStatusCodes": []})),
            "spec.healthCheck.expectedStatusCodes",
            "at least 1 items",
        ),
        bad(
            "status-code-low",
            with_health_check(json!({"expectedStatusCodes": [200, 99]})),
            "spec.healthCheck.expectedStatusCodes[1]",
            "greater than or equal to 100",
        ),
        bad(
            "status-code-high",
            with_health_check(json!({"expectedStatusCodes": [600]})),
            "spec.healthCheck.expectedStatusCodes[0]",
            "less than or equal to 599",
        ),
        bad(
            "placement-zone-empty",
            json!({"mode": "Managed", "provider": "gcp-eu", "placement": {"zone": ""}}),
            "spec.placement.zone",
            "at least 1 chars long",
        ),
        bad(
            "placement-image-empty",
            json!({"mode": "Managed", "provider": "pods", "placement": {"image": ""}}),
            "spec.placement.image",
            "at least 1 chars long",
        ),
        bad(
            "placement-machine-type-empty",
            json!({"mode": "Managed", "provider": "lab", "placement": {"machineType": ""}}),
            "spec.placement.machineType",
            "at least 1 chars long",
        ),
        bad(
            "placement-host-empty",
            json!({"mode": "Managed", "provider": "lab", "placement": {"host": ""}}),
            "spec.placement.host",
            "at least 1 chars long",
        ),
    ]
}

#[tokio::test]
async fn every_bad_field_is_refused_with_a_message_naming_it() {
    let bed = Bed::new("crd-bad-fields").await;
    let mut wrong = Vec::new();
    for case in bad_fields() {
        match bed.create(case.name, case.spec.clone()).await {
            Ok(_) => wrong.push(format!("{}: accepted {}", case.name, case.spec)),
            Err(message) => {
                let named = format!("{}: Invalid value", case.path);
                let required = format!("{}: Required value", case.path);
                if !(message.contains(&named) || message.contains(&required))
                    || !message.contains(case.says)
                {
                    wrong.push(format!(
                        "{}: {message:?} does not name {:?} with {:?}",
                        case.name, case.path, case.says
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn values_at_the_edge_of_every_range_are_accepted() {
    let bed = Bed::new("crd-edges").await;
    let accepted = [
        with_health_check(json!({"intervalSeconds": 2, "timeoutSeconds": 1,
            "failureThreshold": 1, "successThreshold": 1, "expectedStatusCodes": [100, 599],
            "probeURL": "http://[2001:db8::1]:65535/health?probe=1"})),
        with_health_check(json!({"probeURL": "HTTPS://Probe.Test:1/status/204#x"})),
        json!({"mode": "Managed", "provider": "pods", "port": 65535, "maxLeases": 0}),
        json!({"mode": "External", "endpoint": {"host": "2001:db8::7", "port": 1}}),
        with_host("squid.crawl.svc.cluster.local"),
        with_host("Proxy-1.Example.NET"),
        with_secret_ref("squid-cloud-init.v2", "user_data.yaml"),
    ];
    for (i, spec) in accepted.into_iter().enumerate() {
        let name = format!("edge-{i}");
        if let Err(message) = bed.create(&name, spec.clone()).await {
            panic!("{spec} refused: {message}");
        }
    }
}

/// The `examples/` Proxies apply as they are, and each `examples/invalid/proxy-*.yaml` is
/// refused with what its first comment says.
#[tokio::test]
async fn the_example_proxies_apply_and_the_invalid_ones_are_refused() {
    let plane = ControlPlane::shared();
    let bed = Bed::new("crd-examples").await;
    let examples = proxy_tests::bins::repo_root().join("examples");
    let mut seen = 0;
    for dir in [examples.clone(), examples.join("invalid")] {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("proxy-") && n.ends_with(".yaml"))
            })
            .collect();
        files.sort();
        for file in files {
            seen += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            let out = plane.kubectl(&["apply", "-n", &bed.ns, "-f", file.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            match text.strip_prefix("# Rejected by the API server: ") {
                None => assert!(out.status.success(), "{}: {stderr}", file.display()),
                Some(rest) => {
                    let says = rest.lines().next().unwrap().trim_end_matches('.');
                    assert!(!out.status.success(), "{} was accepted", file.display());
                    assert!(
                        stderr.contains(says),
                        "{}: {stderr:?} does not say {says:?}",
                        file.display()
                    );
                }
            }
        }
    }
    assert!(seen >= 10, "only {seen} example Proxies found");
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
        "deployment.apps/proxy-operator-gateway",
        "service/proxy-operator-gateway",
        "configmap/proxy-operator-providers",
        "flowschema.flowcontrol.apiserver.k8s.io/proxy-operator-leadership",
    ] {
        assert!(stdout.contains(kind), "{kind} missing from:\n{stdout}");
    }
    // No known default token: the manifest creates no Secret, and the Deployment needs the
    // one the user creates.
    assert!(
        !stdout.contains("secret/"),
        "the manifest ships a Secret:\n{stdout}"
    );
    let secret = plane.kubectl(&["-n", "proxy-operator", "get", "secret", "discovery-token"]);
    assert!(
        String::from_utf8_lossy(&secret.stderr).contains("NotFound"),
        "the discovery-token Secret exists after applying the manifest alone"
    );
    let token = plane.kubectl(&[
        "-n",
        "proxy-operator",
        "get",
        "deployment",
        "proxy-operator",
        "-o",
        r#"jsonpath={.spec.template.spec.containers[0].env[?(@.name=="DISCOVERY_TOKEN")].valueFrom.secretKeyRef}"#,
    ]);
    let token = String::from_utf8_lossy(&token.stdout);
    assert!(
        token.contains(r#""name":"discovery-token""#) && token.contains(r#""optional":false"#),
        "DISCOVERY_TOKEN must come from the Secret, not optionally: {token}"
    );
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

#[tokio::test]
async fn a_proxy_pool_gets_its_defaults_printer_columns_and_scale_subresource() {
    let plane = ControlPlane::shared();
    let bed = Bed::new("crd-pools").await;
    let pools = Api::<DynamicObject>::namespaced_with(
        bed.client.clone(),
        &bed.ns,
        &ApiResource::erase::<proxy_crd::ProxyPool>(&()),
    );
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": managed()}},
    }))
    .unwrap();
    let stored = pools.create(&PostParams::default(), &pool).await.unwrap();
    let spec = &stored.data["spec"];
    assert_eq!(spec["replicas"], 1, "{spec}");
    assert_eq!(spec["disruption"]["maxSurge"], "25%", "{spec}");
    assert_eq!(spec["disruption"]["maxUnavailable"], 0, "{spec}");
    assert_eq!(
        spec["recycle"]["replaceUnhealthyAfterSeconds"], 300,
        "{spec}"
    );
    assert_eq!(spec["template"]["spec"]["port"], 3128, "{spec}");
    assert_eq!(
        spec["template"]["spec"]["healthCheck"]["intervalSeconds"], 30,
        "{spec}"
    );
    // The scale subresource: kubectl scale works on a pool.
    let out = plane.kubectl(&["scale", "pxp", "web", "-n", &bed.ns, "--replicas=4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scaled = pools.get("web").await.unwrap();
    assert_eq!(scaled.data["spec"]["replicas"], 4);
    let out = plane.kubectl(&["get", "pxp", "-n", &bed.ns]);
    let out = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "READY", "AVAILABLE", "AGE"]);
    // Unlike a Proxy's, a template's provider may change (it rolls the pool).
    let moved = json!({"spec": {"template": {"spec": {"provider": "gcp-eu"}}}});
    pools
        .patch("web", &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .unwrap();
}

/// `placement.parameters` as `n` keys.
fn parameters(n: usize) -> Value {
    let keys: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("key{i}"), json!("value")))
        .collect();
    json!({"mode": "Managed", "provider": "pods", "placement": {"parameters": keys}})
}

#[tokio::test]
async fn placement_parameters_hold_at_most_32_keys() {
    let bed = Bed::new("crd-params").await;
    bed.create("thirty-two", parameters(32)).await.unwrap();
    assert_refused(
        bed.create("thirty-three", parameters(33)).await,
        "spec.placement.parameters: Too many: 33: must have at most 32 items",
    );
}

/// A kvm provider whose one host nothing answers at: its Proxies are decided on before any
/// call (and the provider is down, which a refused placement does not wait for).
const KVM_NOWHERE: &str = "  - name: lab\n    type: kvm\n    kvm:\n      hosts:\n        \
     - name: nowhere\n          uri: \"qemu+unix:///session?socket=/nonexistent/libvirt-sock\"\n          \
     storagePool: default\n          baseImage: base.qcow2\n          address: {dhcp: {}}\n";

#[tokio::test]
async fn a_parameter_its_provider_does_not_use_is_refused_naming_the_key() {
    // The API server cannot know which parameters a provider takes: the operator refuses
    // the spec, says which key, and makes nothing (before issue 50 the key was ignored, and
    // adding one replaced the machine for nothing).
    let mut bed = crate::operated::Bed::with_providers("params", KVM_NOWHERE, &[]).await;
    for (name, provider) in [("pod", "pods"), ("vm", "lab")] {
        let spec = json!({"mode": "Managed", "provider": provider,
                          "placement": {"parameters": {"gpu": "yes"}}});
        bed.create(name, spec).await;
    }
    for (name, type_) in [("pod", "kubernetes"), ("vm", "kvm")] {
        let refused = bed
            .wait_for(name, "refused", |p| {
                crate::operated::condition(p, "Provisioned")
                    .is_some_and(|(_, reason)| reason == "PermanentError")
            })
            .await;
        let status = refused.status.unwrap();
        assert_eq!(status.phase, Some(proxy_crd::Phase::Failed), "{name}");
        let message = &status.conditions[0].message;
        assert!(
            message.starts_with(&format!(
                "spec.placement.parameters.gpu: not a {type_} parameter (it takes none)"
            )),
            "{name}: {message}"
        );
    }
    assert_eq!(bed.pod_count().await, 0, "no Pod for a refused spec");
}
