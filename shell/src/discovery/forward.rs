//! Forwarding: a replica that does not own the lease book sends a crawler's request on to the
//! owner and relays the answer, so a crawler may reach any replica (a Service picks one) and
//! still sees the fleet's one book.
//!
//! The forwarded request carries [`FORWARDED_HEADER`], and a replica never forwards such a
//! request again (`proxy_core::lease::route`): while ownership moves, a request stops at the
//! second replica with a 503 instead of circling. The crawler's bearer token travels with it;
//! the owner checks it too. Connections to the owner are pooled and kept alive, so a
//! forwarded request costs one more HTTP exchange on an open connection.

use std::time::Duration;

use bytes::Bytes;
use warp::http::{HeaderMap, Method, header};
use warp::path::FullPath;
use warp::reply::Response;

use super::ApiError;

/// The header that marks a request one replica forwarded to another.
pub const FORWARDED_HEADER: &str = "x-proxy-operator-forwarded";

/// How long the owner may take to answer a forwarded request, connection included.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A request as it arrived: what it takes to send it on.
#[derive(Debug)]
pub struct Incoming {
    /// Its method.
    pub method: Method,
    /// Its path.
    pub path: FullPath,
    /// Its query string, empty when it has none.
    pub query: String,
    /// Its `Authorization` header.
    pub authorization: Option<String>,
    /// Whether another replica forwarded it here.
    pub forwarded: bool,
}

/// The HTTP client that forwards to the owner.
#[derive(Debug, Clone)]
pub struct Forwarder {
    http: reqwest::Client,
}

impl Default for Forwarder {
    fn default() -> Self {
        Self::new()
    }
}

impl Forwarder {
    /// A client that never goes through an HTTP proxy (the owner is a Pod next door), with
    /// a bounded wait.
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        Self { http }
    }

    /// Sends `incoming` with `body` to the owner at `owner` (a base URL) and returns its
    /// answer as it is: status, body, `Content-Type` and `Retry-After`. An owner that does not
    /// answer is a 503: ownership is probably moving, and the crawler retries.
    pub async fn send(&self, owner: &str, incoming: &Incoming, body: Bytes) -> Response {
        let mut url = format!("{owner}{}", incoming.path.as_str());
        if !incoming.query.is_empty() {
            url.push('?');
            url.push_str(&incoming.query);
        }
        let mut request = self
            .http
            .request(incoming.method.clone(), url)
            .header(FORWARDED_HEADER, "1");
        if let Some(authorization) = &incoming.authorization {
            request = request.header(header::AUTHORIZATION, authorization.as_str());
        }
        if !body.is_empty() {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(error) => return ApiError::owner_unreachable(owner, error).into_response(),
        };
        let status = answer.status();
        let headers = relayed(answer.headers());
        match answer.bytes().await {
            Ok(body) => {
                let mut response = Response::new(body.into());
                *response.status_mut() = status;
                *response.headers_mut() = headers;
                response
            }
            Err(error) => ApiError::owner_unreachable(owner, error).into_response(),
        }
    }
}

/// The headers of the owner's answer that the crawler needs.
fn relayed(from: &HeaderMap) -> HeaderMap {
    [header::CONTENT_TYPE, header::RETRY_AFTER]
        .into_iter()
        .filter_map(|name| Some((name.clone(), from.get(&name)?.clone())))
        .collect()
}
