//! Prometheus metrics, served on the admin port (`--metrics-addr`, `GET /metrics`, see
//! [`crate::admin`]).
//!
//! Names follow Prometheus conventions: the `proxy_operator_` prefix, units in the name,
//! `_total` on counters. What can be read when scraped is read then (proxies by phase,
//! active leases), so no gauge drifts from the truth and no series outlives its object.
//! Per-proxy series (probe results and latency) are removed when the health engine stops
//! probing the proxy, and when the Proxy goes.
//!
//! A leaf: it imports no other module of the operator. Subsystems count into it, name their
//! own label values (a panicked loop, a dropped write's kind), and hand it what it reads at
//! scrape time as [`Gauges`] of their own (the lease book's leases, the leadership claim's
//! age, the recorder's memory, the per-Proxy stores).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, Weak};

pub use prometheus_client::encoding::DescriptorEncoder;

use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use proxy_core::ProxyKey;
use proxy_crd::{Phase, Proxy, ProxyPool};

use crate::locks::lock;

/// Labels of provider requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// The provider's name in the providers config.
    pub provider: String,
    /// `create`, `get`, `delete` or `list`.
    pub op: &'static str,
    /// `ok`, or the error class: `transient`, `quota`, `permanent`.
    pub result: &'static str,
}

/// Labels of one proxy's probes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// The Proxy's namespace.
    pub namespace: String,
    /// The Proxy's name.
    pub proxy: String,
    /// `success` or `failure`.
    pub result: &'static str,
}

/// Labels of the probe latency histogram: a namespace, not a proxy. A histogram per proxy
/// was 15 series each, 150 000 series and a 17 MB scrape at 10 000 proxies; a proxy's own
/// latency is its status's `lastProbeLatencyMs` and the discovery API's `latencyMs`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    /// The Proxies' namespace.
    pub namespace: String,
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

impl NamespaceLabels {
    fn of(proxy: &ProxyKey) -> Self {
        Self {
            namespace: proxy.namespace().to_owned(),
        }
    }
}

/// Labels of one provider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderName {
    /// The provider's name in the providers config.
    pub provider: String,
}

/// Labels of one quota scope of one provider (its pacing, `providers/pace.rs`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    /// The provider's name in the providers config.
    pub provider: String,
    /// `read` or `write`.
    pub scope: &'static str,
}

/// Labels of what GC kept, by provider and reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeptLabels {
    /// The provider's name in the providers config.
    pub provider: String,
    /// The core's `KeepReason`, snake_case.
    pub reason: &'static str,
}

/// Labels of reconcile errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `kube_api`, or the provider error class: `transient`, `quota`, `permanent`.
    pub class: &'static str,
}

/// Labels of caught panics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PanicLabels {
    /// What panicked: `reconcile`, `pool`, `health`, `gc`, `discovery_sync`, `leadership`,
    /// `provider_health` or `lease_book` (`supervise::Loop::label`).
    pub r#loop: &'static str,
}

/// Labels of writes the leader gate refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `metadata`, `provider_call`, `status`, `event`, `gc_delete`, `provider_health` or
    /// `pool` (`gate::Write::label`).
    pub kind: &'static str,
}

/// Labels of the lease book's saves.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SaveLabels {
    /// `saved`, `conflict` (another replica wrote first: its book was merged) or `failed`.
    pub result: &'static str,
}

/// Every metric of one operator process.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    provider_requests: Family<ProviderLabels, Counter>,
    probes: Family<ProbeLabels, Counter>,
    probe_latency: Family<NamespaceLabels, Histogram>,
    reconcile_duration: Histogram,
    reconcile_errors: Family<ErrorLabels, Counter>,
    panics: Family<PanicLabels, Counter>,
    provider_in_flight: Family<ProviderName, Gauge>,
    provider_in_flight_max: Family<ProviderName, Gauge>,
    provider_up: Family<ProviderName, Gauge>,
    provider_rate_limits: Family<ScopeLabels, Counter>,
    provider_calls_paced: Family<ScopeLabels, Counter>,
    provider_pause: Family<ScopeLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    gc_held_back: Family<ProviderName, Counter>,
    gc_kept: Family<KeptLabels, Gauge>,
    writes_dropped: Family<WriteLabels, Counter>,
    lease_book_saves: Family<SaveLabels, Counter>,
    leadership_renew_interval: Histogram,
    // The proxies that have series, for `proxy_operator_tracked_proxies{store="metrics"}`.
    proxy_series: Mutex<HashSet<ProxyKey>>,
    sources: Arc<Sources>,
}

/// What the scrape-time collector reads.
#[derive(Debug, Default)]
struct Sources {
    proxies: OnceLock<Store<Proxy>>,
    pools: OnceLock<Store<ProxyPool>>,
    // Weak: what a subsystem reads out often holds these metrics itself.
    gauges: Mutex<Vec<Weak<dyn Gauges>>>,
}

/// A subsystem's gauges, read when scraped: it encodes its own families
/// ([`gauge`] writes a single value).
pub trait Gauges: Send + Sync + std::fmt::Debug {
    /// Encodes this subsystem's gauges now.
    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error>;
}

/// Encodes one gauge without labels, `proxy_operator_<name>`: a count, or seconds.
pub fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl Into<GaugeValue>,
) -> Result<(), std::fmt::Error> {
    match value.into() {
        GaugeValue::Count(count) => {
            let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        }
        GaugeValue::Seconds(seconds) => {
            let gauge = ConstGauge::new(seconds);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        }
    }
}

/// Encodes one family of counts, `proxy_operator_<name>`, a series per label set.
pub fn gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, usize)>,
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstGauge::new(0i64).metric_type())?;
    for (labels, count) in series {
        let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
        gauge.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// What [`gauge`] encodes.
#[derive(Clone, Copy, Debug)]
pub enum GaugeValue {
    /// A count of things.
    Count(usize),
    /// A duration, in seconds.
    Seconds(f64),
}

impl From<usize> for GaugeValue {
    fn from(count: usize) -> Self {
        Self::Count(count)
    }
}

impl From<std::time::Duration> for GaugeValue {
    fn from(duration: std::time::Duration) -> Self {
        Self::Seconds(duration.as_secs_f64())
    }
}

fn latency_histogram() -> Histogram {
    // 5 ms to ~20 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("proxy_operator");
        let provider_requests = Family::<ProviderLabels, Counter>::default();
        registry.register(
            "provider_requests",
            "Provider calls by provider, operation and result (ok or the error class)",
            provider_requests.clone(),
        );
        let probes = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "probes",
            "Health probes through each proxy, by result",
            probes.clone(),
        );
        let probe_latency = Family::<NamespaceLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "probe_latency_seconds",
            "Duration of each health probe through the proxies of a namespace, from connecting to the response status",
            probe_latency.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile of one Proxy",
            reconcile_duration.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed or met a provider error, by class",
            reconcile_errors.clone(),
        );
        let panics = Family::<PanicLabels, Counter>::default();
        registry.register(
            "panics",
            "Panics caught at the panic boundary, by what panicked (a reconcile, or a loop that was restarted)",
            panics.clone(),
        );
        let provider_in_flight = Family::<ProviderName, Gauge>::default();
        registry.register(
            "provider_calls_in_flight",
            "Provider calls running now, by provider",
            provider_in_flight.clone(),
        );
        let provider_in_flight_max = Family::<ProviderName, Gauge>::default();
        registry.register(
            "provider_calls_in_flight_max",
            "The most provider calls that ran at once since the start, by provider (bounded by --max-concurrent-provider-calls, plus one each for GC and the provider check)",
            provider_in_flight_max.clone(),
        );
        let provider_up = Family::<ProviderName, Gauge>::default();
        registry.register(
            "provider_up",
            "1 when the provider passed its last health check, 0 when it failed, timed out or could not be started; absent for a provider without a check",
            provider_up.clone(),
        );
        let provider_rate_limits = Family::<ScopeLabels, Counter>::default();
        registry.register(
            "provider_rate_limits",
            "Provider calls answered with a rate limit, by provider and quota scope (read, write): each closes the scope for every caller",
            provider_rate_limits.clone(),
        );
        let provider_calls_paced = Family::<ScopeLabels, Counter>::default();
        registry.register(
            "provider_calls_paced",
            "Provider calls not sent because the provider's pacing held them back (a rate limit's pause, or the scope's budget per minute), by provider and quota scope",
            provider_calls_paced.clone(),
        );
        let provider_pause =
            Family::<ScopeLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "provider_pause_seconds",
            "The pause the provider's pacing set after the last call of a quota scope ended: 0 once a call passed, else the wait after the rate limits in a row",
            provider_pause.clone(),
        );
        let gc_held_back = Family::<ProviderName, Counter>::default();
        registry.register(
            "gc_held_back",
            "Orphans GC's brake did not delete in a sweep (--gc-max-delete-fraction), summed over sweeps",
            gc_held_back.clone(),
        );
        let gc_kept = Family::<KeptLabels, Gauge>::default();
        registry.register(
            "gc_kept",
            "Instances the last GC sweep kept, by provider and reason",
            gc_kept.clone(),
        );
        let writes_dropped = Family::<WriteLabels, Counter>::default();
        registry.register(
            "writes_dropped",
            "Writes of a reconcile refused because this replica's leadership claim had run out, by kind",
            writes_dropped.clone(),
        );
        let lease_book_saves = Family::<SaveLabels, Counter>::default();
        registry.register(
            "lease_book_saves",
            "Saves of the lease book to its ConfigMap by the replica that owns it, by result (saved, conflict, failed)",
            lease_book_saves.clone(),
        );
        for result in ["saved", "conflict", "failed"] {
            drop(lease_book_saves.get_or_create(&SaveLabels { result }));
        }
        // 0.25 s to 64 s: a healthy leader renews every retry period (2 s by default), and
        // its claim runs out at the duration (15 s).
        let leadership_renew_interval = Histogram::new(exponential_buckets(0.25, 2.0, 9));
        registry.register(
            "leadership_renew_interval_seconds",
            "Time between two successive successful writes of this replica's leadership claim (their renew times)",
            leadership_renew_interval.clone(),
        );
        let sources = Arc::new(Sources::default());
        registry.register_collector(Box::new(ScrapeTime(sources.clone())));
        Self {
            registry: root,
            provider_requests,
            probes,
            probe_latency,
            reconcile_duration,
            reconcile_errors,
            panics,
            provider_in_flight,
            provider_in_flight_max,
            provider_up,
            provider_rate_limits,
            provider_calls_paced,
            provider_pause,
            gc_held_back,
            gc_kept,
            writes_dropped,
            lease_book_saves,
            leadership_renew_interval,
            proxy_series: Mutex::default(),
            sources,
        }
    }
}

impl Metrics {
    /// Proxies by phase are read from this cache at scrape time.
    pub fn watch_proxies(&self, store: Store<Proxy>) {
        let _ = self.sources.proxies.set(store);
    }

    /// Each ProxyPool's sizes and autoscale figures are read from this cache at scrape time.
    pub fn watch_pools(&self, store: Store<ProxyPool>) {
        let _ = self.sources.pools.set(store);
    }

    /// `gauges` are encoded at every scrape, for as long as something else holds them.
    pub fn read_at_scrape<G: Gauges + 'static>(&self, gauges: &Arc<G>) {
        let weak: Weak<G> = Arc::downgrade(gauges);
        lock(&self.sources.gauges).push(weak);
    }

    /// Every `loop` of `proxy_operator_panics_total` has a series from the start, at 0, so
    /// that an alert on an increase sees the first panic.
    pub fn count_panics_from_zero(&self, loops: impl IntoIterator<Item = &'static str>) {
        for r#loop in loops {
            drop(self.panics.get_or_create(&PanicLabels { r#loop }));
        }
    }

    /// Every `kind` of `proxy_operator_writes_dropped_total` has a series from the start, at 0.
    pub fn count_dropped_writes_from_zero(&self, kinds: impl IntoIterator<Item = &'static str>) {
        for kind in kinds {
            drop(self.writes_dropped.get_or_create(&WriteLabels { kind }));
        }
    }

    /// Counts one provider call.
    pub fn provider_request(&self, provider: &str, op: &'static str, result: &'static str) {
        self.provider_requests
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
                op,
                result,
            })
            .inc();
    }

    /// Records one probe of one proxy.
    pub fn probe(&self, proxy: &ProxyKey, ok: bool, seconds: f64) {
        let result = if ok { "success" } else { "failure" };
        self.probes
            .get_or_create(&ProbeLabels::of(proxy, result))
            .inc();
        self.probe_latency
            .get_or_create(&NamespaceLabels::of(proxy))
            .observe(seconds);
        let mut series = lock(&self.proxy_series);
        if !series.contains(proxy) {
            series.insert(proxy.clone());
        }
    }

    /// Removes every series of a proxy that is no longer probed, and its namespace's latency
    /// histogram with the last of its proxies.
    pub fn forget_proxy(&self, proxy: &ProxyKey) {
        for result in ["success", "failure"] {
            self.probes.remove(&ProbeLabels::of(proxy, result));
        }
        let mut series = lock(&self.proxy_series);
        series.remove(proxy);
        if !series
            .iter()
            .any(|other| other.namespace() == proxy.namespace())
        {
            self.probe_latency.remove(&NamespaceLabels::of(proxy));
        }
    }

    /// Records one reconcile's duration.
    pub fn reconcile(&self, seconds: f64) {
        self.reconcile_duration.observe(seconds);
    }

    /// Counts a reconcile error of this class.
    pub fn reconcile_error(&self, class: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { class })
            .inc();
    }

    /// Counts a write of `kind` the leader gate refused.
    pub fn write_dropped(&self, kind: &'static str) {
        self.writes_dropped
            .get_or_create(&WriteLabels { kind })
            .inc();
    }

    /// This replica renewed its leadership claim `interval` after its previous renew.
    pub fn leadership_renewed(&self, interval: std::time::Duration) {
        self.leadership_renew_interval
            .observe(interval.as_secs_f64());
    }

    /// Counts a save of the lease book: `saved`, `conflict` or `failed`.
    pub fn lease_book_save(&self, result: &'static str) {
        self.lease_book_saves
            .get_or_create(&SaveLabels { result })
            .inc();
    }

    /// Counts a panic caught in the loop labelled `task`.
    pub fn panic(&self, task: &'static str) {
        self.panics
            .get_or_create(&PanicLabels { r#loop: task })
            .inc();
    }

    /// A provider call starts: counts it in flight, and raises the high-water mark.
    pub fn provider_call_started(&self, provider: &str) {
        let labels = ProviderName {
            provider: provider.to_owned(),
        };
        let now = self.provider_in_flight.get_or_create(&labels).inc() + 1;
        self.provider_in_flight_max
            .get_or_create(&labels)
            .inner()
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// The verdict of `provider`'s last health check: `None` removes the series (a provider
    /// without a check).
    pub fn provider_up(&self, provider: &str, up: Option<bool>) {
        let labels = ProviderName {
            provider: provider.to_owned(),
        };
        match up {
            Some(up) => {
                self.provider_up.get_or_create(&labels).set(i64::from(up));
            }
            None => {
                self.provider_up.remove(&labels);
            }
        }
    }

    /// Every scope of a paced `provider` has its series from the start, at 0, so that an
    /// alert on an increase sees the first rate limit.
    pub fn pace_from_zero(&self, provider: &str, scopes: impl IntoIterator<Item = &'static str>) {
        for scope in scopes {
            let labels = ScopeLabels {
                provider: provider.to_owned(),
                scope,
            };
            drop(self.provider_rate_limits.get_or_create(&labels));
            drop(self.provider_calls_paced.get_or_create(&labels));
            drop(self.provider_pause.get_or_create(&labels));
        }
    }

    /// A call of `provider`'s `scope` met a rate limit.
    pub fn provider_rate_limited(&self, provider: &str, scope: &'static str) {
        self.provider_rate_limits
            .get_or_create(&ScopeLabels {
                provider: provider.to_owned(),
                scope,
            })
            .inc();
    }

    /// A call of `provider`'s `scope` was held back by its pacing, not sent.
    pub fn provider_call_paced(&self, provider: &str, scope: &'static str) {
        self.provider_calls_paced
            .get_or_create(&ScopeLabels {
                provider: provider.to_owned(),
                scope,
            })
            .inc();
    }

    /// The pause `provider`'s `scope` is in after its last call ended.
    pub fn provider_pause(&self, provider: &str, scope: &'static str, pause: std::time::Duration) {
        self.provider_pause
            .get_or_create(&ScopeLabels {
                provider: provider.to_owned(),
                scope,
            })
            .set(pause.as_secs_f64());
    }

    /// A provider call ended (returned, failed or was cancelled).
    pub fn provider_call_finished(&self, provider: &str) {
        self.provider_in_flight
            .get_or_create(&ProviderName {
                provider: provider.to_owned(),
            })
            .dec();
    }

    /// One GC sweep of `provider`: `held_back` orphans the brake kept, and how many
    /// instances it kept for each reason (every reason, so that no series goes stale).
    pub fn gc_sweep(
        &self,
        provider: &str,
        held_back: usize,
        kept: impl IntoIterator<Item = (&'static str, usize)>,
    ) {
        self.gc_held_back
            .get_or_create(&ProviderName {
                provider: provider.to_owned(),
            })
            .inc_by(u64::try_from(held_back).unwrap_or(u64::MAX));
        for (reason, count) in kept {
            self.gc_kept
                .get_or_create(&KeptLabels {
                    provider: provider.to_owned(),
                    reason,
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encoding to a String cannot fail");
        text
    }
}

/// The gauges read at scrape time.
#[derive(Debug)]
struct ScrapeTime(Arc<Sources>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(store) = self.0.proxies.get() {
            let phases = [
                (Some(Phase::Pending), "Pending"),
                (Some(Phase::Provisioning), "Provisioning"),
                (Some(Phase::Ready), "Ready"),
                (Some(Phase::Unhealthy), "Unhealthy"),
                (Some(Phase::Failed), "Failed"),
                (Some(Phase::Deleting), "Deleting"),
                (None, "Unknown"),
            ];
            let proxies = store.state();
            let gauge = ConstGauge::new(0i64);
            let mut family = encoder.encode_descriptor(
                "proxies",
                "Proxy objects by phase",
                None,
                gauge.metric_type(),
            )?;
            for (phase, name) in phases {
                let count = proxies
                    .iter()
                    .filter(|p| p.status.as_ref().and_then(|s| s.phase) == phase)
                    .count();
                let gauge = ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX));
                gauge.encode(family.encode_family(&PhaseLabels { phase: name })?)?;
            }
        }
        if let Some(store) = self.0.pools.get() {
            encode_pools(&store.state(), &mut encoder)?;
        }
        let gauges: Vec<_> = lock(&self.0.gauges)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for gauges in gauges {
            gauges.encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// Labels of one pool figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    namespace: String,
    pool: String,
}

/// Labels of one pool size.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolSizeLabels {
    namespace: String,
    pool: String,
    /// `desired`, `current`, `ready`, `available` or `updated`.
    kind: &'static str,
}

/// The labels of `pool`'s figures.
fn pool_labels(pool: &ProxyPool) -> PoolLabels {
    PoolLabels {
        namespace: pool.metadata.namespace.clone().unwrap_or_default(),
        pool: pool.metadata.name.clone().unwrap_or_default(),
    }
}

/// Each pool's sizes, and what its autoscale saw and wants (its inputs and decisions), as
/// its last status says.
fn encode_pools(
    pools: &[Arc<ProxyPool>],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    encode_pool_sizes(pools, encoder)?;
    let autoscaled: Vec<_> = pools
        .iter()
        .filter_map(|p| Some((pool_labels(p), p.status.as_ref()?.autoscale.as_ref()?)))
        .collect();
    for (name, help, value) in [
        (
            "pool_autoscale_utilization_percent",
            "Active leases over the lease capacity of each autoscaled ProxyPool, in percent, at its last decision",
            (|a: &proxy_crd::AutoscaleStatus| a.utilization_percent) as fn(&_) -> i32,
        ),
        (
            "pool_autoscale_recommended_replicas",
            "The size the last observation of each autoscaled ProxyPool asked for, before stabilisation",
            |a| a.recommended_replicas,
        ),
    ] {
        let gauge = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
        for (labels, autoscale) in &autoscaled {
            ConstGauge::new(i64::from(value(autoscale))).encode(family.encode_family(labels)?)?;
        }
    }
    Ok(())
}

/// `proxy_operator_pool_replicas`: each pool's sizes by kind.
fn encode_pool_sizes(
    pools: &[Arc<ProxyPool>],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "pool_replicas",
        "Proxies of each ProxyPool, by kind: desired, current, ready, available, updated",
        None,
        ConstGauge::new(0i64).metric_type(),
    )?;
    for pool in pools {
        let Some(status) = &pool.status else { continue };
        let PoolLabels { namespace, pool } = pool_labels(pool);
        for (kind, count) in [
            ("desired", status.desired_replicas),
            ("current", status.replicas),
            ("ready", status.ready_replicas),
            ("available", status.available_replicas),
            ("updated", status.updated_replicas),
        ] {
            let labels = PoolSizeLabels {
                namespace: namespace.clone(),
                pool: pool.clone(),
                kind,
            };
            ConstGauge::new(i64::from(count)).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl crate::per_proxy::PerProxy for Metrics {
    fn forget(&self, proxy: &ProxyKey) {
        self.forget_proxy(proxy);
    }

    /// How many proxies have series.
    fn tracked(&self) -> usize {
        lock(&self.proxy_series).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::per_proxy::PerProxy;

    #[test]
    fn names_follow_prometheus_conventions_and_proxy_series_are_removed() {
        let metrics = Metrics::default();
        metrics.provider_request("pods", "create", "ok");
        let (p1, p2) = (ProxyKey::new("crawl", "p1"), ProxyKey::new("crawl", "p2"));
        metrics.probe(&p1, true, 0.042);
        metrics.probe(&p2, false, 5.0);
        metrics.reconcile(0.01);
        metrics.reconcile_error("transient");
        metrics.count_panics_from_zero(["gc", "reconcile"]);
        metrics.panic("gc");
        metrics.provider_call_started("pods");
        metrics.provider_call_started("pods");
        metrics.provider_call_finished("pods");
        metrics.gc_sweep("pods", 2, [("live", 3), ("too_young", 0)]);
        let text = metrics.encode();
        for line in [
            r#"proxy_operator_provider_requests_total{provider="pods",op="create",result="ok"} 1"#,
            r#"proxy_operator_probes_total{namespace="crawl",proxy="p1",result="success"} 1"#,
            r#"proxy_operator_probes_total{namespace="crawl",proxy="p2",result="failure"} 1"#,
            r#"proxy_operator_probe_latency_seconds_count{namespace="crawl"} 2"#,
            "proxy_operator_reconcile_duration_seconds_count 1",
            r#"proxy_operator_reconcile_errors_total{class="transient"} 1"#,
            r#"proxy_operator_panics_total{loop="gc"} 1"#,
            r#"proxy_operator_panics_total{loop="reconcile"} 0"#,
            r#"proxy_operator_provider_calls_in_flight{provider="pods"} 1"#,
            r#"proxy_operator_provider_calls_in_flight_max{provider="pods"} 2"#,
            r#"proxy_operator_gc_held_back_total{provider="pods"} 2"#,
            r#"proxy_operator_gc_kept{provider="pods",reason="live"} 3"#,
            r#"proxy_operator_gc_kept{provider="pods",reason="too_young"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        assert_eq!(metrics.tracked(), 2);
        metrics.forget_proxy(&p1);
        assert_eq!(metrics.tracked(), 1);
        let text = metrics.encode();
        assert!(
            !text.contains(r#"proxy="p1""#),
            "p1's series survived:\n{text}"
        );
        assert!(text.contains(r#"proxy="p2""#));
        assert!(
            text.contains(r#"proxy_operator_probe_latency_seconds_count{namespace="crawl"} 2"#),
            "the namespace's latency stays while one of its proxies is probed:\n{text}"
        );
        metrics.forget_proxy(&p2);
        assert_eq!(metrics.tracked(), 0);
        let text = metrics.encode();
        assert!(
            !text.contains(r#"namespace="crawl""#),
            "the namespace's series went with its last proxy:\n{text}"
        );
    }
}
