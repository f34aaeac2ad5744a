//! `proxy-operator gateway`: builds the gateway from its flags ([`super::Args`]) on the
//! shared [`runtime`](crate::runtime) and serves until SIGTERM or SIGINT. Everything that can
//! refuse a start (the tenants, the username labels, the listeners) is tried before the first
//! connection is accepted.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;

use super::args::Args;
use super::book::Book;
use super::metrics::GatewayMetrics;
use super::tenants::Tenants;
use super::{Gateway, serve};
use crate::runtime::server::probes;
use crate::runtime::signals::{self, stopped};

/// Runs the gateway until a shutdown signal; the exit code says whether it started.
pub fn run(args: Args) -> ExitCode {
    crate::runtime::start("proxy-operator gateway", args.log_format, gateway(args))
}

async fn gateway(args: Args) -> anyhow::Result<()> {
    let signals = signals::shutdown_signals()?;
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
    // The admin port: `GET /metrics`, and `GET /healthz` and `GET /readyz` for kubelet (the
    // gateway is ready once it serves: it keeps no state to load).
    let routes = crate::runtime::admin::routes(
        metrics,
        probes::filter(Arc::new(|| Ok(()))),
        "GET /metrics, /healthz or /readyz",
    );
    let admin = tokio::spawn(crate::runtime::server::serve(
        "gateway-admin",
        routes,
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
