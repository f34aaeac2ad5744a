//! Routes and handlers of the discovery API. Handlers are plain functions of the state and
//! the parsed request, one module per resource: `proxies` (the listing, a proxy's detail),
//! `leases` (lease, release, a holder's leases), `reports`, `sessions`; the bodies they read
//! and write are [`crate::wire`]'s. This module routes (one dispatch for every route),
//! authenticates and reads bodies.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::StreamExt;
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireError, AcquireRequest, Call, Circuit, Field, Fields, Grant, Labels, Lease, ListQuery,
    ProxyView, Report, ReportId, ReportResult, Selector, SessionName, Site, StatusMeaning, Sticky,
    checked_holder, checked_target, meaning_of, seconds_until,
};
use serde::Serialize;
use warp::http::{HeaderValue, StatusCode, header};
use warp::reply::Response;
use warp::{Filter, Reply};

use super::error::{ApiError, json_response, recover};
use super::forward::{FORWARDED_HEADER, Incoming};
use super::{Away, BODY_LIMIT, Discovery};
use crate::credentials::Credentials;
use crate::wire::{
    LeaseGranted, LeaseRequest, LeasedProxy, Moved, NoMatchBody, ReportAnswer, ReportRequest,
};

mod leases;
mod proxies;
mod reports;
mod sessions;

use self::leases::*;
use self::proxies::*;
use self::reports::*;
use self::sessions::*;

/// Every route, with authentication, the body limit, panic recovery, JSON errors and the
/// request log. A request this replica does not answer from its book is forwarded to the
/// owner or refused for now (`Discovery::serving`).
///
/// One filter reads what every route needs and `dispatch` routes by hand: a tree of warp
/// filters (one per route, joined by `or`) was two thirds of what a lease pair cost more
/// than a trivial warp handler, on the path crawlers call most (docs/benchmarks.md).
pub fn routes(
    state: Arc<Discovery>,
) -> impl Filter<Extract = (impl warp::Reply,), Error = Infallible> + Clone {
    incoming()
        .and(warp::body::stream())
        .then(move |incoming, body| dispatch(state.clone(), incoming, body))
        .recover(recover)
        .unify()
        .with(warp::log::custom(|info| {
            tracing::info!(
                method = %info.method(),
                path = info.path(),
                status = info.status().as_u16(),
                elapsed_ms = info.elapsed().as_millis() as u64,
                "discovery request"
            );
        }))
}

/// A route of the API, told by its path alone; the path's parameters as they are in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    Healthz,
    List,
    Detail {
        namespace: &'a str,
        name: &'a str,
    },
    /// `/v1/leases`: a holder's leases (GET), a new lease (POST), a holder's release (DELETE).
    Leases,
    Release {
        id: &'a str,
    },
    Report {
        id: &'a str,
    },
    EndSession {
        name: &'a str,
    },
    SessionReport {
        name: &'a str,
    },
}

impl<'a> Route<'a> {
    /// The route of `path`, by warp's rules: segments as they are (no percent-decoding), no
    /// empty one, and one trailing slash allowed.
    fn of(path: &'a str) -> Option<Self> {
        let path = path.strip_prefix('/').unwrap_or(path);
        let path = path.strip_suffix('/').unwrap_or(path);
        let mut segments = path.split('/');
        let parts = [(); 4].map(|()| segments.next());
        if segments.next().is_some() {
            return None;
        }
        let given = |segment: &'a str| (!segment.is_empty()).then_some(segment);
        Some(match parts {
            [Some("healthz"), None, ..] => Self::Healthz,
            [Some("v1"), Some("proxies"), None, _] => Self::List,
            [Some("v1"), Some("proxies"), Some(namespace), Some(name)] => Self::Detail {
                namespace: given(namespace)?,
                name: given(name)?,
            },
            [Some("v1"), Some("leases"), None, _] => Self::Leases,
            [Some("v1"), Some("leases"), Some(id), None] => Self::Release { id: given(id)? },
            [Some("v1"), Some("leases"), Some(id), Some("report")] => {
                Self::Report { id: given(id)? }
            }
            [Some("v1"), Some("sessions"), Some(name), None] => {
                Self::EndSession { name: given(name)? }
            }
            [Some("v1"), Some("sessions"), Some(name), Some("report")] => {
                Self::SessionReport { name: given(name)? }
            }
            _ => return None,
        })
    }

    /// The methods the route takes, as the `Allow` header of a 405 names them (RFC 9110).
    fn allow_text(self) -> &'static str {
        match self {
            Self::Healthz | Self::List | Self::Detail { .. } => "GET",
            Self::Leases => "DELETE, GET, POST",
            Self::Report { .. } | Self::SessionReport { .. } => "POST",
            Self::Release { .. } | Self::EndSession { .. } => "DELETE",
        }
    }

    /// Whether the route takes `method`.
    fn takes(self, method: &str) -> bool {
        self.allow_text().split(", ").any(|m| m == method)
    }

    /// Whether a query is refused for `method`: only the listings and the release by holder
    /// take one (`/healthz`, for probes, ignores one, as it always did).
    fn refuses_query(self, method: &str) -> bool {
        match self {
            Self::Healthz | Self::List => false,
            Self::Leases => method == "POST",
            _ => true,
        }
    }

    /// The `Allow` header of a 405 on this route (RFC 9110).
    fn allow(self) -> HeaderValue {
        HeaderValue::from_static(self.allow_text())
    }
}

/// Routes a request: 404 for no route, 405 (with `Allow`) for the wrong method, 401 for a
/// missing or wrong token (`/healthz` needs none), the body read only for a route that takes
/// one and only once the token is checked, then the route's handler.
async fn dispatch<B: Buf>(
    state: Arc<Discovery>,
    incoming: Incoming,
    body: impl futures::Stream<Item = Result<B, warp::Error>>,
) -> Response {
    let Some(route) = Route::of(incoming.path.as_str()) else {
        return ApiError::not_found().into_response();
    };
    let method = incoming.method.as_str();
    if !route.takes(method) {
        let mut response = ApiError::method_not_allowed().into_response();
        response.headers_mut().insert(header::ALLOW, route.allow());
        return response;
    }
    if route != Route::Healthz && !state.authorized(incoming.authorization.as_deref()) {
        return ApiError::unauthorized().into_response();
    }
    let body = if method == "POST" {
        match read_limited(body).await {
            Ok(body) => body,
            Err(error) => return error.into_response(),
        }
    } else {
        bytes::Bytes::new()
    };
    let (forwarded, query) = (incoming.forwarded, incoming.query.as_str());
    // The routes that take no query refuse one, rather than ignore what the client meant.
    let outcome = if route.refuses_query(method)
        && let Err(refused) = no_query(query)
    {
        Err(refused)
    } else {
        match route {
            Route::Healthz => Ok(json_response(
                StatusCode::OK,
                &serde_json::json!({"status": "ok"}),
            )),
            Route::List => {
                // A listing of a large fleet takes milliseconds to build: on a blocking
                // thread, so that it never holds up the lease requests the async workers serve.
                let (state, query) = (state.clone(), query.to_owned());
                tokio::task::spawn_blocking(move || guarded(|| list(&state, forwarded, &query)))
                    .await
                    .unwrap_or_else(|_| Err(Away::Answer(ApiError::internal())))
            }
            Route::Detail { namespace, name } => {
                guarded(|| detail(&state, forwarded, &ProxyKey::new(namespace, name)))
            }
            Route::Leases => match method {
                "POST" => guarded(|| acquire(&state, forwarded, &body)),
                "GET" => guarded(|| held(&state, forwarded, query)),
                _ => guarded(|| release_held(&state, forwarded, query)),
            },
            Route::Release { id } => guarded(|| release(&state, forwarded, id)),
            Route::Report { id } => {
                guarded(|| report(&state, forwarded, ReportedOn::Lease(id), &body))
            }
            Route::EndSession { name } => {
                guarded(|| end_session(&state, forwarded, &session_segment(name)))
            }
            Route::SessionReport { name } => guarded(|| {
                let name = session_segment(name);
                report(&state, forwarded, ReportedOn::Session(&name), &body)
            }),
        }
    };
    answered(state, incoming, body, outcome).await
}

/// A session name as its path segment carries it, percent-decoded: a session's `:` is
/// reserved in a path, and clients encode it (Python's `quote`, JavaScript's
/// `encodeURIComponent`: `acme%3As1`) as often as not. A segment that does not decode to
/// UTF-8 stays as it came, which no session name can be.
fn session_segment(segment: &str) -> std::borrow::Cow<'_, str> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .unwrap_or(std::borrow::Cow::Borrowed(segment))
}

/// Refuses a query on a route that takes none, rather than ignore what the client meant.
fn no_query(query: &str) -> Result<(), Away> {
    match form_urlencoded::parse(query.as_bytes()).next() {
        None => Ok(()),
        Some((name, _)) => Err(ApiError::invalid_request(format!(
            "unknown query parameter {name:?}: this endpoint takes none"
        ))
        .into()),
    }
}

/// What it takes to forward the request: method, path, query, token, and whether another
/// replica forwarded it here already.
fn incoming() -> impl Filter<Extract = (Incoming,), Error = warp::Rejection> + Clone {
    warp::method()
        .and(warp::path::full())
        .and(query())
        .and(warp::header::optional::<String>("authorization"))
        .and(warp::header::optional::<String>(FORWARDED_HEADER))
        .map(
            |method, path, query, authorization, forwarded: Option<String>| Incoming {
                method,
                path,
                query,
                authorization,
                forwarded: forwarded.is_some(),
            },
        )
}

/// The raw query string, empty when there is none.
fn query() -> impl Filter<Extract = (String,), Error = Infallible> + Clone {
    warp::query::raw().or(warp::any().map(String::new)).unify()
}

/// The body, read up to [`BODY_LIMIT`]: past it the request is refused (413) without
/// buffering the rest, whether or not it announced its length.
async fn read_limited<B: Buf>(
    stream: impl futures::Stream<Item = Result<B, warp::Error>>,
) -> Result<bytes::Bytes, ApiError> {
    let mut stream = std::pin::pin!(stream);
    let mut body = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let mut chunk =
            chunk.map_err(|e| ApiError::invalid_request(format!("reading the body: {e}")))?;
        if body.len() + chunk.remaining() > BODY_LIMIT {
            return Err(ApiError::body_too_large(BODY_LIMIT));
        }
        while chunk.has_remaining() {
            let bytes = chunk.chunk();
            let n = bytes.len();
            body.extend_from_slice(bytes);
            chunk.advance(n);
        }
    }
    Ok(body.freeze())
}

/// Runs a handler; a panic becomes a 500 answer instead of a dropped connection, and the
/// server keeps serving.
pub(super) fn guarded(handler: impl FnOnce() -> Result<Response, Away>) -> Result<Response, Away> {
    match std::panic::catch_unwind(AssertUnwindSafe(handler)) {
        Ok(outcome) => outcome,
        Err(_) => {
            tracing::error!("a discovery handler panicked (the panic message is above)");
            Err(Away::Answer(ApiError::internal()))
        }
    }
}

/// The answer to a request: the handler's, or the owner's when the handler said to forward.
async fn answered(
    state: Arc<Discovery>,
    incoming: Incoming,
    body: bytes::Bytes,
    outcome: Result<Response, Away>,
) -> Response {
    match outcome {
        Ok(response) => response,
        Err(Away::Answer(error)) => error.into_response(),
        Err(Away::Forward(owner)) => state.forwarder.send(&owner, &incoming, body).await,
    }
}

/// Parses a JSON body, telling malformed JSON (`invalid_json`) from JSON of the wrong shape
/// (`invalid_request`: unknown fields, wrong types).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Syntax
        | serde_json::error::Category::Eof
        | serde_json::error::Category::Io => {
            ApiError::invalid_json(format!("the body is not valid JSON: {e}"))
        }
        serde_json::error::Category::Data => ApiError::invalid_request(e.to_string()),
    })
}

/// The whole number a JSON number stands for, `60.0` included (JSON Schema's integers are
/// the numbers without a fraction); `None` for a negative one or a fraction. A float too
/// large for a `u64` saturates to `u64::MAX`, which every caller's range refuses.
fn whole(number: &serde_json::Number) -> Option<u64> {
    number.as_u64().or_else(|| {
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

fn no_content() -> Response {
    warp::reply::with_status(warp::reply(), StatusCode::NO_CONTENT).into_response()
}

#[cfg(test)]
mod tests;
