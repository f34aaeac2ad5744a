//! A real libvirt for the kvm provider's end-to-end test: `libvirtd` in session mode, run as
//! `nobody` (a session daemon run by root would be the system daemon), with its socket,
//! config and state in the run directory, and a directory storage pool holding the guest
//! image `tests/bed/guest-image.sh` builds. Its VMs are real qemu processes (TCG: this
//! machine's `/dev/kvm` offers no usable virtualisation), their disk paths inside the run
//! directory, so `tests/bed/reap.sh` ends them with the test process. The daemon knows the
//! user of the operator's image (65532), which the kvm image's test connects as.
//!
//! A missing libvirtd, qemu or guest image fails the test with the command that provides it,
//! never skips it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::run_dir::subdir;

/// The storage pool the harness defines.
pub const POOL: &str = "proxies";
/// The base image volume in [`POOL`].
pub const BASE_IMAGE: &str = "guest-base.qcow2";
/// The kernel command line of the guest (root is the whole first virtio disk).
pub const CMDLINE: &str = "root=/dev/vda console=ttyS0";

/// The shared session libvirtd and its pool.
#[derive(Debug)]
pub struct Libvirt {
    /// The URI the provider connects with.
    pub uri: String,
    /// The guest kernel, readable by the daemon.
    pub kernel: PathBuf,
    /// The guest initramfs, readable by the daemon.
    pub initrd: PathBuf,
    /// The pool's directory.
    pub pool_dir: PathBuf,
    _daemon: Child,
}

/// The guest image directory: `$PROXY_OPERATOR_GUEST`, else the one of the version
/// `tests/bed/guest-image.sh` builds.
pub fn guest_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PROXY_OPERATOR_GUEST") {
        return dir.into();
    }
    let script = crate::bins::repo_root().join("tests/bed/guest-image.sh");
    let output = Command::new(&script)
        .arg("--dir")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

fn require(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "{} ({what}) is missing: run `tests/bed/provision.sh` (it installs libvirt and qemu from \
         Debian's packages and builds the guest image), or the README's test command",
        path.display()
    );
}

impl Libvirt {
    /// The daemon of this test binary, started on first use.
    pub fn shared() -> &'static Libvirt {
        static LIBVIRT: OnceLock<Libvirt> = OnceLock::new();
        LIBVIRT.get_or_init(|| Self::start().unwrap_or_else(|e| panic!("libvirt: {e:#}")))
    }

    fn start() -> anyhow::Result<Self> {
        require(Path::new("/usr/sbin/libvirtd"), "libvirt-daemon");
        require(Path::new("/usr/bin/qemu-system-x86_64"), "qemu-system-x86");
        require(Path::new("/usr/bin/virsh"), "libvirt-clients");
        let guest = guest_dir();
        for file in ["rootfs.img", "vmlinuz", "initrd.img"] {
            require(&guest.join(file), "tests/bed/guest-image.sh");
        }
        // Short names: qemu's monitor socket goes under XDG_CONFIG_HOME, and a UNIX socket
        // path has at most 107 bytes.
        let dir = subdir("lv");
        let home = dir.join("h");
        let pool_dir = dir.join("pool");
        for d in [&home, &pool_dir, &dir.join("r")] {
            std::fs::create_dir_all(d)?;
        }
        // The daemon and its qemu run as nobody: everything they read or write is theirs.
        let kernel = dir.join("vmlinuz");
        let initrd = dir.join("initrd.img");
        std::fs::copy(guest.join("vmlinuz"), &kernel)?;
        std::fs::copy(guest.join("initrd.img"), &initrd)?;
        run(Command::new("cp")
            .args(["--sparse=always"])
            .arg(guest.join("rootfs.img"))
            .arg(pool_dir.join("guest-rootfs.img")))?;
        run(Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(pool_dir.join("guest-rootfs.img"))
            .arg(pool_dir.join(BASE_IMAGE)))?;
        run(Command::new("chown")
            .arg("-R")
            .arg("nobody:nogroup")
            .arg(&dir))?;
        run(Command::new("chmod").arg("0755").arg(&dir))?;
        // libvirtd names every client by its uid and gid (its identity, from the socket's
        // peer credentials) and refuses one it cannot name: "Failed to find user record for
        // uid '65532'". The operator's image runs as 65532 (the chart's Deployment), so this
        // host knows that user, as a real libvirt host reached through a hostPath socket must
        // (docs/kvm.md): in the daemon's own mount namespace, over copies of /etc/passwd and
        // /etc/group with the user added, so that the machine's files are left alone.
        let passwd = dir.join("passwd");
        let group = dir.join("group");
        std::fs::write(
            &passwd,
            std::fs::read_to_string("/etc/passwd")?
                + "proxy-operator:x:65532:65532::/nonexistent:/usr/sbin/nologin\n",
        )?;
        std::fs::write(
            &group,
            std::fs::read_to_string("/etc/group")? + "proxy-operator:x:65532:\n",
        )?;
        let config = dir.join("libvirtd.conf");
        std::fs::write(&config, "unix_sock_rw_perms = \"0777\"\n")?;
        let socket = dir.join("r/libvirt/libvirt-sock");
        let log = std::fs::File::create(dir.join("libvirtd.log"))?;
        let daemon = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(&passwd)
            .arg(&group)
            .args(["runuser", "-u", "nobody", "--", "env"])
            .arg(format!("HOME={}", home.display()))
            .arg(format!("XDG_RUNTIME_DIR={}", dir.join("r").display()))
            .arg(format!("XDG_CONFIG_HOME={}", dir.join("c").display()))
            .arg(format!("XDG_CACHE_HOME={}", dir.join("x").display()))
            .arg("/usr/sbin/libvirtd")
            .arg("--config")
            .arg(&config)
            .arg("--pid-file")
            .arg(dir.join("libvirtd.pid"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let uri = format!("qemu+unix:///session?socket={}", socket.display());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !virsh_ok(&uri, &["version"]) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "libvirtd did not answer on {} within 30 s: see {}",
                socket.display(),
                dir.join("libvirtd.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let target = pool_dir.display().to_string();
        virsh(&uri, &["pool-define-as", POOL, "dir", "--target", &target])?;
        virsh(&uri, &["pool-start", POOL])?;
        Ok(Self {
            uri,
            kernel,
            initrd,
            pool_dir,
            _daemon: daemon,
        })
    }

    /// `virsh` against this daemon; its standard output.
    pub fn virsh(&self, args: &[&str]) -> anyhow::Result<String> {
        virsh(&self.uri, args)
    }

    /// The volumes of [`POOL`], refreshed from its directory.
    pub fn volumes(&self) -> anyhow::Result<Vec<String>> {
        self.virsh(&["pool-refresh", POOL])?;
        Ok(self
            .virsh(&["vol-list", POOL, "--details"])?
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect())
    }

    /// The names of every domain, running or not.
    pub fn domains(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .virsh(&["list", "--all", "--name"])?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect())
    }
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command.status()?;
    anyhow::ensure!(status.success(), "{command:?}: {status}");
    Ok(())
}

fn virsh_ok(uri: &str, args: &[&str]) -> bool {
    virsh(uri, args).is_ok()
}

fn virsh(uri: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("virsh")
        .args(["-q", "-c", uri])
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "virsh {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
