//! The Helm chart (deploy/chart) against the real API server: `helm lint`, `helm template`
//! applied with a server-side dry run, and the rendered objects installed for real, with
//! the operator run as the Deployment says (its args, its environment, the ServiceAccount's
//! rights, the generated token, the providers config of the ConfigMap) from the built
//! binary; and `helm install` then `helm upgrade` for real (the generated token survives
//! the upgrade). What is not run: kubelet (there is none), so the Deployment's Pods, its probes
//! and its securityContext are not executed here; the image test (`image.rs`) runs the
//! same args in the container image.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use proxy_crd::Proxy;
use proxy_tests::bins::{helm, kbin, repo_root};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::ports::Port;
use proxy_tests::probe_origin::ProbeOrigin;
use proxy_tests::run_dir::subdir;
use serde_json::{Value, json};

use crate::gc::kubeconfig_of;

fn chart() -> PathBuf {
    repo_root().join("deploy/chart")
}

/// Runs `program` with `args`, `stdin` fed in; fails with its output unless it succeeds.
fn run(program: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    {
        use std::io::Write;
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{} {}: {}\n{}",
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// `helm template` of the chart as release `release` in `namespace`, with `values` (YAML).
pub(crate) fn render(release: &str, namespace: &str, values: &str, extra: &[&str]) -> String {
    let file = subdir(&format!("chart-{release}")).join("values.yaml");
    std::fs::write(&file, values).expect("write values");
    let chart = chart();
    let mut args = vec![
        "template",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "--values",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    String::from_utf8(run(&helm(), &args, "").stdout).expect("UTF-8")
}

/// `kubectl apply` of `yaml` as the admin; with `dry_run`, a server-side dry run. The
/// objects as the API server returned them.
fn apply(plane: &ControlPlane, yaml: &str, dry_run: bool) -> Vec<Value> {
    let kubeconfig = plane.kubeconfig.to_str().unwrap();
    let mut args = vec!["--kubeconfig", kubeconfig, "apply", "-o", "json", "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    let out = run(&kbin("kubectl"), &args, yaml);
    let value: Value = serde_json::from_slice(&out.stdout).expect("kubectl's JSON");
    match value["kind"].as_str() {
        Some("List") => value["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![value],
    }
}

/// The rules of the ClusterRole among `objects`.
fn cluster_role_resources(objects: &[Value]) -> Vec<String> {
    role_resources(objects, "ClusterRole")
}

/// The resources the rules of every object of `kind` (ClusterRole, Role) name.
fn role_resources(objects: &[Value], kind: &str) -> Vec<String> {
    objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .flat_map(|rule| rule["resources"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_chart_lints() {
    let chart = chart();
    let out = run(&helm(), &["lint", "--strict", chart.to_str().unwrap()], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{text}"
    );
}

#[tokio::test]
async fn the_rendered_chart_passes_a_server_side_dry_run_with_least_privilege_per_provider() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "chart-dry").await;
    // The defaults: a kubernetes provider, so Pod rights; a generated token.
    let objects = apply(plane, &render("dry", &ns, "{}", &["--include-crds"]), true);
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "FlowSchema",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    // API Priority and Fairness: the API server takes the FlowSchema (flowcontrol v1), which
    // puts the ServiceAccount's requests on its leadership Lease in `leader-election`. (The
    // test bed runs kube-apiserver with --enable-priority-and-fairness=false, as envtest
    // does: the schema is accepted and installed here, not enforced.)
    let schema = objects
        .iter()
        .find(|o| o["kind"] == "FlowSchema")
        .expect("a FlowSchema");
    assert_eq!(schema["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
    assert_eq!(
        schema["spec"]["priorityLevelConfiguration"]["name"],
        "leader-election"
    );
    let rule = &schema["spec"]["rules"][0];
    assert_eq!(
        rule["subjects"][0]["serviceAccount"],
        json!({"name": "dry-proxy-operator", "namespace": ns})
    );
    assert_eq!(
        rule["resourceRules"][0],
        json!({
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
            "namespaces": [ns],
        })
    );
    let resources = cluster_role_resources(&objects);
    for resource in ["pods", "proxies", "proxies/status"] {
        assert!(
            resources.iter().any(|r| r == resource),
            "{resource}: {resources:?}"
        );
    }
    // The ProviderHealth objects live in the release namespace: a Role is enough.
    let namespaced = role_resources(&objects, "Role");
    for resource in ["leases", "providerhealths", "providerhealths/status"] {
        assert!(
            namespaced.iter().any(|r| r == resource),
            "{resource}: {namespaced:?}"
        );
    }
    // A generated token: never a known default, a new one on each render.
    let token = |objects: &[Value]| {
        objects
            .iter()
            .find(|o| o["kind"] == "Secret")
            .and_then(|s| s["data"]["token"].as_str().map(str::to_owned))
            .expect("a token Secret")
    };
    let again = apply(plane, &render("dry", &ns, "{}", &[]), true);
    assert_ne!(token(&objects), token(&again));
    assert!(
        token(&objects).len() >= 64,
        "48 random characters, base64: {}",
        token(&objects)
    );

    // Only a gcp provider and an existing Secret: no Pod rights, no Secret rendered, no
    // kube-system read with an installation ID.
    let gcp_only = r#"
providers:
  - name: gcp-eu
    type: gcp
    gcp: {project: p, zones: [europe-west1-b], allowedSourceCIDRs: [203.0.113.0/24]}
discoveryToken: {existingSecret: my-token}
installationId: crawl-prod
"#;
    let objects = apply(plane, &render("dry", &ns, gcp_only, &[]), true);
    let resources = cluster_role_resources(&objects);
    assert!(!resources.iter().any(|r| r == "pods"), "{resources:?}");
    assert!(
        !resources.iter().any(|r| r == "namespaces"),
        "{resources:?}"
    );
    assert!(!objects.iter().any(|o| o["kind"] == "Secret"));
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let token_ref = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "DISCOVERY_TOKEN")
        .map(|e| e["valueFrom"]["secretKeyRef"].clone());
    assert_eq!(
        token_ref,
        Some(json!({"name": "my-token", "key": "token", "optional": false}))
    );
    assert!(
        container["args"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("--installation-id=crawl-prod"))),
        "{container}"
    );
}

#[test]
fn the_monitoring_objects_carry_the_tested_rules_and_the_dashboard() {
    let values = "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\ndashboard: {enabled: true}\n";
    let text = render("mon", "monitoring", values, &[]);
    let documents: Vec<Value> = text
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|doc| doc.is_object())
        .collect();
    let of_kind = |kind: &str| {
        documents
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in:\n{text}"))
            .clone()
    };
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("files/alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(of_kind("PrometheusRule")["spec"], rules);
    let monitor = of_kind("ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    let dashboard = documents
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["proxy-operator.json"].is_string())
        .unwrap_or_else(|| panic!("no dashboard ConfigMap in:\n{text}"));
    let json: Value =
        serde_json::from_str(dashboard["data"]["proxy-operator.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["uid"], "proxy-operator");
}

/// The chart installed in a namespace of its own: what the operator's Pod would get.
pub(crate) struct Installed {
    pub ns: String,
    /// The Deployment's container args, with the ConfigMap's providers config at `config`
    /// and the listen addresses on loopback ports reserved for this test.
    pub args: Vec<String>,
    /// The container's environment: the token from the generated Secret, the fieldRefs
    /// resolved as kubelet would.
    pub env: Vec<(String, String)>,
    /// The directory holding the providers config (mounted at /etc/proxy-operator).
    pub config_dir: PathBuf,
    /// The kubeconfig that acts as the chart's ServiceAccount.
    pub kubeconfig: PathBuf,
    pub token: String,
    pub discovery: String,
    pub metrics: String,
    pub probes: String,
    pub origin: ProbeOrigin,
    pub _runner: PodRunner,
    _ports: [Port; 3],
}

/// Installs the chart for real in a new namespace (prefix `prefix`), watching only that
/// namespace, with a kubernetes provider whose squids the pod runner starts.
pub(crate) async fn install(prefix: &str) -> Installed {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, prefix).await;
    let origin = ProbeOrigin::start().await.unwrap();
    let runner = PodRunner::start(client.clone(), &ns, origin.hosts_file.clone())
        .await
        .unwrap();
    let ports = [Port::reserve(), Port::reserve(), Port::reserve()];
    let name = format!("chart-{ns}");
    // Cluster-scoped names are the namespace's (parallel tests share the API server); fast
    // polls and leadership, with durations in both of the accepted forms.
    let values = format!(
        r#"
fullnameOverride: {name}
watchNamespace: {ns}
installationId: {ns}
replicas: 1
providers:
  - name: pods
    type: kubernetes
    kubernetes: {{allowedSourceCIDRs: ["127.0.0.0/8"]}}
ports: {{discovery: {}, metrics: {}, probes: {}}}
extraArgs: [--provisioning-poll-seconds=300ms, --deletion-poll-seconds=0.3, --drift-poll-seconds=2s,
  --leadership-duration-seconds=3s, --leadership-renew-deadline-seconds=2, --leadership-retry-period-seconds=500ms]
"#,
        ports[0].number(),
        ports[1].number(),
        ports[2].number()
    );
    let objects = apply(plane, &render("e2e", &ns, &values, &[]), false);
    assert!(objects.iter().any(|o| o["kind"] == "Deployment"));

    // What the Pod would get: the Secret's token, the ConfigMap's file, the Deployment's
    // args and env, the ServiceAccount's identity.
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get(&format!("{name}-discovery-token"))
        .await
        .unwrap();
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| String::from_utf8(b.0.clone()).unwrap())
        .expect("a generated token");
    assert!(
        token.len() == 48 && token.chars().all(|c| c.is_ascii_alphanumeric()),
        "{token}"
    );
    let config = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get(&format!("{name}-providers"))
        .await
        .unwrap();
    let config_dir = subdir(&format!("chart-{ns}-config"));
    std::fs::write(
        config_dir.join("providers.yaml"),
        &config.data.as_ref().unwrap()["providers.yaml"],
    )
    .unwrap();
    let deployment = Api::<Deployment>::namespaced(client, &ns)
        .get(&name)
        .await
        .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(name.as_str()));
    let container = &pod.containers[0];
    let security = container.security_context.clone().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(
        security.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_owned()])
    );
    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|g| g.path.clone().unwrap_or_default())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    let mut env = Vec::new();
    for var in container.env.clone().unwrap_or_default() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) if from.secret_key_ref.is_some() => token.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => format!("{name}-0"),
                Some("metadata.namespace") => ns.clone(),
                // The Pod's IP: the test's operator runs on the loopback address.
                Some("status.podIP") => "127.0.0.1".to_owned(),
                other => panic!("unexpected fieldRef {other:?}"),
            },
            (None, None) => String::new(),
        };
        env.push((var.name, value));
    }
    let args = container
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|arg| arg.replace("0.0.0.0:", "127.0.0.1:"))
        .collect();
    // Acting as the ServiceAccount (impersonation by the admin). KUBECONFIG is a list split
    // at colons, and the user name has some: the file moves next to the config.
    let kubeconfig = config_dir.join("kubeconfig");
    std::fs::rename(
        kubeconfig_of(plane, &format!("system:serviceaccount:{ns}:{name}")),
        &kubeconfig,
    )
    .unwrap();
    Installed {
        discovery: format!("http://127.0.0.1:{}", ports[0].number()),
        metrics: format!("http://127.0.0.1:{}/metrics", ports[1].number()),
        probes: format!("http://127.0.0.1:{}", ports[2].number()),
        ns,
        args,
        env,
        config_dir,
        kubeconfig,
        token,
        origin,
        _runner: runner,
        _ports: ports,
    }
}

impl Installed {
    /// The operator's args with the config where `config_dir` shows it (`mounted_at`) and
    /// the probe origin's CA at `ca_dir` (test-only: the bed's probe URL has a private CA).
    pub fn operator_args(&self, mounted_at: &str, ca: &str) -> Vec<String> {
        let mut args: Vec<String> = self
            .args
            .iter()
            .map(|a| a.replace("/etc/proxy-operator", mounted_at))
            .collect();
        args.push(format!("--probe-ca-bundle={ca}"));
        args
    }

    /// Writes the probe origin's CA next to the providers config; its file name.
    pub fn write_ca(&self) -> &'static str {
        std::fs::write(self.config_dir.join("probe-ca.pem"), &self.origin.ca_pem).unwrap();
        "probe-ca.pem"
    }

    /// Waits (90 s at most) until the Proxy `name` is Ready, and fails with its status and
    /// `log` (what the operator printed, called `what`) when it is not.
    pub async fn assert_ready(
        &self,
        proxies: &Api<Proxy>,
        name: &str,
        what: &str,
        log: &dyn Fn() -> String,
    ) {
        let is_ready = |proxy: &Option<Proxy>| {
            proxy
                .as_ref()
                .and_then(|p| p.status.as_ref())
                .is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        };
        let mut last = None;
        for _ in 0..900 {
            last = proxies.get_opt(name).await.unwrap();
            if is_ready(&last) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "not Ready: {:?}\n{what}:\n{}",
            last.and_then(|p| p.status),
            log()
        );
    }

    /// Creates a Managed Proxy `name` on the `pods` provider, probed at the bed's origin.
    pub async fn create_proxy(&self, name: &str) -> Api<Proxy> {
        let client = ControlPlane::shared().client().await;
        let proxies: Api<Proxy> = Api::namespaced(client, &self.ns);
        let proxy: Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "labels": {"geo": "eu"}},
            "spec": {"mode": "Managed", "provider": "pods", "healthCheck": {
                "probeURL": self.origin.url("/generate_204"), "intervalSeconds": 2,
                "timeoutSeconds": 1, "failureThreshold": 3, "successThreshold": 1}}
        }))
        .unwrap();
        proxies.create(&Default::default(), &proxy).await.unwrap();
        proxies
    }

    /// What the operator serves once a Proxy is Ready: `/readyz` 200, the discovery API
    /// with the generated token lists `proxy` (401 without it), and the metrics name every
    /// series the alerts and the dashboard read.
    pub async fn check_serving(&self, proxy: &str, log: &dyn Fn() -> String) {
        let ready = reqwest::get(format!("{}/readyz", self.probes)).await;
        assert_eq!(
            ready.map(|r| r.status().as_u16()).ok(),
            Some(200),
            "{}",
            log()
        );
        let http = reqwest::Client::new();
        let url = format!("{}/v1/proxies?selector=geo%3Deu", self.discovery);
        let open = http.get(&url).send().await.unwrap();
        assert_eq!(open.status().as_u16(), 401);
        let listed = http
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status().as_u16(), 200);
        let body = listed.text().await.unwrap();
        assert!(body.contains(proxy), "{body}");
        let scraped = crate::metrics::scrape(&self.metrics).await;
        let missing = missing_metrics(&scraped);
        assert!(
            missing.is_empty(),
            "alerts or dashboard read {missing:?}, not exported:\n{scraped}"
        );
    }
}

/// The `proxy_operator_*` names the alert rules and the dashboard use that the operator
/// does not export: neither announced by the scrape (`# TYPE` lines; a counter's `_total`, a
/// histogram's `_bucket` are samples of the announced name) nor registered in
/// shell/src/metrics.rs (a family without a sample yet, such as the panics of a process
/// that never panicked, is not in the scrape).
fn missing_metrics(scraped: &str) -> Vec<String> {
    let source = std::fs::read_to_string(repo_root().join("shell/src/metrics.rs")).unwrap();
    let registered: Vec<String> = source
        .lines()
        .zip(source.lines().skip(1))
        .filter(|(line, _)| {
            let line = line.trim_end();
            line.ends_with("register(") || line.ends_with("encode_descriptor(")
        })
        .filter_map(|(_, next)| next.trim().strip_prefix('"')?.split('"').next())
        .map(|name| format!("proxy_operator_{name}"))
        .collect();
    let announced: Vec<&str> = scraped
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .chain(registered.iter().map(String::as_str))
        .collect();
    let files = [
        chart().join("files/alerts.yaml"),
        chart().join("files/dashboard.json"),
    ];
    let mut used = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("proxy_operator_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            used.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    used.sort();
    used.dedup();
    used.into_iter()
        .filter(|name| {
            let base = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            !announced.contains(&base)
        })
        .collect()
}

/// A process killed when dropped.
pub(crate) struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_installed_chart_runs_the_operator_as_its_service_account_to_a_ready_proxy() {
    let installed = install("chart").await;
    let ca = installed.write_ca();
    let dir = installed.config_dir.display().to_string();
    let log = installed.config_dir.join("operator.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(proxy_tests::operator::binary())
        .args(installed.operator_args(&dir, &format!("{dir}/{ca}")))
        .env_clear()
        .envs(installed.env.iter().map(|(k, v)| (k, v)))
        .env("KUBECONFIG", &installed.kubeconfig)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start proxy-operator");
    let _operator = Running(child);
    let show = || std::fs::read_to_string(&log).unwrap_or_default();

    let proxies = installed.create_proxy("from-chart").await;
    installed
        .assert_ready(&proxies, "from-chart", "operator log", &show)
        .await;
    installed.check_serving("from-chart", &show).await;
}

#[test]
fn the_chart_refuses_unknown_values_naming_them() {
    let file = subdir("chart-refused").join("values.yaml");
    for (values, says) in [
        (
            "replica: 2\n",
            "additional properties 'replica' not allowed",
        ),
        (
            "providers: [{name: pods, type: aws}]\n",
            "at '/providers/0/type'",
        ),
        (
            "providers: [{name: Pods, type: kubernetes}]\n",
            "at '/providers/0/name'",
        ),
        ("replicas: 0\n", "at '/replicas'"),
    ] {
        std::fs::write(&file, values).unwrap();
        let chart = chart();
        let out = Command::new(helm())
            .args(["template", "x", chart.to_str().unwrap(), "--values"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{values} was accepted");
        assert!(stderr.contains(says), "{values}: {stderr}");
    }
}

/// The `token` of Secret `name` in `ns`.
async fn token_of(client: &kube::Client, ns: &str, name: &str) -> String {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let bytes = secret.data.and_then(|d| d.get("token").cloned()).unwrap();
    String::from_utf8(bytes.0).unwrap()
}

#[tokio::test]
async fn helm_install_generates_a_token_once_and_an_upgrade_keeps_it() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "chart-helm").await;
    let name = format!("helm-{ns}");
    let chart = chart();
    let kubeconfig = plane.kubeconfig.to_str().unwrap();
    let release = |verb: &str, extra: &[&str]| {
        let mut args = vec![
            verb,
            "rel",
            chart.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig,
            "--namespace",
            &ns,
            "--set",
        ];
        let set = format!("fullnameOverride={name}");
        args.push(&set);
        args.extend_from_slice(extra);
        run(&helm(), &args, "");
    };
    release("install", &[]);
    let secret = format!("{name}-discovery-token");
    let first = token_of(&client, &ns, &secret).await;
    assert_eq!(first.len(), 48, "{first}");
    release("upgrade", &["--set", "logLevel=debug"]);
    assert_eq!(token_of(&client, &ns, &secret).await, first);
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(&name)
        .await
        .unwrap();
    let env = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "RUST_LOG" && e.value.as_deref() == Some("debug")),
        "{env:?}"
    );
    run(
        &helm(),
        &[
            "uninstall",
            "rel",
            "--kubeconfig",
            kubeconfig,
            "--namespace",
            &ns,
        ],
        "",
    );
}
