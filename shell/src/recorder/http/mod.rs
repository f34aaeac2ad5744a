//! The recorder's HTTP face, on the operator's admin port (`--metrics-addr`, beside `GET
//! /metrics`): `GET /debug/recording[?object=namespace/name][&since=<RFC 3339 time>]`, the
//! records the recorder keeps, streamed as a file `proxy-operator replay` reads.
//!
//! A recording holds every recorded Proxy's spec and status, so it is not for everyone who
//! can scrape metrics: with a bearer token set (`--discovery-token`) it takes that token;
//! without one it answers only clients on the loopback interface (`kubectl port-forward`
//! arrives there), and refuses the rest.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use warp::http::StatusCode;
use warp::reply::Response;
use warp::{Filter, Rejection, Reply};

use super::{Filter as Records, Recorder};
use crate::runtime::metrics::Registry;
use crate::runtime::server::{BearerToken, Peer, Settings};

/// Why a request for a recording is refused, if it is.
fn refusal(
    token: &BearerToken,
    authorization: Option<&str>,
    peer: Option<Peer>,
) -> Option<Response> {
    let (status, message) = if token.is_set() {
        if token.accepts(authorization) {
            return None;
        }
        (
            StatusCode::UNAUTHORIZED,
            "a valid bearer token is required (Authorization: Bearer <token>)\n",
        )
    } else {
        if peer.is_some_and(|Peer(addr)| addr.ip().is_loopback()) {
            return None;
        }
        (
            StatusCode::FORBIDDEN,
            "without --discovery-token, /debug/recording answers only loopback clients \
             (kubectl port-forward)\n",
        )
    };
    Some(warp::reply::with_status(message, status).into_response())
}

/// The records a `GET /debug/recording` asks for: `object=namespace/name`,
/// `since=<RFC 3339 time>`; anything else is refused with what is wrong.
fn records(query: &BTreeMap<String, String>) -> Result<Records, String> {
    let mut filter = Records::default();
    for (name, value) in query {
        match name.as_str() {
            "object" => {
                filter.object = Some(value.parse().map_err(|e| format!("object: {e}\n"))?);
            }
            "since" => {
                filter.since = Some(value.parse().map_err(|e| {
                    format!(
                        "since: {value:?} is not an RFC 3339 time (2026-12-01T10:00:00Z): {e}\n"
                    )
                })?);
            }
            other => {
                return Err(format!(
                    "unknown query parameter {other:?}: object=namespace/name and since=<RFC 3339 time> are taken\n"
                ));
            }
        }
    }
    Ok(filter)
}

/// `GET /debug/recording`, with the token (or a loopback client) it takes.
pub fn route(
    recorder: Arc<Recorder>,
    token: BearerToken,
) -> impl Filter<Extract = (Response,), Error = Rejection> + Clone {
    warp::path!("debug" / "recording")
        .and(warp::get())
        .and(warp::header::optional::<String>("authorization"))
        .and(warp::ext::optional::<Peer>())
        .and(warp::query::<BTreeMap<String, String>>())
        .map(
            move |authorization: Option<String>,
                  peer: Option<Peer>,
                  query: BTreeMap<String, String>| {
                if let Some(refused) = refusal(&token, authorization.as_deref(), peer) {
                    return refused;
                }
                let filter = match records(&query) {
                    Ok(filter) => filter,
                    Err(message) => {
                        return warp::reply::with_status(message, StatusCode::BAD_REQUEST)
                            .into_response();
                    }
                };
                let lines = recorder.dump(&filter);
                let chunks = futures::stream::iter(lines.map(Ok::<_, Infallible>));
                warp::reply::with_header(
                    warp::reply::stream(chunks),
                    "content-type",
                    "application/jsonl",
                )
                .into_response()
            },
        )
}

/// Serves the operator's admin port on `listener` until `shutdown` resolves (see
/// [`crate::runtime::server`]): the admin router's `GET /metrics` of `registry`, and the
/// recording.
pub async fn serve_admin(
    registry: Arc<Registry>,
    recorder: Arc<Recorder>,
    token: BearerToken,
    listener: tokio::net::TcpListener,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let routes = crate::runtime::admin::routes(
        registry,
        route(recorder, token),
        "GET /metrics or GET /debug/recording",
    );
    crate::runtime::server::serve("admin", routes, listener, settings, shutdown).await;
}

#[cfg(test)]
mod tests;
