//! `proxy-operator gateway`: one proxy address for any client (curl, requests, httpx,
//! Scrapy, Playwright, Crawlee, any language), in front of the fleet (`docs/gateway.md`).
//!
//! An HTTP/1.1 forward proxy, on hyper and tokio directly: `CONNECT host:port` opens a
//! tunnel, an absolute `http://` request is forwarded. The proxy username carries the options
//! (`user-acme-session-cart7-ttl-600-geo-eu`), the password the tenant's token. Each client
//! connection asks the one lease book for an upstream (the discovery API, [`book`]): a session
//! is a lease there, so it keeps its upstream across connections and gateway replicas until
//! its TTL or a ban; without a session every connection is a fresh choice. Every decision is
//! the core's (`proxy_core::gateway`, `proxy_core::lease`); this module is the data path:
//! accept, authenticate, ask, connect, copy bytes, forward.
//!
//! - [`connection`]: one client connection: CONNECT, plain HTTP, `POST /v1/report`;
//! - [`upstream`]: a connection to an upstream proxy, and a tunnel through it;
//! - `tunnel`: a tunnel's bytes both ways, with the idle timeout;
//! - `expect`: a request body held back until the upstream asks for it (`100 Continue`), and
//!   `linger`: one the upstream stopped reading, read to its end, so that a site's early
//!   answer reaches the client;
//! - [`book`]: the lease book's client; [`tenants`]: the tenants' tokens;
//! - [`metrics`]: the gateway's own registry; [`run`](mod@run): the subcommand's wiring,
//!   from its flags ([`Args`]); `open_files`: its open-files limit, raised at start (two per
//!   client connection).
//!
//! Hardening, as the other servers have it ([`crate::runtime::server`]): a client must send a
//! request's head within `--http-header-timeout-seconds` (also the idle limit between
//! requests); an upstream must connect within `--connect-timeout-seconds` and answer within
//! `--http-request-timeout-seconds`; a tunnel idle for `--idle-timeout-seconds` is closed; a
//! panic while serving a request is a 500 and counted (`proxy_operator_panics_total{loop=
//! "gateway"}`), never a dead gateway; on SIGTERM the listener closes, connections finish
//! their requests and tunnels run on for at most `--shutdown-grace-seconds`; then what is
//! left closes, and the gateway exits once every lease it held is released.
//!
//! HTTP/2: the connection's service and the tunnel's copy take any request and any upgraded
//! stream, so serving HTTP/2's extended CONNECT is a second builder in [`serve`], not a new
//! data path.

mod args;
pub mod book;
pub mod connection;
mod counted;
mod exchange;
mod expect;
mod linger;
pub mod metrics;
mod open_files;
pub mod run;
pub mod tenants;
mod tunnel;
pub mod upstream;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use proxy_core::gateway::Grammar;
use proxy_core::gateway::target::OwnAddresses;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use self::args::Args;
use self::book::Book;
use self::connection::Connection;
use self::metrics::GatewayMetrics;
pub use self::run::run;
use self::tenants::Tenants;
use crate::locks;
use crate::runtime::supervise;

/// The gateway's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a client may take to send a request's head (and may idle between requests).
    pub header_read_timeout: Duration,
    /// How long an upstream may take to answer a forwarded request's head, from the end of
    /// the request's body.
    pub request_timeout: Duration,
    /// How long connecting to an upstream (and its answer to a CONNECT) may take.
    pub connect_timeout: Duration,
    /// How long a tunnel may carry nothing before it is closed.
    pub idle_timeout: Duration,
    /// How long requests and tunnels may run on after SIGTERM.
    pub shutdown_grace: Duration,
    /// How long the body of a request that expects `100 Continue` waits for the upstream's
    /// (`expect`): curl's own wait.
    pub continue_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            continue_wait: Duration::from_secs(1),
        }
    }
}

/// What every connection of one gateway shares.
#[derive(Debug)]
pub struct Gateway {
    /// The lease book.
    pub book: Book,
    /// The tenants' tokens.
    pub tenants: Tenants,
    /// The username's grammar.
    pub grammar: Grammar,
    /// Where the gateway can be reached: a CONNECT there is refused.
    pub own: OwnAddresses,
    /// The timeouts.
    pub settings: Settings,
    /// The metrics.
    pub metrics: Arc<GatewayMetrics>,
    /// The open tunnels, stopped together at the end of the shutdown grace.
    tunnels: Mutex<JoinSet<()>>,
    /// Turns `true` when the shutdown grace is over: the tunnels close.
    stop: watch::Sender<bool>,
}

impl Gateway {
    /// A gateway of these parts.
    pub fn new(
        book: Book,
        tenants: Tenants,
        grammar: Grammar,
        own: OwnAddresses,
        settings: Settings,
        metrics: Arc<GatewayMetrics>,
    ) -> Self {
        Self {
            book,
            tenants,
            grammar,
            own,
            settings,
            metrics,
            tunnels: Mutex::default(),
            stop: watch::channel(false).0,
        }
    }

    /// Runs a tunnel until it ends or the shutdown grace is over, under the panic boundary,
    /// counted as an open connection.
    fn spawn_tunnel(&self, work: impl Future<Output = ()> + Send + 'static) {
        let open = self.metrics.opened();
        let metrics = self.metrics.clone();
        let mut tunnels = locks::lock(&self.tunnels);
        while tunnels.try_join_next().is_some() {}
        tunnels.spawn(async move {
            let _open = open;
            let _ = supervise::catch("gateway", "tunnel", || metrics.panicked(), work).await;
        });
    }

    /// Resolves when the tunnels must close.
    fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }
}

/// Serves `gateway` on `listener` until `shutdown` resolves, then lets requests in flight and
/// open tunnels finish within the shutdown grace, and closes what is left.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    let settings = gateway.settings;
    let (drain, draining) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let Some((stream, peer)) =
            crate::runtime::server::accept(&listener, "gateway", shutdown.as_mut()).await
        else {
            break;
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let local = stream
            .local_addr()
            .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |addr| addr.ip());
        let connection = Arc::new(Connection::new(gateway.clone(), local));
        let service = hyper::service::service_fn(move |request| connection.clone().serve(request));
        let mut draining = draining.clone();
        let open = gateway.metrics.accepted();
        connections.spawn(async move {
            let _open = open;
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(settings.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = async { let _ = draining.wait_for(|drain| *drain).await; } => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                // A client's doing (a malformed request, a timeout, a hang-up): debug.
                tracing::debug!(%peer, %error, "a gateway client connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = drain.send(true);
    let open = connections.len();
    let mut tunnels = std::mem::take(&mut *locks::lock(&gateway.tunnels));
    let finished = tokio::time::timeout(settings.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
        while tunnels.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            grace_seconds = settings.shutdown_grace.as_secs_f64(),
            "gateway connections still open after the shutdown grace: closing them"
        );
    } else {
        tracing::debug!(open, "every gateway connection finished");
    }
    // The tunnels close and release their leases: those open since the grace began and
    // those a request opened during it. A connection still open is aborted (its upstream's
    // lease is released as it is dropped), which also ends a tunnel still waiting for it.
    let _ = gateway.stop.send(true);
    connections.shutdown().await;
    let late = std::mem::take(&mut *locks::lock(&gateway.tunnels));
    for mut closing in [tunnels, late] {
        while closing.join_next().await.is_some() {}
    }
    gateway.book.settle().await;
}

#[cfg(test)]
mod tests;
