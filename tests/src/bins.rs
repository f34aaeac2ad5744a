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
    cache_root().join("kbins").join(format!("v{K8S_VERSION}"))
}

/// The provision script's cache: `$PROXY_OPERATOR_CACHE`, else `$XDG_CACHE_HOME` or
/// `~/.cache`, then `proxy-operator`.
fn cache_root() -> PathBuf {
    std::env::var_os("PROXY_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                })
                .join("proxy-operator")
        })
}

/// helm version the provision script builds.
pub const HELM_VERSION: &str = "4.3.2";
/// Prometheus version whose promtool the provision script builds.
pub const PROMETHEUS_VERSION: &str = "3.16.0";

/// The cached `helm`: `$PROXY_OPERATOR_HELM`, else the provision script's cache.
pub fn helm() -> PathBuf {
    cached_tool(
        "PROXY_OPERATOR_HELM",
        &format!("helm/v{HELM_VERSION}/helm"),
        "helm",
    )
}

/// The cached `promtool`: `$PROXY_OPERATOR_PROMTOOL`, else the provision script's cache.
pub fn promtool() -> PathBuf {
    cached_tool(
        "PROXY_OPERATOR_PROMTOOL",
        &format!("promtool/v{PROMETHEUS_VERSION}/promtool"),
        "promtool",
    )
}

fn cached_tool(variable: &str, in_cache: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_root().join(in_cache));
    assert!(
        path.is_file(),
        "{} is missing: run `tests/bed/provision.sh` (it installs {name} into the cache), or use \
         the README's test command, which runs it first",
        path.display()
    );
    path
}

/// schemathesis version the provision script installs from PyPI.
pub const SCHEMATHESIS_VERSION: &str = "4.32.5";

/// The cached `schemathesis`: `$PROXY_OPERATOR_SCHEMATHESIS`, else the provision script's
/// cache (a virtualenv).
pub fn schemathesis() -> PathBuf {
    cached_tool(
        "PROXY_OPERATOR_SCHEMATHESIS",
        &format!("schemathesis/v{SCHEMATHESIS_VERSION}/bin/schemathesis"),
        "schemathesis",
    )
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
