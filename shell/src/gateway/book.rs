//! The gateway's client of the one lease book: the discovery API (`--discovery-url`, the
//! discovery Service, which routes to the replica that owns the book; any other replica
//! forwards). A gateway replica keeps no lease state of its own: every connection asks the
//! book, so replicas are interchangeable and scale as a Deployment, and a session is the same
//! lease whichever replica a connection reaches.
//!
//! Connections to the API are pooled and kept alive, so a lease costs one HTTP exchange on
//! an open connection; an idle one is closed after [`POOL_IDLE`], before the API's own idle
//! limit closes it (a request sent on a connection the API is closing at that moment is
//! lost: the cause of the releases missing after a load, docs/gateway.md). A report of a ban
//! on plain HTTP is awaited, so the client's next request already finds the session moved;
//! an `error` report (statistics only) is sent in the background.
//!
//! **No lease outlives what serves its client.** A lease is a [`Held`] from the moment the
//! book grants it: released when dropped, whoever drops it and whenever (the client hung up
//! while the book answered, while the upstream was dialled, in the middle of its tunnel or
//! after it). The book's answer is awaited in a task of its own, so a client that hangs up
//! while the book answers drops a future that is not the one holding the grant: the grant
//! lands in that task, finds nobody, and is released. A release is sent in the background
//! and sent again until the book answers, within the lease's TTL
//! ([`proxy_core::gateway::release`]); a stopping gateway waits for those in flight, at most
//! [`SETTLE`], then releases whatever it still holds at once, by holder ([`Book::settle`]).
//!
//! **Calls in the background wait their turn.** At most [`BACKGROUND_CALLS`] releases and
//! background reports are sent at once; the others wait as a few bytes each (the lease's
//! ID). Without the bound, a burst of clients closing together (2 000 kept-alive
//! connections a crawl drops at its end) sent 2 000 requests at once, each on a connection
//! of its own to the book, and the gateway's memory rose after every client had gone, by
//! up to two thirds of what the burst itself took (docs/benchmarks.md, the gateway's
//! memory). Grants are not bounded: a client waits on each.
//!
//! **The gateway's holder.** Every lease it takes outside a session names the gateway as its
//! holder (`--holder`, by default `gateway:<host name>`, in a Pod its name). Before its first
//! lease a gateway releases every lease of its holder (`DELETE /v1/leases?holder=`): those of
//! a predecessor with the same name that died without releasing them (a container
//! restarted after an OOM kill or a crash). Session leases carry none: they are the
//! tenant's, across connections and gateways.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_core::ProxyKey;
use proxy_core::gateway::credentials::basic_header;
use proxy_core::gateway::release::{Next, ReleaseTries, Released};
use proxy_core::gateway::{LeaseAsk, Refusal};
use proxy_core::lease::ReportResult;
use tokio::sync::{OnceCell, Semaphore};
use tokio_util::task::TaskTracker;

use super::metrics::GatewayMetrics;
use crate::wire::{HeldReleased, LeaseGranted, LeaseRequest, NoMatchBody, ReportRequest};

/// How long one request to the lease book may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// How long a pooled connection to the book may sit idle: under the discovery API's idle
/// limit (its `--http-header-timeout-seconds`, 10 s by default), so the gateway closes an
/// idle connection before the API does, and never sends a request on one the API is
/// closing at that moment.
pub const POOL_IDLE: Duration = Duration::from_secs(4);

/// How long a stopping gateway waits for its releases in flight before it releases the
/// rest by holder: about a leadership failover, and with the shutdown grace (10 s) within
/// a Pod's default termination grace of 30 s.
pub const SETTLE: Duration = Duration::from_secs(15);

/// How many releases and background reports may be in flight at once: a few pooled
/// connections' worth, which at a millisecond each clears thousands a second, while a burst
/// of releases no longer opens a connection to the book per release.
pub const BACKGROUND_CALLS: usize = 32;

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
    /// When the book ends the lease by itself (its TTL from the grant, as this gateway
    /// counts it): a release is not sent after it.
    pub expires: Instant,
    /// The proxy's trial lease after clients could not reach it: once the upstream is
    /// reached, an `ok` is reported, which brings the proxy back for every client.
    pub trial: bool,
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

/// A lease held by what serves a client (a tunnel, a connection's upstream, or a request
/// still dialling): released as it is dropped.
#[derive(Debug)]
pub struct Held {
    book: Book,
    leased: Leased,
}

impl std::ops::Deref for Held {
    type Target = Leased;

    fn deref(&self) -> &Leased {
        &self.leased
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.book.release_later(&self.leased);
    }
}

/// The discovery API, as the gateway uses it.
#[derive(Debug, Clone)]
pub struct Book {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// The holder of this gateway's leases.
    holder: String,
    /// Set once the leases of a predecessor of the same holder are released.
    predecessor: Arc<OnceCell<()>>,
    metrics: Arc<GatewayMetrics>,
    /// The grants awaited, the releases and reports in flight.
    background: TaskTracker,
    /// The turns of the releases and background reports ([`BACKGROUND_CALLS`]).
    turns: Arc<Semaphore>,
}

impl Book {
    /// The lease book at `base` (`http://proxy-operator-discovery:8090`), with the
    /// discovery API's bearer token; the gateway's leases name `holder`.
    pub fn new(
        base: &str,
        token: Option<String>,
        holder: String,
        metrics: Arc<GatewayMetrics>,
    ) -> Self {
        Self::with_pool_idle(base, token, holder, metrics, POOL_IDLE)
    }

    /// [`new`](Self::new), with pooled connections closed after `pool_idle`: the tests' API
    /// closes idle connections sooner than the real one's 10 s.
    pub(crate) fn with_pool_idle(
        base: &str,
        token: Option<String>,
        holder: String,
        metrics: Arc<GatewayMetrics>,
        pool_idle: Duration,
    ) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .pool_idle_timeout(pool_idle)
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            holder,
            predecessor: Arc::default(),
            metrics,
            background: TaskTracker::new(),
            turns: Arc::new(Semaphore::new(BACKGROUND_CALLS)),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Releases the leases a predecessor of the same holder left, once, trying again until
    /// the book answers: the gateway's first step, before its first lease request (which
    /// would otherwise be released with them).
    pub async fn release_predecessor(&self) {
        let mut tries = ReleaseTries::default();
        while self.released_predecessor().await.is_err() {
            // Bounded only by the gateway's life: it serves nothing until the book answers.
            let Next::RetryIn(wait) = tries.after(None, Duration::MAX) else {
                return;
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// [`release_predecessor`](Self::release_predecessor) once, or the refusal the client
    /// gets while the book cannot answer it.
    async fn released_predecessor(&self) -> Result<(), Refusal> {
        self.predecessor
            .get_or_try_init(|| async {
                let released = self.release_holder().await?;
                if released > 0 {
                    tracing::info!(
                        holder = self.holder,
                        released,
                        "released the leases a predecessor of this gateway held"
                    );
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// `DELETE /v1/leases?holder=`: every lease of this gateway's holder; how many.
    async fn release_holder(&self) -> Result<u64, Refusal> {
        let answer = self
            .request(reqwest::Method::DELETE, "/v1/leases")
            .query(&[("holder", &self.holder)])
            .send()
            .await
            .map_err(|error| {
                tracing::warn!(%error, url = %self.base, "the lease book did not answer a release by holder");
                Refusal::BookUnavailable
            })?;
        let status = answer.status();
        if status.is_success() {
            let body = answer.json::<HeldReleased>().await;
            Ok(body.map_or(0, |body| body.released as u64))
        } else if status.is_server_error() {
            Err(Refusal::BookUnavailable)
        } else {
            // No retry changes a refusal (a token the API refuses): serve on, and let the
            // leases a predecessor left expire.
            let body = answer.text().await.unwrap_or_default();
            tracing::warn!(status = status.as_u16(), %body, holder = self.holder, "the lease book refused a release by holder");
            Ok(0)
        }
    }

    /// A lease for `ask`: the session's, or a new one. A refusal the client understands when
    /// there is none: no proxy fits (503 with `Retry-After`), or the book cannot answer.
    ///
    /// The book is asked in a task of its own: if the caller's future is dropped (its client
    /// hung up) while the book answers, the grant is released as it lands.
    pub async fn lease(&self, ask: &LeaseAsk) -> Result<Held, Refusal> {
        self.released_predecessor().await?;
        let body = LeaseRequest {
            selector: ask
                .selector
                .terms()
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect(),
            target: Some(ask.target.clone()),
            ttl_seconds: ask.ttl.map(|ttl| ttl.as_secs().into()),
            session: ask.session.as_ref().map(|s| s.as_str().to_owned()),
            holder: ask.holder(&self.holder).map(str::to_owned),
            avoid: ask.avoid.iter().map(ToString::to_string).collect(),
            ..LeaseRequest::default()
        };
        let session = ask.session.as_ref().map(|s| s.as_str().to_owned());
        let book = self.clone();
        self.background
            .spawn(async move { book.grant(body, session).await })
            .await
            .unwrap_or(Err(Refusal::BookUnavailable))
    }

    /// `POST /v1/leases` with `body`, for `session`.
    async fn grant(self, body: LeaseRequest, session: Option<String>) -> Result<Held, Refusal> {
        let started = Instant::now();
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
        self.metrics.lease_took(started.elapsed().as_secs_f64());
        match status {
            200 | 201 => {
                let granted: LeaseGranted = serde_json::from_slice(&bytes).map_err(|error| {
                    tracing::warn!(%error, "the lease book's answer is not a lease");
                    Refusal::BookUnavailable
                })?;
                if session.is_some() {
                    self.metrics.session(match (status, &granted.moved) {
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
                    session,
                    expires: started + Duration::from_secs(granted.ttl_seconds),
                    trial: granted.trial,
                };
                Ok(Held { book: self, leased })
            }
            409 => Err(Refusal::NoProxy(
                serde_json::from_slice::<NoMatchBody>(&bytes)
                    .map(|body| body.stats)
                    .unwrap_or_default(),
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

    /// Releases `leased` in the background, sent again until the book answers
    /// ([`proxy_core::gateway::release`]). Sessions are never released by the gateway: they
    /// last until their TTL or a ban.
    fn release_later(&self, leased: &Leased) {
        if leased.session.is_some() {
            return;
        }
        let book = self.clone();
        let (id, expires) = (leased.id.clone(), leased.expires);
        self.in_background(async move {
            let released = book.release(&id, expires).await;
            book.metrics.released(released);
        });
    }

    /// `DELETE /v1/leases/{id}` until the book answers, or the lease has expired.
    async fn release(&self, id: &str, expires: Instant) -> Released {
        let mut tries = ReleaseTries::default();
        loop {
            // The turn lasts until the answer is dropped, when its connection is back in
            // the pool for the next release.
            let answer = {
                let _turn = self.turns.acquire().await;
                self.request(reqwest::Method::DELETE, &format!("/v1/leases/{id}"))
                    .send()
                    .await
                    .map(|answer| answer.status().as_u16())
            };
            let status = answer.as_ref().ok().copied();
            let left = expires.saturating_duration_since(Instant::now());
            match tries.after(status, left) {
                Next::Done(Released::Refused) => {
                    tracing::warn!(?status, lease = id, "the lease book refused a release");
                    return Released::Refused;
                }
                Next::Done(Released::Expired) => {
                    tracing::warn!(
                        ?status,
                        lease = id,
                        "the lease book did not answer a release before the lease's TTL: it expired there"
                    );
                    return Released::Expired;
                }
                Next::Done(done) => return done,
                Next::RetryIn(wait) => {
                    match answer {
                        Ok(status) => tracing::debug!(
                            status,
                            lease = id,
                            ?wait,
                            "a release met no book: sending it again"
                        ),
                        Err(error) => {
                            tracing::debug!(%error, lease = id, ?wait, "a release met no book: sending it again")
                        }
                    }
                    self.metrics.release_retried();
                    tokio::time::sleep(wait).await;
                }
            }
        }
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
        let turns = Arc::clone(&self.turns);
        self.in_background(async move {
            let _turn = turns.acquire().await;
            deliver(request, &id).await;
        });
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
        .json(&ReportRequest {
            result: Some(result.as_str().to_owned()),
            target: Some(target.to_owned()),
            ..ReportRequest::default()
        })
    }

    /// Runs `work` (a call to the book) on the current runtime, tracked for [`settle`](Self::settle).
    fn in_background(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.background.spawn_on(work, &runtime);
        }
    }

    /// The last step of a gateway's shutdown: waits for the grants, releases and reports in
    /// flight, at most [`SETTLE`], then releases whatever this gateway still holds by its
    /// holder (a release still being retried, a grant whose answer is late), so that its
    /// leases go back to the book rather than waiting out their TTL.
    pub async fn settle(&self) {
        self.background.close();
        if tokio::time::timeout(SETTLE, self.background.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = self.background.len(),
                "lease book calls still in flight after the settle time: releasing by holder"
            );
        }
        let until = tokio::time::Instant::now() + SETTLE;
        let mut tries = ReleaseTries::default();
        loop {
            match self.release_holder().await {
                Ok(released) => {
                    if released > 0 {
                        tracing::info!(
                            released,
                            holder = self.holder,
                            "released by holder at shutdown"
                        );
                    }
                    return;
                }
                Err(_) => {
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    let Next::RetryIn(wait) = tries.after(None, left) else {
                        tracing::warn!(
                            holder = self.holder,
                            "the lease book did not answer the release by holder at shutdown: the leases expire by themselves"
                        );
                        return;
                    };
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// How many calls to the book are in flight (grants, releases, reports).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.background.len()
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
