//! `proxy-operator run`: the operator, built from its flags ([`Args`]) on the shared
//! [`runtime`](crate::runtime), and run until SIGTERM or SIGINT.
//!
//! `serve` builds each part and starts it in one place, in the order they depend on each
//! other: the leadership, the metrics each part registers, the health engine, the
//! providers, the lease book and its API, the recorder, the writer, then the loops and the
//! two controllers. Everything that can refuse a start (the providers config, the probe CA
//! bundle, the flags' checks, the API server, the listeners, the record file) is tried
//! before any loop runs: a replica that cannot start never takes part in the leadership
//! election.
//!
//! The loops (leadership rounds, the health engine, the lease book's sync and saves, orphan
//! GC, the provider checks) run under the panic boundary ([`supervise::forever`]): a panic
//! restarts the loop after a backoff, never the process. Two run on a thread of their own
//! ([`Dedicated`](crate::dedicated::Dedicated)): the leadership rounds, with a kube client of their own, so that no load
//! on the main runtime delays a renew, and the health engine with its probes, whose many
//! short wake-ups cost less CPU on one thread and whose latencies then measure the proxies,
//! not the main runtime's queue. Should either thread end anyway, the operator shuts down
//! with an error (and is restarted) rather than go on without renewing its claim or
//! probing. The three servers (the discovery API, the admin port, the probe port) are
//! spawned once: each owns its listener, and a panic in a handler is already a 500 answer
//! ([`crate::runtime::server`]), so there is nothing to restart. The controller runs in the
//! caller's task; it owns the Proxy cache every loop reads, and its watch also feeds GC's
//! view of the cache's completeness and [`Tracked`], which frees a Proxy's state when it
//! goes.
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

mod args;
mod threads;

use std::future::Future;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::runtime::{reflector, watcher};
use proxy_core::record::{Config as RecordConfig, Header, Operator};
use proxy_crd::Proxy;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use self::args::{Args, Serving};
use self::threads::{Threads, elections};
use crate::config::ProvidersConfig;
use crate::controller::metrics::{Phases, ReconcileMetrics};
use crate::controller::{self, Context};
use crate::credentials::{self, CredentialsCache};
use crate::discovery::{self, Discovery};
use crate::events::Events;
use crate::gate::{FIELD_MANAGER, Gate};
use crate::gc::{CacheWatch, Collector, GcMetrics};
use crate::health::probe::Prober;
use crate::health::{HealthEngine, ProbeMetrics};
use crate::leadership::{Leadership, RenewMetrics};
use crate::lease_book::owner_label::OwnerLabel;
use crate::lease_book::ownership::{self, SaveMetrics, Store as LeaseBookStore};
use crate::lease_book::{Book, Reader, Replica};
use crate::per_proxy::Store;
use crate::pool::metrics::PoolErrors;
use crate::pool::{self, PoolContext};
use crate::provider_health::{Board, Monitor};
use crate::providers::metrics::ProviderMetrics;
use crate::providers::registry::Registry as Providers;
use crate::providers::types::Env;
use crate::recorder::Recorder;
use crate::runtime::metrics::Registry;
use crate::runtime::server::BearerToken;
use crate::runtime::signals::{self, stopped};
use crate::runtime::supervise::{self, Panics};
use crate::tasks::Loop;
use crate::tracked::Tracked;
use crate::writes::Writer;

/// Runs the operator until a shutdown signal; the exit code says whether it started.
pub fn run(args: Args) -> ExitCode {
    // A bad config stops the operator here, with the offending path, before it touches anything.
    let config = match ProvidersConfig::load(&args.providers_config) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    crate::runtime::start("proxy-operator", args.log_format, serve(args, config))
}

/// Builds every part, then runs them until the shutdown signals stop them.
async fn serve(args: Args, config: ProvidersConfig) -> anyhow::Result<()> {
    // First, so that a signal that arrives while the operator starts is not lost.
    let signals = signals::shutdown_signals()?;
    let prober = prober(
        args.health.probe_ca_bundle.as_deref(),
        args.health.probe_concurrency,
    )?;
    args.check_gc_scope()?;
    let candidate = args.leadership.candidate()?;
    let advertised = args.advertised_url();
    let leadership = Arc::new(
        if args.leadership.no_leader_election {
            Leadership::unopposed(candidate)
        } else {
            Leadership::new(candidate)
        }
        .advertising(advertised.clone()),
    );
    if advertised.is_none() && !args.leadership.no_leader_election {
        tracing::warn!(
            "no --discovery-advertise-url (nor POD_IP): while another replica leads, this one cannot be forwarded to, and while this one leads the others cannot forward lease requests to it"
        );
    }

    // Each part registers the families it counts into.
    let mut registry = Registry::default();
    let panics = Panics::register(&mut registry, Loop::ALL.map(Loop::label));
    let probe_metrics = Arc::new(ProbeMetrics::register(&mut registry));
    let provider_metrics = ProviderMetrics::register(&mut registry);
    let reconcile_metrics = ReconcileMetrics::register(&mut registry);
    let gc_metrics = GcMetrics::register(&mut registry);
    let renew_metrics = RenewMetrics::register(&mut registry);
    let saves = SaveMetrics::register(&mut registry);
    let pool_errors = PoolErrors::register(&mut registry);
    let gate = Gate::new(leadership.clone(), &mut registry);
    let registry = Arc::new(registry);

    let health = Arc::new(HealthEngine::new(
        prober,
        args.health.probe_concurrency,
        probe_metrics.clone(),
        panics.clone(),
    ));
    let kube_config = kube::Config::infer().await?;
    let client = kube::Client::try_from(kube_config.clone())?;
    let installation = match &args.installation_id {
        Some(id) => id.clone(),
        None => kube::Api::<Namespace>::all(client.clone())
            .get("kube-system")
            .await
            .map_err(|e| anyhow!("reading the kube-system namespace for the installation ID (or pass --installation-id): {e}"))?
            .metadata
            .uid
            .unwrap_or_default(),
    };
    let env = Env {
        client: client.clone(),
        installation: installation.clone(),
    };
    let configured = config
        .providers
        .iter()
        .map(|p| (p.name.as_str(), &p.settings));
    let providers = Providers::build(
        configured,
        &env,
        &provider_metrics,
        args.controller.bounds(),
    )
    .await;
    let timing = args.controller.timing();
    let namespace = args.controller.namespace.clone();
    tracing::info!(providers = %config.summary(), ?namespace, identity = leadership.identity(), installation, "proxy-operator starting");

    // The lease book, and where it is saved.
    let book = &args.lease_book;
    let (checkpoint_interval, fence) = book.checkpoints();
    let leadership_namespace = args.leadership.leadership_namespace.clone();
    let leadership_name = args.leadership.leadership_name.clone();
    let leases = Arc::new(Book::replicated(
        book.lease_config(),
        Replica {
            own_url: advertised,
            leadership: leadership.clone(),
        },
        fence,
    ));
    registry.read_at_scrape(&leases);
    let discovery = Arc::new(Discovery::serving(
        leases.clone(),
        args.serving.discovery_token.as_deref(),
        book.limits(),
    ));
    let lease_book = Arc::new(
        LeaseBookStore::new(
            kube::Api::namespaced(client.clone(), &leadership_namespace),
            format!("{leadership_name}-lease-book"),
            checkpoint_interval,
            saves,
        )
        .marking(book.pod_name.clone().map(|pod| {
            let namespace = book.pod_namespace.as_ref().unwrap_or(&leadership_namespace);
            OwnerLabel::new(kube::Api::namespaced(client.clone(), namespace), pod)
        })),
    );

    // The three listeners, bound before anything runs.
    let serving = &args.serving;
    let discovery_listener = bind(serving.discovery_addr, "--discovery-addr").await?;
    tracing::info!(addr = %discovery_listener.local_addr()?, "discovery API listening");
    let admin_listener = bind(serving.metrics_addr, "--metrics-addr").await?;
    tracing::info!(addr = %admin_listener.local_addr()?, "metrics listening");
    let probe_listener = bind(serving.probe_addr, "--probe-addr").await?;
    tracing::info!(addr = %probe_listener.local_addr()?, "probes (/healthz, /readyz) listening");
    let http = serving.http();
    let token = BearerToken::new(serving.discovery_token.as_deref());

    let recorder = Arc::new(
        Recorder::new(
            record_header(&config, timing),
            args.recorder.record_per_object,
            args.recorder.record_budget_bytes,
            args.recorder.file(),
        )
        .map_err(|e| {
            let file = args.recorder.record_file.as_deref();
            anyhow!(
                "--record-file {}: {e}",
                file.unwrap_or(Path::new("")).display()
            )
        })?,
    );
    registry.read_at_scrape(&recorder);
    let events = Arc::new(Events::new(
        client.clone(),
        FIELD_MANAGER,
        std::env::var("POD_NAME").ok(),
    ));
    let writer = Writer::new(client, gate, events, args.controller.call_timeout_seconds);

    // From here on, everything runs.
    let (stop, stopping) = signals::stop_on(signals);
    let mut background = Background {
        tasks: JoinSet::new(),
        panics: panics.clone(),
    };
    registry.read_at_scrape(&leadership);
    // The loops on threads of their own: the operator cannot go on without any of them.
    let mut threads = Threads::default();
    if leadership.elects() {
        threads.push(
            "leadership",
            elections(
                &leadership,
                (&panics, &renew_metrics),
                kube_config,
                leadership_namespace.clone(),
                leadership_name.clone(),
            )?,
        );
    }
    let admin = tokio::spawn(crate::recorder::http::serve_admin(
        registry.clone(),
        recorder.clone(),
        token,
        admin_listener,
        http,
        stopped(stopping.clone()),
    ));
    let api = tokio::spawn(discovery::serve(
        discovery.clone(),
        discovery_listener,
        http,
        stopped(stopping.clone()),
    ));
    // Ready once the Proxy cache has listed (the watch below feeds `completeness`).
    let completeness = CacheWatch::default();
    let probes = tokio::spawn({
        let completeness = completeness.clone();
        crate::runtime::server::serve(
            "probes",
            crate::runtime::server::probes::routes(Arc::new(move || completeness.first_list())),
            probe_listener,
            http,
            stopped(stopping.clone()),
        )
    });

    // The controller's cache, read by every loop below and by the scrape.
    let cache = reflector::store::Writer::<Proxy>::default();
    let store = cache.as_reader();
    let phases = Arc::new(Phases(store.clone()));
    registry.read_at_scrape(&phases);
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
        metrics: provider_metrics,
        leadership: leadership.clone(),
        namespace: leadership_namespace,
        operator: leadership_name,
        types: config
            .providers
            .iter()
            .map(|p| (p.name.clone(), p.settings.type_name()))
            .collect(),
        schedule: args
            .provider_checks
            .schedule(args.controller.quota_retry_seconds),
        proxies: store.clone(),
        wake: health_tx.clone(),
    });
    background.spawn(Loop::ProviderHealth, move || {
        crate::provider_health::run(monitor.clone())
    });
    threads.push(
        "health",
        health
            .clone()
            .start(
                store.clone(),
                credentials.clone(),
                health_tx,
                leadership.clone(),
            )
            .map_err(|e| anyhow!("starting the health engine's thread: {e}"))?,
    );
    background.spawn(Loop::LeaseBook, {
        let (leases, lease_book) = (leases.clone(), lease_book.clone());
        move || ownership::run(leases.clone(), lease_book.clone())
    });
    background.spawn(Loop::LeaseBook, {
        let (arrivals, store) = (leases.turns.arrivals(), store.clone());
        let events = writer.events().clone();
        move || {
            crate::lease_book::circuits::publish(arrivals.clone(), store.clone(), events.clone())
        }
    });
    background.spawn(Loop::DiscoverySync, {
        let (leases, store) = (leases.clone(), store.clone());
        let listed = completeness.clone();
        let listed: Arc<dyn Fn() -> bool + Send + Sync> =
            Arc::new(move || listed.first_list().is_ok());
        move || {
            leases
                .clone()
                .sync(store.clone(), credentials.clone(), listed.clone())
        }
    });
    if let Some(settings) = args.gc.settings(&installation) {
        let collector = Collector {
            settings,
            providers: providers.clone(),
            proxies: store.clone(),
            cache: completeness.clone(),
            leadership: leadership.clone(),
            writes: writer.gate.clone(),
            metrics: gc_metrics,
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
            (reconcile_metrics, panics.clone()),
            leadership.clone(),
            recorder,
        )
        .with_bans(Reader::of(&leases), book.banned_sites),
    );
    let [failures, versions] = ctx.per_proxy();
    let stores: [Store; 6] = [
        ("recorder", ctx.recorder.clone()),
        failures,
        versions,
        ("health", ctx.health.clone()),
        ("leases", leases.clone()),
        ("metrics", probe_metrics),
    ];
    let tracked = Arc::new(Tracked::new(stores, store.clone()));
    registry.read_at_scrape(&tracked);
    // A pool is reconciled when one of its Proxies changes; a full channel drops the
    // trigger, as the pool looks again at its decision's wake-up anyway.
    let (pool_tx, mut pool_rx) = tokio::sync::mpsc::channel(1024);
    let pools = Arc::new(PoolContext::new(
        writer,
        leadership,
        ctx.recorder.clone(),
        (panics, pool_errors, registry),
        store.clone(),
        Reader::of(&leases),
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
                args.controller.max_concurrent_reconciles,
            ),
            pool::run(pools, namespace, pool_triggers),
        ) => {}
        () = async {
            stopped(stopping).await;
            tokio::time::sleep(grace).await;
        } => tracing::warn!("the controller did not stop within the shutdown grace: stopping it"),
        name = threads.first_ended() => {
            tracing::error!(thread = name, "a loop's thread ended: stopping, so that the operator is restarted");
            failed = Some(anyhow!("the {name} thread ended"));
            let _ = stop.send(true);
        }
    }
    background.tasks.shutdown().await;
    threads.stop().await;
    api.await?;
    // Every lease request is answered: save the book once more, so a restart loses nothing.
    ownership::save_at_shutdown(&leases, &lease_book).await;
    admin.await?;
    probes.await?;
    drop(phases);
    tracing::info!("stopped");
    failed.map_or(Ok(()), Err)
}

/// A listener on `addr`, or an error naming the `flag` that gave it.
async fn bind(addr: std::net::SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow!("{flag} {addr}: {e}"))
}

/// The prober, trusting the extra CA certificates of `--probe-ca-bundle` when given, with
/// TLS sessions to resume for `in_flight` probes at once.
fn prober(bundle: Option<&Path>, in_flight: usize) -> anyhow::Result<Prober> {
    let shown = || bundle.unwrap_or(Path::new("")).display();
    let pem = bundle
        .map(|path| std::fs::read(path).map_err(|e| anyhow!("--probe-ca-bundle {}: {e}", shown())))
        .transpose()?;
    Prober::new(pem.as_deref(), in_flight)
        .map_err(|e| anyhow!("--probe-ca-bundle {}: {e}", shown()))
}

/// The header of every recording of this process: this build, and the configuration the
/// core's decisions depend on.
fn record_header(config: &ProvidersConfig, timing: proxy_core::Timing) -> Header {
    Header::new(
        Operator {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: option_env!("PROXY_OPERATOR_COMMIT")
                .unwrap_or("unknown")
                .to_owned(),
        },
        RecordConfig::new(timing, config.providers.iter().map(|p| p.name.clone())),
        jiff::Timestamp::now(),
    )
}

/// The loops, each under the panic boundary; aborted together at shutdown.
struct Background {
    tasks: JoinSet<()>,
    panics: Panics,
}

impl Background {
    /// Runs the loop `start` makes under [`supervise::forever`]: restarted after a panic.
    fn spawn<F, Fut>(&mut self, task: Loop, start: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks
            .spawn(supervise::forever(task.label(), self.panics.clone(), start));
    }
}
