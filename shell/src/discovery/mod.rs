//! The discovery API, the lease book's HTTP face: crawlers list proxies, lease one for a
//! target site, release it, and report how the site treated them (`docs/api.md`,
//! `docs/openapi.yaml`).
//!
//! The book and every decision it takes live in [`crate::lease_book`]; this module parses and
//! checks requests, asks the book, and turns its answers into HTTP. Every replica serves the
//! API; the book says which replica answers a request (`proxy_core::lease::route`), and a
//! replica that does not own it relays lease requests to the owner ([`forward`]).
//!
//! - [`routes`]: the router, one dispatch for every route, and the handlers per resource:
//!   `proxies` (the listing and a proxy's detail), `leases` (lease, release, a holder's
//!   leases), `reports`, `sessions`;
//! - `wire`: the bodies of every request and answer, in one place;
//! - `error`: the JSON errors, each with a machine code.
//!
//! `GET /v1/proxies` is served from the book's snapshot of the fleet, so a large answer is
//! built without the book's lock and never holds up a lease; it reads from the book only the
//! active lease counts of the proxies it shows, a few hundred at a time.
//!
//! Hardening, outermost first: a request log; a panic in a handler is a 500 JSON answer and
//! the server keeps serving; bodies above 64 KiB are refused (413) without being buffered;
//! a bearer token, compared in constant time, on everything but `/healthz`. Under them, the
//! server's timeouts and bounded shutdown ([`crate::runtime::server`]).

mod error;
mod flags;
pub mod forward;
mod routes;

pub use self::flags::Flags;

use std::sync::Arc;
use std::time::Duration;

use proxy_core::lease::LeaseConfig;

use crate::lease_book::{Book, Elsewhere};
use crate::runtime::server::{BearerToken, Settings};

pub use error::ApiError;
pub use routes::routes;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

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

/// The discovery API of one replica: the book it serves, and what the HTTP face adds.
#[derive(Debug)]
pub struct Discovery {
    book: Arc<Book>,
    token: BearerToken,
    limits: Limits,
    forwarder: forward::Forwarder,
}

impl Discovery {
    /// The API of `book`, with this token (`None`: no authentication, loudly warned about)
    /// and limits.
    pub fn serving(book: Arc<Book>, token: Option<&str>, limits: Limits) -> Self {
        let token = BearerToken::new(token);
        if !token.is_set() {
            tracing::warn!(
                "DISCOVERY API WITHOUT AUTHENTICATION: no --discovery-token (DISCOVERY_TOKEN) is \
                 set, so anyone who can reach the API can lease the fleet's proxies"
            );
        }
        Self {
            book,
            token,
            limits,
            forwarder: forward::Forwarder::new(),
        }
    }

    /// An API with this token, cooldowns and limits, over a book of its own that it owns
    /// alone and never saves (tests, benchmarks).
    pub fn new(token: Option<&str>, config: LeaseConfig, limits: Limits) -> Self {
        Self::serving(Arc::new(Book::alone(config)), token, limits)
    }

    /// The book it serves.
    pub fn book(&self) -> &Arc<Book> {
        &self.book
    }

    fn authorized(&self, header: Option<&str>) -> bool {
        self.token.accepts(header)
    }
}

/// A request this replica does not answer from its book: an answer now, or the owner's.
#[derive(Debug)]
pub(crate) enum Away {
    /// This answer, now (an error, or a refusal while ownership moves).
    Answer(ApiError),
    /// To the owner at this base URL.
    Forward(String),
}

impl From<ApiError> for Away {
    fn from(error: ApiError) -> Self {
        Self::Answer(error)
    }
}

impl From<Elsewhere> for Away {
    fn from(elsewhere: Elsewhere) -> Self {
        match elsewhere {
            Elsewhere::Refused(refusal) => Self::Answer(ApiError::unavailable(refusal)),
            Elsewhere::Forward(owner) => Self::Forward(owner),
        }
    }
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes the requests in
/// flight within the shutdown grace (see [`crate::runtime::server`]).
pub async fn serve(
    discovery: Arc<Discovery>,
    listener: tokio::net::TcpListener,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()>,
) {
    crate::runtime::server::serve("discovery", routes(discovery), listener, settings, shutdown)
        .await;
}
