//! `proxy-operator`: the effects shell around the pure core (see `docs/architecture.md`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use proxy_core::gc::DeleteFraction;
use proxy_core::leadership::Candidate;
use proxy_core::lease::LeaseConfig;
use proxy_core::record::{Config as RecordConfig, Header, Operator, Recording, timeline};
use proxy_operator::config::ProvidersConfig;
use proxy_operator::controller::{self, Context};
use proxy_operator::discovery::{self, Discovery, Limits};
use proxy_operator::gc::GcSettings;
use proxy_operator::health::HealthEngine;
use proxy_operator::health::probe::Prober;
use proxy_operator::leadership::Leadership;
use proxy_operator::metrics::Metrics;
use proxy_operator::providers::registry::Registry;
use proxy_operator::recorder::Recorder;
use proxy_operator::server::BearerToken;
use proxy_operator::supervise::{self, Loop};

/// Runs fleets of HTTP forward proxies for web crawlers on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "proxy-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator: reconcile Proxy objects against the configured providers.
    Run(Box<RunArgs>),
    /// Validate a providers config file and print a one-line summary. Exits 1 with every
    /// problem (each naming the path of the offending entry) when it is invalid.
    CheckConfig {
        /// The providers config (YAML), as passed to `--providers-config`.
        file: PathBuf,
    },
    /// Print the Proxy CustomResourceDefinition as YAML (`... crd | kubectl apply -f -`).
    Crd,
    /// Replay a recording through this build's core: print the timeline, then exit 0 when
    /// every decision is the same, 1 at the first divergence (shown), 2 when the file
    /// cannot be read. See docs/replay.md.
    Replay {
        /// The recording (`--record-file`, or `GET /debug/recording` on the metrics port).
        file: PathBuf,
        /// Do not print the timeline, only the verdict.
        #[arg(long)]
        quiet: bool,
    },
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The providers config (YAML); the operator refuses to start when it is invalid.
    #[arg(long, env = "PROVIDERS_CONFIG")]
    providers_config: PathBuf,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Seconds between checks of a machine that is being created.
    #[arg(long, default_value_t = 10.0)]
    provisioning_poll_seconds: f64,
    /// Seconds between checks of a running machine (how soon a vanished machine is noticed).
    #[arg(long, default_value_t = 60.0)]
    drift_poll_seconds: f64,
    /// Seconds between checks of a machine that is being deleted.
    #[arg(long, default_value_t = 10.0)]
    deletion_poll_seconds: f64,
    /// PEM file of extra CA certificates to trust for probe URLs (a private probe origin);
    /// the public web PKI is always trusted.
    #[arg(long, env = "PROBE_CA_BUNDLE")]
    probe_ca_bundle: Option<PathBuf>,
    /// How many probes may run at once.
    #[arg(long, default_value_t = proxy_operator::health::DEFAULT_CONCURRENCY)]
    probe_concurrency: usize,
    /// Address of the admin port: `GET /metrics` (Prometheus text format) for anyone, and
    /// `GET /debug/recording`, which takes the discovery token (without a token: loopback
    /// clients only).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    metrics_addr: std::net::SocketAddr,
    /// Address of the discovery API (crawlers lease proxies here).
    #[arg(long, env = "DISCOVERY_ADDR", default_value = "0.0.0.0:8090")]
    discovery_addr: std::net::SocketAddr,
    /// Bearer token the discovery API and `GET /debug/recording` require. Without one the
    /// API is open to anyone who can reach it (the operator warns loudly at start).
    #[arg(long, env = "DISCOVERY_TOKEN", hide_env_values = true)]
    discovery_token: Option<String>,
    /// Seconds a client of the discovery API or the admin port may take to send a request's
    /// headers (also how long a connection may sit idle between requests).
    #[arg(long, default_value_t = 10.0)]
    http_header_timeout_seconds: f64,
    /// Seconds a request to the discovery API or the admin port may take to arrive, body
    /// included; past it the answer is 408.
    #[arg(long, default_value_t = 30.0)]
    http_request_timeout_seconds: f64,
    /// Seconds the servers let requests in flight finish after SIGTERM; connections still
    /// open then are closed.
    #[arg(long, default_value_t = 10.0)]
    shutdown_grace_seconds: f64,
    /// The longest lease a client may ask for, in seconds.
    #[arg(long, default_value_t = 3600)]
    max_lease_ttl_seconds: u64,
    /// How long a proxy is not leased for a target after a `rate_limited` report, in seconds.
    #[arg(long, default_value_t = 300)]
    rate_limited_cooldown_seconds: u64,
    /// This installation's identity, put on every instance it creates so that GC never
    /// touches another installation's instances (default: the UID of the cluster's
    /// kube-system namespace).
    #[arg(long, env = "INSTALLATION_ID")]
    installation_id: Option<String>,
    /// This replica's identity in the leadership Lease (default: hostname and process ID).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Namespace of the leadership Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leadership_namespace: String,
    /// Name of the leadership Lease.
    #[arg(long, default_value = "proxy-operator")]
    leadership_name: String,
    /// Seconds a leader's claim holds after its last renew.
    #[arg(long, default_value_t = 15)]
    leadership_duration_seconds: u64,
    /// Seconds after its last renew at which a leader stops writing.
    #[arg(long, default_value_t = 10.0)]
    leadership_renew_deadline_seconds: f64,
    /// Seconds between leadership rounds.
    #[arg(long, default_value_t = 2.0)]
    leadership_retry_period_seconds: f64,
    /// How many decide calls are kept in memory per Proxy, for `GET /debug/recording` on
    /// the metrics port.
    #[arg(long, default_value_t = 64)]
    record_per_object: usize,
    /// Also append every decide call to this file (JSON Lines, `proxy-operator replay`).
    #[arg(long, env = "RECORD_FILE")]
    record_file: Option<PathBuf>,
    /// Size at which the record file moves to `<file>.1` and a new one starts.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    record_max_bytes: u64,
    /// Lead without an election: for a deployment of exactly one replica.
    #[arg(long)]
    no_leader_election: bool,
    /// Seconds between orphan-GC sweeps.
    #[arg(long, default_value_t = 600.0)]
    gc_interval_seconds: f64,
    /// Minimum age, in seconds, of an instance GC may delete.
    #[arg(long, default_value_t = 600.0)]
    gc_min_age_seconds: f64,
    /// The largest share of a provider's instances (of this installation) one GC sweep may
    /// delete, from 0 (delete nothing, report only) to 1 (no brake). Rounded down: below 1 a
    /// sweep never deletes every instance, so a lone orphan (1 of 1) is held back, logged
    /// and counted (`proxy_operator_gc_held_back_total`) for a human.
    #[arg(long, default_value_t = DeleteFraction::DEFAULT)]
    gc_max_delete_fraction: DeleteFraction,
    /// Log the orphans GC would delete, delete nothing.
    #[arg(long)]
    gc_dry_run: bool,
    /// Run GC although the operator watches one namespace. GC deletes instances whose owner
    /// it cannot see, so with --namespace it would reap the instances of Proxies in other
    /// namespaces; allow it only when this installation's Proxies all live in that namespace.
    #[arg(long)]
    gc_allow_namespaced: bool,
    /// Do not run orphan GC.
    #[arg(long, conflicts_with_all = ["gc_allow_namespaced", "gc_dry_run"])]
    no_gc: bool,
    /// How many reconciles run at once (0: unbounded). Each makes at most one provider call
    /// at a time, so this bounds what a mass apply fires at a cloud API. The default 4 was
    /// the fastest bound for 200 Proxies applied at once on the 2-core test bed (faster than
    /// 1, 16 and unbounded, which put up to 86 provider calls in flight); see
    /// docs/benchmarks.md (`just bench-reconcile`). More cores or a slow cloud API may favour
    /// a larger bound.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 4)]
    max_concurrent_reconciles: u16,
    /// How long a proxy is not leased for a target after a `blocked` report, in seconds.
    #[arg(long, default_value_t = 1800)]
    blocked_cooldown_seconds: u64,
    /// Log line format (default: json, or text when standard output is a terminal). Inside a
    /// span, lines carry `trace_id`/`span_id`; spans go to OTLP/HTTP when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    #[arg(long, env = "LOG_FORMAT", value_enum)]
    log_format: Option<proxy_operator::telemetry::LogFormat>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(*args),
        Command::CheckConfig { file } => match ProvidersConfig::load(&file) {
            Ok(config) => {
                println!("{}: {}", file.display(), config.summary());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        },
        Command::Replay { file, quiet } => replay(&file, quiet),
        Command::Crd => {
            print!("{}", proxy_crd::Proxy::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}

fn replay(file: &Path, quiet: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    let recording = match Recording::parse(&text) {
        Ok(recording) => recording,
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    if !quiet {
        for line in timeline(&recording) {
            println!("{line}");
        }
    }
    match recording.replay() {
        Ok(report) => {
            for note in &report.notes {
                println!("note: {note}");
            }
            match &report.divergence {
                None => {
                    println!(
                        "replay: {} of {} records replayed, every decision identical",
                        report.checked, report.records
                    );
                    ExitCode::SUCCESS
                }
                Some(divergence) => {
                    println!("replay: DIVERGED\n{divergence}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            ExitCode::from(2)
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    // Dropped when `run` returns, after the runtime: flushes the spans not yet exported.
    let _telemetry = proxy_operator::telemetry::init(
        args.log_format
            .unwrap_or_else(proxy_operator::telemetry::LogFormat::detect),
    );
    // A bad config stops the operator here, with the offending path, before it touches anything.
    let config = match ProvidersConfig::load(&args.providers_config) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
    match runtime.block_on(serve(args, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("proxy-operator: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: RunArgs, config: ProvidersConfig) -> anyhow::Result<()> {
    let stopping = shutdown_signals()?;
    let bundle = match &args.probe_ca_bundle {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("--probe-ca-bundle {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let prober = Prober::new(bundle.as_deref()).map_err(|e| {
        anyhow::anyhow!(
            "--probe-ca-bundle {}: {e}",
            args.probe_ca_bundle
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        )
    })?;
    if args.namespace.is_some() && !args.gc_allow_namespaced && !args.no_gc {
        anyhow::bail!(
            "--namespace restricts the cache, so GC would take the instances of Proxies in other \
             namespaces for orphans: pass --gc-allow-namespaced if this installation's Proxies all \
             live in {:?}, or --no-gc",
            args.namespace.as_deref().unwrap_or_default()
        );
    }
    let seconds = |s: f64| Duration::from_secs_f64(s.max(0.01));
    let leadership_timing = proxy_core::leadership::Timing::new(
        Duration::from_secs(args.leadership_duration_seconds),
        seconds(args.leadership_renew_deadline_seconds),
        seconds(args.leadership_retry_period_seconds),
    )
    .map_err(|e| anyhow::anyhow!("--leadership-*: {e}"))?;
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let candidate = Candidate::new(identity, leadership_timing)
        .ok_or_else(|| anyhow::anyhow!("--identity must not be empty"))?;
    let leadership = Arc::new(if args.no_leader_election {
        Leadership::unopposed(candidate)
    } else {
        Leadership::new(candidate)
    });
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(HealthEngine::new(
        prober,
        args.probe_concurrency,
        metrics.clone(),
    ));
    let client = kube::Client::try_default().await?;
    let installation = match &args.installation_id {
        Some(id) => id.clone(),
        None => kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .get("kube-system")
            .await
            .map_err(|e| anyhow::anyhow!("reading the kube-system namespace for the installation ID (or pass --installation-id): {e}"))?
            .metadata
            .uid
            .unwrap_or_default(),
    };
    let providers = Registry::build(&config, &client, &installation, &metrics)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.providers_config.display()))?;
    let gc = (!args.no_gc).then(|| GcSettings {
        interval: seconds(args.gc_interval_seconds),
        min_age: seconds(args.gc_min_age_seconds),
        dry_run: args.gc_dry_run,
        installation: installation.clone(),
        max_delete_fraction: args.gc_max_delete_fraction,
    });
    let timing = proxy_core::Timing {
        provisioning_poll: seconds(args.provisioning_poll_seconds),
        drift_poll: seconds(args.drift_poll_seconds),
        deletion_poll: seconds(args.deletion_poll_seconds),
        ..proxy_core::Timing::default()
    };
    tracing::info!(providers = %config.summary(), namespace = ?args.namespace, identity = leadership.identity(), installation, "proxy-operator starting");
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &args.leadership_namespace);
    // Under the panic boundary, like every loop: a panic restarts the rounds after a backoff.
    let elections = tokio::spawn(supervise::forever(Loop::Leadership, metrics.clone(), {
        let (leadership, name) = (leadership.clone(), args.leadership_name.clone());
        move || {
            let (leadership, leases, name) = (leadership.clone(), leases.clone(), name.clone());
            async move { leadership.run(leases, name).await }
        }
    }));
    let lease_config = LeaseConfig {
        rate_limited_cooldown: Duration::from_secs(args.rate_limited_cooldown_seconds),
        blocked_cooldown: Duration::from_secs(args.blocked_cooldown_seconds),
        ..LeaseConfig::default()
    };
    let limits = Limits {
        max_ttl: Duration::from_secs(args.max_lease_ttl_seconds),
        ..Limits::default()
    };
    let discovery = Arc::new(Discovery::new(
        args.discovery_token.as_deref(),
        lease_config,
        limits,
    ));
    let listener = tokio::net::TcpListener::bind(args.discovery_addr)
        .await
        .map_err(|e| anyhow::anyhow!("--discovery-addr {}: {e}", args.discovery_addr))?;
    tracing::info!(addr = %listener.local_addr()?, "discovery API listening");
    metrics.watch_leases(discovery.clone());
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| anyhow::anyhow!("--metrics-addr {}: {e}", args.metrics_addr))?;
    tracing::info!(addr = %metrics_listener.local_addr()?, "metrics listening");
    let header = Header::new(
        Operator {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: option_env!("PROXY_OPERATOR_COMMIT")
                .unwrap_or("unknown")
                .to_owned(),
        },
        RecordConfig::new(timing, config.providers.iter().map(|p| p.name.clone())),
        jiff::Timestamp::now(),
    );
    let file = args
        .record_file
        .clone()
        .map(|path| (path, args.record_max_bytes));
    let recorder = Arc::new(
        Recorder::new(header, args.record_per_object, file).map_err(|e| {
            anyhow::anyhow!(
                "--record-file {}: {e}",
                args.record_file
                    .as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
            )
        })?,
    );
    let http = proxy_operator::server::Settings {
        header_read_timeout: seconds(args.http_header_timeout_seconds),
        request_timeout: seconds(args.http_request_timeout_seconds),
        shutdown_grace: seconds(args.shutdown_grace_seconds),
    };
    let metrics_server = tokio::spawn(proxy_operator::admin::serve(
        metrics.clone(),
        recorder.clone(),
        BearerToken::new(args.discovery_token.as_deref()),
        metrics_listener,
        http,
        stopped(stopping.clone()),
    ));
    let ctx = Arc::new(Context::new(
        client, providers, timing, health, metrics, leadership, recorder,
    ));
    let server = tokio::spawn(discovery::serve(
        discovery.clone(),
        listener,
        http,
        stopped(stopping.clone()),
    ));
    // The controller stops on the same signals and finishes its reconciles in flight; one
    // that missed the signal (it came while the operator was starting) or does not finish
    // within the grace is dropped, as a crash would (reconciles are idempotent).
    tokio::select! {
        () = controller::run(
            ctx,
            args.namespace,
            discovery,
            gc,
            args.max_concurrent_reconciles,
        ) => {}
        () = async {
            stopped(stopping).await;
            tokio::time::sleep(http.shutdown_grace).await;
        } => tracing::warn!("the controller did not stop within the shutdown grace: stopping it"),
    }
    elections.abort();
    // The controller stops on the same signals; let the API finish the requests in flight.
    server.await?;
    metrics_server.await?;
    tracing::info!("stopped");
    Ok(())
}

/// Listens for SIGTERM (how Kubernetes stops a Pod) and SIGINT from now on, so that a signal
/// that arrives while the operator starts is not lost: the receiver turns `true` at the first.
fn shutdown_signals() -> anyhow::Result<tokio::sync::watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("installing a SIGTERM handler: {e}"))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("installing a SIGINT handler: {e}"))?;
    let (signalled, stopping) = tokio::sync::watch::channel(false);
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

/// Resolves once a shutdown signal has arrived.
async fn stopped(mut stopping: tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|signalled| *signalled).await;
}
