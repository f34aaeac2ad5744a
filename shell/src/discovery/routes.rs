//! Routes and handlers of the discovery API. Handlers are plain functions of the state and
//! the parsed request; the filters around them only route, authenticate and read bodies.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::StreamExt;
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireError, AcquireRequest, Call, Field, Fields, Grant, Labels, Lease, ListQuery, ProxyView,
    Report, ReportId, ReportResult, Selector, SessionName, Site, StatusMeaning, Sticky,
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

/// One proxy as the API shows it: the fields the listing asked for (`fields`), the key
/// always.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ProxyItem<'a> {
    namespace: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    /// `http://host:port`, ready for a crawler's proxy setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    healthy: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    active_leases: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_leases: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a Labels>,
}

impl<'a> ProxyItem<'a> {
    /// `proxy`, holding `active` leases, with the `fields` asked for.
    fn of(proxy: &'a ProxyView, active: u32, fields: Fields) -> Self {
        let shown = |field: Field| fields.contains(field);
        Self {
            namespace: proxy.key.namespace(),
            name: proxy.key.name(),
            host: shown(Field::Host).then_some(proxy.host.as_str()),
            port: shown(Field::Port).then_some(proxy.port),
            url: shown(Field::Url).then(|| proxy_url(&proxy.host, proxy.port)),
            healthy: shown(Field::Healthy).then_some(proxy.healthy),
            latency_ms: shown(Field::LatencyMs).then_some(proxy.latency_ms),
            active_leases: shown(Field::ActiveLeases).then_some(active),
            max_leases: shown(Field::MaxLeases).then_some(proxy.max_leases),
            labels: shown(Field::Labels).then_some(&proxy.labels),
        }
    }
}

/// The answer of `GET /v1/proxies`.
#[derive(Debug, Serialize)]
struct ProxyList<'a> {
    /// Absent for `countOnly=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    proxies: Option<Vec<ProxyItem<'a>>>,
    /// The proxies the filters take, over all pages.
    count: usize,
    /// The token of the next page, when one follows.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

fn proxy_url(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// What the userinfo of a URL may not hold as it is (RFC 3986: everything but unreserved
/// characters and sub-delims; `:` separates the user from the password, `@` ends them).
const USERINFO: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `http://user:pass@host:port`, the user and the password percent-encoded.
fn proxy_url_with(host: &str, port: u16, credentials: &Credentials) -> String {
    let encode = |text: &str| percent_encoding::utf8_percent_encode(text, USERINFO).to_string();
    let bare = proxy_url(host, port);
    let rest = bare.strip_prefix("http://").unwrap_or(&bare);
    format!(
        "http://{}:{}@{rest}",
        encode(credentials.username()),
        encode(credentials.password())
    )
}

/// `GET /v1/proxies[?healthy=true][&selector=geo=eu,tier=a][&distinctEgress=true]`
/// `[&limit=500][&continue=TOKEN][&countOnly=true][&fields=host,port]`: what the query means
/// is the core's ([`ListQuery::parse`]). The page is taken from the fleet's snapshot, its
/// active lease counts from the book a few hundred at a time, and the answer is serialized
/// with no lock held.
fn list(state: &Discovery, forwarded: bool, query: &str) -> Result<Response, Away> {
    let pairs: Vec<(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> =
        form_urlencoded::parse(query.as_bytes()).collect();
    let query = ListQuery::parse(pairs.iter().map(|(n, v)| (n.as_ref(), v.as_ref())))
        .map_err(ApiError::invalid_query)?;
    // Only the owner's book holds the fleet's leases: route, then let go of the lock.
    drop(state.book().serving(Call::Other, forwarded)?);
    let snapshot = state.book().snapshot();
    let page = snapshot.page(&query);
    let active = if query.fields.contains(Field::ActiveLeases) {
        state.book().active_leases_of(&page.proxies)
    } else {
        vec![0; page.proxies.len()]
    };
    let proxies = (!query.count_only).then(|| {
        page.proxies
            .iter()
            .zip(active)
            .map(|(proxy, active)| ProxyItem::of(proxy, active, query.fields))
            .collect()
    });
    Ok(json_response(
        StatusCode::OK,
        &ProxyList {
            proxies,
            count: page.count,
            next: page.next,
        },
    ))
}

/// One proxy with how each site treated it: `GET /v1/proxies/{namespace}/{name}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ProxyDetail<'a> {
    #[serde(flatten)]
    proxy: ProxyItem<'a>,
    /// Distinct sites that reported it `blocked` within the window (what `Banned` judges).
    blocked_sites: u32,
    /// The window of `sites` and `blockedSites`, in seconds.
    site_window_seconds: u64,
    sites: Vec<SiteItem<'a>>,
}

/// How one site treated the proxy.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SiteItem<'a> {
    target: &'a str,
    ok: u32,
    rate_limited: u32,
    blocked: u32,
    error: u32,
    window_start: String,
    last: ReportResult,
    last_at: String,
    /// Set while the proxy cools down for the target.
    cooldown_until: Option<String>,
}

impl<'a> From<Site<'a>> for SiteItem<'a> {
    fn from(site: Site<'a>) -> Self {
        let stats = site.stats;
        Self {
            target: site.target,
            ok: stats.ok,
            rate_limited: stats.rate_limited,
            blocked: stats.blocked,
            error: stats.error,
            window_start: stats.window_start.to_string(),
            last: stats.last,
            last_at: stats.last_at.to_string(),
            cooldown_until: site.cooldown_until.map(|until| until.to_string()),
        }
    }
}

/// `GET /v1/proxies/{namespace}/{name}`: the proxy as of now (the book ends what is due
/// before it counts).
fn detail(state: &Discovery, forwarded: bool, key: &ProxyKey) -> Result<Response, Away> {
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let site_window_seconds = shared.book.config().site_window.as_secs();
    let found = shared
        .book
        .detail(key, jiff::Timestamp::now())
        .ok_or_else(|| ApiError::unknown_proxy(key))?;
    let detail = ProxyDetail {
        proxy: ProxyItem::of(found.listed.proxy, found.listed.active, Fields::ALL),
        blocked_sites: found.blocked_sites,
        site_window_seconds,
        sites: found.sites.into_iter().map(SiteItem::from).collect(),
    };
    Ok(json_response(StatusCode::OK, &detail))
}

/// The most proxies a lease request may avoid.
const MAX_AVOID: usize = 8;

/// The session and the avoided proxies of a lease request, checked.
fn sticky(request: &LeaseRequest) -> Result<Sticky, ApiError> {
    let session = request
        .session
        .as_deref()
        .map(SessionName::parse)
        .transpose()
        .map_err(|e| ApiError::invalid_session(e.to_string()))?;
    if request.avoid.len() > MAX_AVOID {
        return Err(ApiError::invalid_request(format!(
            "avoid names at most {MAX_AVOID} proxies, not {}",
            request.avoid.len()
        )));
    }
    let avoid = request
        .avoid
        .iter()
        .map(|key| {
            key.parse::<ProxyKey>()
                .map_err(|e| ApiError::invalid_request(format!("avoid: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(Sticky { session, avoid })
}

/// The lease's duration: the default without `ttlSeconds`, else `ttlSeconds` if it is a
/// whole number of seconds in range (`60.0` included), else an error that says the range.
fn ttl(seconds: Option<&serde_json::Number>, limits: &super::Limits) -> Result<Duration, ApiError> {
    let Some(seconds) = seconds else {
        return Ok(limits.default_ttl);
    };
    let max = limits.max_ttl.as_secs();
    match whole(seconds) {
        Some(s) if (1..=max).contains(&s) => Ok(Duration::from_secs(s)),
        _ => Err(ApiError::invalid_ttl(format!(
            "ttlSeconds must be a whole number of seconds between 1 and {max}, not {seconds}"
        ))),
    }
}

impl LeaseGranted {
    fn of(lease: Lease, credentials: Option<Credentials>) -> Self {
        let url = match &credentials {
            Some(credentials) => proxy_url_with(&lease.host, lease.port, credentials),
            None => proxy_url(&lease.host, lease.port),
        };
        Self {
            proxy: LeasedProxy {
                namespace: lease.proxy.namespace().to_owned(),
                name: lease.proxy.name().to_owned(),
                url,
                host: lease.host,
                port: lease.port,
                username: credentials.as_ref().map(|c| c.username().to_owned()),
                password: credentials.as_ref().map(|c| c.password().to_owned()),
            },
            lease_id: lease.id,
            target: lease.target,
            expires_at: lease.expires_at.to_string(),
            ttl_seconds: lease.ttl.as_secs(),
            holder: lease.holder,
            session: None,
            moved: None,
        }
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

/// `POST /v1/leases`
fn acquire(state: &Discovery, forwarded: bool, body: &[u8]) -> Result<Response, Away> {
    let request: LeaseRequest = parse(body)?;
    let sticky = sticky(&request)?;
    let ttl = ttl(request.ttl_seconds.as_ref(), &state.limits)?;
    let selector = Selector::checked(request.selector)
        .map_err(|e| ApiError::invalid_selector(e.to_string()))?;
    let target = target(request.target.as_deref())?;
    let holder = request.holder.as_deref().map(holder).transpose()?;
    let distinct_egress = request.distinct_egress;
    let mut shared = state.book().serving(Call::Acquire, forwarded)?;
    let now = jiff::Timestamp::now();
    let granted = loop {
        let id = uuid::Uuid::new_v4().to_string();
        let request = AcquireRequest {
            id,
            selector: selector.clone(),
            target: target.clone(),
            ttl,
            distinct_egress,
            holder: holder.clone(),
        };
        match shared.book.acquire_with(request, &sticky, now) {
            Ok(grant) => {
                if grant.changed_book() {
                    shared.journal.changed(now);
                }
                break Ok(grant);
            }
            Err(AcquireError::NoMatch(stats)) => break Err(stats),
            // A random ID collided with a lease the book still knows: draw another.
            Err(AcquireError::IdInUse) => continue,
        }
    };
    // The answer is built without the book's lock.
    drop(shared);
    Ok(match granted {
        Ok(grant) => {
            let (status, lease, moved) = match grant {
                Grant::New(lease) => (StatusCode::CREATED, lease, None),
                Grant::Resumed(lease) => (StatusCode::OK, lease, None),
                Grant::Moved { lease, from, why } => {
                    let moved = Moved {
                        from: from.to_string(),
                        reason: why.as_str().to_owned(),
                    };
                    (StatusCode::CREATED, lease, Some(moved))
                }
            };
            let credentials = state.book().credentials_of(&lease.proxy);
            let answer = LeaseGranted {
                session: sticky.session.map(|name| name.to_string()),
                moved,
                ..LeaseGranted::of(lease, credentials)
            };
            json_response(status, &answer)
        }
        Err(stats) => {
            state.book().refusals.note(&selector);
            let retry_after = stats.retry_after(now);
            let mut response = json_response(
                StatusCode::CONFLICT,
                &NoMatchBody {
                    retry_after_seconds: retry_after,
                    ..NoMatchBody::from(stats)
                },
            );
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
    })
}

/// A request's target, checked ([`checked_target`]); absent or `null` is no target.
fn target(text: Option<&str>) -> Result<Option<String>, ApiError> {
    text.map(checked_target)
        .transpose()
        .map_err(|e| ApiError::invalid_target(e.to_string()))
}

/// A holder name, checked ([`checked_holder`]).
fn holder(text: &str) -> Result<String, ApiError> {
    checked_holder(text)
        .map(str::to_owned)
        .map_err(|e| ApiError::invalid_holder(e.to_string()))
}

/// The `holder` of a query on `/v1/leases`, the one parameter it takes.
fn holder_query(query: &str) -> Result<Option<String>, ApiError> {
    let mut found = None;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if name != "holder" {
            return Err(ApiError::invalid_request(format!(
                "unknown query parameter {name:?}: /v1/leases takes only holder"
            )));
        }
        if found.is_some() {
            return Err(ApiError::invalid_request("holder is given twice"));
        }
        found = Some(holder(&value)?);
    }
    Ok(found)
}

/// One active lease in `GET /v1/leases`: no credentials, whoever asks.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HeldLease<'a> {
    #[serde(rename = "leaseID")]
    lease_id: &'a str,
    proxy: HeldProxy<'a>,
    target: Option<&'a str>,
    holder: Option<&'a str>,
    granted_at: String,
    expires_at: String,
}

#[derive(Debug, Serialize)]
struct HeldProxy<'a> {
    namespace: &'a str,
    name: &'a str,
    host: &'a str,
    port: u16,
}

impl<'a> From<&'a Lease> for HeldLease<'a> {
    fn from(lease: &'a Lease) -> Self {
        Self {
            lease_id: &lease.id,
            proxy: HeldProxy {
                namespace: lease.proxy.namespace(),
                name: lease.proxy.name(),
                host: &lease.host,
                port: lease.port,
            },
            target: lease.target.as_deref(),
            holder: lease.holder.as_deref(),
            granted_at: lease.granted_at.to_string(),
            expires_at: lease.expires_at.to_string(),
        }
    }
}

/// `GET /v1/leases[?holder=NAME]`: the active leases of the holder (of everyone without
/// `holder`), by ID, so that a crawler's leases can be found after it crashed.
fn held(state: &Discovery, forwarded: bool, query: &str) -> Result<Response, Away> {
    let holder = holder_query(query)?;
    let shared = state.book().serving(Call::Other, forwarded)?;
    let leases = shared
        .book
        .leases(holder.as_deref(), jiff::Timestamp::now());
    let leases: Vec<HeldLease<'_>> = leases.into_iter().map(HeldLease::from).collect();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"count": leases.len(), "leases": leases}),
    ))
}

/// `DELETE /v1/leases?holder=NAME`: releases every active lease of the holder, those whose
/// IDs the crawler never learned included; 200 with how many it released.
fn release_held(state: &Discovery, forwarded: bool, query: &str) -> Result<Response, Away> {
    let Some(holder) = holder_query(query)? else {
        return Err(ApiError::invalid_request(
            "DELETE /v1/leases releases the leases of one holder: it needs ?holder=",
        )
        .into());
    };
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    let released = shared.book.release_held_by(&holder, now);
    if released > 0 {
        shared.journal.changed(now);
    }
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"released": released}),
    ))
}

/// Whether `id` has the form of the lease IDs this API grants: a UUID, lowercase and
/// hyphenated. Anything else is not a lease, so it is refused before the book is asked.
fn is_lease_id(id: &str) -> bool {
    // 36 characters, no capitals: of the forms a UUID parses from, only the lowercase
    // hyphenated one.
    id.len() == 36
        && !id.bytes().any(|b| b.is_ascii_uppercase())
        && uuid::Uuid::try_parse(id).is_ok()
}

impl From<proxy_core::lease::NoMatch> for NoMatchBody {
    fn from(stats: proxy_core::lease::NoMatch) -> Self {
        Self {
            error: "no_match".to_owned(),
            message: "no healthy proxy with free capacity matches the selector and target"
                .to_owned(),
            stats,
            retry_after_seconds: None,
        }
    }
}

/// `DELETE /v1/leases/{id}`: 204 for every lease ID, granted or not, so a retried release is
/// harmless; 404 for what cannot be a lease ID at all.
fn release(state: &Discovery, forwarded: bool, id: &str) -> Result<Response, Away> {
    if !is_lease_id(id) {
        return Err(ApiError::unknown_lease(id).into());
    }
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    if shared.book.release(id, now) {
        shared.journal.changed(now);
    }
    Ok(no_content())
}

/// The status code a JSON number stands for, or 0 (refused by [`meaning_of`]) when it is
/// not a whole number that fits.
fn status_code(number: &serde_json::Number) -> u16 {
    whole(number)
        .and_then(|n| u16::try_from(n).ok())
        .unwrap_or(0)
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

/// What a report body says the crawler saw: a result (as the core's `StatusMeaning::Report`),
/// or the meaning of the status code it saw.
fn saw(request: &ReportRequest) -> Result<StatusMeaning, ApiError> {
    match (&request.result, &request.status) {
        (Some(result), None) => serde_json::from_value(serde_json::Value::String(result.clone()))
            .map(StatusMeaning::Report)
            .map_err(|_| {
                ApiError::invalid_result(format!(
                    "result must be one of ok, rate_limited, blocked, error; not {result:?}"
                ))
            }),
        (None, Some(status)) => meaning_of(status_code(status)).map_err(|_| {
            ApiError::invalid_status(format!(
                "status must be an HTTP status code (100 to 599), not {status}"
            ))
        }),
        (Some(_), Some(_)) => Err(ApiError::invalid_request(
            "a report says either result or status, not both",
        )),
        (None, None) => Err(ApiError::invalid_request(
            "a report needs result (ok, rate_limited, blocked, error) or status (an HTTP status code)",
        )),
    }
}

impl ReportAnswer {
    fn of(reported: proxy_core::lease::Reported, now: jiff::Timestamp) -> Self {
        Self {
            result: reported.result,
            lease_again: reported.lease_again,
            target: reported.target,
            cooldown_until: reported.cooldown_until.map(|until| until.to_string()),
            cooldown_seconds: reported
                .cooldown_until
                .map(|until| seconds_until(until, now)),
            repeated: reported.repeated,
        }
    }
}

/// What a report is about: a lease by ID, or a session by name.
#[derive(Clone, Copy, Debug)]
enum ReportedOn<'a> {
    Lease(&'a str),
    Session(&'a str),
}

impl ReportedOn<'_> {
    /// The 404 of a report on something the book does not know.
    fn unknown(self) -> ApiError {
        match self {
            Self::Lease(id) => ApiError::unknown_lease(id),
            Self::Session(name) => ApiError::unknown_session(name),
        }
    }
}

/// `POST /v1/leases/{id}/report` and `POST /v1/sessions/{name}/report`: 200 with what the
/// book made of it ([`ReportAnswer`]). A report on a session lands on its active lease (and
/// a ban ends it: the session moves at its next request).
fn report(
    state: &Discovery,
    forwarded: bool,
    on: ReportedOn<'_>,
    body: &[u8],
) -> Result<Response, Away> {
    let request: ReportRequest = parse(body)?;
    let report = Report {
        saw: saw(&request)?,
        target: target(request.target.as_deref())?,
        id: request
            .report_id
            .as_deref()
            .map(ReportId::parse)
            .transpose()
            .map_err(|e| ApiError::invalid_request(e.to_string()))?,
    };
    let session = match on {
        ReportedOn::Lease(id) if !is_lease_id(id) => return Err(on.unknown().into()),
        ReportedOn::Lease(_) => None,
        ReportedOn::Session(name) => Some(SessionName::parse(name).map_err(|_| on.unknown())?),
    };
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    let book = &mut shared.book;
    let reported = match (on, &session) {
        (ReportedOn::Lease(id), _) => book.submit(id, &report, now).ok(),
        (_, Some(name)) => book.submit_session(name, &report, now).ok(),
        (ReportedOn::Session(_), None) => None,
    }
    .ok_or_else(|| on.unknown())?;
    // DIAG (temporary)
    if let ReportedOn::Lease(id) = on {
        let lease = book
            .leases(None, now)
            .into_iter()
            .find(|l| l.id == id)
            .map(|l| l.proxy.clone());
        let counts: Vec<String> = lease
            .iter()
            .flat_map(|p| {
                book.sites(p, now)
                    .into_iter()
                    .map(|s| format!("{}:{}/{}", s.target, s.stats.rate_limited, s.stats.blocked))
            })
            .collect();
        tracing::info!(lease = id, proxy = ?lease, result = ?reported.result, repeated = reported.repeated, target = ?reported.target, counts = ?counts, "DIAG report");
    }
    if reported.result.is_some() && !reported.repeated {
        // Every report recorded changes the book: its site statistics, maybe a cooldown.
        shared.journal.changed(now);
    }
    Ok(json_response(
        StatusCode::OK,
        &ReportAnswer::of(reported, now),
    ))
}

/// `DELETE /v1/sessions/{name}`: ends the session (releases its lease), so its next request
/// gets a new choice. 204 for every session name, active or not, so a retry is harmless; 404
/// for what cannot be a session name.
fn end_session(state: &Discovery, forwarded: bool, name: &str) -> Result<Response, Away> {
    let session = SessionName::parse(name).map_err(|_| ApiError::unknown_session(name))?;
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    if shared.book.end_session(&session, now) {
        shared.journal.changed(now);
    }
    Ok(no_content())
}

fn no_content() -> Response {
    warp::reply::with_status(warp::reply(), StatusCode::NO_CONTENT).into_response()
}

#[cfg(test)]
mod tests;
