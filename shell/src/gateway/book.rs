//! The gateway's client of the one lease book: the discovery API (`--discovery-url`, the
//! discovery Service, which routes to the replica that owns the book; any other replica
//! forwards). A gateway replica keeps no lease state of its own: every connection asks the
//! book, so replicas are interchangeable and scale as a Deployment, and a session is the same
//! lease whichever replica a connection reaches.
//!
//! Connections to the API are pooled and kept alive, so a lease costs one HTTP exchange on
//! an open connection. Releases are sent in the background (a connection's close never waits
//! for one), and a stopping gateway waits for those in flight ([`Book::settle`]). A report of
//! a ban on plain HTTP is awaited, so the client's next request already finds the session
//! moved; an `error` report (statistics only) is sent in the background too.
//!
//! A lease is a [`Pending`] until what releases it holds it (a tunnel, a connection's
//! upstream): a client that hangs up while its upstream is being dialled drops the request's
//! future, and the lease with it goes back to the book instead of counting against the
//! proxy's `maxLeases` until its TTL.

use std::time::{Duration, Instant};

use proxy_core::ProxyKey;
use proxy_core::gateway::credentials::basic_header;
use proxy_core::gateway::{LeaseAsk, Refusal};
use proxy_core::lease::{NoMatch, ReportResult};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::task::TaskTracker;

use super::metrics::GatewayMetrics;

/// How long one request to the lease book may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A lease the book granted a connection: where to connect, and how to authenticate there.
#[derive(Clone)]
pub struct Leased {
    /// The lease ID.
    pub id: String,
    /// The upstream proxy.
    pub proxy: ProxyKey,
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `Proxy-Authorization` for the upstream, when it has credentials.
    pub authorization: Option<String>,
    /// The session (`<tenant>:<id>`), when the username named one.
    pub session: Option<String>,
}

impl std::fmt::Debug for Leased {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leased")
            .field("id", &self.id)
            .field("proxy", &self.proxy)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// A lease just granted, released when dropped unless [`kept`](Pending::keep).
#[derive(Debug)]
pub struct Pending<'a> {
    book: &'a Book,
    leased: Leased,
    kept: bool,
}

impl Pending<'_> {
    /// The lease.
    pub fn leased(&self) -> &Leased {
        &self.leased
    }

    /// The lease, now in the hands of what releases it.
    pub fn keep(mut self) -> Leased {
        self.kept = true;
        self.leased.clone()
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.book.release_later(&self.leased);
        }
    }
}

/// The discovery API, as the gateway uses it.
#[derive(Debug, Clone)]
pub struct Book {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// The releases and reports in flight.
    background: TaskTracker,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Granted {
    #[serde(rename = "leaseID")]
    lease_id: String,
    proxy: GrantedProxy,
    #[serde(default)]
    moved: Option<Value>,
}

#[derive(Deserialize)]
struct GrantedProxy {
    namespace: String,
    name: String,
    host: String,
    port: u16,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl Book {
    /// The lease book at `base` (`http://proxy-operator-discovery:8090`), with the
    /// discovery API's bearer token.
    pub fn new(base: &str, token: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            background: TaskTracker::new(),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// A lease for `ask`: the session's, or a new one. A refusal the client understands when
    /// there is none: no proxy fits (503 with `Retry-After`), or the book cannot answer.
    ///
    /// A grant whose answer is still on its way when the caller's future is dropped is not
    /// released: it ends at its TTL.
    pub async fn lease(
        &self,
        ask: &LeaseAsk,
        metrics: &GatewayMetrics,
    ) -> Result<Pending<'_>, Refusal> {
        let started = Instant::now();
        let mut body = json!({
            "selector": ask.selector.terms().collect::<std::collections::BTreeMap<_, _>>(),
            "target": ask.target,
        });
        if let Some(ttl) = ask.ttl {
            body["ttlSeconds"] = json!(ttl.as_secs());
        }
        if let Some(session) = &ask.session {
            body["session"] = json!(session.as_str());
        }
        if !ask.avoid.is_empty() {
            body["avoid"] = json!(
                ask.avoid
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            );
        }
        let answer = self
            .request(reqwest::Method::POST, "/v1/leases")
            .json(&body)
            .send()
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(%error, url = %self.base, "the lease book did not answer");
                return Err(Refusal::BookUnavailable);
            }
        };
        let status = answer.status().as_u16();
        let bytes = answer.bytes().await.map_err(|error| {
            tracing::warn!(%error, "reading the lease book's answer");
            Refusal::BookUnavailable
        })?;
        metrics.lease_took(started.elapsed().as_secs_f64());
        match status {
            200 | 201 => {
                let granted: Granted = serde_json::from_slice(&bytes).map_err(|error| {
                    tracing::warn!(%error, "the lease book's answer is not a lease");
                    Refusal::BookUnavailable
                })?;
                if ask.session.is_some() {
                    metrics.session(match (status, &granted.moved) {
                        (200, _) => "resumed",
                        (_, Some(_)) => "moved",
                        _ => "new",
                    });
                }
                let proxy = granted.proxy;
                let leased = Leased {
                    id: granted.lease_id,
                    proxy: ProxyKey::new(&proxy.namespace, &proxy.name),
                    authorization: match (&proxy.username, &proxy.password) {
                        (Some(user), Some(password)) => Some(basic_header(user, password)),
                        _ => None,
                    },
                    host: proxy.host,
                    port: proxy.port,
                    session: ask.session.as_ref().map(|s| s.as_str().to_owned()),
                };
                Ok(Pending {
                    book: self,
                    leased,
                    kept: false,
                })
            }
            409 => Err(Refusal::NoProxy(
                serde_json::from_slice::<NoMatch>(&bytes).unwrap_or_default(),
            )),
            503 => Err(Refusal::BookUnavailable),
            other => {
                tracing::warn!(
                    status = other,
                    body = %String::from_utf8_lossy(&bytes),
                    "the lease book refused a lease request"
                );
                Err(Refusal::BookUnavailable)
            }
        }
    }

    /// Releases the lease `id` in the background. Sessions are never released by the
    /// gateway: they last until their TTL or a ban.
    pub fn release_later(&self, leased: &Leased) {
        if leased.session.is_some() {
            return;
        }
        let request = self.request(
            reqwest::Method::DELETE,
            &format!("/v1/leases/{}", leased.id),
        );
        let id = leased.id.clone();
        self.in_background(async move {
            if let Err(error) = request.send().await {
                tracing::debug!(%error, lease = id, "releasing a gateway lease failed; it expires by itself");
            }
        });
    }

    /// Reports `result` for `target` on `leased` (its session's lease ends on a ban); waits
    /// for the book's answer, at most the client timeout.
    pub async fn report(&self, leased: &Leased, result: ReportResult, target: &str) {
        deliver(self.report_request(leased, result, target), &leased.id).await;
    }

    /// [`report`](Self::report) in the background: for a report that changes nothing the
    /// client's next request gets (an `error`, for the statistics).
    pub fn report_later(&self, leased: &Leased, result: ReportResult, target: &str) {
        let request = self.report_request(leased, result, target);
        let id = leased.id.clone();
        self.in_background(async move { deliver(request, &id).await });
    }

    fn report_request(
        &self,
        leased: &Leased,
        result: ReportResult,
        target: &str,
    ) -> reqwest::RequestBuilder {
        self.request(
            reqwest::Method::POST,
            &format!("/v1/leases/{}/report", leased.id),
        )
        .json(&json!({"result": result, "target": target}))
    }

    /// Runs `work` (a call to the book) on the current runtime, tracked for [`settle`](Self::settle).
    fn in_background(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.background.spawn_on(work, &runtime);
        }
    }

    /// Waits until the releases and reports in flight are sent (each is bounded by the
    /// client's timeout): the last step of a gateway's shutdown, so that its leases go back
    /// to the book rather than waiting out their TTL.
    pub async fn settle(&self) {
        self.background.close();
        self.background.wait().await;
    }

    /// Relays a client's report on its session (`POST /v1/sessions/{name}/report`) with the
    /// client's body, and returns the book's status and body.
    pub async fn report_session(
        &self,
        session: &str,
        body: bytes::Bytes,
    ) -> Result<(u16, bytes::Bytes), Refusal> {
        let answer = self
            .request(
                reqwest::Method::POST,
                &format!("/v1/sessions/{session}/report"),
            )
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|_| Refusal::BookUnavailable)?;
        let status = answer.status().as_u16();
        let body = answer.bytes().await.map_err(|_| Refusal::BookUnavailable)?;
        Ok((status, body))
    }
}

/// Sends a report on the lease `id`, and logs what went wrong.
async fn deliver(request: reqwest::RequestBuilder, id: &str) {
    match request.send().await {
        Ok(answer) if answer.status().is_success() => {}
        Ok(answer) => {
            tracing::warn!(
                status = answer.status().as_u16(),
                lease = id,
                "the lease book refused a report"
            )
        }
        Err(error) => tracing::warn!(%error, lease = id, "reporting to the lease book failed"),
    }
}
