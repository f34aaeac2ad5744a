//! The probes' metrics: each probe by proxy and result (`proxy_operator_probes_total`), and
//! the probe latency per namespace (`proxy_operator_probe_latency_seconds`). A proxy's
//! series go when the engine stops probing it, and when the Proxy goes ([`PerProxy`]).

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use proxy_core::ProxyKey;

use crate::locks::lock;
use crate::per_proxy::PerProxy;
use crate::runtime::metrics::Registry;

/// Labels of one proxy's probes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    /// The Proxy's namespace.
    namespace: String,
    /// The Proxy's name.
    proxy: String,
    /// `success` or `failure`.
    result: &'static str,
}

impl ProbeLabels {
    fn of(proxy: &ProxyKey, result: &'static str) -> Self {
        Self {
            namespace: proxy.namespace().to_owned(),
            proxy: proxy.name().to_owned(),
            result,
        }
    }
}

/// Labels of the probe latency histogram: a namespace, not a proxy. A histogram per proxy
/// was 15 series each, 150 000 series and a 17 MB scrape at 10 000 proxies; a proxy's own
/// latency is its status's `lastProbeLatencyMs` and the discovery API's `latencyMs`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    /// The Proxies' namespace.
    namespace: String,
}

impl NamespaceLabels {
    fn of(proxy: &ProxyKey) -> Self {
        Self {
            namespace: proxy.namespace().to_owned(),
        }
    }
}

fn latency_histogram() -> Histogram {
    // 5 ms to ~20 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

/// The families of the probes.
#[derive(Debug)]
pub struct ProbeMetrics {
    probes: Family<ProbeLabels, Counter>,
    latency: Family<NamespaceLabels, Histogram>,
    /// The proxies that have series, for `proxy_operator_tracked_proxies{store="metrics"}`.
    series: Mutex<HashSet<ProxyKey>>,
}

impl ProbeMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let families = registry.families();
        let probes = Family::<ProbeLabels, Counter>::default();
        families.register(
            "probes",
            "Health probes through each proxy, by result",
            probes.clone(),
        );
        let latency = Family::<NamespaceLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        families.register(
            "probe_latency_seconds",
            "Duration of each health probe through the proxies of a namespace, from connecting to the response status",
            latency.clone(),
        );
        Self {
            probes,
            latency,
            series: Mutex::default(),
        }
    }

    /// Records one probe of one proxy.
    pub fn probe(&self, proxy: &ProxyKey, ok: bool, seconds: f64) {
        let result = if ok { "success" } else { "failure" };
        self.probes
            .get_or_create(&ProbeLabels::of(proxy, result))
            .inc();
        self.latency
            .get_or_create(&NamespaceLabels::of(proxy))
            .observe(seconds);
        let mut series = lock(&self.series);
        if !series.contains(proxy) {
            series.insert(proxy.clone());
        }
    }
}

impl PerProxy for ProbeMetrics {
    /// Removes every series of a proxy that is no longer probed, and its namespace's latency
    /// histogram with the last of its proxies.
    fn forget(&self, proxy: &ProxyKey) {
        for result in ["success", "failure"] {
            self.probes.remove(&ProbeLabels::of(proxy, result));
        }
        let mut series = lock(&self.series);
        series.remove(proxy);
        if !series
            .iter()
            .any(|other| other.namespace() == proxy.namespace())
        {
            self.latency.remove(&NamespaceLabels::of(proxy));
        }
    }

    /// How many proxies have series.
    fn tracked(&self) -> usize {
        lock(&self.series).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxys_series_go_with_it_and_its_namespaces_with_the_last() {
        let mut registry = Registry::default();
        let metrics = ProbeMetrics::register(&mut registry);
        let (p1, p2) = (ProxyKey::new("crawl", "p1"), ProxyKey::new("crawl", "p2"));
        metrics.probe(&p1, true, 0.042);
        metrics.probe(&p2, false, 5.0);
        let text = registry.encode();
        for line in [
            r#"proxy_operator_probes_total{namespace="crawl",proxy="p1",result="success"} 1"#,
            r#"proxy_operator_probes_total{namespace="crawl",proxy="p2",result="failure"} 1"#,
            r#"proxy_operator_probe_latency_seconds_count{namespace="crawl"} 2"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        assert_eq!(metrics.tracked(), 2);
        metrics.forget(&p1);
        assert_eq!(metrics.tracked(), 1);
        let text = registry.encode();
        assert!(
            !text.contains(r#"proxy="p1""#),
            "p1's series survived:\n{text}"
        );
        assert!(text.contains(r#"proxy="p2""#));
        assert!(
            text.contains(r#"proxy_operator_probe_latency_seconds_count{namespace="crawl"} 2"#),
            "the namespace's latency stays while one of its proxies is probed:\n{text}"
        );
        metrics.forget(&p2);
        assert_eq!(metrics.tracked(), 0);
        assert!(
            !registry.encode().contains(r#"namespace="crawl""#),
            "the namespace's series went with its last proxy"
        );
    }
}
