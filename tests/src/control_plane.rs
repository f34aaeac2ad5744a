//! A real control plane: `etcd` and `kube-apiserver` on free loopback ports, with fresh
//! certificates, a kubeconfig, and the Proxy CRD installed from `deploy/crds/`.
//!
//! Started once per test binary ([`ControlPlane::shared`]) because it takes seconds; tests
//! isolate themselves with a namespace each. A bare API server has no namespace controller,
//! so namespaces are never deleted: they are unique per test instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::bins::{kbin, repo_root};
use crate::certs::Ca;
use crate::run_dir::subdir;

/// A running etcd + kube-apiserver pair.
#[derive(Debug)]
pub struct ControlPlane {
    /// Where the kubeconfig (admin, `system:masters`) is.
    pub kubeconfig: PathBuf,
    /// The API server's URL.
    pub server: String,
    dir: PathBuf,
    // Watched while starting; stopped by the reaper (tests/bed/reap.sh) when the run ends.
    processes: Vec<Child>,
}

impl ControlPlane {
    /// The control plane of this test binary, started on first use.
    pub fn shared() -> &'static ControlPlane {
        // The outcome is kept either way, so that after a failed start every other test fails
        // at once with the same message instead of trying again.
        static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        match PLANE.get_or_init(|| ControlPlane::start().map_err(|e| format!("{e:#}"))) {
            Ok(plane) => plane,
            Err(e) => panic!("the test bed's control plane failed to start: {e}"),
        }
    }

    fn start() -> anyhow::Result<Self> {
        let started = Instant::now();
        let dir = subdir("control-plane");
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki)?;
        let ca = Ca::new("proxy-operator-test-ca");
        let serving = ca.server(&["127.0.0.1", "localhost", "kubernetes.default.svc"]);
        let admin = ca.client("admin", "system:masters");
        let sa_key = rcgen::KeyPair::generate()?;
        let write = |name: &str, content: &str| -> std::io::Result<PathBuf> {
            let path = pki.join(name);
            std::fs::write(&path, content)?;
            Ok(path)
        };
        let ca_crt = write("ca.crt", &ca.cert_pem)?;
        let srv_crt = write("apiserver.crt", &serving.cert_pem)?;
        let srv_key = write("apiserver.key", &serving.key_pem)?;
        let sa_private = write("sa.key", &sa_key.serialize_pem())?;
        let sa_public = write("sa.pub", &sa_key.public_key_pem())?;
        let admin_crt = write("admin.crt", &admin.cert_pem)?;
        let admin_key = write("admin.key", &admin.key_pem)?;

        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Command::new(kbin("etcd"))
            .args([
                "--name",
                "bed",
                "--log-level",
                "warn",
                "--unsafe-no-fsync=true",
            ])
            .arg("--data-dir")
            .arg(dir.join("etcd"))
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
            .stdout(log_file(&dir, "etcd.log")?)
            .stderr(log_file(&dir, "etcd.log")?)
            .spawn()?;

        let server = format!("https://127.0.0.1:{api_port}");
        let apiserver = Command::new(kbin("kube-apiserver"))
            .arg(format!("--etcd-servers={etcd_url}"))
            .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
            .arg(format!("--secure-port={api_port}"))
            .arg(format!("--tls-cert-file={}", srv_crt.display()))
            .arg(format!("--tls-private-key-file={}", srv_key.display()))
            .arg(format!("--client-ca-file={}", ca_crt.display()))
            .arg(format!("--service-account-issuer={server}"))
            .arg(format!("--service-account-key-file={}", sa_public.display()))
            .arg(format!("--service-account-signing-key-file={}", sa_private.display()))
            .args(["--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC", "--allow-privileged=true"])
            // As envtest, plus the plugins whose controllers do not run here (a bare API
            // server has no node-lifecycle or PVC-protection controller).
            .arg("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,StorageObjectInUseProtection")
            .args(["--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false", "--profiling=false"])
            .arg(format!("--cert-dir={}", dir.join("apiserver-certs").display()))
            .arg("--v=1")
            .stdin(Stdio::null())
            .stdout(log_file(&dir, "apiserver.log")?)
            .stderr(log_file(&dir, "apiserver.log")?)
            .spawn()?;

        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(&server, &ca_crt, &admin_crt, &admin_key),
        )?;
        let mut plane = ControlPlane {
            kubeconfig,
            server,
            dir,
            processes: vec![etcd, apiserver],
        };

        plane.wait_for("the API server's /readyz", Duration::from_secs(120), |p| {
            p.kubectl(&["get", "--raw", "/readyz"]).status.success()
        })?;
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

    fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !ready(self) {
            let exited = self
                .processes
                .iter_mut()
                .any(|p| matches!(p.try_wait(), Ok(Some(_))));
            if exited || Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(self.dir.join("apiserver.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                let why = if exited {
                    "a control-plane process exited".to_owned()
                } else {
                    format!("timed out after {timeout:?}")
                };
                anyhow::bail!(
                    "{why} while waiting for {what}; logs in {}; apiserver.log ends:\n{tail}",
                    self.dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
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
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("read the kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("a valid kubeconfig");
        kube::Client::try_from(config).expect("build a client")
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

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

fn log_file(dir: &Path, name: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
}
