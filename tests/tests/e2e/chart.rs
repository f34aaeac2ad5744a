//! The Helm chart (deploy/chart) against the real API server: `helm lint`, `helm template`
//! applied with a server-side dry run, and the rendered objects installed for real, with
//! the operator run as the Deployment says (its args, its environment, its user, group and
//! fsGroup, its Secret volumes laid out as kubelet would, the ServiceAccount's rights, the
//! generated token, the providers config of the ConfigMap) from the built binary; and
//! `helm install` then `helm upgrade` for real (the generated token survives the upgrade).
//! What is not run: kubelet (there is none), so the Deployment's Pods, its probes and the
//! rest of its securityContext are not executed here; the image test (`image.rs`) runs the
//! same args in the container image.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use kube::api::Api;
use proxy_crd::{Condition, ProviderHealth, Proxy};
use proxy_tests::bins::{helm, kbin, repo_root};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::gce::{FakeGce, FakeOptions, Method, ServiceAccountKey};
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
    // One file per namespace: tests that render in parallel must not read each other's.
    let file = subdir(&format!("chart-{release}-{namespace}")).join("values.yaml");
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
            .find(|o| {
                o["kind"] == "Secret"
                    && o["metadata"]["name"] == "dry-proxy-operator-discovery-token"
            })
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
    // The gateway: its own Deployment (the token from the same Secret, the tenants from a
    // generated one), Services, PodDisruptionBudget; Pods no selector of the operator's takes.
    let named = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    let gateway = named("Deployment", "dry-proxy-operator-gateway");
    let pod = &gateway["spec"]["template"];
    assert_eq!(
        pod["metadata"]["labels"]["app.kubernetes.io/name"],
        "proxy-operator-gateway"
    );
    let operator = named("Deployment", "dry-proxy-operator");
    assert_ne!(
        operator["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        pod["metadata"]["labels"]["app.kubernetes.io/name"]
    );
    let container = &pod["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args[0], "gateway");
    assert!(
        args.contains(
            &format!("--discovery-url=http://dry-proxy-operator-discovery.{ns}.svc:8090").as_str()
        ),
        "{args:?}"
    );
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    let tenants = named("Secret", "dry-proxy-operator-gateway-tenants");
    assert!(
        tenants["data"]["default"]
            .as_str()
            .is_some_and(|t| t.len() >= 64),
        "{tenants}"
    );
    for (kind, name) in [
        ("Service", "dry-proxy-operator-gateway"),
        ("Service", "dry-proxy-operator-gateway-metrics"),
        ("PodDisruptionBudget", "dry-proxy-operator-gateway"),
    ] {
        named(kind, name);
    }

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
    assert!(
        !objects.iter().any(|o| o["kind"] == "Secret"
            && o["metadata"]["name"] == "dry-proxy-operator-discovery-token")
    );
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
    /// The Deployment's Pod template, as the API server stored it.
    pub pod: PodSpec,
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
    /// The Secret volumes the container mounts (beyond the providers config), laid out as
    /// kubelet would: (mountPath, the directory holding the files).
    pub mounts: Vec<(String, PathBuf)>,
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
    install_with(prefix, &Extra::default()).await
}

/// What a test adds to [`install`]'s values, and the Secrets to create first.
#[derive(Default)]
pub(crate) struct Extra {
    /// More entries of `providers:` (YAML list items, indented by two), after `pods`.
    pub providers: String,
    /// More top-level values (YAML).
    pub values: String,
    /// Secrets to create in the namespace before the install: (name, key, content).
    pub secrets: Vec<(String, String, String)>,
}

/// [`install`] with `extra`'s providers, values and Secrets.
pub(crate) async fn install_with(prefix: &str, extra: &Extra) -> Installed {
    let plane = ControlPlane::shared();
    let crate::operated::Ground {
        client,
        ns,
        origin,
        runner,
    } = crate::operated::ground(plane, prefix).await;
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
{}ports: {{discovery: {}, metrics: {}, probes: {}}}
extraArgs: [--provisioning-poll-seconds=300ms, --deletion-poll-seconds=0.3, --drift-poll-seconds=2s,
  --leadership-duration-seconds=3s, --leadership-renew-deadline-seconds=2, --leadership-retry-period-seconds=500ms]
{}
"#,
        extra.providers,
        ports[0].number(),
        ports[1].number(),
        ports[2].number(),
        extra.values,
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    for (secret, key, content) in &extra.secrets {
        let object: Secret = serde_json::from_value(json!({
            "metadata": {"name": secret},
            "stringData": {key: content},
        }))
        .unwrap();
        secrets.create(&Default::default(), &object).await.unwrap();
    }
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
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(&name)
        .await
        .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let mounts = mount_secrets(&client, &ns, &pod, &config_dir).await;
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
        pod: pod.clone(),
        mounts,
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

/// The Secret volumes the operator's container mounts, laid out under `dir` as kubelet lays
/// them out: each item (every key without items) a file of its `mode`, else the volume's
/// `defaultMode`, else 0644, owned by root; with the Pod's `fsGroup`, of that group and
/// readable by it (kubelet's SetVolumeOwnership on a read-only volume: mode | 0440). Panics
/// when a Secret the Pod needs is missing (kubelet would not start it). (mountPath, directory).
async fn mount_secrets(
    client: &kube::Client,
    ns: &str,
    pod: &PodSpec,
    dir: &Path,
) -> Vec<(String, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let fs_group = pod
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .map(|g| u32::try_from(g).unwrap());
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let mut mounts = Vec::new();
    for mount in pod.containers[0].volume_mounts.iter().flatten() {
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| panic!("volumeMount {} names no volume", mount.name));
        let Some(source) = &volume.secret else {
            continue;
        };
        let name = source.secret_name.clone().unwrap_or_default();
        let data = secrets
            .get_opt(&name)
            .await
            .unwrap()
            .and_then(|s| s.data)
            .unwrap_or_else(|| panic!("Secret {name} is missing: the Pod would not start"));
        let items: Vec<(String, String, Option<i32>)> = match &source.items {
            Some(items) => items
                .iter()
                .map(|i| (i.key.clone(), i.path.clone(), i.mode))
                .collect(),
            None => data.keys().map(|k| (k.clone(), k.clone(), None)).collect(),
        };
        let root = dir.join(format!("volume-{}", mount.name));
        std::fs::create_dir_all(&root).unwrap();
        for (key, path, mode) in items {
            let content = &data
                .get(&key)
                .unwrap_or_else(|| {
                    panic!("Secret {name} has no key {key}: the Pod would not start")
                })
                .0;
            let file = root.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, content).unwrap();
            let mut mode = mode.or(source.default_mode).unwrap_or(0o644);
            if let Some(group) = fs_group {
                std::os::unix::fs::chown(&file, Some(0), Some(group)).unwrap();
                mode |= 0o440;
            }
            let mode = u32::try_from(mode).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        mounts.push((mount.mount_path.clone(), root));
    }
    mounts
}

impl Installed {
    /// Starts the built operator on the host as the Deployment runs it: its args, its
    /// environment (Secret volumes at their directories here), its `runAsUser`, `runAsGroup`
    /// and `fsGroup` (with `setpriv`, so that a file the user could not read in the Pod is
    /// not read here either), as the chart's ServiceAccount; its output to `log`.
    pub fn run_on_host(&self, log: &Path) -> Running {
        crate::image::embed_certificates(&self.kubeconfig);
        let ca = self.write_ca();
        let dir = self.config_dir.display().to_string();
        let out = std::fs::File::create(log).unwrap();
        let (user, group, fs_group) = run_as(&self.pod);
        let child = Command::new("setpriv")
            .arg(format!("--reuid={user}"))
            .arg(format!("--regid={group}"))
            .arg(format!("--groups={fs_group}"))
            .arg("--")
            .arg(proxy_tests::operator::binary())
            .args(self.operator_args(&dir, &format!("{dir}/{ca}")))
            .env_clear()
            .envs(self.env_on_host())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start proxy-operator with setpriv (util-linux)");
        Running(child)
    }

    /// The container's environment with every path under a Secret volume's mountPath at
    /// the directory that holds its files here (for the operator run on the host).
    pub fn env_on_host(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(name, value)| {
                let value = self
                    .mounts
                    .iter()
                    .find_map(|(at, dir)| {
                        let rest = value.strip_prefix(at.as_str())?;
                        Some(format!("{}{rest}", dir.display()))
                    })
                    .unwrap_or_else(|| value.clone());
                (name.clone(), value)
            })
            .collect()
    }

    /// podman `--volume` specs that mount the Secret volumes at their mountPath, read-only
    /// (for the operator run in the image).
    pub fn volumes(&self) -> Vec<String> {
        self.mounts
            .iter()
            .map(|(at, dir)| format!("{}:{at}:ro", dir.display()))
            .collect()
    }

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
/// histogram's `_bucket` are samples of the announced name) nor registered by any part of
/// the shell (a family without a sample yet, such as the panics of a process that never
/// panicked, is not in the scrape).
fn missing_metrics(scraped: &str) -> Vec<String> {
    let registered = registered_metrics(&repo_root().join("shell/src"));
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

/// The names each part of the shell registers (`registry.register(` or a gauge read at
/// scrape time, `metrics::gauge(` and `gauges(`, with the name the first string after it),
/// under `dir`, prefixed with `proxy_operator_`.
fn registered_metrics(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            names.extend(registered_metrics(&path));
            continue;
        }
        if path.extension().is_none_or(|extension| extension != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for marker in ["register(", "metrics::gauge(", "metrics::gauges("] {
            for (at, _) in source.match_indices(marker) {
                let after = &source[at + marker.len()..];
                let Some(open) = after.find('"') else {
                    continue;
                };
                // The name is the first string of the call, within its first few lines.
                if after[..open].lines().count() > 3 {
                    continue;
                }
                if let Some(name) = after[open + 1..].split('"').next() {
                    names.push(format!("proxy_operator_{name}"));
                }
            }
        }
    }
    names
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
    let log = installed.config_dir.join("operator.log");
    let _operator = installed.run_on_host(&log);
    let show = || std::fs::read_to_string(&log).unwrap_or_default();

    let proxies = installed.create_proxy("from-chart").await;
    installed
        .assert_ready(&proxies, "from-chart", "operator log", &show)
        .await;
    installed.check_serving("from-chart", &show).await;
}

/// The gateway as the chart's Deployment runs it (its args, its environment, the tenants of
/// the generated Secret at its mountPath, its user and group), in front of the installed
/// operator: a client with the generated tenant's token fetches through a Ready proxy.
#[tokio::test]
async fn the_installed_charts_gateway_serves_a_client_through_a_ready_proxy() {
    let installed = install("chart-gw").await;
    let log = installed.config_dir.join("operator.log");
    let _operator = installed.run_on_host(&log);
    let show = || std::fs::read_to_string(&log).unwrap_or_default();
    let proxies = installed.create_proxy("via-gateway").await;
    installed
        .assert_ready(&proxies, "via-gateway", "operator log", &show)
        .await;

    let client = ControlPlane::shared().client().await;
    let name = format!("chart-{}", installed.ns);
    let deployment = Api::<Deployment>::namespaced(client.clone(), &installed.ns)
        .get(&format!("{name}-gateway"))
        .await
        .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let dir = subdir(&format!("chart-{}-gateway", installed.ns));
    let mounts = mount_secrets(&client, &installed.ns, &pod, &dir).await;
    let tenants = mounts
        .iter()
        .find(|(at, _)| at == "/etc/proxy-operator/tenants")
        .map(|(_, dir)| dir.clone())
        .expect("the tenants volume");
    let token = std::fs::read_to_string(tenants.join("default")).unwrap();
    let ports = [Port::reserve(), Port::reserve()];
    let listen = format!("127.0.0.1:{}", ports[0].number());
    let container = &pod.containers[0];
    // The environment as kubelet makes it: the token from the Secret, the Pod's name.
    let pod_name = format!("{name}-gateway-0");
    let env: Vec<(String, String)> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|var| {
            let value = match (var.value, var.value_from) {
                (Some(value), _) => value,
                (None, Some(from)) if from.secret_key_ref.is_some() => installed.token.clone(),
                (None, Some(from))
                    if from.field_ref.as_ref().map(|f| f.field_path.as_str())
                        == Some("metadata.name") =>
                {
                    pod_name.clone()
                }
                other => panic!("unexpected env {other:?}"),
            };
            (var.name, value)
        })
        .collect();
    // kubelet expands `$(NAME)` in args from the container's environment.
    let expand = |arg: String| {
        env.iter().fold(arg, |arg, (name, value)| {
            arg.replace(&format!("$({name})"), value)
        })
    };
    let args: Vec<String> = container
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|arg| match arg.split_once('=') {
            Some(("--listen", _)) => format!("--listen={listen}"),
            Some(("--metrics-addr", _)) => {
                format!("--metrics-addr=127.0.0.1:{}", ports[1].number())
            }
            // The Service's name resolves in a cluster only: the installed operator's address.
            Some(("--discovery-url", url)) => {
                assert_eq!(
                    url,
                    format!(
                        "http://{name}-discovery.{}.svc:{}",
                        installed.ns,
                        installed.discovery.rsplit(':').next().unwrap()
                    )
                );
                format!("--discovery-url={}", installed.discovery)
            }
            Some(("--tenants-dir", _)) => format!("--tenants-dir={}", tenants.display()),
            _ => expand(arg),
        })
        .collect();
    assert!(
        args.contains(&format!("--holder=gateway:{pod_name}")),
        "the gateway's leases name its Pod: {args:?}"
    );
    let (user, group, fs_group) = run_as(&pod);
    let gateway_log = dir.join("gateway.log");
    let out = std::fs::File::create(&gateway_log).unwrap();
    let _gateway = Running(
        Command::new("setpriv")
            .arg(format!("--reuid={user}"))
            .arg(format!("--regid={group}"))
            .arg(format!("--groups={fs_group}"))
            .arg("--")
            .arg(proxy_tests::operator::binary())
            .args(&args)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start the gateway with setpriv"),
    );
    let show_gateway = || std::fs::read_to_string(&gateway_log).unwrap_or_default();
    let proxy = reqwest::Proxy::all(format!("http://{listen}"))
        .unwrap()
        .basic_auth("user-default-geo-eu", token.trim());
    let http = reqwest::Client::builder().proxy(proxy).build().unwrap();
    let url = installed.origin.http_url("/client-address");
    let mut last = String::new();
    for _ in 0..100 {
        match http.get(&url).send().await {
            Ok(answer) if answer.status() == 200 => {
                let upstream = answer.headers().get("x-proxy-upstream").cloned();
                assert_eq!(
                    upstream.as_ref().and_then(|v| v.to_str().ok()),
                    Some(format!("{}/via-gateway", installed.ns).as_str())
                );
                // The client's connection is still open (pooled): its lease names the Pod.
                let _ = answer.bytes().await;
                let held: Value = reqwest::Client::new()
                    .get(format!("{}/v1/leases", installed.discovery))
                    .query(&[("holder", format!("gateway:{pod_name}"))])
                    .bearer_auth(&installed.token)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(held["count"], 1, "{held}\ngateway log:\n{}", show_gateway());
                return;
            }
            Ok(answer) => {
                last = format!(
                    "{} {}",
                    answer.status(),
                    answer.text().await.unwrap_or_default()
                )
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no page through the chart's gateway: {last}\ngateway log:\n{}\noperator log:\n{}",
        show_gateway(),
        show()
    );
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
        (
            "gcp: {credentialsSecret: {nmae: gcp-key}}\n",
            "additional properties 'nmae' not allowed",
        ),
        (
            "gcp: {keyFile: /k.json}\n",
            "additional properties 'keyFile' not allowed",
        ),
        ("image: {variant: arm}\n", "at '/image/variant'"),
        (
            "extraVolumeMounts: [{name: ssh}]\n",
            "at '/extraVolumeMounts/0'",
        ),
        ("extraEnv: [{value: x}]\n", "at '/extraEnv/0'"),
        // The default image has no kvm provider: the render says which variant has.
        (
            "providers: [{name: lab, type: kvm}]\n",
            "provider lab is of type kvm: set image.variant=kvm",
        ),
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

/// Waits (60 s at most) until the ProviderHealth `name` in `ns` says `Healthy` is `status`;
/// its reason and message. Fails with what it said last and `log`.
pub(crate) async fn wait_provider_health(
    ns: &str,
    name: &str,
    status: &str,
    log: &dyn Fn() -> String,
) -> (String, String) {
    wait_provider_condition(ns, name, &format!("Healthy={status}"), log, &|c| {
        c.status == status
    })
    .await
}

/// Waits (60 s at most) until the `Healthy` condition of the ProviderHealth `name` in `ns`
/// is one `wanted` (described as `what`) accepts; its reason and message. Fails with what it
/// said last and `log`.
pub(crate) async fn wait_provider_condition(
    ns: &str,
    name: &str,
    what: &str,
    log: &dyn Fn() -> String,
    wanted: &dyn Fn(&Condition) -> bool,
) -> (String, String) {
    let client = ControlPlane::shared().client().await;
    let api: Api<ProviderHealth> = Api::namespaced(client, ns);
    let mut last = None;
    for _ in 0..600 {
        last = api
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|h| h.status)
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Healthy"));
        if let Some(condition) = last.as_ref().filter(|c| wanted(c)) {
            return (condition.reason.clone(), condition.message.clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "ProviderHealth {name} not {what} within 60 s (last: {last:?}); log:\n{}",
        log()
    );
}

/// The user, group and fsGroup the Deployment runs its container as.
fn run_as(pod: &PodSpec) -> (i64, i64, i64) {
    let security = pod.security_context.clone().unwrap_or_default();
    (
        security.run_as_user.expect("runAsUser"),
        security.run_as_group.expect("runAsGroup"),
        security.fs_group.expect("fsGroup"),
    )
}

#[tokio::test]
async fn the_chart_gives_the_gcp_provider_a_key_file_from_a_secret_outside_gke() {
    // The local Compute Engine API accepts only requests that carry a JWT signed by this
    // key for its service account (see proxy_tests::gce's auth.rs: google-cloud-auth signs
    // one itself with a key file, and never calls the key's token_uri).
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    let key = ServiceAccountKey::generate(fake.project(), "proxy-operator").unwrap();
    fake.require_service_account(Some(key.clone()));
    // The provider as users configure it: Application Default Credentials.
    let providers = fake
        .provider_entry("gcp-key")
        .replace("credentials: none", "credentials: adc");
    assert!(providers.contains("credentials: adc"), "{providers}");
    let installed = install_with(
        "chart-gcp",
        &Extra {
            providers,
            // And the generic extras, which the API server validates as it stores them.
            values: "gcp: {credentialsSecret: {name: gcp-key, key: sa.json}}\n\
                     extraEnv: [{name: EXTRA, value: seen}]\n\
                     extraVolumes: [{name: more, secret: {secretName: more, defaultMode: 0400}}]\n\
                     extraVolumeMounts: [{name: more, mountPath: /var/run/more, readOnly: true}]\n"
                .to_owned(),
            secrets: vec![
                ("gcp-key".into(), "sa.json".into(), key.json.clone()),
                ("more".into(), "note".into(), "more".into()),
            ],
        },
    )
    .await;
    assert!(
        installed
            .env
            .contains(&("EXTRA".to_owned(), "seen".to_owned())),
        "{:?}",
        installed.env
    );
    assert!(
        installed
            .mounts
            .iter()
            .any(|(at, dir)| at == "/var/run/more" && dir.join("note").exists()),
        "{:?}",
        installed.mounts
    );

    // What the Deployment says: the key file mounted read-only where
    // GOOGLE_APPLICATION_CREDENTIALS points.
    let container = &installed.pod.containers[0];
    let credentials = installed
        .env
        .iter()
        .find(|(name, _)| name == "GOOGLE_APPLICATION_CREDENTIALS")
        .map(|(_, value)| value.clone())
        .expect("GOOGLE_APPLICATION_CREDENTIALS");
    assert_eq!(credentials, "/var/run/secrets/proxy-operator/gcp/sa.json");
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| credentials.starts_with(&format!("{}/", m.mount_path)))
        .expect("a volumeMount holding the key file");
    assert_eq!(mount.read_only, Some(true));
    let (_, _, fs_group) = run_as(&installed.pod);
    // The file as kubelet lays it out, read by the Deployment's user (not root): its mode and
    // group must let that user read it.
    let on_host = installed
        .env_on_host()
        .into_iter()
        .find(|(name, _)| name == "GOOGLE_APPLICATION_CREDENTIALS")
        .map(|(_, value)| value)
        .unwrap();
    let metadata = std::fs::metadata(&on_host).unwrap();
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(
            (
                metadata.uid(),
                metadata.gid(),
                metadata.permissions().mode() & 0o777
            ),
            (0, u32::try_from(fs_group).unwrap(), 0o440),
            "kubelet's layout of the key file"
        );
    }

    let log = installed.config_dir.join("operator.log");
    let _operator = installed.run_on_host(&log);
    let show = || {
        format!(
            "{}\nfake's authentication (accepted, last refusal): {:?}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            fake.authentication()
        )
    };

    wait_provider_health(&installed.ns, "gcp-key", "True", &show).await;
    // The check that made it healthy was an authenticated list, and no request came without
    // the key's JWT.
    let (accepted, refused) = fake.authentication();
    assert!(fake.calls(Method::AggregatedList) > 0, "{}", show());
    assert!(
        accepted > 0,
        "no request carried the key's JWT: {refused:?}"
    );
    assert_eq!(refused, None, "{}", show());
}
