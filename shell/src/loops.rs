//! Every long-running task of the operator, started here and stopped together.
//!
//! The loops (leadership rounds, the health engine, the lease book's sync, orphan GC) run
//! under the panic boundary ([`supervise::forever`]): a panic restarts the loop after a
//! backoff, never the process. Two run on a thread of their own ([`Dedicated`]): the
//! leadership rounds, with a kube client of their own, so that no load on the main runtime
//! delays a renew, and the health engine with its probes, whose many short wake-ups cost
//! less CPU on one thread and whose latencies then measure the proxies, not the main
//! runtime's queue. Should either thread end anyway, the operator shuts down with an error
//! (and is restarted) rather than go on without renewing its claim or probing. The two servers (the
//! discovery API and the admin port) are spawned once: each owns its listener, and a panic
//! in a handler is already a 500 answer (`crate::server`), so there is nothing to restart.
//! The controller runs in the caller's task; it owns the Proxy cache every loop reads, and
//! its watch also feeds GC's view of the cache's completeness and [`Tracked`], which frees
//! a Proxy's state when it goes.
//!
//! Shutdown, on SIGTERM (how Kubernetes stops a Pod) or SIGINT:
//! 1. the servers stop accepting and let the requests in flight finish within the grace;
//! 2. at the same time the controller finishes its reconciles in flight; one that missed the
//!    signal (it came while the operator was starting) or does not finish within the grace
//!    is dropped, as a crash would (reconciles are idempotent);
//! 3. once the controller has stopped, the loops are aborted and their threads stopped (the
//!    claim then runs out, or another replica's round takes it over);
//! 4. then the servers are awaited, the owner of the lease book saves it once more, and the
//!    process exits.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{reflector, watcher};
use proxy_crd::Proxy;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use proxy_core::Timing;

use crate::controller::{self, Context};
use crate::credentials::{self, CredentialsCache};
use crate::dedicated::Dedicated;
use crate::discovery::ownership::{self, Store as LeaseBookStore};
use crate::discovery::{self, Discovery};
use crate::gc::{CacheWatch, Collector, GcSettings};
use crate::health::HealthEngine;
use crate::leadership::Leadership;
use crate::metrics::Metrics;
use crate::per_proxy::Store;
use crate::pool::{self, PoolContext};
use crate::provider_health::{Board, Monitor, Schedule};
use crate::providers::registry::Registry;
use crate::recorder::Recorder;
use crate::server::{BearerToken, Settings};
use crate::supervise::{self, Loop};
use crate::tracked::Tracked;
use crate::writes::Writer;

/// What the operator runs on, built by [`crate::wiring`] from the flags.
#[derive(Debug)]
pub struct Parts {
    /// Writes statuses, Events and objects through the leader gate, within the call
    /// deadline; its client is the operator's.
    pub writer: Writer,
    /// The configured providers.
    pub providers: Registry,
    /// The requeue intervals the Proxy controller hands the core.
    pub timing: Timing,
    /// The health engine: it probes, the Proxy controller reads its verdicts.
    pub health: Arc<HealthEngine>,
    /// Where every loop registers its metrics.
    pub metrics: Arc<Metrics>,
    /// Who leads: only the leader writes.
    pub leadership: Arc<Leadership>,
    /// Every decide call, for replay.
    pub recorder: Arc<Recorder>,
    /// `--banned-sites`: from how many blocking sites a proxy is `Banned`.
    pub banned_sites: u32,
    /// The discovery API's state: the lease book.
    pub discovery: Arc<Discovery>,
    /// Where the lease book is saved.
    pub lease_book: Arc<LeaseBookStore>,
    /// The one namespace watched (`None`: all).
    pub namespace: Option<String>,
    /// How GC runs (`None`: it does not).
    pub gc: Option<GcSettings>,
    /// Reconciles at once (0: unbounded).
    pub max_concurrent_reconciles: u16,
    /// How to reach the API server: the leadership rounds build their own client from it.
    pub kube_config: kube::Config,
    /// The namespace of the leadership Lease.
    pub leadership_namespace: String,
    /// The leadership Lease's name.
    pub leadership_name: String,
    /// Where and how the provider health monitor runs.
    pub provider_checks: ProviderChecks,
    /// The two HTTP servers.
    pub servers: Servers,
}

/// Where and how the provider health monitor ([`crate::provider_health`]) runs.
#[derive(Debug)]
pub struct ProviderChecks {
    /// The namespace of the `ProviderHealth` objects: the operator's own.
    pub namespace: String,
    /// The type of each configured provider, by name.
    pub types: BTreeMap<String, &'static str>,
    /// How often and how long.
    pub schedule: Schedule,
}

/// The discovery API, the admin port and the probe port, bound already.
#[derive(Debug)]
pub struct Servers {
    /// The discovery API's listener.
    pub discovery: TcpListener,
    /// The admin port's listener (`/metrics`, `/debug/recording`).
    pub admin: TcpListener,
    /// The probe port's listener (`/healthz`, `/readyz`).
    pub probes: TcpListener,
    /// The token of the discovery API and of `/debug/recording`.
    pub token: BearerToken,
    /// Timeouts and shutdown grace of both.
    pub http: Settings,
}

/// Runs everything until `signals` turns `true` (see [`shutdown_signals`]) and the
/// shutdown above is done; or, should a loop's thread end, shuts down the same way
/// and returns that error.
pub async fn run(parts: Parts, signals: watch::Receiver<bool>) -> anyhow::Result<()> {
    let Parts {
        writer,
        providers,
        timing,
        health,
        metrics,
        leadership,
        recorder,
        banned_sites,
        discovery,
        lease_book,
        namespace,
        gc,
        max_concurrent_reconciles,
        kube_config,
        leadership_namespace,
        leadership_name,
        provider_checks,
        servers,
    } = parts;
    let (stop, stopping) = stop_on(signals);
    let mut background = Background {
        tasks: JoinSet::new(),
        metrics: metrics.clone(),
    };
    metrics.read_at_scrape(&leadership);
    // The loops on threads of their own: the operator cannot go on without any of them.
    let mut threads: Vec<(&'static str, Dedicated)> = Vec::new();
    if leadership.elects() {
        threads.push((
            "leadership",
            elections(
                &leadership,
                &metrics,
                kube_config,
                leadership_namespace,
                leadership_name.clone(),
            )?,
        ));
    }
    let http = servers.http;
    let admin = tokio::spawn(crate::admin::serve(
        metrics.clone(),
        recorder.clone(),
        servers.token,
        servers.admin,
        http,
        stopped(stopping.clone()),
    ));
    let api = tokio::spawn(discovery::serve(
        discovery.clone(),
        servers.discovery,
        http,
        stopped(stopping.clone()),
    ));

    // Ready once the Proxy cache has listed (the watch below feeds `completeness`).
    let completeness = CacheWatch::default();
    let probes = tokio::spawn({
        let completeness = completeness.clone();
        crate::server::serve(
            "probes",
            crate::server::probes::routes(Arc::new(move || completeness.first_list())),
            servers.probes,
            http,
            stopped(stopping.clone()),
        )
    });

    // The controller's cache, read by every loop below and by the scrape.
    let cache = reflector::store::Writer::<Proxy>::default();
    let store = cache.as_reader();
    metrics.watch_proxies(store.clone());
    // The credentials Secrets (labelled ones only), for the probes and the lease answers.
    let credentials = {
        let (reader, filler) = reflector::store();
        let secrets: kube::Api<Secret> = match &namespace {
            Some(ns) => kube::Api::namespaced(writer.client.clone(), ns),
            None => kube::Api::all(writer.client.clone()),
        };
        background.tasks.spawn(credentials::watch(secrets, filler));
        CredentialsCache::new(reader)
    };
    // The health engine probes what the cache holds and asks for a reconcile when a verdict
    // must be written; it never writes status itself.
    let (health_tx, mut health_rx) = tokio::sync::mpsc::channel(1024);
    // What the provider health monitor concludes, and the Proxy controller observes.
    let board = Arc::new(Board::default());
    let monitor = Arc::new(Monitor {
        client: writer.client.clone(),
        providers: providers.clone(),
        board: board.clone(),
        gate: writer.gate.clone(),
        events: writer.events().clone(),
        metrics: metrics.clone(),
        leadership: leadership.clone(),
        namespace: provider_checks.namespace,
        operator: leadership_name,
        types: provider_checks.types,
        schedule: provider_checks.schedule,
        proxies: store.clone(),
        wake: health_tx.clone(),
    });
    background.spawn(Loop::ProviderHealth, move || {
        crate::provider_health::run(monitor.clone())
    });
    threads.push((
        "health",
        health
            .clone()
            .start(
                store.clone(),
                credentials.clone(),
                health_tx,
                leadership.clone(),
            )
            .map_err(|e| anyhow::anyhow!("starting the health engine's thread: {e}"))?,
    ));
    background.spawn(Loop::LeaseBook, {
        let (discovery, lease_book) = (discovery.clone(), lease_book.clone());
        move || ownership::run(discovery.clone(), lease_book.clone())
    });
    background.spawn(Loop::DiscoverySync, {
        let (discovery, store) = (discovery.clone(), store.clone());
        let listed = completeness.clone();
        let listed: Arc<dyn Fn() -> bool + Send + Sync> =
            Arc::new(move || listed.first_list().is_ok());
        move || {
            discovery
                .clone()
                .sync(store.clone(), credentials.clone(), listed.clone())
        }
    });
    if let Some(settings) = gc {
        let collector = Collector {
            settings,
            providers: providers.clone(),
            proxies: store.clone(),
            cache: completeness.clone(),
            leadership: leadership.clone(),
            writes: writer.gate.clone(),
            metrics: metrics.clone(),
        };
        background.spawn(Loop::Gc, move || crate::gc::run(collector.clone()));
    }
    // The Proxy controller: what it reads and writes, and nothing else.
    let ctx = Arc::new(
        Context::new(
            writer.clone(),
            providers,
            timing,
            health,
            board,
            metrics.clone(),
            leadership.clone(),
            recorder,
        )
        .with_bans(discovery.clone(), banned_sites),
    );
    let [failures, versions] = ctx.per_proxy();
    let stores: [Store; 6] = [
        ("recorder", ctx.recorder.clone()),
        failures,
        versions,
        ("health", ctx.health.clone()),
        ("leases", discovery.clone()),
        ("metrics", metrics.clone()),
    ];
    let tracked = Arc::new(Tracked::new(stores, store.clone()));
    metrics.read_at_scrape(&tracked);
    // A pool is reconciled when one of its Proxies changes; a full channel drops the
    // trigger, as the pool looks again at its decision's wake-up anyway.
    let (pool_tx, mut pool_rx) = tokio::sync::mpsc::channel(1024);
    let pools = Arc::new(PoolContext::new(
        writer,
        leadership,
        ctx.recorder.clone(),
        metrics,
        store.clone(),
        discovery.clone(),
    ));
    let observe = move |item: &Result<watcher::Event<Proxy>, watcher::Error>| {
        completeness.observe(item);
        tracked.observe(item);
        if let Ok(
            watcher::Event::Apply(proxy)
            | watcher::Event::InitApply(proxy)
            | watcher::Event::Delete(proxy),
        ) = item
            && let Some(pool) = pool::triggers(proxy)
        {
            let _ = pool_tx.try_send(pool);
        }
    };
    let pool_triggers = futures::stream::poll_fn(move |cx| pool_rx.poll_recv(cx));
    let health_reports = futures::stream::poll_fn(move |cx| health_rx.poll_recv(cx));
    let grace = http.shutdown_grace;
    let mut failed = None;
    tokio::select! {
        ((), ()) = futures::future::join(
            controller::run(
                ctx,
                namespace.clone(),
                cache,
                observe,
                health_reports,
                max_concurrent_reconciles,
            ),
            pool::run(pools, namespace, pool_triggers),
        ) => {}
        () = async {
            stopped(stopping).await;
            tokio::time::sleep(grace).await;
        } => tracing::warn!("the controller did not stop within the shutdown grace: stopping it"),
        name = first_ended(&mut threads) => {
            tracing::error!(thread = name, "a loop's thread ended: stopping, so that the operator is restarted");
            failed = Some(anyhow::anyhow!("the {name} thread ended"));
            let _ = stop.send(true);
        }
    }
    background.tasks.shutdown().await;
    for (_, thread) in threads {
        thread.stop().await;
    }
    api.await?;
    // Every lease request is answered: save the book once more, so a restart loses nothing.
    ownership::save_at_shutdown(&discovery, &lease_book).await;
    admin.await?;
    probes.await?;
    tracing::info!("stopped");
    failed.map_or(Ok(()), Err)
}

/// The name of the first of `threads` to end; never, when there are none.
async fn first_ended(threads: &mut [(&'static str, Dedicated)]) -> &'static str {
    if threads.is_empty() {
        return std::future::pending().await;
    }
    let ended = threads.iter_mut().map(|(name, thread)| {
        Box::pin(async move {
            thread.ended().await;
            *name
        })
    });
    let (name, ..) = futures::future::select_all(ended).await;
    name
}

/// Starts the leadership rounds on their own thread and runtime, with their own client
/// built there from `config` (see [`crate::dedicated`]), under the panic boundary.
fn elections(
    leadership: &Arc<Leadership>,
    metrics: &Arc<Metrics>,
    config: kube::Config,
    namespace: String,
    name: String,
) -> anyhow::Result<Dedicated> {
    let (leadership, metrics) = (leadership.clone(), metrics.clone());
    let start = move || async move {
        let client = match kube::Client::try_from(config) {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%error, "cannot build the leadership rounds' API client");
                return;
            }
        };
        let leases = kube::Api::<Lease>::namespaced(client, &namespace);
        supervise::forever(Loop::Leadership, metrics.clone(), || {
            leadership.run(leases.clone(), name.clone(), &metrics)
        })
        .await;
    };
    Dedicated::spawn("leadership", start)
        .map_err(|e| anyhow::anyhow!("starting the leadership thread: {e}"))
}

/// The loops, each under the panic boundary; aborted together at shutdown.
struct Background {
    tasks: JoinSet<()>,
    metrics: Arc<Metrics>,
}

impl Background {
    /// Runs the loop `start` makes under [`supervise::forever`]: restarted after a panic.
    fn spawn<F, Fut>(&mut self, task: Loop, start: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks
            .spawn(supervise::forever(task, self.metrics.clone(), start));
    }
}

/// Listens for SIGTERM (how Kubernetes stops a Pod) and SIGINT from now on, so that a signal
/// that arrives while the operator starts is not lost: the receiver turns `true` at the first.
pub fn shutdown_signals() -> anyhow::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("installing a SIGTERM handler: {e}"))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("installing a SIGINT handler: {e}"))?;
    let (signalled, stopping) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("signal received: stopping");
        let _ = signalled.send(true);
    });
    Ok(stopping)
}

/// A stop that turns `true` at the first of `signals`, or when the operator sends it.
fn stop_on(signals: watch::Receiver<bool>) -> (Arc<watch::Sender<bool>>, watch::Receiver<bool>) {
    let (stop, stopping) = watch::channel(false);
    let stop = Arc::new(stop);
    tokio::spawn({
        let stop = stop.clone();
        async move {
            stopped(signals).await;
            let _ = stop.send(true);
        }
    });
    (stop, stopping)
}

/// Resolves once a shutdown signal has arrived.
async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|signalled| *signalled).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_first_thread_to_end_is_named_and_none_never_ends() {
        let forever = || Dedicated::spawn("test-forever", std::future::pending::<()>);
        let mut threads = vec![
            ("forever", forever().unwrap()),
            (
                "short",
                Dedicated::spawn("test-short", || async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                })
                .unwrap(),
            ),
        ];
        let ended = tokio::time::timeout(Duration::from_secs(5), first_ended(&mut threads)).await;
        assert_eq!(ended, Ok("short"));
        let mut none = Vec::new();
        let ended = tokio::time::timeout(Duration::from_millis(100), first_ended(&mut none)).await;
        assert!(ended.is_err(), "no thread, nothing ends");
        for (_, thread) in threads {
            thread.stop().await;
        }
    }
}
