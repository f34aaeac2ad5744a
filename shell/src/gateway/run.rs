//! `proxy-operator gateway`: builds the gateway from its flags ([`crate::args::GatewayArgs`])
//! and serves until SIGTERM or SIGINT. Everything that can refuse a start (the tenants, the
//! username labels, the listeners) is tried before the first connection is accepted.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;
use warp::http::StatusCode;
use warp::reply::Response;
use warp::{Filter, Reply};

use super::book::Book;
use super::metrics::GatewayMetrics;
use super::tenants::Tenants;
use super::{Gateway, serve};
use crate::args::GatewayArgs;
use crate::telemetry::{self, LogFormat};

/// Runs the gateway until a shutdown signal; the exit code says whether it started.
pub fn run(args: GatewayArgs) -> ExitCode {
    let _telemetry = telemetry::init(args.log_format.unwrap_or_else(LogFormat::detect));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("proxy-operator gateway: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(gateway(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("proxy-operator gateway: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn gateway(args: GatewayArgs) -> anyhow::Result<()> {
    let signals = crate::loops::shutdown_signals()?;
    let tenants = Tenants::load(&args.tenants_dir)
        .map_err(|e| anyhow!("--tenants-dir {}: {e}", args.tenants_dir.display()))?;
    if tenants.is_empty() {
        tracing::warn!(dir = %args.tenants_dir.display(), "no tenant in --tenants-dir: every client gets 407 until one is added");
    }
    let grammar = args.grammar()?;
    let holder = args.holder()?;
    if args.discovery_token.is_none() {
        tracing::warn!(
            "no DISCOVERY_TOKEN: the gateway asks the lease book without a token, which a protected discovery API refuses"
        );
    }
    let metrics = Arc::new(GatewayMetrics::default());
    let book = Book::new(
        &args.discovery_url,
        args.discovery_token.clone(),
        holder.clone(),
        metrics.clone(),
    );
    // A predecessor's leases go back before this gateway's first (a client's first
    // connection waits for it, if it comes first).
    let predecessor = tokio::spawn({
        let book = book.clone();
        async move { book.release_predecessor().await }
    });
    let gateway = Arc::new(Gateway::new(
        book,
        tenants.clone(),
        grammar,
        args.own_addresses(),
        args.settings(),
        metrics.clone(),
    ));
    let (open_files, failed) = super::open_files::raise();
    if let Some(error) = failed {
        tracing::warn!(%error, open_files, "could not raise the open-files limit to the hard limit: at most about half as many client connections fit");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow!("--listen {}: {e}", args.listen))?;
    tracing::info!(addr = %listener.local_addr()?, discovery = args.discovery_url, tenants = tenants.len(), holder, open_files, "gateway listening");
    let admin = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| anyhow!("--metrics-addr {}: {e}", args.metrics_addr))?;
    tracing::info!(addr = %admin.local_addr()?, "gateway metrics and probes listening");
    let reload = tokio::spawn(tenants.reload(args.tenants_dir.clone()));
    let admin = tokio::spawn(crate::server::serve(
        "gateway-admin",
        admin_routes(metrics),
        admin,
        args.http(),
        stopped(signals.clone()),
    ));
    serve(gateway, listener, stopped(signals)).await;
    predecessor.abort();
    reload.abort();
    admin.await?;
    tracing::info!("gateway stopped");
    Ok(())
}

/// Resolves at the first shutdown signal.
async fn stopped(mut signals: tokio::sync::watch::Receiver<bool>) {
    let _ = signals.wait_for(|signalled| *signalled).await;
}

/// The admin port: `GET /metrics`, and `GET /healthz` and `GET /readyz` for kubelet (the
/// gateway is ready once it serves: it keeps no state to load).
fn admin_routes(
    metrics: Arc<GatewayMetrics>,
) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    let scrape = warp::path!("metrics").and(warp::get()).map(move || {
        warp::reply::with_header(
            metrics.encode(),
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .into_response()
    });
    let probe = warp::path!("healthz")
        .or(warp::path!("readyz"))
        .unify()
        .and(warp::get())
        .map(|| warp::reply::with_status("ok\n", StatusCode::OK).into_response());
    scrape
        .or(probe)
        .unify()
        .recover(|_: warp::Rejection| async {
            Ok::<_, Infallible>(
                warp::reply::with_status(
                    "no such endpoint: GET /metrics, /healthz or /readyz\n",
                    StatusCode::NOT_FOUND,
                )
                .into_response(),
            )
        })
        .unify()
}
