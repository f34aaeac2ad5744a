//! One real squid process on its own loopback address.
//!
//! Linux routes all of 127.0.0.0/8 to loopback, so each squid gets an address of its own and
//! the usual port, like a Pod with its own IP, and sends its traffic from that address
//! (`tcp_outgoing_address`), so a site (the probe origin) sees each proxy's own egress
//! address, as it would see each machine's. Facts and pitfalls: `../shared/docs/squid.md`.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::bins::squid;
use crate::run_dir::subdir;

/// A running squid.
#[derive(Debug)]
pub struct Squid {
    /// The loopback address it listens on.
    pub addr: Ipv4Addr,
    /// The port it listens on.
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

/// The directives of a squid config that belong to the machine it runs on, not to the
/// proxy's policy: [`Squid::start_with_config`] puts the bed's in their place.
pub const MACHINE_DIRECTIVES: &[&str] = &[
    "http_port",
    "pid_filename",
    "cache_log",
    "access_log",
    "cache_store_log",
    "coredump_dir",
    "hosts_file",
    "dns_nameservers",
    "tcp_outgoing_address",
];

/// The bed's own policy: loopback clients only, no cache, no revealing headers.
const BED_POLICY: &str = "cache deny all
cache_mem 0 MB
pinger_enable off
via off
forwarded_for delete
acl localsrc src 127.0.0.0/8
http_access allow localsrc
http_access deny all
shutdown_lifetime 0 seconds
";

/// A loopback address no other squid uses: the next one of this process's block,
/// `127.<block>.0.0/16` ([`block`]).
pub fn next_loopback_addr() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Ipv4Addr::new(127, block(), (n / 250) as u8, (n % 250 + 1) as u8)
}

/// The second octet of this process's squid addresses, one of 100 to 249, reserved for the
/// process's life ([`crate::reserved`]) so that test processes running side by side (the
/// suite runs groups of end-to-end tests at once) never share an address. The search starts
/// at one the process ID picks, so that a test process that starts right after another
/// does not take the block whose squids the reaper may still be stopping.
fn block() -> u8 {
    static BLOCK: OnceLock<(u8, File)> = OnceLock::new();
    let (block, _lock) = BLOCK.get_or_init(|| {
        let start = std::process::id() % 150;
        (0..150)
            .map(|i| 100 + ((start + i) % 150) as u8)
            .find_map(|block| {
                crate::reserved::try_reserve("loopback", &block.to_string())
                    .map(|lock| (block, lock))
            })
            .expect("every loopback block 127.100-249.0.0/16 is held by another test process")
    });
    *block
}

impl Squid {
    /// Starts squid on `addr:port`, resolving names through `hosts_file` only, and returns
    /// once it accepts connections. It serves loopback clients only.
    pub fn start(name: &str, addr: Ipv4Addr, port: u16, hosts_file: &Path) -> anyhow::Result<Self> {
        Self::start_with_config(name, addr, port, hosts_file, BED_POLICY)
    }

    /// A squid of a test's own, with the bed's policy, on the next loopback address and port
    /// 3128, resolving names by `hosts_file`: started off the async runtime's threads (it
    /// waits for squid to listen). For External proxies in front of it.
    pub async fn start_own(name: &'static str, hosts_file: &Path) -> anyhow::Result<Self> {
        let (addr, hosts) = (next_loopback_addr(), hosts_file.to_owned());
        tokio::task::spawn_blocking(move || Self::start(name, addr, 3128, &hosts)).await?
    }

    /// Starts squid on `addr:port` with the access rules and settings of `config`, a squid
    /// config written for a real machine (a VM's `/etc/squid/squid.conf`), and returns once
    /// it accepts connections.
    ///
    /// The directives that tie a config to its machine (where it listens, where it writes its
    /// pid file and logs, how it resolves names: [`MACHINE_DIRECTIVES`]) are replaced with the
    /// bed's: the address and port given here, a directory of the run dir, `hosts_file`. All
    /// the others (ACLs, `http_access`, headers, caching) are what squid enforces.
    pub fn start_with_config(
        name: &str,
        addr: Ipv4Addr,
        port: u16,
        hosts_file: &Path,
        config: &str,
    ) -> anyhow::Result<Self> {
        Self::start_with_files(name, addr, port, hosts_file, config, &[])
    }

    /// [`Squid::start_with_config`] on a machine that also has `files` (absolute path on the
    /// machine, content): each is written under this squid's directory, and the config's
    /// mentions of its path name that copy, as a container's mount or a VM's disk would
    /// make the config find it (a Pod's Secret volume, a cloud-config's `write_files`).
    pub fn start_with_files(
        name: &str,
        addr: Ipv4Addr,
        port: u16,
        hosts_file: &Path,
        config: &str,
        files: &[(String, Vec<u8>)],
    ) -> anyhow::Result<Self> {
        let dir = subdir(&format!("squid/{name}"));
        let mut config = config.to_owned();
        for (path, content) in files {
            let relative = path.trim_start_matches('/');
            anyhow::ensure!(
                !relative.split('/').any(|part| part == ".."),
                "file path {path:?} leaves the machine's root"
            );
            let local = dir.join("root").join(relative);
            if let Some(parent) = local.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&local, content)?;
            config = config.replace(path.as_str(), &local.display().to_string());
        }
        let mut config_file = format!(
            "http_port {addr}:{port}\n\
             tcp_outgoing_address {addr}\n\
             pid_filename {dir}/squid.pid\n\
             cache_log {dir}/cache.log\n\
             access_log stdio:{dir}/access.log\n\
             cache_store_log none\n\
             coredump_dir {dir}\n\
             hosts_file {hosts}\n\
             dns_nameservers 127.0.0.1\n",
            dir = dir.display(),
            hosts = hosts_file.display(),
        );
        for line in config.lines() {
            let directive = line.split_whitespace().next().unwrap_or_default();
            if !MACHINE_DIRECTIVES.contains(&directive) {
                config_file.push_str(line);
                config_file.push('\n');
            }
        }
        let conf = dir.join("squid.conf");
        std::fs::write(&conf, config_file)?;
        // squid drops root for user `proxy`, which must be able to write its logs.
        let chown = Command::new("chown")
            .args(["-R", "proxy:proxy"])
            .arg(&dir)
            .status()?;
        anyhow::ensure!(chown.success(), "chown proxy:proxy {}", dir.display());
        let child = spawn(addr, &dir)?;
        let mut squid = Squid {
            addr,
            port,
            dir,
            child,
        };
        squid.wait_listening(Duration::from_secs(20))?;
        Ok(squid)
    }

    /// Starts this squid again (after a [`kill`](Self::kill)): the same config, address
    /// and port, as a machine's init system restarts a crashed squid. Returns once it
    /// accepts connections.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.child = spawn(self.addr, &self.dir)?;
        self.wait_listening(Duration::from_secs(20))
    }

    fn wait_listening(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if std::net::TcpStream::connect((self.addr, self.port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(self.dir.join("squid.out")).unwrap_or_default();
                anyhow::bail!(
                    "squid on {}:{} exited with {status}: {log}",
                    self.addr,
                    self.port
                );
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "squid on {}:{} not listening after {timeout:?}",
                self.addr,
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The squid process's ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes squid (SIGSTOP): connections are still accepted by the kernel, nothing answers.
    pub fn hang(&self) {
        self.signal("STOP");
    }

    /// Lets a hung squid run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills squid at once (SIGKILL): connections are refused from then on.
    pub fn kill(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    /// Stops squid the normal way and waits for it (a second or two with
    /// `shutdown_lifetime 0 seconds`).
    pub fn stop(mut self) {
        self.signal("CONT");
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    /// The lines squid logged for each request it handled.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        // Signalling a squid that already exited is fine: say nothing about it.
        let _ = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs squid on the config `dir/squid.conf` wrote for `addr`, its output in `dir/squid.out`.
fn spawn(addr: Ipv4Addr, dir: &Path) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(dir.join("squid.out"))?;
    let child = Command::new(squid())
        // -n names the shared-memory segments: unique per instance, alphanumeric, at most
        // 32 characters. The address is unique, so it makes the name.
        .args([
            "-N",
            "-n",
            &format!("bed{}", addr.to_string().replace('.', "x")),
        ])
        .arg("-f")
        .arg(dir.join("squid.conf"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()?;
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another test process (or anyone else) cannot take this process's block while it runs.
    #[test]
    fn the_loopback_block_is_held_for_the_process() {
        let addr = next_loopback_addr();
        let [_, block, ..] = addr.octets();
        assert!((100..250).contains(&block), "{addr}");
        assert!(
            crate::reserved::try_reserve("loopback", &block.to_string()).is_none(),
            "block {block} is not held"
        );
        assert_eq!(
            next_loopback_addr().octets()[1],
            block,
            "one block per process"
        );
    }
}
