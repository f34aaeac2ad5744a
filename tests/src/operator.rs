//! The operator as a real process: the `proxy-operator` binary, built once per test binary,
//! started against the test bed's API server.
//!
//! Starting the real binary is also what keeps the TLS trap of `docs/dependencies.md` (two
//! rustls crypto providers compiled in make `Client::try_default` panic) from coming back
//! unnoticed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use crate::bins::repo_root;
use crate::control_plane::ControlPlane;
use crate::run_dir::subdir;

/// The operator binary, built on first use (a no-op when it is current).
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "--package",
                "proxy-operator",
                "--bin",
                "proxy-operator",
            ])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p proxy-operator failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| repo_root().join("target"), PathBuf::from);
        target.join("debug").join("proxy-operator")
    })
}

/// A running operator; killed when dropped.
#[derive(Debug)]
pub struct Operator {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
}

impl Operator {
    /// Starts the operator for `namespace` with a providers config holding one kubernetes
    /// provider named `pods`, and short polls so tests move quickly.
    pub fn start(plane: &ControlPlane, namespace: &str) -> Self {
        let dir = subdir(&format!("operator-{namespace}"));
        let config = dir.join("providers.yaml");
        std::fs::write(
            &config,
            "providers:\n  - name: pods\n    type: kubernetes\n    kubernetes:\n      allowedSourceCIDRs: [\"127.0.0.0/8\"]\n",
        )
        .expect("write the providers config");
        let log = dir.join("operator.log");
        // Appended to, so a restarted operator's log follows the one it replaces.
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open the operator log");
        let child = Command::new(binary())
            .arg("run")
            .arg("--providers-config")
            .arg(&config)
            .args(["--namespace", namespace])
            .args([
                "--provisioning-poll-seconds",
                "0.3",
                "--deletion-poll-seconds",
                "0.3",
                "--drift-poll-seconds",
                "2",
            ])
            .env("KUBECONFIG", &plane.kubeconfig)
            .env("RUST_LOG", "info,proxy_operator=debug,kube=warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start proxy-operator");
        Self { child, log }
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

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}
