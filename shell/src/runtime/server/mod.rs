//! The HTTP server under the discovery API, the admin port and the probe port ([`probes`]): warp's filters served by
//! hyper's HTTP/1 connection with the limits warp's own server does not set.
//!
//! - **Header read timeout.** A client must send a request's whole head within it, counted
//!   from the moment the connection waits for one, so a slow-loris client that sends its
//!   headers a byte at a time, or an idle keep-alive connection, is closed after it.
//! - **Request timeout.** A request must be read and answered within it: a body that trickles
//!   in gets `408 request_timeout` and the connection is closed.
//! - **Bounded graceful shutdown.** When `shutdown` resolves the listener closes, idle
//!   connections close, and requests in flight finish; after the grace whatever is still
//!   open is dropped, so no client can keep the process alive.
//! - **Client errors are not server errors.** A malformed request, a timeout or a client that
//!   hangs up is logged at debug; nothing a client sends is logged at error.
//!
//! Each request carries its client's address as a [`Peer`] extension, for filters that
//! depend on where the request comes from (`warp::ext::get::<Peer>()`).

mod auth;
pub mod probes;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use warp::http::{HeaderValue, StatusCode, header};
use warp::{Filter, Reply};

pub use auth::BearerToken;

/// The limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a client may take to send a request's head (and how long a connection may
    /// sit idle between requests).
    pub header_read_timeout: Duration,
    /// How long a request may take from its head to its answer, body included.
    pub request_timeout: Duration,
    /// How long requests in flight may run on after the shutdown signal.
    pub shutdown_grace: Duration,
}

impl Default for Settings {
    /// 10 s for headers, 30 s for a request, 10 s of shutdown grace (a Pod's default
    /// termination grace is 30 s, so the operator is gone well before it is killed).
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// The address of the client that sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// The next connection on `listener`, or `None` once `shutdown` resolves. A failed accept
/// (out of file descriptors, most likely) is logged as `server`'s and tried again 100 ms
/// later, once connections may have closed. Both programs' servers accept through it.
pub async fn accept(
    listener: &TcpListener,
    server: &str,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            () = shutdown.as_mut() => return None,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(error) => {
                    tracing::warn!(server, %error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// Serves `filter` on `listener` until `shutdown` resolves, then for at most the shutdown
/// grace. `name` names the server in its log lines.
pub async fn serve<F, R>(
    name: &'static str,
    filter: F,
    listener: TcpListener,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) where
    F: Filter<Extract = (R,), Error = Infallible> + Clone + Send + Sync + 'static,
    R: Reply,
{
    let service = TowerToHyperService::new(warp::service(filter));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let Some((stream, peer)) = accept(&listener, name, shutdown.as_mut()).await else {
            break;
        };
        while connections.try_join_next().is_some() {}
        let service = service.clone();
        let timed = hyper::service::service_fn(move |mut request| {
            request.extensions_mut().insert(Peer(peer));
            let answer = hyper::service::Service::call(&service, request);
            async move {
                Ok::<_, Infallible>(
                    match tokio::time::timeout(settings.request_timeout, answer).await {
                        Ok(Ok(response)) => response,
                        Err(_elapsed) => request_timeout(name, peer),
                    },
                )
            }
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(settings.header_read_timeout)
            .serve_connection(TokioIo::new(stream), timed);
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(error) = connection.await {
                log_connection_error(name, peer, &error);
            }
        });
    }
    drop(listener);
    let open = connections.len();
    if tokio::time::timeout(settings.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            server = name,
            open = connections.len(),
            grace_seconds = settings.shutdown_grace.as_secs_f64(),
            "connections still open after the shutdown grace: closing them"
        );
    } else {
        tracing::debug!(server = name, open, "every connection finished");
    }
    connections.shutdown().await;
}

/// The answer to a request that was not read in time; the connection closes after it.
fn request_timeout(name: &'static str, peer: SocketAddr) -> warp::reply::Response {
    tracing::debug!(server = name, %peer, "request not read within the request timeout");
    let body = serde_json::json!({
        "error": "request_timeout",
        "message": "the request was not received within the request timeout",
    });
    let mut response =
        warp::reply::with_status(warp::reply::json(&body), StatusCode::REQUEST_TIMEOUT)
            .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A connection that ended in an error. Malformed requests, timeouts and clients that hang
/// up are the client's doing (debug); the rest would be ours (warn).
fn log_connection_error(name: &'static str, peer: SocketAddr, error: &hyper::Error) {
    if error.is_user() {
        tracing::warn!(server = name, %peer, %error, "connection failed");
    } else {
        tracing::debug!(server = name, %peer, %error, "client connection ended with an error");
    }
}

#[cfg(test)]
mod tests;
