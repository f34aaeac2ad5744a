//! `proxy-operator`: the effects shell around the pure core (see `docs/architecture.md`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use proxy_core::lease::LeaseConfig;
use proxy_operator::config::ProvidersConfig;
use proxy_operator::controller::{self, Context};
use proxy_operator::discovery::{self, Discovery, Limits};
use proxy_operator::health::HealthEngine;
use proxy_operator::health::probe::Prober;
use proxy_operator::metrics::Metrics;
use proxy_operator::providers::registry::Registry;

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
    Run(RunArgs),
    /// Validate a providers config file and print a one-line summary. Exits 1 with every
    /// problem (each naming the path of the offending entry) when it is invalid.
    CheckConfig {
        /// The providers config (YAML), as passed to `--providers-config`.
        file: PathBuf,
    },
    /// Print the Proxy CustomResourceDefinition as YAML (`... crd | kubectl apply -f -`).
    Crd,
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
    /// Address of the metrics endpoint (`GET /metrics`, Prometheus text format).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    metrics_addr: std::net::SocketAddr,
    /// Address of the discovery API (crawlers lease proxies here).
    #[arg(long, env = "DISCOVERY_ADDR", default_value = "0.0.0.0:8090")]
    discovery_addr: std::net::SocketAddr,
    /// Bearer token the discovery API requires. Without one the API is open to anyone who
    /// can reach it (the operator warns loudly at start).
    #[arg(long, env = "DISCOVERY_TOKEN", hide_env_values = true)]
    discovery_token: Option<String>,
    /// The longest lease a client may ask for, in seconds.
    #[arg(long, default_value_t = 3600)]
    max_lease_ttl_seconds: u64,
    /// How long a proxy is not leased for a target after a `rate_limited` report, in seconds.
    #[arg(long, default_value_t = 300)]
    rate_limited_cooldown_seconds: u64,
    /// How long a proxy is not leased for a target after a `blocked` report, in seconds.
    #[arg(long, default_value_t = 1800)]
    blocked_cooldown_seconds: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
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
        Command::Crd => {
            print!("{}", proxy_crd::Proxy::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
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
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(HealthEngine::new(
        prober,
        args.probe_concurrency,
        metrics.clone(),
    ));
    let client = kube::Client::try_default().await?;
    let providers = Registry::build(&config, &client, &metrics)?;
    let seconds = |s: f64| Duration::from_secs_f64(s.max(0.01));
    let timing = proxy_core::Timing {
        provisioning_poll: seconds(args.provisioning_poll_seconds),
        drift_poll: seconds(args.drift_poll_seconds),
        deletion_poll: seconds(args.deletion_poll_seconds),
        ..proxy_core::Timing::default()
    };
    tracing::info!(providers = %config.summary(), namespace = ?args.namespace, "proxy-operator starting");
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
    let metrics_server = tokio::spawn(proxy_operator::metrics::serve(
        metrics.clone(),
        metrics_listener,
        shutdown_signal(),
    ));
    let ctx = Arc::new(Context::new(client, providers, timing, health, metrics));
    let server = tokio::spawn(discovery::serve(
        discovery.clone(),
        listener,
        shutdown_signal(),
    ));
    controller::run(ctx, args.namespace, discovery).await;
    // The controller stops on the same signals; let the API finish the requests in flight.
    server.await?;
    metrics_server.await?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM (how Kubernetes stops a Pod) or SIGINT.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
