//! The gateway as a real process: `proxy-operator gateway` (the binary the operator tests
//! build), in front of a discovery API, with tenants written into a directory of its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::operator::DISCOVERY_TOKEN;
use crate::ports::Port;
use crate::run_dir::subdir;

/// The tenant the tests' clients use, and its token.
pub const TENANT: (&str, &str) = ("acme", "acme-token-0123456789");

/// A running gateway; killed when dropped.
#[derive(Debug)]
pub struct Gateway {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
    /// `127.0.0.1:PORT`, the proxy address clients use.
    pub addr: String,
    /// URL of its metrics.
    pub metrics: String,
    _ports: [Port; 2],
}

impl Gateway {
    /// Starts `binary`'s gateway for the discovery API at `discovery` (which takes
    /// [`DISCOVERY_TOKEN`]), with the tenant [`TENANT`] and `extra_args`, and waits until it
    /// accepts connections.
    pub fn start(binary: &Path, name: &str, discovery: &str, extra_args: &[&str]) -> Self {
        let dir = subdir(&format!("gateway-{name}"));
        let tenants = dir.join("tenants");
        std::fs::create_dir_all(&tenants).expect("the tenants directory");
        std::fs::write(tenants.join(TENANT.0), TENANT.1).expect("a tenant's token");
        let log = dir.join("gateway.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open the gateway log");
        let ports = [Port::reserve(), Port::reserve()];
        let addr = format!("127.0.0.1:{}", ports[0].number());
        let metrics = format!("127.0.0.1:{}", ports[1].number());
        let child = Command::new(binary)
            .arg("gateway")
            .args(["--listen", &addr, "--metrics-addr", &metrics])
            .args(["--discovery-url", discovery])
            .arg("--tenants-dir")
            .arg(&tenants)
            .args(extra_args)
            .env("DISCOVERY_TOKEN", DISCOVERY_TOKEN)
            .env("RUST_LOG", "info,proxy_operator=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start proxy-operator gateway");
        let mut gateway = Self {
            child,
            log,
            addr,
            metrics: format!("http://{metrics}/metrics"),
            _ports: ports,
        };
        gateway.wait_listening();
        gateway
    }

    /// Waits (10 s at most) until the gateway accepts connections.
    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("the gateway exited ({exit}):\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the gateway does not listen on {}:\n{}",
            self.addr,
            self.log()
        );
    }

    /// `http://<username>:<token>@127.0.0.1:PORT`, a client's proxy URL.
    pub fn proxy_url(&self, username: &str) -> String {
        format!("http://{username}:{}@{}", TENANT.1, self.addr)
    }

    /// What the gateway logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
