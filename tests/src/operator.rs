//! The operator as a real process: the `proxy-operator` binary, built once per test binary,
//! started against the test bed's API server.
//!
//! Starting the real binary is also what keeps the TLS trap of `docs/dependencies.md` (two
//! rustls crypto providers compiled in make `Client::try_default` panic) from coming back
//! unnoticed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::bins::repo_root;
use crate::control_plane::ControlPlane;
use crate::ports::Port;
use crate::run_dir::subdir;

/// The debug operator binary, built on first use (a no-op when it is current): with the kvm
/// provider when this crate has its `kvm` feature (the tests), without it otherwise (the demo).
/// `PROXY_OPERATOR_BINARY` names another binary to run instead (an older build, to show what
/// a test catches: the before of a before-and-after).
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        std::env::var_os("PROXY_OPERATOR_BINARY").map_or_else(|| build(false), PathBuf::from)
    })
}

/// The release operator binary, for benchmarks, built on first use with the default
/// features: the build the container image ships (`deploy/Containerfile`). The kvm feature
/// links libvirt and some fifty shared libraries, about 10 MiB of resident memory that a
/// deployed operator does not have, so a benchmark of memory must not measure it.
pub fn release_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build(true))
}

fn build(release: bool) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args([
        "build",
        "--quiet",
        "--package",
        "proxy-operator",
        "--bin",
        "proxy-operator",
    ]);
    if release {
        command.arg("--release");
    } else if cfg!(feature = "kvm") {
        // The kvm provider's e2e needs it; every e2e runs the same binary. The demo, built
        // without the feature, runs the default build and needs no libvirt.
        command.args(["--features", "kvm"]);
    }
    let status = command
        .current_dir(repo_root())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p proxy-operator failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), PathBuf::from);
    target
        .join(if release { "release" } else { "debug" })
        .join("proxy-operator")
}

/// The `RUST_LOG` of the operators tests start: with the operator's debug events (a failed
/// probe, a failed reconcile, a proxy's state freed), which tests assert on and print when
/// they fail.
const TEST_LOG_FILTER: &str = "info,proxy_operator=debug,kube=warn";

/// Set by [`log_as_deployed`].
static LOG_AS_DEPLOYED: AtomicBool = AtomicBool::new(false);

/// The operators this process starts from now on log as deployed: the operator's default
/// filter (`proxy_operator::runtime::telemetry::DEFAULT_FILTER`, the chart's `logLevel`) instead of the
/// tests' debug events. Benchmarks call it first: what they measure is the operator as it
/// runs in a cluster.
pub fn log_as_deployed() {
    LOG_AS_DEPLOYED.store(true, Ordering::Relaxed);
}

/// The bearer token the test operators' discovery APIs require.
pub const DISCOVERY_TOKEN: &str = "test-bed-token";

/// A running operator; killed when dropped.
#[derive(Debug)]
pub struct Operator {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
    /// Base URL of its discovery API (`http://127.0.0.1:PORT`), which takes
    /// [`DISCOVERY_TOKEN`].
    pub discovery: String,
    /// URL of its metrics endpoint.
    pub metrics: String,
    /// Base URL of its probe port (`http://127.0.0.1:PORT`: `/healthz`, `/readyz`).
    pub probes: String,
    /// Its identity in the leadership Lease.
    pub identity: String,
    /// The ports of its discovery, metrics and probe servers, reserved while it runs.
    _ports: [Port; 3],
    /// How it was started, for [`Operator::start_again`].
    launch: Launch,
    /// Whether its log is checked when it stops (see its `Drop`).
    check_log: bool,
}

/// A command line to start the operator with, again if need be.
#[derive(Debug, Clone)]
struct Launch {
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    envs: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

impl Launch {
    /// Starts it, its output appended to `log`.
    fn spawn(&self, log: &Path) -> Child {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the operator log");
        Command::new(&self.program)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start proxy-operator")
    }
}

/// How often the operator polls, in seconds (its `--*-poll-seconds` flags).
#[derive(Debug, Clone, Copy)]
pub struct Polls {
    /// While a machine is being created.
    pub provisioning: f64,
    /// While a machine is being deleted.
    pub deletion: f64,
    /// While a machine runs.
    pub drift: f64,
}

impl Polls {
    /// Short polls, so tests move quickly.
    pub const FAST: Self = Self {
        provisioning: 0.3,
        deletion: 0.3,
        drift: 2.0,
    };
}

impl Operator {
    /// Starts `binary` for `namespace` with a providers config holding one kubernetes
    /// provider named `pods`, which lets clients in 127.0.0.0/8 use its squids, trusting
    /// `probe_ca_pem` (a private probe origin's CA) for its probes.
    ///
    /// Each test namespace is an installation of its own: its installation ID and its
    /// leadership Lease are the namespace's, so operators of parallel tests never compete for
    /// leadership nor reap each other's Pods. Leadership is fast (3 s claims, 0.5 s rounds)
    /// unless `extra_args` sets a `--leadership-*` flag.
    /// `extra_args` are added to `proxy-operator run`.
    pub fn start_with(
        plane: &ControlPlane,
        namespace: &str,
        binary: &Path,
        polls: Polls,
        probe_ca_pem: Option<&str>,
        extra_args: &[&str],
    ) -> Self {
        Self::start_with_providers(
            plane,
            namespace,
            binary,
            polls,
            probe_ca_pem,
            "",
            extra_args,
        )
    }

    /// As [`Operator::start_with`], with `more_providers` (entries of the `providers:` list,
    /// as YAML lines) after `pods`.
    pub fn start_with_providers(
        plane: &ControlPlane,
        namespace: &str,
        binary: &Path,
        polls: Polls,
        probe_ca_pem: Option<&str>,
        more_providers: &str,
        extra_args: &[&str],
    ) -> Self {
        Self::start_with_kubeconfig(
            &plane.kubeconfig,
            namespace,
            binary,
            polls,
            probe_ca_pem,
            more_providers,
            extra_args,
            &[],
        )
    }

    /// As [`Operator::start_with_providers`], but the operator talks to the API server with
    /// `kubeconfig` (a user with less than the admin's rights, for RBAC tests), and has
    /// `envs` in its environment (an OTLP endpoint, say).
    #[expect(
        clippy::too_many_arguments,
        reason = "start_with_providers' arguments, the kubeconfig and the environment"
    )]
    pub fn start_with_kubeconfig(
        kubeconfig: &Path,
        namespace: &str,
        binary: &Path,
        polls: Polls,
        probe_ca_pem: Option<&str>,
        more_providers: &str,
        extra_args: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        let dir = subdir(&format!("operator-{namespace}"));
        let config = dir.join("providers.yaml");
        std::fs::write(
            &config,
            format!("providers:\n  - name: pods\n    type: kubernetes\n    kubernetes:\n      allowedSourceCIDRs: [\"127.0.0.0/8\"]\n{more_providers}"),
        )
        .expect("write the providers config");
        // Appended to, so a restarted operator's log follows the one it replaces.
        let log = dir.join("operator.log");
        let seconds = |s: f64| s.to_string();
        let mut command = Command::new(binary);
        let ports = [Port::reserve(), Port::reserve(), Port::reserve()];
        let discovery = format!("127.0.0.1:{}", ports[0].number());
        let metrics = format!("127.0.0.1:{}", ports[1].number());
        let probes = format!("127.0.0.1:{}", ports[2].number());
        let identity = format!("operator-{}", ports[0].number());
        command
            .arg("run")
            .args(["--discovery-addr", &discovery])
            .args(["--metrics-addr", &metrics])
            .args(["--probe-addr", &probes])
            .args([
                "--installation-id",
                namespace,
                "--leadership-namespace",
                namespace,
                "--gc-allow-namespaced",
            ])
            .args(["--identity", &identity]);
        // Fast leadership, unless the caller sets its own (a benchmark of the defaults).
        if !extra_args
            .iter()
            .any(|arg| arg.starts_with("--leadership-"))
        {
            command
                .args([
                    "--leadership-duration-seconds",
                    "3",
                    "--leadership-renew-deadline-seconds",
                    "2",
                ])
                .args(["--leadership-retry-period-seconds", "0.5"]);
        }
        command
            .args(extra_args)
            .env("DISCOVERY_TOKEN", DISCOVERY_TOKEN);
        if let Some(pem) = probe_ca_pem {
            let bundle = dir.join("probe-ca.pem");
            std::fs::write(&bundle, pem).expect("write the probe CA bundle");
            command.arg("--probe-ca-bundle").arg(bundle);
        }
        command
            .arg("--providers-config")
            .arg(&config)
            .args(["--namespace", namespace])
            .args(["--provisioning-poll-seconds", &seconds(polls.provisioning)])
            .args(["--deletion-poll-seconds", &seconds(polls.deletion)])
            .args(["--drift-poll-seconds", &seconds(polls.drift)])
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                if LOG_AS_DEPLOYED.load(Ordering::Relaxed) {
                    proxy_operator::runtime::telemetry::DEFAULT_FILTER
                } else {
                    TEST_LOG_FILTER
                },
            )
            .envs(envs.iter().copied());
        let launch = Launch {
            program: binary.to_owned(),
            args: command.get_args().map(ToOwned::to_owned).collect(),
            envs: command
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
                .collect(),
        };
        Self {
            child: launch.spawn(&log),
            log,
            discovery: format!("http://{discovery}"),
            metrics: format!("http://{metrics}/metrics"),
            probes: format!("http://{probes}"),
            identity,
            _ports: ports,
            launch,
            check_log: true,
        }
    }

    /// Its log is not checked when it stops: a benchmark that runs an older build, whose log
    /// lines are what they were, measures it all the same.
    pub fn without_log_check(mut self) -> Self {
        self.check_log = false;
        self
    }

    /// Starts the operator again with the same command line: the same identity, ports and
    /// log, as a container restarted in its Pod (killing it first if it still runs).
    /// Clients reach it at the same URLs.
    pub fn start_again(&mut self) {
        self.kill();
        self.child = self.launch.spawn(&self.log);
    }

    /// Its process ID (for its memory and CPU in `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the operator logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills the operator at once (SIGKILL), as a crash or an OOM kill would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the operator to stop, as Kubernetes does (SIGTERM), and waits up to `bound` for
    /// it to exit: its exit status, or `None` while it still runs.
    pub fn terminate(&mut self, bound: Duration) -> Option<ExitStatus> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.child.id());
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(exit)) = self.child.try_wait() {
                return Some(exit);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// The samples of metric `name` over its series whose labels contain `labels` (`""`:
    /// every series), scraped now.
    async fn metric_samples(&self, name: &str, labels: &str) -> Vec<f64> {
        let text = reqwest::get(&self.metrics)
            .await
            .expect("the metrics endpoint answers")
            .text()
            .await
            .expect("a metrics body");
        let series = format!("{name}{{");
        text.lines()
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(id, _)| (*id == name || id.starts_with(&series)) && id.contains(labels))
            .filter_map(|(_, value)| value.parse::<f64>().ok())
            .collect()
    }

    /// The sum of the samples of metric `name` over its series whose labels contain
    /// `labels` (`""`: every series), scraped now.
    pub async fn metric_sum(&self, name: &str, labels: &str) -> u64 {
        self.metric_samples(name, labels).await.iter().sum::<f64>() as u64
    }

    /// The largest sample of metric `name` over its series whose labels contain `labels`;
    /// `None` when the operator has no such series (an older build).
    pub async fn metric_max(&self, name: &str, labels: &str) -> Option<f64> {
        self.metric_samples(name, labels)
            .await
            .into_iter()
            .reduce(f64::max)
    }

    /// `GET /debug/recording` on the admin port with the discovery token: the recording of
    /// `object` (`namespace/name`), or of every object when `None`.
    pub async fn recording(&self, object: Option<&str>) -> String {
        let url = self.metrics.replace("/metrics", "/debug/recording");
        let url = match object {
            Some(object) => format!("{url}?object={object}"),
            None => url,
        };
        reqwest::Client::new()
            .get(url)
            .bearer_auth(DISCOVERY_TOKEN)
            .send()
            .await
            .expect("the admin endpoint answers")
            .text()
            .await
            .expect("a recording body")
    }

    /// How many machines it asked its providers to create so far
    /// (`proxy_operator_provider_requests_total{op="create"}`, every provider and result).
    pub async fn provider_creates(&self) -> u64 {
        self.metric_sum("proxy_operator_provider_requests_total", r#"op="create""#)
            .await
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Operator {
    /// Kills the operator, then checks its log: every JSON line it wrote parses as one
    /// value with each key once per object ([`crate::log_lines`]), in every test that runs
    /// an operator. A test already failing is not failed a second time (a panic while
    /// panicking aborts the process).
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() || !self.check_log {
            return;
        }
        let bad = crate::log_lines::bad_json_lines(&self.log(), 5);
        assert!(
            bad.is_empty(),
            "the operator wrote JSON log lines a log pipeline cannot read ({}):\n{}",
            self.log.display(),
            bad.join("\n")
        );
    }
}
