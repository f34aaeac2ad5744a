//! A lease book's fleet for the lease table tests: fixed times and `default/` proxies.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use jiff::Timestamp;
use proxy_core::ProxyKey;
use proxy_core::lease::ProxyView;
use proxy_core::testing::proxy_view;

/// `secs` seconds after a fixed start.
pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

/// The key of the proxy `default/{name}`.
pub fn key(name: &str) -> ProxyKey {
    ProxyKey::new("default", name)
}

/// A healthy, unlabelled proxy `default/{name}`.
pub fn proxy(name: &str, latency_ms: u32, max_leases: u32) -> ProxyView {
    ProxyView {
        latency_ms,
        max_leases,
        ..proxy_view(key(name))
    }
}
