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

/// glider version `tests/bed/peer.sh` builds: bench-gateway's Go peer.
pub const GLIDER_VERSION: &str = "0.16.4";

/// The cached glider: `$PROXY_OPERATOR_GLIDER`, else `tests/bed/peer.sh`'s cache.
pub fn glider() -> PathBuf {
    let path = std::env::var_os("PROXY_OPERATOR_GLIDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_root().join(format!("glider/v{GLIDER_VERSION}/glider")));
    assert!(
        path.is_file(),
        "{} is missing: run `tests/bed/peer.sh` (it builds glider from the Go module proxy \
         into the cache), or `just bench-gateway`, which runs it first",
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

/// Scrapy version of the client shims' venv (`tests/bed/clients.sh`).
pub const SCRAPY_VERSION: &str = "2.19.0";
/// Crawlee version of the client shims' node modules (`tests/bed/clients.sh`).
pub const CRAWLEE_VERSION: &str = "3.18.1";
/// Playwright version of both (the Python package and the npm one).
pub const PLAYWRIGHT_VERSION: &str = "1.65.2";

/// The Python of the venv with Scrapy, Playwright and pytest: `$PROXY_OPERATOR_SCRAPY/bin/python`, else
/// the provision script's cache.
pub fn scrapy_python() -> PathBuf {
    let venv = std::env::var_os("PROXY_OPERATOR_SCRAPY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            cache_root().join(format!(
                "clients/scrapy-{SCRAPY_VERSION}-playwright-{PLAYWRIGHT_VERSION}"
            ))
        });
    clients_file(venv.join("bin/python"), "Scrapy")
}

/// The directory whose `node_modules` holds Crawlee and Playwright: `$PROXY_OPERATOR_CRAWLEE`, else the
/// provision script's cache.
pub fn crawlee_modules() -> PathBuf {
    let dir = std::env::var_os("PROXY_OPERATOR_CRAWLEE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            cache_root().join(format!(
                "clients/crawlee-{CRAWLEE_VERSION}-playwright-{PLAYWRIGHT_VERSION}"
            ))
        });
    clients_file(
        dir.join("node_modules/@crawlee/http/package.json"),
        "Crawlee",
    );
    dir
}

/// `node`, from the PATH (Node.js 20 or later).
pub fn node() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("node"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("node is missing: install Node.js 20 (the Crawlee shim's tests run it)")
        })
}

/// Debian's chromium, which Playwright drives (`tests/bed/provision.sh` installs it; no
/// browser download works here).
pub fn chromium() -> PathBuf {
    let path = PathBuf::from("/usr/bin/chromium");
    assert!(
        path.is_file(),
        "chromium is missing: run `tests/bed/provision.sh` (it installs Debian's chromium package)"
    );
    path
}

fn clients_file(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.is_file(),
        "{} is missing: run `tests/bed/provision.sh` (its tests/bed/clients.sh installs {what} \
         into the cache), or use the README's test command, which runs it first",
        path.display()
    );
    path
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
