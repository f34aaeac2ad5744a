//! The gateway's metrics, on its admin port (`--metrics-addr`, `GET /metrics`): the gateway
//! program's whole registry ([`Registry`]), since a gateway replica runs no controller,
//! prober or lease book. Names carry
//! `proxy_operator_gateway_`, except the panics, which share the operator's
//! `proxy_operator_panics_total{loop}` so that one alert covers both.
//!
//! Hot-path counters are plain atomics behind prometheus-client's `Counter` (one
//! `fetch_add` each); label sets are fixed and created up front, never per request. The
//! counters a request touches (connections, requests, bytes) are kept as fields, one per
//! [`Kind`] or [`Direction`], so a request adds to them without a family's lock and label
//! hash (`Family::get_or_create` takes a read lock and hashes the labels on every call).

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use proxy_core::gateway::release::Released;
use proxy_core::gateway::{Outcome, Refusal};

use crate::runtime::admin::Scrape;
use crate::runtime::metrics::Registry;
use crate::runtime::supervise::Panics;

/// What kind of client request got an upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A CONNECT tunnel.
    Connect,
    /// A plain-HTTP request forwarded.
    Http,
}

/// Which way bytes went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the upstream proxy.
    Upstream,
    /// From the upstream proxy back to the client.
    Downstream,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

/// How a session's lease request was answered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrantLabels {
    /// `new`, `resumed` or `moved`.
    pub grant: &'static str,
}

/// The class of a refusal: its `X-Proxy-Error` code.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// [`Refusal::code`].
    pub class: &'static str,
}

/// A report sent to the lease book, or how a release ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `rate_limited`, `blocked` or `error`; `released`, `refused` or `expired`.
    pub result: &'static str,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Every metric of one gateway process.
#[derive(Debug)]
pub struct GatewayMetrics {
    registry: Registry,
    connections: ByKind,
    accepted: Counter,
    open: Gauge,
    requests: ByKind,
    upstream_bytes: Counter<u64, AtomicU64>,
    downstream_bytes: Counter<u64, AtomicU64>,
    sessions: Family<GrantLabels, Counter>,
    errors: Family<ClassLabels, Counter>,
    retries: Counter,
    reports: Family<ResultLabels, Counter>,
    outcomes: Family<OutcomeLabels, Counter>,
    releases: Family<ResultLabels, Counter>,
    release_retries: Counter,
    lease_seconds: Histogram,
    panics: Panics,
}

/// A family's two series, one per [`Kind`], taken from it once: the same atomics the
/// registry encodes.
#[derive(Debug)]
struct ByKind {
    connect: Counter,
    http: Counter,
}

impl ByKind {
    fn of(family: &Family<KindLabels, Counter>) -> Self {
        let get = |kind| family.get_or_create(&KindLabels { kind }).clone();
        Self {
            connect: get("connect"),
            http: get("http"),
        }
    }

    fn of_kind(&self, kind: Kind) -> &Counter {
        match kind {
            Kind::Connect => &self.connect,
            Kind::Http => &self.http,
        }
    }
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        let mut root = Registry::default();
        let panics = Panics::register(&mut root, ["gateway"]);
        let registry = root.families();
        let connections = Family::<KindLabels, Counter>::default();
        registry.register(
            "gateway_connections",
            "Client requests that opened an upstream: CONNECT tunnels, and plain-HTTP connections",
            connections.clone(),
        );
        let accepted = Counter::default();
        registry.register(
            "gateway_accepted_connections",
            "Client connections accepted",
            accepted.clone(),
        );
        let open = Gauge::default();
        registry.register(
            "gateway_open_connections",
            "Client connections open now (tunnels included)",
            open.clone(),
        );
        let requests = Family::<KindLabels, Counter>::default();
        registry.register(
            "gateway_requests",
            "Requests answered by an upstream: tunnels established, plain-HTTP requests forwarded",
            requests.clone(),
        );
        let bytes = Family::<DirectionLabels, Counter<u64, AtomicU64>>::default();
        registry.register(
            "gateway_bytes",
            "Bytes carried between clients and upstream proxies, by direction",
            bytes.clone(),
        );
        let sessions = Family::<GrantLabels, Counter>::default();
        registry.register(
            "gateway_sessions",
            "Lease requests of sessions, by how the book answered: new, resumed (the same upstream), moved (a ban, a failed upstream, a proxy gone)",
            sessions.clone(),
        );
        let errors = Family::<ClassLabels, Counter>::default();
        registry.register(
            "gateway_errors",
            "Answers the gateway gave itself, by class (their X-Proxy-Error code)",
            errors.clone(),
        );
        let retries = Counter::default();
        registry.register(
            "gateway_upstream_retries",
            "Requests retried on another upstream after the first failed before any byte reached the client",
            retries.clone(),
        );
        let reports = Family::<ResultLabels, Counter>::default();
        registry.register(
            "gateway_reports",
            "Plain-HTTP answers reported to the lease book, by result",
            reports.clone(),
        );
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "gateway_outcomes",
            "Exchanges (a request on one upstream, or refused before one) by how they ended: ok, client_gone, client_malformed, client_unauthorized, no_proxy, book_unavailable, upstream_unreachable, upstream_refused, destination_failed, timeout, interrupted (docs/gateway.md)",
            outcomes.clone(),
        );
        let releases = Family::<ResultLabels, Counter>::default();
        registry.register(
            "gateway_lease_releases",
            "Lease releases, by how they ended: released (the book answered), refused (a 4xx), expired (no answer within the lease's TTL)",
            releases.clone(),
        );
        let release_retries = Counter::default();
        registry.register(
            "gateway_lease_release_retries",
            "Releases sent again because the book did not answer (no connection, a 5xx during a failover)",
            release_retries.clone(),
        );
        let lease_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "gateway_lease_seconds",
            "Time to get a lease from the lease book (the discovery API), per client connection",
            lease_seconds.clone(),
        );
        for grant in ["new", "resumed", "moved"] {
            drop(sessions.get_or_create(&GrantLabels { grant }));
        }
        for class in Refusal::CODES {
            drop(errors.get_or_create(&ClassLabels { class }));
        }
        for result in ["ok", "rate_limited", "blocked", "error", "unreachable"] {
            drop(reports.get_or_create(&ResultLabels { result }));
        }
        for outcome in Outcome::ALL {
            drop(outcomes.get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            }));
        }
        for result in Released::ALL {
            drop(releases.get_or_create(&ResultLabels {
                result: result.as_str(),
            }));
        }
        let direction = |direction| bytes.get_or_create(&DirectionLabels { direction }).clone();
        Self {
            registry: root,
            connections: ByKind::of(&connections),
            accepted,
            open,
            requests: ByKind::of(&requests),
            upstream_bytes: direction("upstream"),
            downstream_bytes: direction("downstream"),
            sessions,
            errors,
            retries,
            reports,
            outcomes,
            releases,
            release_retries,
            lease_seconds,
            panics,
        }
    }
}

impl GatewayMetrics {
    /// A request of `kind` got an upstream.
    pub fn connection(&self, kind: Kind) {
        self.connections.of_kind(kind).inc();
    }

    /// A request of `kind` was answered by an upstream.
    pub fn request(&self, kind: Kind) {
        self.requests.of_kind(kind).inc();
    }

    /// A client connection was accepted: open until the returned guard drops.
    pub fn accepted(&self) -> Open {
        self.accepted.inc();
        self.opened()
    }

    /// A client connection (or a tunnel) opened: closed when the returned guard drops.
    pub fn opened(&self) -> Open {
        self.open.inc();
        Open(self.open.clone())
    }

    /// The counter of bytes going `direction`, to add to.
    pub fn bytes(&self, direction: Direction) -> Counter<u64, AtomicU64> {
        match direction {
            Direction::Upstream => self.upstream_bytes.clone(),
            Direction::Downstream => self.downstream_bytes.clone(),
        }
    }

    /// A session's lease request was answered with `grant`.
    pub fn session(&self, grant: &'static str) {
        self.sessions.get_or_create(&GrantLabels { grant }).inc();
    }

    /// The gateway answered `refusal` itself.
    pub fn refused(&self, refusal: &Refusal) {
        self.errors
            .get_or_create(&ClassLabels {
                class: refusal.code(),
            })
            .inc();
    }

    /// A request was retried on another upstream.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// An answer was reported as `result`.
    pub fn reported(&self, result: &'static str) {
        self.reports.get_or_create(&ResultLabels { result }).inc();
    }

    /// An exchange ended with `outcome`.
    pub fn ended(&self, outcome: Outcome) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// A lease's release ended as `released`.
    pub fn released(&self, released: Released) {
        self.releases
            .get_or_create(&ResultLabels {
                result: released.as_str(),
            })
            .inc();
    }

    /// A release was sent again.
    pub fn release_retried(&self) {
        self.release_retries.inc();
    }

    /// A lease took `seconds` to get.
    pub fn lease_took(&self, seconds: f64) {
        self.lease_seconds.observe(seconds);
    }

    /// A client connection's task panicked.
    pub fn panicked(&self) {
        self.panics.count("gateway");
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        self.registry.encode()
    }
}

impl Scrape for GatewayMetrics {
    fn encode(&self) -> String {
        self.registry.encode()
    }
}

/// An open client connection, counted until dropped.
#[derive(Debug)]
pub struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Adds `n` bytes to `counter`.
pub fn add_bytes(counter: &Counter<u64, AtomicU64>, n: usize) {
    counter.inner().fetch_add(n as u64, Ordering::Relaxed);
}
