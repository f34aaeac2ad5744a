//! The fleet's one lease book, as one replica holds it: the core's `LeaseBook` with its
//! journal and this replica's standing behind one lock, the fleet snapshot the listing is
//! served from, the credentials the lease answer hands out, and the lease requests lately
//! refused. Every decision is the core's (`proxy_core::lease`): which proxy, capacity, TTL,
//! cooldowns, the 409 statistics, and which replica answers (`proxy_core::lease::route`).
//!
//! The book is a service of its own, not the HTTP API's: the discovery API
//! ([`crate::discovery`]) serves it, and the controller, the pools, `tracked` and the
//! metrics read it through a [`Reader`], which shows what they read and nothing else.
//!
//! - [`sync`](Book::sync) keeps it in line with the controller's cache: the fleet
//!   ([`FleetSnapshot`]; the book is told only what changed) and the credentials;
//! - [`ownership`]: the leader owns the book, saves it to a ConfigMap and takes it back
//!   after a failover or a restart; [`owner_label`] marks the owner's Pod for the Service;
//! - [`refusals`]: the lease requests refused for want of a proxy, for the pools that grow
//!   on demand.

pub mod circuits;
pub mod owner_label;
pub mod ownership;
mod reader;
pub mod refusals;
mod sync;

pub use self::reader::Reader;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use proxy_core::lease::{
    Call, Circuit, FleetSnapshot, Journal, LeaseBook, LeaseConfig, NotServing, ProxyView, Route,
    Standing, route,
};
use proxy_core::{BlockedSites, ProxyKey};

use crate::credentials::Credentials;
use crate::leadership::Leadership;

/// The lease book of one replica.
#[derive(Debug)]
pub struct Book {
    shared: Mutex<Shared>,
    /// How this replica takes part in the fleet's one book; `None`: it is alone and owns
    /// its book for good (tests, benchmarks).
    replica: Option<Replica>,
    /// The credentials of the proxies that have them, for the lease answer: in memory only,
    /// kept in line with the credentials Secrets by [`Book::sync`]. Never in the book
    /// (which is saved to a ConfigMap), never in a listing.
    credentials: Mutex<BTreeMap<ProxyKey, Credentials>>,
    /// The fleet as the last sync saw it, which the listing is served from.
    snapshot: Mutex<Arc<FleetSnapshot>>,
    /// Proxies [`PerProxy::forget`](crate::per_proxy::PerProxy::forget) took out of the
    /// book since the last sync: the next sync upserts them again if they are still in the
    /// fleet, although the snapshot did not change for them.
    forgotten: Mutex<BTreeSet<ProxyKey>>,
    /// The lease requests lately refused for want of a proxy, for the pools that grow on
    /// demand.
    pub refusals: refusals::Refusals,
    /// What the breakers did, on its way to the Proxies' Events.
    pub turns: circuits::Turns,
    /// Whether the fleet was given at least once ([`Book::replace_fleet`]): the sync
    /// gives it only once the Proxy cache has listed, and a replica takes the book over only
    /// then ([`ownership`]), so that no report lands uncounted (site statistics count for
    /// proxies the book holds) and no lease is refused for proxies the cache has not shown yet.
    fleet_given: std::sync::atomic::AtomicBool,
}

/// What one lock guards: the book, what of it is saved, and who owns it. One lock, so that
/// a request is routed and served in the same step: once ownership moves, this replica
/// grants nothing more.
#[derive(Debug)]
pub struct Shared {
    /// The lease book.
    pub book: LeaseBook,
    /// Which of the book's changes are saved.
    pub journal: Journal,
    /// Whether this replica owns the book, takes it over, or forwards to the owner.
    pub standing: Standing,
}

/// A replica of a fleet of operators that share one book.
#[derive(Debug)]
pub struct Replica {
    /// This replica's discovery URL as the others reach it (`None`: they cannot).
    pub own_url: Option<String>,
    /// Whether this replica leads, which makes it the book's owner.
    pub leadership: Arc<Leadership>,
}

impl Book {
    /// A book that this replica owns alone and never saves.
    pub fn alone(config: LeaseConfig) -> Self {
        Self::build(config, None, std::time::Duration::MAX)
    }

    /// The book of one replica among several: it owns the book while it leads and forwards
    /// to the leader otherwise; `fence` is how long a change may stay unsaved before it
    /// stops granting ([`Journal`]).
    pub fn replicated(config: LeaseConfig, replica: Replica, fence: std::time::Duration) -> Self {
        Self::build(config, Some(replica), fence)
    }

    fn build(config: LeaseConfig, replica: Option<Replica>, fence: std::time::Duration) -> Self {
        let standing = match replica {
            None => Standing::Owner,
            Some(_) => Standing::Follower { owner: None },
        };
        Self {
            shared: Mutex::new(Shared {
                book: LeaseBook::new(config),
                journal: Journal::new(fence),
                standing,
            }),
            replica,
            credentials: Mutex::default(),
            snapshot: Mutex::default(),
            forgotten: Mutex::default(),
            refusals: refusals::Refusals::default(),
            turns: circuits::Turns::default(),
            fleet_given: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The book, its journal and its standing. A handler that panicked while holding them
    /// leaves them as they were at the panic; the book's operations are single steps, so
    /// serving on is the better choice.
    pub fn shared(&self) -> MutexGuard<'_, Shared> {
        crate::locks::lock(&self.shared)
    }

    /// The book, locked, if this replica answers `call` itself; else where the request goes
    /// (forwarded to the owner, or refused for now). `forwarded`: another replica sent it.
    pub fn serving(
        &self,
        call: Call,
        forwarded: bool,
    ) -> Result<MutexGuard<'_, Shared>, Elsewhere> {
        let shared = self.shared();
        let (leading, own_url) = match &self.replica {
            None => (true, None),
            Some(replica) => (replica.leadership.is_leader(), replica.own_url.as_deref()),
        };
        let now = jiff::Timestamp::now();
        match route(
            &shared.standing,
            leading,
            call,
            forwarded,
            own_url,
            &shared.journal,
            now,
        ) {
            Route::Serve => Ok(shared),
            Route::Forward(owner) => Err(Elsewhere::Forward(owner)),
            Route::Refuse(why) => Err(Elsewhere::Refused(why)),
        }
    }

    /// Active leases in the book of this replica while it owns the book (0 otherwise: a
    /// follower's book is not the fleet's), for metrics; the book ends what is due first.
    pub fn active_leases(&self) -> usize {
        self.owned_count(LeaseBook::active_total)
    }

    /// Ended leases kept for late reports, as [`active_leases`](Self::active_leases).
    pub fn retained_leases(&self) -> usize {
        self.owned_count(LeaseBook::retained_total)
    }

    /// Proxies whose breaker is open or running a trial, as
    /// [`active_leases`](Self::active_leases).
    pub fn open_circuits(&self) -> usize {
        self.owned_count(|book, _| book.open_circuits())
    }

    /// `count` of the book as of now while this replica owns it, else 0.
    fn owned_count(&self, count: fn(&mut LeaseBook, jiff::Timestamp) -> usize) -> usize {
        let mut shared = self.shared();
        match shared.standing {
            Standing::Owner => count(&mut shared.book, jiff::Timestamp::now()),
            _ => 0,
        }
    }

    /// Whether this replica owns the lease book now (what it counts is the fleet's).
    pub fn owns_book(&self) -> bool {
        self.shared().standing == Standing::Owner
    }

    /// The active leases of the proxy `key` as of now while this replica owns the book
    /// (`None` otherwise), for the pool that drains it or scales on demand.
    pub fn leases_of(&self, key: &ProxyKey) -> Option<u32> {
        let mut shared = self.shared();
        let now = jiff::Timestamp::now();
        (shared.standing == Standing::Owner).then(|| shared.book.active_leases(key, now))
    }

    /// How many distinct sites blocked the proxy `key` within the site window, judged against
    /// `threshold`, while this replica owns the book (`None` otherwise: a follower's book, or
    /// one not merged yet, is not the fleet's).
    pub fn blocked_sites(&self, key: &ProxyKey, threshold: u32) -> Option<BlockedSites> {
        let shared = self.shared();
        (shared.standing == Standing::Owner).then(|| BlockedSites {
            sites: shared.book.blocked_sites(key, jiff::Timestamp::now()),
            threshold,
            window_seconds: shared.book.config().site_window.as_secs(),
        })
    }

    /// The active leases of each of `proxies` (a page, in key order) as of now, read from
    /// the book a chunk at a time, so that a long listing never holds its lock for long.
    pub fn active_leases_of(&self, proxies: &[&ProxyView]) -> Vec<u32> {
        /// Proxies read per hold of the lock: a few microseconds each time.
        const CHUNK: usize = 256;
        let now = jiff::Timestamp::now();
        let mut active = Vec::with_capacity(proxies.len());
        for chunk in proxies.chunks(CHUNK) {
            let keys = chunk.iter().map(|p| &p.key);
            active.extend(self.shared().book.active_leases_in_order(keys, now));
        }
        active
    }

    /// The breaker of each of `proxies` as of now, read a few hundred at a time as
    /// [`active_leases_of`](Self::active_leases_of) reads.
    pub fn circuits_of(&self, proxies: &[&ProxyView]) -> Vec<Circuit> {
        const CHUNK: usize = 256;
        let mut circuits = Vec::with_capacity(proxies.len());
        for chunk in proxies.chunks(CHUNK) {
            let shared = self.shared();
            circuits.extend(chunk.iter().map(|proxy| shared.book.circuit(&proxy.key)));
        }
        circuits
    }

    /// Makes `views` the fleet: the snapshot the listing is served from, and the book's,
    /// which takes only what changed since the previous snapshot (under its lock: usually
    /// nothing). Called by one task at a time (the sync).
    pub fn replace_fleet(&self, views: impl IntoIterator<Item = ProxyView>) {
        let next = Arc::new(FleetSnapshot::new(views));
        let previous = self.snapshot();
        let forgotten = std::mem::take(&mut *crate::locks::lock(&self.forgotten));
        let changes = next.changes_from(&previous);
        let again = forgotten.iter().filter_map(|key| next.get(key));
        {
            let mut shared = self.shared();
            for view in changes.upserts.iter().copied().chain(again) {
                shared.book.upsert(view.clone());
            }
            for key in changes.removals {
                shared.book.remove(key);
            }
        }
        *crate::locks::lock(&self.snapshot) = next;
        self.fleet_given
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the fleet was given at least once (see `fleet_given`).
    pub fn fleet_given(&self) -> bool {
        self.fleet_given.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The fleet as the last sync saw it.
    pub fn snapshot(&self) -> Arc<FleetSnapshot> {
        crate::locks::lock(&self.snapshot).clone()
    }

    /// Makes `credentials` the credentials the lease answer hands out, per proxy.
    pub fn replace_credentials(
        &self,
        credentials: impl IntoIterator<Item = (ProxyKey, Credentials)>,
    ) {
        *crate::locks::lock(&self.credentials) = credentials.into_iter().collect();
    }

    /// The credentials of the proxy `key`, if it has any.
    pub fn credentials_of(&self, key: &ProxyKey) -> Option<Credentials> {
        crate::locks::lock(&self.credentials).get(key).cloned()
    }
}

/// Where a request goes when this replica does not answer it from its book.
#[derive(Debug)]
pub enum Elsewhere {
    /// Nowhere for now: ownership is moving, or the book is not saved ([`NotServing`]).
    Refused(NotServing),
    /// To the owner at this base URL.
    Forward(String),
}

/// `proxy_operator_leases_active`, `proxy_operator_leases_retained` and
/// `proxy_operator_circuits_open`.
impl crate::runtime::metrics::Gauges for Book {
    fn encode(&self, encoder: &mut crate::runtime::metrics::DescriptorEncoder) -> std::fmt::Result {
        crate::runtime::metrics::gauge(
            encoder,
            "leases_active",
            "Crawler leases held on this replica's proxies",
            self.active_leases(),
        )?;
        crate::runtime::metrics::gauge(
            encoder,
            "leases_retained",
            "Ended leases kept for late reports (at most --max-retained-leases: at the bound, late reports on the oldest answer unknown_lease)",
            self.retained_leases(),
        )?;
        crate::runtime::metrics::gauge(
            encoder,
            "circuits_open",
            "Proxies out of selection because crawlers could not reach them (their breaker is open or running its one trial lease)",
            self.open_circuits(),
        )
    }
}

impl crate::per_proxy::PerProxy for Book {
    /// Removes the proxy `key`, which is gone, from the book (the listing follows at the
    /// next sync).
    fn forget(&self, key: &ProxyKey) {
        self.shared().book.remove(key);
        crate::locks::lock(&self.forgotten).insert(key.clone());
    }

    /// How many proxies the book holds.
    fn tracked(&self) -> usize {
        self.shared().book.proxies()
    }
}
