//! One directory per test process for everything the bed writes (certificates, etcd data,
//! squid configs and logs), watched over by `tests/bed/reap.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The run directory of this test process, created (with its reaper) on first use.
pub fn run_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("proxy-operator-bed.{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the run directory");
        let reaper = crate::bins::repo_root().join("tests/bed/reap.sh");
        // `setsid --fork` returns at once and leaves the reaper in a session of its own, so
        // that it outlives this process and a Ctrl-C to the test's process group.
        let started = Command::new("setsid")
            .arg("--fork")
            .arg(reaper)
            .arg(std::process::id().to_string())
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("start tests/bed/reap.sh (needs setsid and pkill)");
        assert!(
            started.success(),
            "tests/bed/reap.sh did not start: {started}"
        );
        dir
    })
}

/// A fresh subdirectory of the run directory.
pub fn subdir(name: &str) -> PathBuf {
    let dir = run_dir().join(name);
    std::fs::create_dir_all(&dir).expect("create a run subdirectory");
    dir
}
