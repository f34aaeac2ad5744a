//! The discovery API: crawlers list proxies, lease one for a target site, release it, and
//! report how the site treated them (`docs/api.md`, `docs/openapi.yaml`).
//!
//! Every decision is the core's `LeaseBook`: which proxy, capacity, TTL, cooldowns, the 409
//! statistics. This module keeps the book in step with the controller's cache, parses and
//! checks requests, and turns the book's answers into HTTP. It runs on every replica (it is
//! not leader-elected); leases live in the memory of the replica that granted them.
//!
//! Hardening, outermost first: a request log; a panic in a handler is a 500 JSON answer and
//! the server keeps serving; bodies above 64 KiB are refused (413) without being buffered;
//! a bearer token, compared in constant time, on everything but `/healthz`. Under them, the
//! server's timeouts and bounded shutdown ([`crate::server`]).

mod error;
mod routes;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use proxy_core::ProxyKey;
use proxy_core::lease::{LeaseBook, LeaseConfig, ProxyView, Selector, view_of};
use proxy_crd::Proxy;

use crate::server::{BearerToken, Settings};

pub use error::ApiError;
pub use routes::routes;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

/// How often the book is brought in line with the controller's cache.
const SYNC_INTERVAL: Duration = Duration::from_millis(500);

/// Limits of the lease requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The TTL of a lease request that names none.
    pub default_ttl: Duration,
    /// The longest TTL a request may ask for.
    pub max_ttl: Duration,
}

impl Default for Limits {
    /// 5 minutes by default, at most an hour.
    fn default() -> Self {
        Self {
            default_ttl: Duration::from_secs(300),
            max_ttl: Duration::from_secs(3600),
        }
    }
}

/// The state behind the discovery API of one replica.
#[derive(Debug)]
pub struct Discovery {
    book: Mutex<LeaseBook>,
    token: BearerToken,
    limits: Limits,
}

impl Discovery {
    /// A discovery API with this token (`None`: no authentication, loudly warned about),
    /// cooldowns and limits.
    pub fn new(token: Option<&str>, config: LeaseConfig, limits: Limits) -> Self {
        let token = BearerToken::new(token);
        if !token.is_set() {
            tracing::warn!(
                "DISCOVERY API WITHOUT AUTHENTICATION: no --discovery-token (DISCOVERY_TOKEN) is \
                 set, so anyone who can reach the API can lease the fleet's proxies"
            );
        }
        Self {
            book: Mutex::new(LeaseBook::new(config)),
            token,
            limits,
        }
    }

    /// The lease book. A handler that panicked while holding it leaves it as it was at the
    /// panic; the book's operations are single steps, so serving on is the better choice.
    fn book(&self) -> MutexGuard<'_, LeaseBook> {
        crate::supervise::lock(&self.book)
    }

    /// Active leases of this replica, for metrics.
    pub fn active_leases(&self) -> usize {
        self.book().active_total()
    }

    /// Keeps the book in line with the proxies of `store` until the task is dropped.
    pub async fn sync(self: Arc<Self>, store: Store<Proxy>) {
        let mut tick = tokio::time::interval(SYNC_INTERVAL);
        loop {
            tick.tick().await;
            let views = store.state().into_iter().filter_map(|proxy| {
                let labels = proxy.labels().clone().into_iter().collect();
                view_of(
                    ProxyKey::of(&proxy),
                    labels,
                    &proxy.spec,
                    proxy.status.as_ref(),
                )
            });
            self.replace_fleet(views);
        }
    }

    /// Makes `views` the fleet: upserts each, and removes the proxies not among them.
    pub fn replace_fleet(&self, views: impl IntoIterator<Item = ProxyView>) {
        let mut book = self.book();
        let mut gone: BTreeSet<ProxyKey> = book
            .list(&Selector::all(), false)
            .into_iter()
            .map(|listed| listed.proxy.key.clone())
            .collect();
        for view in views {
            gone.remove(&view.key);
            book.upsert(view);
        }
        for key in &gone {
            book.remove(key);
        }
    }

    /// Removes the proxy `key`, which is gone, from the book.
    pub fn forget(&self, key: &ProxyKey) {
        self.book().remove(key);
    }

    /// How many proxies the book holds.
    pub fn tracked(&self) -> usize {
        self.book().list(&Selector::all(), false).len()
    }

    fn authorized(&self, header: Option<&str>) -> bool {
        self.token.accepts(header)
    }
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes the requests in
/// flight within the shutdown grace (see [`crate::server`]).
pub async fn serve(
    discovery: Arc<Discovery>,
    listener: tokio::net::TcpListener,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()>,
) {
    crate::server::serve("discovery", routes(discovery), listener, settings, shutdown).await;
}
