//! One client connection: each request is a CONNECT (a tunnel), a plain-HTTP request in
//! absolute form (forwarded), or a request to the gateway itself (`POST /v1/report`).
//!
//! Every decision is the core's (`proxy_core::gateway`): the credentials and the username's
//! options, the site, the lease request, the retry on another upstream, what an answer
//! reports, every refusal. This module carries them out.
//!
//! A plain-HTTP connection keeps its upstream (one upstream connection, kept alive) for its
//! next requests to the same site, until a ban answer (429, 401, 403) or a new username makes
//! it ask the book again; a request to another site asks the book too (the proxy may be
//! cooling down for that site), and keeps the upstream connection if the answer is the same
//! proxy. Its lease, unless it is a session's, is released when the connection closes or
//! moves. A tunnel holds its lease until it closes.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body as _, Incoming};
use hyper::client::conn::http1 as client;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use proxy_core::gateway::feedback::after_answer;
use proxy_core::gateway::target::Target;
use proxy_core::gateway::{
    Attempts, Blame, Ending, Options, Outcome, Refusal, UpstreamFailure, credentials, username,
};
use proxy_core::lease::ReportResult;

use super::Gateway;
use super::book::{Held, Leased};
use super::counted::Counted;
use super::exchange::{Answer, Exchange};
use super::expect::{self, Asked};
use super::linger::Lingering;
use super::metrics::{Direction, Kind};
use super::tunnel;
use super::upstream::{self, Answerable, TunnelError};

/// The body of every answer: an upstream's, counted as it streams, or one the gateway wrote.
pub type Body = Either<Answer, Full<Bytes>>;

/// The headers that tell a client which upstream served it.
const UPSTREAM: HeaderName = HeaderName::from_static("x-proxy-upstream");
const LEASE: HeaderName = HeaderName::from_static("x-proxy-lease");
const SESSION: HeaderName = HeaderName::from_static("x-proxy-session");
const ERROR: HeaderName = HeaderName::from_static("x-proxy-error");
/// What squid puts on an answer of its own (an error page), never on a site's.
const SQUID_ERROR: HeaderName = HeaderName::from_static("x-squid-error");

/// The upstream of a plain-HTTP connection.
struct Forwarding {
    held: Held,
    /// The username it was leased for: a request with another one asks the book again.
    username: String,
    /// The site it was leased for: a request to another one asks the book again, which
    /// knows the cooldowns of that site.
    site: String,
    sender: Sender,
    /// The lease's headers, made once per lease rather than once per request.
    headers: LeaseHeaders,
}

/// What every request and answer on one lease carries, as header values ready to insert
/// (a `HeaderValue` clone is a reference count, validating and copying a string is not).
struct LeaseHeaders {
    /// `Proxy-Authorization` for the upstream, when it has credentials.
    authorization: Option<HeaderValue>,
    /// The answer's `X-Proxy-Upstream`, `X-Proxy-Lease` and `X-Proxy-Session`.
    served_by: HeaderMap,
}

impl LeaseHeaders {
    fn of(leased: &Leased) -> Self {
        let mut served_by = HeaderMap::new();
        self::served_by(&mut served_by, leased);
        Self {
            authorization: leased
                .authorization
                .as_deref()
                .and_then(|value| HeaderValue::from_str(value).ok()),
            served_by,
        }
    }
}

/// A connection to an upstream, for forwarded requests.
type Sender = client::SendRequest<Asked<Counted<Lingering>>>;

/// Why a request got no answer from an upstream.
enum Stop {
    /// The gateway answers with this refusal.
    Refused(Refusal),
    /// The client left (its request's body broke off): nobody to answer.
    ClientGone,
}

impl From<Refusal> for Stop {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// A request as the panic boundary names it (`GET http://site/page`): written out only if
/// the request panicked.
struct Described {
    method: Method,
    uri: hyper::Uri,
}

impl std::fmt::Display for Described {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.uri)
    }
}

/// One client connection's state.
pub struct Connection {
    gateway: Arc<Gateway>,
    /// The address the client reached the gateway at: a CONNECT to it is the gateway's own.
    local: IpAddr,
    upstream: tokio::sync::Mutex<Option<Forwarding>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Connection {
    /// A new client connection of `gateway`, which the client reached at `local`. Its
    /// upstream's lease is released as it is dropped (the connection closed).
    pub fn new(gateway: Arc<Gateway>, local: IpAddr) -> Self {
        Self {
            gateway,
            local,
            upstream: tokio::sync::Mutex::new(None),
        }
    }

    /// The answer to `request`. A panic is a 500 (`X-Proxy-Error: internal`), counted, and
    /// the gateway goes on serving (the panic boundary).
    pub async fn serve(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        let metrics = self.gateway.metrics.clone();
        let what = Described {
            method: request.method().clone(),
            uri: request.uri().clone(),
        };
        let answer = crate::runtime::supervise::catch(
            "gateway",
            what,
            || metrics.panicked(),
            self.answer(request),
        )
        .await;
        Ok(answer.unwrap_or_else(|_| {
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the gateway failed on this request (a bug); it goes on serving\n",
            )
        }))
    }

    async fn answer(&self, request: Request<Incoming>) -> Response<Body> {
        let metrics = &self.gateway.metrics;
        if request.method() != Method::CONNECT && request.uri().scheme().is_none() {
            return self.own(request).await.unwrap_or_else(|refusal| {
                metrics.refused(&refusal);
                refused(&refusal)
            });
        }
        // Ended by a refusal here, by the tunnel or the answer's body, or as the client's if
        // this future is dropped first (the client hung up).
        let exchange = Exchange::new(metrics.clone());
        let served = if request.method() == Method::CONNECT {
            self.connect(request, &exchange).await
        } else {
            self.forward(request, &exchange).await
        };
        match served {
            Ok(response) => response,
            Err(Stop::Refused(refusal)) => {
                exchange.end(Ending::Refused(&refusal));
                metrics.refused(&refusal);
                refused(&refusal)
            }
            Err(Stop::ClientGone) => {
                exchange.end(Ending::ClientLeft);
                refused(&Refusal::BadRequest("the request's body broke off".into()))
            }
        }
    }

    /// `failure` of an upstream before anything reached the client: reported `unreachable`
    /// when it speaks against the proxy (its breaker, module `proxy_core::lease::circuit`:
    /// awaited, so that the book hears it before this client's retry asks for another
    /// upstream), then the refusal if it was the last try, else counted as its own
    /// exchange's ending and retried.
    async fn failed(
        &self,
        attempts: &mut Attempts,
        failed: &Leased,
        failure: UpstreamFailure,
        target: &Target,
    ) -> Result<(), Refusal> {
        tracing::debug!(proxy = %failed.proxy, failure = failure.as_str(), "upstream failed before anything reached the client");
        if Outcome::of_failure(failure).blame() == Blame::Upstream {
            self.unreachable(failed, target).await;
        }
        attempts.failed(failed.proxy.clone(), failure)?;
        self.gateway.metrics.ended(Outcome::of_failure(failure));
        self.gateway.metrics.retried();
        Ok(())
    }

    /// Reports that `leased`'s proxy could not be reached (or refused the lease's
    /// credentials) on the way to `target`, and waits for the book to hear it.
    async fn unreachable(&self, leased: &Leased, target: &Target) {
        let unreachable = ReportResult::Unreachable;
        self.gateway
            .book
            .report(leased, unreachable, &target.host)
            .await;
        self.gateway.metrics.reported(unreachable.as_str());
    }

    /// The upstream of `leased` carried a request to `target`: on a trial lease, that is
    /// reported (`ok`, in the background) so that its breaker closes; on any other lease
    /// nothing is (a report per request would double the gateway's work).
    fn reached(&self, leased: &Leased, target: &Target) {
        if leased.trial {
            let ok = ReportResult::Ok;
            self.gateway.book.report_later(leased, ok, &target.host);
            self.gateway.metrics.reported(ok.as_str());
        }
    }

    /// The options of the credentials in `headers[name]`, with the username as it was sent,
    /// once the tenant's token is checked.
    fn authenticate(
        &self,
        headers: &HeaderMap,
        name: HeaderName,
    ) -> Result<(Options, String), Refusal> {
        let presented = credentials::basic(headers.get(name).map(HeaderValue::as_bytes))
            .map_err(Refusal::Credentials)?;
        let options = username::parse(&presented.username, &self.gateway.grammar)
            .map_err(|e| Refusal::Credentials(e.0))?;
        if !self
            .gateway
            .tenants
            .accepts(&options.tenant, &presented.password)
        {
            return Err(Refusal::Credentials(format!(
                "unknown tenant {:?}, or not its token",
                options.tenant
            )));
        }
        Ok((options, presented.username))
    }

    /// `CONNECT host:port`: a lease for the site, a tunnel through its proxy (one retry on
    /// another if it fails), `200` to the client, then the bytes both ways until either side
    /// closes or the tunnel idles.
    async fn connect(
        &self,
        mut request: Request<Incoming>,
        exchange: &Exchange,
    ) -> Result<Response<Body>, Stop> {
        let target = Target::connect(&request.uri().to_string()).map_err(Refusal::BadRequest)?;
        if target.is_gateway(&self.gateway.own, self.local) {
            return Err(Refusal::BadRequest(format!(
                "CONNECT {} is this gateway itself: a tunnel to it would come back here",
                target.authority()
            ))
            .into());
        }
        let (options, _) = self.authenticate(request.headers(), header::PROXY_AUTHORIZATION)?;
        let gateway = &self.gateway;
        let mut attempts = Attempts::default();
        // Each lease that does not become the tunnel's is released as it is dropped, also
        // when the client hangs up while its upstream is being dialled.
        let (held, stream, rest) = loop {
            let ask = options.ask(&target.host, attempts.avoid());
            let held = gateway
                .book
                .lease(&ask)
                .await
                .map_err(|refused| attempts.lease_refused(refused))?;
            match upstream::tunnel(&held, &target, gateway.settings.connect_timeout).await {
                Ok((stream, rest)) => {
                    self.reached(&held, &target);
                    break (held, stream, rest);
                }
                Err(TunnelError::Failed(failure)) => {
                    self.failed(&mut attempts, &held, failure, &target).await?;
                }
                Err(TunnelError::Refused(status)) => {
                    return Err(Refusal::TunnelRefused(status).into());
                }
            }
        };
        gateway.metrics.connection(Kind::Connect);
        gateway.metrics.request(Kind::Connect);
        let upgrade = hyper::upgrade::on(&mut request);
        let mut response = Response::new(Either::Right(Full::new(Bytes::new())));
        served_by(response.headers_mut(), &held);
        let (carrier, exchange) = (gateway.clone(), exchange.clone());
        gateway.spawn_tunnel(async move {
            let ending = match upgrade.await {
                Ok(upgraded) => Ending::TunnelEnded {
                    broken: tunnel::carry(upgraded, stream, rest, &carrier).await,
                },
                Err(error) => {
                    tracing::debug!(%error, "the client left before its tunnel opened");
                    Ending::ClientLeft
                }
            };
            exchange.end(ending);
            drop(held);
        });
        Ok(response)
    }

    /// A plain-HTTP request: forwarded on the connection's upstream (opened, with one retry,
    /// when it has none), its answer reported when it says a ban, relayed as it streams.
    async fn forward(
        &self,
        request: Request<Incoming>,
        exchange: &Exchange,
    ) -> Result<Response<Body>, Stop> {
        let uri = request.uri();
        let target = Target::absolute(uri.scheme_str(), uri.authority().map(|a| a.as_str()))
            .map_err(Refusal::BadRequest)?;
        let (options, username) =
            self.authenticate(request.headers(), header::PROXY_AUTHORIZATION)?;
        let gateway = &self.gateway;
        let mut slot = self.upstream.lock().await;
        let mut attempts = Attempts::default();
        loop {
            // A new lease that could not be connected to.
            let mut unopened = None;
            let failure = match slot.as_mut() {
                Some(forwarding)
                    if forwarding.username == username && forwarding.site == target.host =>
                {
                    // The upstream may have closed the kept-alive connection (its idle
                    // timeout): open it again, to the same lease.
                    if forwarding.sender.ready().await.is_ok() {
                        break;
                    }
                    match self.sender(&forwarding.held).await {
                        Ok(sender) => {
                            forwarding.sender = sender;
                            break;
                        }
                        Err(failure) => failure,
                    }
                }
                _ => {
                    // The previous lease is released (dropped) before the next is asked for;
                    // its connection is kept in case the book answers the same proxy.
                    let previous = slot.take().map(|old| (old.held.proxy.clone(), old.sender));
                    let ask = options.ask(&target.host, attempts.avoid());
                    let held = gateway
                        .book
                        .lease(&ask)
                        .await
                        .map_err(|refused| attempts.lease_refused(refused))?;
                    // The same proxy for another site keeps its open connection.
                    let kept = match previous.filter(|(proxy, _)| *proxy == held.proxy) {
                        Some((_, mut sender)) => sender.ready().await.is_ok().then_some(sender),
                        None => None,
                    };
                    // The lease is released as it is dropped if the client hangs up while
                    // its upstream is dialled.
                    let opened = match kept {
                        Some(sender) => Ok(sender),
                        None => self.sender(&held).await.inspect(|_| {
                            gateway.metrics.connection(Kind::Http);
                        }),
                    };
                    match opened {
                        Ok(sender) => {
                            *slot = Some(Forwarding {
                                headers: LeaseHeaders::of(&held),
                                held,
                                username: username.clone(),
                                site: target.host.clone(),
                                sender,
                            });
                            break;
                        }
                        Err(failure) => {
                            unopened = Some(held);
                            failure
                        }
                    }
                }
            };
            // Only reached on a failure, before anything went to the client.
            if let Some(failed) = slot.take().map(|old| old.held).or(unopened) {
                self.failed(&mut attempts, &failed, failure, &target)
                    .await?;
            }
        }
        let Some(forwarding) = slot.as_mut() else {
            return Err(Refusal::UpstreamFailed(UpstreamFailure::Closed).into());
        };
        let (mut parts, body) = request.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // hyper frames a body of unknown length as chunked, except on a GET or HEAD, which
        // it sends with none unless told: a GET with a body (search APIs) keeps it.
        if !body.is_end_stream() && !parts.headers.contains_key(header::CONTENT_LENGTH) {
            parts.headers.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
        }
        if let Some(authorization) = &forwarding.headers.authorization {
            parts
                .headers
                .insert(header::PROXY_AUTHORIZATION, authorization.clone());
        }
        // Read to its end even if the upstream stops reading it: an early answer reaches
        // the client (`linger`).
        let (body, upload) = Counted::new(
            Lingering::new(body),
            gateway.metrics.bytes(Direction::Upstream),
        )
        .upload();
        let (uploaded, body_failed) = match upload {
            Some(upload) => (Some(upload.end), Some(upload.failed)),
            None => (None, None),
        };
        // The upstream has the request timeout to answer once it has the whole request: an
        // upload takes as long as it takes.
        let answer_due = async {
            if let Some(uploaded) = uploaded {
                let _ = uploaded.await;
            }
            tokio::time::sleep(gateway.settings.request_timeout).await;
        };
        let sent = tokio::select! {
            // The answer first, as `tokio::time::timeout` polls: no random draw per request.
            biased;
            sent = forwarding.sender.send_request(expect::until_asked(
                Request::from_parts(parts, body),
                gateway.settings.continue_wait,
            )) => Some(sent),
            () = answer_due => None,
        };
        let answer = match sent {
            Some(Ok(answer)) => answer,
            failed => {
                // The upstream connection is done for: its lease is released.
                slot.take();
                // A body that broke off is the client's doing, whatever the upstream did.
                return Err(match body_failed.as_ref().and_then(|failed| failed.get()) {
                    Some(Outcome::ClientMalformed) => Refusal::BadRequest(
                        "the request's body is malformed (a chunk size that is not one, a chunk without its line end)".into(),
                    )
                    .into(),
                    Some(_) => Stop::ClientGone,
                    None if failed.is_none() => Refusal::UpstreamTimeout.into(),
                    None => Refusal::UpstreamFailed(UpstreamFailure::Closed).into(),
                });
            }
        };
        let leased = Leased::clone(&forwarding.held);
        let served = forwarding.headers.served_by.clone();
        let status = answer.status().as_u16();
        let feedback = after_answer(status);
        if feedback.refused_credentials {
            // The request's body is gone: no retry; the next request leases again.
            self.unreachable(&leased, &target).await;
            slot.take();
            return Err(Refusal::UpstreamFailed(UpstreamFailure::Credentials).into());
        }
        if let Some(result) = feedback.report {
            if feedback.report_awaited {
                gateway.book.report(&leased, result, &target.host).await;
            } else {
                gateway.book.report_later(&leased, result, &target.host);
            }
            gateway.metrics.reported(result.as_str());
        } else {
            self.reached(&leased, &target);
        }
        if feedback.lease_again {
            slot.take();
        }
        drop(slot);
        gateway.metrics.request(Kind::Http);
        let (mut parts, body) = answer.into_parts();
        let proxy_error = parts.headers.contains_key(SQUID_ERROR);
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.extend(served);
        let body = Counted::new(body, gateway.metrics.bytes(Direction::Downstream));
        let body = Answer::new(body, exchange.clone(), status, proxy_error);
        Ok(Response::from_parts(parts, Either::Left(body)))
    }

    /// A connection to `leased`'s proxy, ready for requests.
    async fn sender(&self, leased: &Leased) -> Result<Sender, UpstreamFailure> {
        let stream = upstream::dial(leased, self.gateway.settings.connect_timeout).await?;
        let (sender, connection) = client::handshake(TokioIo::new(Answerable::new(stream)))
            .await
            .map_err(|_| UpstreamFailure::Closed)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "an upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// A request to the gateway itself: `POST /v1/report` relays a report on the session of
    /// the credentials (`Authorization` or `Proxy-Authorization`, the same username and
    /// token as for the proxy) to the lease book. Everything else is a 400.
    async fn own(&self, request: Request<Incoming>) -> Result<Response<Body>, Refusal> {
        if request.method() != Method::POST || request.uri().path() != "/v1/report" {
            return Err(Refusal::BadRequest(
                "this is a forward proxy: send http:// URIs or CONNECT; its own endpoint is POST /v1/report".into(),
            ));
        }
        let name = if request.headers().contains_key(header::AUTHORIZATION) {
            header::AUTHORIZATION
        } else {
            header::PROXY_AUTHORIZATION
        };
        let (options, _) = self.authenticate(request.headers(), name)?;
        let Some(session) = options.session_name() else {
            return Err(Refusal::BadRequest(
                "a report names the session in the username (user-<tenant>-session-<id>)".into(),
            ));
        };
        // A body announced and not sent must not hold the connection.
        let within = self.gateway.settings.header_read_timeout;
        let body = tokio::time::timeout(
            within,
            http_body_util::Limited::new(request.into_body(), 64 * 1024).collect(),
        )
        .await
        .map_err(|_| {
            Refusal::BadRequest(format!(
                "the body did not arrive within {} s",
                within.as_secs_f64()
            ))
        })?
        .map_err(|_| Refusal::BadRequest("the body is unreadable or over 64 KiB".into()))?
        .to_bytes();
        let (status, body) = self
            .gateway
            .book
            .report_session(session.as_str(), body)
            .await?;
        let mut response = Response::new(Either::Right(Full::new(body)));
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(response)
    }
}

/// The headers that concern one connection only (RFC 9110 §7.6.1), and the credentials of
/// the client (never sent on: the upstream gets the lease's): removed before a request goes
/// upstream and before an answer goes back.
///
/// Runs twice per forwarded request, so it allocates only when `Connection` names headers of
/// its own (most requests carry none, or just `keep-alive`).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The hop-by-hop headers that are always removed ([`strip_hop_by_hop`]).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Says which upstream served: `X-Proxy-Upstream` (namespace/name), `X-Proxy-Lease`, and
/// `X-Proxy-Session` (`<tenant>:<id>`, the name the report endpoints take) for a session.
fn served_by(headers: &mut HeaderMap, leased: &Leased) {
    let mut put = |name: HeaderName, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    put(UPSTREAM, &leased.proxy.to_string());
    put(LEASE, &leased.id);
    if let Some(session) = &leased.session {
        put(SESSION, session);
    }
}

/// An answer the gateway writes itself: `status`, `X-Proxy-Error: code`, `text`.
fn plain(status: StatusCode, code: &'static str, text: &str) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text.to_owned()))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(ERROR, HeaderValue::from_static(code));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer to `refusal`: its status and code, `Retry-After` on a 503, and the
/// `Proxy-Authenticate` challenge on a 407 (clients send credentials only when challenged).
fn refused(refusal: &Refusal) -> Response<Body> {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = plain(status, refusal.code(), &format!("{}\n", refusal.message()));
    let headers = response.headers_mut();
    if let Some(seconds) = refusal.retry_after() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        headers.insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"proxy-operator\""),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_the_clients_credentials_never_travel_on() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("proxy-authorization", "Basic dXNlcjpwYXNz"),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("accept", "*/*"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["accept"]);
    }

    #[test]
    fn refusals_carry_their_code_challenge_and_wait() {
        let answer = refused(&Refusal::Credentials("no".into()));
        assert_eq!(answer.status(), 407);
        assert_eq!(answer.headers()[ERROR], "bad_credentials");
        assert_eq!(
            answer.headers()[header::PROXY_AUTHENTICATE],
            "Basic realm=\"proxy-operator\""
        );
        let answer = refused(&Refusal::BookUnavailable);
        assert_eq!(answer.status(), 503);
        assert_eq!(answer.headers()[header::RETRY_AFTER], "1");
    }
}
