//! Where the test bed's programs are. A missing one is a failure with the command that
//! installs it, never a skipped test.

use std::path::PathBuf;

/// Kubernetes version the bed is built for (see `tests/bed/provision.sh`).
pub const K8S_VERSION: &str = "1.36.3";

/// Directory holding the cached `kube-apiserver`, `etcd` and `kubectl`: `$PROXY_OPERATOR_KBINS`,
/// else the provision script's default cache.
pub fn kbins_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PROXY_OPERATOR_KBINS") {
        return dir.into();
    }
    let cache = std::env::var_os("PROXY_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                })
                .join("proxy-operator")
        });
    cache.join("kbins").join(format!("v{K8S_VERSION}"))
}

/// A control-plane program from the cache.
pub fn kbin(name: &str) -> PathBuf {
    let path = kbins_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `tests/bed/provision.sh` (it builds kube-apiserver, etcd and kubectl \
         into the cache), or use the README's test command, which runs it first",
        path.display()
    );
    path
}

/// The squid binary from Debian's package.
pub fn squid() -> PathBuf {
    for candidate in ["/usr/sbin/squid", "/usr/bin/squid"] {
        let path = PathBuf::from(candidate);
        if path.is_file() {
            return path;
        }
    }
    panic!("squid is missing: run `tests/bed/provision.sh` (it installs Debian's squid package)");
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}
