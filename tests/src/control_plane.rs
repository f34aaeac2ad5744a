//! A real control plane: `etcd` and `kube-apiserver` on reserved loopback ports
//! ([`crate::ports`]), with fresh certificates, a kubeconfig, and the Proxy CRD installed
//! from `deploy/crds/`.
//!
//! Started once per test binary ([`ControlPlane::shared`]) because it takes seconds; tests
//! isolate themselves with a namespace each. A bare API server has no namespace controller,
//! so namespaces are never deleted: they are unique per test instead. A test that takes etcd
//! or the API server down gets a plane of its own ([`ControlPlane::private`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::bins::{kbin, repo_root};
use crate::certs::Ca;
use crate::ports::Port;
use crate::run_dir::subdir;

/// A running etcd + kube-apiserver pair.
#[derive(Debug)]
pub struct ControlPlane {
    /// Where the kubeconfig (admin, `system:masters`) is.
    pub kubeconfig: PathBuf,
    /// The API server's URL.
    pub server: String,
    dir: PathBuf,
    /// Held for the plane's life, so that a restart finds its ports still free.
    ports: Ports,
    // Watched while starting; stopped by the reaper (tests/bed/reap.sh) when the run ends.
    processes: Mutex<Processes>,
}

#[derive(Debug)]
struct Ports {
    etcd: Port,
    peer: Port,
    api: Port,
}

#[derive(Debug, Default)]
struct Processes {
    etcd: Option<Child>,
    apiserver: Option<Child>,
}

impl ControlPlane {
    /// The control plane of this test binary, started on first use.
    pub fn shared() -> &'static ControlPlane {
        // The outcome is kept either way, so that after a failed start every other test fails
        // at once with the same message instead of trying again.
        static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        match PLANE.get_or_init(|| {
            ControlPlane::start(subdir("control-plane")).map_err(|e| format!("{e:#}"))
        }) {
            Ok(plane) => plane,
            Err(e) => panic!("the test bed's control plane failed to start: {e}"),
        }
    }

    /// A control plane of its own, for a test that stops and restarts etcd or the API server
    /// ([`ControlPlane::stop_etcd`], [`ControlPlane::start_apiserver`], ...), which would
    /// disturb every other test on the shared one. It lives as long as the test process,
    /// like the shared one; [`ControlPlane::stop`] ends its processes sooner.
    pub fn private() -> &'static ControlPlane {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = subdir(&format!(
            "control-plane-private-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match ControlPlane::start(dir) {
            Ok(plane) => Box::leak(Box::new(plane)),
            Err(e) => panic!("a private control plane failed to start: {e:#}"),
        }
    }

    fn start(dir: PathBuf) -> anyhow::Result<Self> {
        let started = Instant::now();
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki)?;
        let ca = Ca::new("proxy-operator-test-ca");
        let serving = ca.server(&["127.0.0.1", "localhost", "kubernetes.default.svc"]);
        let admin = ca.client("admin", "system:masters");
        let sa_key = rcgen::KeyPair::generate()?;
        let write = |name: &str, content: &str| std::fs::write(pki.join(name), content);
        write("ca.crt", &ca.cert_pem)?;
        write("apiserver.crt", &serving.cert_pem)?;
        write("apiserver.key", &serving.key_pem)?;
        write("sa.key", &sa_key.serialize_pem())?;
        write("sa.pub", &sa_key.public_key_pem())?;
        write("admin.crt", &admin.cert_pem)?;
        write("admin.key", &admin.key_pem)?;

        let ports = Ports {
            etcd: Port::reserve(),
            peer: Port::reserve(),
            api: Port::reserve(),
        };
        let server = format!("https://127.0.0.1:{}", ports.api.number());
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(
                &server,
                &pki.join("ca.crt"),
                &pki.join("admin.crt"),
                &pki.join("admin.key"),
            ),
        )?;
        let plane = ControlPlane {
            kubeconfig,
            server,
            dir,
            ports,
            processes: Mutex::default(),
        };
        plane.spawn_etcd()?;
        plane.spawn_apiserver()?;
        plane.wait_ready()?;
        plane.wait_for("the default namespace", Duration::from_secs(60), |p| {
            p.kubectl(&["get", "namespace", "default"]).status.success()
        })?;
        let crds = repo_root().join("deploy/crds");
        let applied = plane.kubectl(&["apply", "-f", crds.to_str().expect("utf-8 path")]);
        anyhow::ensure!(
            applied.status.success(),
            "kubectl apply deploy/crds: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        let established = plane.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/proxies.crawl.example.com",
        ]);
        anyhow::ensure!(
            established.status.success(),
            "CRD not Established: {}",
            String::from_utf8_lossy(&established.stderr)
        );
        eprintln!(
            "test bed: control plane at {} ready in {:.1?}",
            plane.server,
            started.elapsed()
        );
        Ok(plane)
    }

    fn processes(&self) -> MutexGuard<'_, Processes> {
        self.processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts etcd on the plane's ports and data directory.
    fn spawn_etcd(&self) -> anyhow::Result<()> {
        let etcd_url = format!("http://127.0.0.1:{}", self.ports.etcd.number());
        let peer_url = format!("http://127.0.0.1:{}", self.ports.peer.number());
        let etcd = Command::new(kbin("etcd"))
            .args([
                "--name",
                "bed",
                "--log-level",
                "warn",
                "--unsafe-no-fsync=true",
            ])
            .arg("--data-dir")
            .arg(self.dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("bed={peer_url}")])
            .stdin(Stdio::null())
            .stdout(log_file(&self.dir, "etcd.log")?)
            .stderr(log_file(&self.dir, "etcd.log")?)
            .spawn()?;
        self.processes().etcd = Some(etcd);
        Ok(())
    }

    /// Starts kube-apiserver on the plane's port, against its etcd.
    fn spawn_apiserver(&self) -> anyhow::Result<()> {
        let pki = |name: &str| self.dir.join("pki").join(name).display().to_string();
        let apiserver = Command::new(kbin("kube-apiserver"))
            .arg(format!("--etcd-servers=http://127.0.0.1:{}", self.ports.etcd.number()))
            .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
            .arg(format!("--secure-port={}", self.ports.api.number()))
            .arg(format!("--tls-cert-file={}", pki("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", pki("apiserver.key")))
            .arg(format!("--client-ca-file={}", pki("ca.crt")))
            .arg(format!("--service-account-issuer={}", self.server))
            .arg(format!("--service-account-key-file={}", pki("sa.pub")))
            .arg(format!("--service-account-signing-key-file={}", pki("sa.key")))
            .args(["--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC", "--allow-privileged=true"])
            // As envtest, plus the plugins whose controllers do not run here (a bare API
            // server has no node-lifecycle or PVC-protection controller).
            .arg("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,StorageObjectInUseProtection")
            .args(["--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false", "--profiling=false"])
            .arg(format!("--cert-dir={}", self.dir.join("apiserver-certs").display()))
            .arg("--v=1")
            .stdin(Stdio::null())
            .stdout(log_file(&self.dir, "apiserver.log")?)
            .stderr(log_file(&self.dir, "apiserver.log")?)
            .spawn()?;
        self.processes().apiserver = Some(apiserver);
        Ok(())
    }

    /// Kills etcd (SIGKILL). The API server stays up and answers what it can without it.
    pub fn stop_etcd(&self) {
        kill(self.processes().etcd.take());
    }

    /// Starts etcd again on the same ports and data, and returns once the API server is ready
    /// (its readiness includes etcd).
    pub fn start_etcd(&self) -> anyhow::Result<()> {
        self.spawn_etcd()?;
        self.wait_ready()
    }

    /// Kills kube-apiserver (SIGKILL): its clients' connections break and new ones are
    /// refused.
    pub fn stop_apiserver(&self) {
        kill(self.processes().apiserver.take());
    }

    /// Starts kube-apiserver again on the same port and certificates, and returns once it is
    /// ready.
    pub fn start_apiserver(&self) -> anyhow::Result<()> {
        self.spawn_apiserver()?;
        self.wait_ready()
    }

    /// Kills both processes.
    pub fn stop(&self) {
        self.stop_apiserver();
        self.stop_etcd();
    }

    fn wait_ready(&self) -> anyhow::Result<()> {
        self.wait_for("the API server's /readyz", Duration::from_secs(120), |p| {
            p.kubectl(&["get", "--raw", "/readyz"]).status.success()
        })
    }

    fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !ready(self) {
            let exited = {
                let mut processes = self.processes();
                let Processes { etcd, apiserver } = &mut *processes;
                [etcd, apiserver]
                    .into_iter()
                    .flatten()
                    .any(|p| matches!(p.try_wait(), Ok(Some(_))))
            };
            if exited || Instant::now() > deadline {
                let why = if exited {
                    "a control-plane process exited".to_owned()
                } else {
                    format!("timed out after {timeout:?}")
                };
                anyhow::bail!(
                    "{why} while waiting for {what}; logs in {}\n{}\n{}",
                    self.dir.display(),
                    self.log_tail("etcd.log"),
                    self.log_tail("apiserver.log")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// The last lines of one of the plane's logs.
    fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(15)..];
        format!("{name} ends:\n{}", tail.join("\n"))
    }

    /// Runs `kubectl` (the one built with the control plane) against this control plane.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(kbin("kubectl"))
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl")
    }

    /// A client for this control plane (one per test: a client is bound to the runtime of the
    /// test that made it).
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).expect("build a client")
    }

    /// How to reach the API server as the admin, for a client built elsewhere (on a runtime
    /// of its own).
    pub async fn config(&self) -> kube::Config {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("read the kubeconfig");
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a valid kubeconfig")
    }

    /// Creates a fresh namespace for one test, named after `prefix`.
    pub async fn namespace(&self, client: &kube::Client, prefix: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create a namespace");
        name
    }

    /// The directory of this control plane's files and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A kubeconfig that points at the certificate files (both kube-rs and kubectl read paths).
fn kubeconfig_yaml(server: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: bed\n\
         clusters:\n- name: bed\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
         users:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\n\
         contexts:\n- name: bed\n  context:\n    cluster: bed\n    user: admin\n",
        ca.display(),
        cert.display(),
        key.display()
    )
}

/// Kills a control-plane process and waits for it.
fn kill(process: Option<Child>) {
    if let Some(mut process) = process {
        let _ = process.kill();
        let _ = process.wait();
    }
}

fn log_file(dir: &Path, name: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
}
