//! `proxy-operator run`: builds the operator's parts from the parsed flags ([`crate::args`])
//! and hands them to [`crate::loops`], which runs them until SIGTERM or SIGINT.
//!
//! Everything that can refuse a start (the providers config, the probe CA bundle, the flags'
//! checks, the API server, the listeners, the record file) is tried here, before any loop
//! runs: a replica that cannot start never takes part in the leadership election.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Namespace;
use proxy_core::record::{Config as RecordConfig, Header, Operator};

use crate::args::RunArgs;
use crate::config::ProvidersConfig;
use crate::discovery::owner_label::OwnerLabel;
use crate::discovery::ownership::Store as LeaseBookStore;
use crate::discovery::{Discovery, Replica};
use crate::events::Events;
use crate::gate::{FIELD_MANAGER, Gate};
use crate::health::HealthEngine;
use crate::health::probe::Prober;
use crate::leadership::Leadership;
use crate::loops::{self, Parts, ProviderChecks, Servers};
use crate::metrics::Metrics;
use crate::providers::metered::Bounds;
use crate::providers::registry::Registry;
use crate::providers::types::Env;
use crate::recorder::Recorder;
use crate::server::BearerToken;
use crate::telemetry::{self, LogFormat};
use crate::writes::Writer;

/// Runs the operator until a shutdown signal; the exit code says whether it started.
pub fn run(args: RunArgs) -> ExitCode {
    // Dropped when `run` returns, after the runtime: flushes the spans not yet exported.
    let _telemetry = telemetry::init(args.log_format.unwrap_or_else(LogFormat::detect));
    // A bad config stops the operator here, with the offending path, before it touches anything.
    let config = match ProvidersConfig::load(&args.providers_config) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("proxy-operator: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("proxy-operator: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Builds every part, then runs the loops until the shutdown signals stop them.
async fn serve(args: RunArgs, config: ProvidersConfig) -> anyhow::Result<()> {
    // First, so that a signal that arrives while the operator starts is not lost.
    let stopping = loops::shutdown_signals()?;
    let prober = prober(args.probe_ca_bundle.as_deref(), args.probe_concurrency)?;
    args.check_gc_scope()?;
    let candidate = args.candidate()?;
    let advertised = args.advertised_url();
    let leadership = Arc::new(
        if args.no_leader_election {
            Leadership::unopposed(candidate)
        } else {
            Leadership::new(candidate)
        }
        .advertising(advertised.clone()),
    );
    if advertised.is_none() && !args.no_leader_election {
        tracing::warn!(
            "no --discovery-advertise-url (nor POD_IP): while another replica leads, this one cannot be forwarded to, and while this one leads the others cannot forward lease requests to it"
        );
    }
    let metrics = Arc::new(Metrics::default());
    crate::supervise::count_from_zero(&metrics);
    let health = Arc::new(HealthEngine::new(
        prober,
        args.probe_concurrency,
        metrics.clone(),
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
    let bounds = Bounds {
        deadline: args.call_timeout_seconds,
        concurrent_calls: args.max_concurrent_provider_calls,
    };
    let configured = config
        .providers
        .iter()
        .map(|p| (p.name.as_str(), &p.settings));
    let providers = Registry::build(configured, &env, &metrics, bounds).await;
    let gc = args.gc(&installation);
    let timing = args.timing();
    tracing::info!(providers = %config.summary(), namespace = ?args.namespace, identity = leadership.identity(), installation, "proxy-operator starting");
    let (checkpoint_interval, fence) = args.lease_checkpoints();
    let discovery = Arc::new(Discovery::replicated(
        args.discovery_token.as_deref(),
        args.lease_config(),
        args.limits(),
        Replica {
            own_url: advertised,
            leadership: leadership.clone(),
        },
        fence,
    ));
    let lease_book = Arc::new(
        LeaseBookStore::new(
            kube::Api::namespaced(client.clone(), &args.leadership_namespace),
            format!("{}-lease-book", args.leadership_name),
            checkpoint_interval,
            metrics.clone(),
        )
        .marking(args.pod_name.clone().map(|pod| {
            let namespace = args
                .pod_namespace
                .as_ref()
                .unwrap_or(&args.leadership_namespace);
            OwnerLabel::new(kube::Api::namespaced(client.clone(), namespace), pod)
        })),
    );
    let discovery_listener = tokio::net::TcpListener::bind(args.discovery_addr)
        .await
        .map_err(|e| anyhow!("--discovery-addr {}: {e}", args.discovery_addr))?;
    tracing::info!(addr = %discovery_listener.local_addr()?, "discovery API listening");
    metrics.read_at_scrape(&discovery);
    let admin_listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| anyhow!("--metrics-addr {}: {e}", args.metrics_addr))?;
    tracing::info!(addr = %admin_listener.local_addr()?, "metrics listening");
    let probe_listener = tokio::net::TcpListener::bind(args.probe_addr)
        .await
        .map_err(|e| anyhow!("--probe-addr {}: {e}", args.probe_addr))?;
    tracing::info!(addr = %probe_listener.local_addr()?, "probes (/healthz, /readyz) listening");
    let recorder = Arc::new(
        Recorder::new(
            record_header(&config, timing),
            args.record_per_object,
            args.record_budget_bytes,
            args.record_file(),
        )
        .map_err(|e| {
            anyhow!(
                "--record-file {}: {e}",
                args.record_file
                    .as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
            )
        })?,
    );
    metrics.read_at_scrape(&recorder);
    let events = Arc::new(Events::new(
        client.clone(),
        FIELD_MANAGER,
        std::env::var("POD_NAME").ok(),
    ));
    let gate = Gate::new(leadership.clone(), metrics.clone());
    let writer = Writer::new(client, gate, events, args.call_timeout_seconds);
    let servers = Servers {
        discovery: discovery_listener,
        admin: admin_listener,
        probes: probe_listener,
        token: BearerToken::new(args.discovery_token.as_deref()),
        http: args.http(),
    };
    let provider_checks = ProviderChecks {
        namespace: args.leadership_namespace.clone(),
        types: config
            .providers
            .iter()
            .map(|p| (p.name.clone(), p.settings.type_name()))
            .collect(),
        schedule: args.provider_checks(),
    };
    let parts = Parts {
        writer,
        providers,
        timing,
        health,
        metrics,
        leadership,
        recorder,
        banned_sites: args.banned_sites,
        discovery,
        lease_book,
        namespace: args.namespace,
        gc,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        kube_config,
        leadership_namespace: args.leadership_namespace.clone(),
        provider_checks,
        leadership_name: args.leadership_name,
        servers,
    };
    loops::run(parts, stopping).await
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
