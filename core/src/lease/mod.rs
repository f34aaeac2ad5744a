//! The lease book: which proxy a crawler gets, for how long, and which proxies are kept away
//! from which sites.
//!
//! # Driving contract
//!
//! The shell owns one [`LeaseBook`] per process behind one lock, and every call is one
//! decision on it: [`acquire`](LeaseBook::acquire) picks the proxy and records the lease in
//! the same `&mut self` call, so two concurrent requests can never both see "4 of 5 used"
//! and overcommit. The book holds the fleet itself:
//!
//! - [`upsert`](LeaseBook::upsert) a [`ProxyView`] whenever the controller's cache shows a
//!   change (labels, health, latency, `maxLeases`, address), [`remove`](LeaseBook::remove) it
//!   when the `Proxy` object goes away; requests then carry only a [`Selector`], not the
//!   candidates (reading n candidates per request would already be linear);
//! - answer the discovery API with [`acquire`](LeaseBook::acquire),
//!   [`release`](LeaseBook::release), [`report`](LeaseBook::report),
//!   [`submit`](LeaseBook::submit) (a crawler's report, answered with what to do next),
//!   [`list`](LeaseBook::list), [`detail`](LeaseBook::detail), and for a holder's leases
//!   [`leases`](LeaseBook::leases) and [`release_held_by`](LeaseBook::release_held_by); read
//!   metrics with [`active_total`](LeaseBook::active_total) and
//!   [`active_leases`](LeaseBook::active_leases). Every view that counts leases takes `now`
//!   and ends what is due first, so no answer counts a lease past its end;
//! - serve `GET /v1/proxies` from a [`FleetSnapshot`] of the last sync, not from the book,
//!   so that a large answer is built without the book's lock: the snapshot says what
//!   changed since the previous one ([`FleetSnapshot::changes_from`]), which is all the
//!   book needs to be told, and which page a [`ListQuery`] selects ([`FleetSnapshot::page`]);
//!   only the active lease counts of the page's proxies are read from the book.
//!
//! # One book for the fleet
//!
//! Several replicas serve the discovery API, but one book answers: the owner's (the leader,
//! once it has merged the last checkpoint). [`route`] says whether a replica serves a
//! request, forwards it to the owner, or refuses it for now. The owner saves its book with
//! [`checkpoint`](LeaseBook::checkpoint) in the background, and a new owner (after a
//! failover or a restart) takes it back with [`restore`](LeaseBook::restore), a merge
//! (module `checkpoint`). The [`Journal`] tracks what is not saved yet and fences grants
//! when saving falls behind, which bounds what a crash of the owner can lose.
//!
//! The core has no clock and no randomness: every call that depends on time takes `now`,
//! which should not go backwards (if it does, nothing breaks: leases and cooldowns just end
//! later), and lease IDs come from the shell. Expiry is lazy: every call taking `now` first
//! ends what is due, so capacity comes back without a timer. The book uses ordered
//! collections only, so the same calls always give the same answers and the same state.
//!
//! # Rules
//!
//! - **Selection.** Among the proxies the selector matches that are healthy, below capacity
//!   and not cooling down for the target, the one with the fewest active leases, then the
//!   lowest latency, then the smallest key ([`ProxyKey`]s order as their `namespace/name`
//!   text).
//! - **Capacity.** A grant never takes a proxy's active leases above its `max_leases`; 0
//!   means never leased. Lowering `max_leases` revokes nothing: the proxy takes no new lease
//!   until it is below the new limit.
//! - **Lifecycle.** A lease is active from the acquire until `expires_at` or its release,
//!   whichever comes first; then it is retained for [`LeaseConfig::retention`], the longest cooldown (it no longer
//!   counts, but a report on it still lands, which matters most when the crawler was being
//!   rate-limited), then forgotten; earlier when [`LeaseConfig::max_retained`] leases ended
//!   after it (the one that ended first goes first), so that a sustained lease rate keeps the
//!   book bounded. Release is idempotent. A zero TTL is allowed: the lease
//!   ends at the next call.
//! - **Answers to reports.** [`submit`](LeaseBook::submit) answers each report with what
//!   the crawler acts on: the result recorded, whether to lease again (the result asks for
//!   it, the proxy cools down for the target, or the lease is over) and when the proxy's
//!   cooldown for the target ends. A report that names an ID already heard on its lease is
//!   recorded once (module `report_ids`). A failed acquire says, with its counts, when the
//!   first proxy cooling down for the target leaves its cooldown ([`NoMatch::retry_at`]):
//!   crawlers wait on the book's clock, never on one of their own.
//! - **Reports and cooldowns.** A report names a result and optionally a target (default:
//!   the lease's). `rate_limited` and `blocked` keep the (proxy, target) pair apart for the
//!   configured time; `error` only if [`LeaseConfig::error_cooldown`] is set (default: no,
//!   the health engine judges the proxy); `ok` changes nothing. A cooldown is never
//!   shortened by a later report. It holds for that target only: other targets still get
//!   the proxy, and so do requests without a target. A report without any target cools the
//!   proxy for requests without a target, and for no named target. Targets are compared
//!   ASCII-case-insensitively (stored lowercased).
//! - **Site statistics.** A report naming a target (its own or the lease's) counts for the
//!   (proxy, target) pair while the proxy is in the book: counts per result in a tumbling
//!   window of [`LeaseConfig::site_window`], the last result, the last `blocked`
//!   ([`sites`](LeaseBook::sites), [`blocked_sites`](LeaseBook::blocked_sites), module
//!   `sites` for the bounds). A status code a crawler saw maps to a result in
//!   [`meaning_of`].
//! - **Removal.** Removing a proxy takes it out of selection and listing at once. Its
//!   leases stay (active until they expire or are released, reports on them land) and so do
//!   its cooldowns (its site statistics go): if the same key comes back (a relist, a re-created object) while
//!   crawlers still hold leases on it, those still count against its capacity.
//! - **Health.** An unhealthy proxy is not leased and keeps counting the leases it has.
//! - **Holders.** A lease may name its holder, the crawler that asked for it:
//!   [`leases`](LeaseBook::leases) lists a holder's active leases and
//!   [`release_held_by`](LeaseBook::release_held_by) ends them all. Nothing else looks at it.
//! - **Sessions.** A request may name a session ([`Sticky`], [`acquire_with`](LeaseBook::acquire_with)):
//!   the session stands for its one active lease, so every request of the session gets the
//!   same proxy until the lease ends (its TTL, a release, [`end_session`](LeaseBook::end_session)),
//!   or a `rate_limited` or `blocked` report on it ends it: sticky until the TTL or a ban. A
//!   session whose proxy no longer fits (gone, unhealthy, not selected, avoided, cooling down
//!   for the target) moves to a new lease. A session is a lease like any other: it counts
//!   against `maxLeases` once, however many connections use it, and it is saved with the
//!   book's checkpoint.
//!
//! # Data structures and cost
//!
//! For n proxies, t labels per proxy, s selector terms, L leases known and c cooldowns:
//!
//! - the fleet (`fleet.rs`): every proxy the book tracks in a numbered slot with its view,
//!   its active count and its numbered label terms, and the slot of each key. A call that
//!   names a key finds the slot once; the index and the ledger carry slots, so a grant or
//!   an end of a lease reaches its proxy by a vector index, not by searching trees of keys;
//! - an eligible index (`index.rs`): ordered sets of `(active, latency, key)` holding only
//!   the proxies that can take a lease now (healthy and below capacity), one for the fleet
//!   and one per `label=value` term. At-capacity and unhealthy proxies are not in it, so
//!   they cost nothing to skip. Granting or ending a lease moves one proxy in t + 1 sets,
//!   found by term number;
//! - the ledger (`ledger.rs`): leases by ID, active ones ordered by expiry and grouped by
//!   holder, retained ones by the time they are forgotten, so expiry pops what is due
//!   instead of scanning; a UUID ID is keyed by its 128 bits (`lease_key.rs`), so its maps
//!   copy and compare integers;
//! - cooldowns (`cooldown.rs`) by target then proxy, ordered by end as well.
//!
//! [`acquire`](LeaseBook::acquire) walks the smallest index set among the selector's terms
//! (the fleet set when there are none) in rank order and takes the first proxy that matches
//! the other terms and is not cooling down for the target: O(s · log n) to find the set,
//! O((k + 1) · (s + log n + log c)) for the walk, where k is the number of proxies skipped,
//! and O((t + 1) · log n + log L) to record the grant, plus the amortized cost of expiring
//! what is due (each lease and cooldown ends once). With a one-term or empty selector and no
//! cooldowns on the target, k is 0: O(log n). Honest worst case: k is bounded by the
//! eligible proxies in the walked set that cool down for the target or miss another term,
//! so a target on which most of a large fleet is cooling down, or a multi-term selector
//! whose terms are each common but rarely together, makes the walk linear (O(n log n) at
//! worst, never worse than sorting every candidate). When nothing matches, counting the
//! [`NoMatch`] statistics visits every proxy: O(n · s), on the failure path only.
//! [`release`](LeaseBook::release) and [`report`](LeaseBook::report) are O((t + 1) · log n +
//! log L) and O(log L + log c).

mod checkpoint;
mod circuit;
mod cooldown;
mod feedback;
mod fleet;
mod index;
mod journal;
mod lease_key;
mod ledger;
mod listing;
mod networks;
mod numbered;
mod report_ids;
mod routing;
mod sessions;
mod sites;
mod types;
mod view;

use std::time::Duration;

use jiff::Timestamp;

use crate::key::ProxyKey;
pub use checkpoint::{
    CHECKPOINT_VERSION, Checkpoint, InvalidCheckpoint, Merged, SavedCooldown, SavedLease, SavedSite,
};
pub use circuit::{Circuit, CircuitConfig, Turn, Turned};
use circuit::{Circuits, Gate};
use cooldown::Cooldowns;
pub use feedback::{InvalidStatus, StatusMeaning, meaning_of};
use fleet::{Fleet, Slot};
use index::EligibleIndex;
pub use journal::{Journal, Ticket};
use lease_key::LeaseKey;
use ledger::{Ledger, Retention};
pub use listing::{
    Field, Fields, FleetChanges, FleetSnapshot, InvalidQuery, ListQuery, MAX_CONTINUE_BYTES,
    MAX_PAGE, Page, continue_after,
};
use networks::NetworkBans;
pub use networks::NetworkConfig;
use report_ids::ReportIds;
pub use report_ids::{
    InvalidReportId, MAX_REPORT_ID_LEN, MAX_REPORT_IDS, REPORT_ID_MEMORY, ReportId,
};
pub use routing::{Call, NotServing, Route, Standing, route};
use sessions::Sessions;
pub use sessions::{InvalidSession, MAX_SESSION_LEN, SessionName};
use sites::Sites;
pub use sites::{SITES_PER_PROXY, SiteStats};
pub use types::{
    AcquireError, AcquireRequest, Cooldown, DEFAULT_MAX_RETAINED, Grant, Labels, Lease,
    LeaseConfig, ListedProxy, MoveReason, NoMatch, ProxyView, Report, ReportResult, Reported,
    Selector, Sticky, UnknownLease, UnknownSession, seconds_until,
};
pub use view::{
    InvalidHolder, InvalidSelector, InvalidTarget, MAX_HOLDER_LEN, MAX_SELECTOR_TERMS,
    MAX_TARGET_LEN, checked_holder, checked_target, view_of,
};

/// The fleet, the leases on it and the cooldowns: see the [module documentation](self) for
/// the contract, the rules and the cost of each call.
///
/// Equality is structural: a book equals its clone, and a call that changes nothing (a
/// refused restore) leaves it equal to itself before; two books that reached the same
/// leases by different calls may differ (their proxies' slot numbers), so compare what
/// they answer ([`checkpoint`](Self::checkpoint), [`list`](Self::list)) instead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseBook {
    config: LeaseConfig,
    fleet: Fleet,
    eligible: EligibleIndex,
    ledger: Ledger,
    cooldowns: Cooldowns,
    circuits: Circuits,
    sites: Sites,
    networks: NetworkBans,
    sessions: Sessions,
    report_ids: ReportIds,
}

/// How one target treated one proxy, from [`LeaseBook::sites`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site<'a> {
    /// The target, lowercased.
    pub target: &'a str,
    /// The statistics as of the call.
    pub stats: SiteStats,
    /// When the proxy's cooldown for the target ends, while one runs.
    pub cooldown_until: Option<Timestamp>,
}

/// One proxy of the book with how the sites treated it, from [`LeaseBook::detail`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyDetail<'a> {
    /// The proxy and its active leases.
    pub listed: ListedProxy<'a>,
    /// Distinct sites that reported it `blocked` within the site window
    /// ([`blocked_sites`](LeaseBook::blocked_sites)).
    pub blocked_sites: u32,
    /// How each site treated it ([`sites`](LeaseBook::sites)).
    pub sites: Vec<Site<'a>>,
    /// Its breaker ([`circuit`](LeaseBook::circuit)).
    pub circuit: Circuit,
}

/// Why a proxy cannot take a lease, before cooldowns are looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unavailable {
    Unhealthy,
    AtCapacity,
}

impl LeaseBook {
    /// An empty book.
    pub fn new(config: LeaseConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Adds the proxy, or replaces the one with the same key. Its active leases are kept.
    /// A proxy whose health turns from unhealthy to healthy closes its breaker (the health
    /// engine saw it pass again: module `circuit`).
    pub fn upsert(&mut self, proxy: ProxyView) {
        if proxy.healthy
            && self
                .fleet
                .view(&proxy.key)
                .is_some_and(|seen| !seen.healthy)
        {
            self.circuits.recovered(&proxy.key);
        }
        let slot = self.fleet.slot_or_new(&proxy.key);
        self.unindex(slot);
        let terms = self.eligible.carry(&proxy.labels);
        let dropped = self.fleet.set_view(slot, proxy, terms);
        self.eligible.let_go(&dropped);
        self.index(slot);
    }

    /// Removes the proxy from selection and listing; returns whether it was in the book.
    /// Its leases and cooldowns stay until they end (see the module's rules); its site
    /// statistics go (a proxy that comes back under the same key is a new machine).
    pub fn remove(&mut self, key: &ProxyKey) -> bool {
        self.sites.remove(key);
        self.circuits.forget(key);
        let Some(slot) = self.fleet.slot(key) else {
            return false;
        };
        self.unindex(slot);
        let (listed, dropped) = self.fleet.clear_view(slot);
        self.eligible.let_go(&dropped);
        listed
    }

    /// Grants a lease on the best eligible proxy the selector matches, after ending what is
    /// due at `now`. The rules and the cost are in the module documentation.
    pub fn acquire(
        &mut self,
        request: AcquireRequest,
        now: Timestamp,
    ) -> Result<Lease, AcquireError> {
        self.acquire_with(request, &Sticky::default(), now)
            .map(|grant| match grant {
                Grant::New(lease) | Grant::Resumed(lease) | Grant::Moved { lease, .. } => lease,
            })
    }

    /// [`acquire`](Self::acquire) for a gateway: the request may name a session and
    /// proxies to avoid ([`Sticky`]).
    ///
    /// - A session whose lease is active keeps it ([`Grant::Resumed`]: no new lease, nothing
    ///   changes) while its proxy still fits the request: in the fleet, healthy, matching
    ///   the selector (and distinct egress when asked), not avoided, not cooling down for
    ///   the target. Capacity is not asked again: the session holds its place.
    /// - Otherwise its lease is released (retained, so reports on it land) and a new lease is
    ///   granted by the usual rules and bound to the session ([`Grant::Moved`]); when none
    ///   fits, the session is over and the answer is [`AcquireError::NoMatch`].
    /// - A session without an active lease gets a new one, bound to it ([`Grant::New`]); so
    ///   does a request without a session, bound to nothing.
    ///
    /// The request's `id` is used only for a new lease. Avoided proxies are not candidates:
    /// the 409 statistics do not count them. O(log n) for a resumed session, plus a grant's
    /// cost otherwise.
    pub fn acquire_with(
        &mut self,
        request: AcquireRequest,
        sticky: &Sticky,
        now: Timestamp,
    ) -> Result<Grant, AcquireError> {
        let AcquireRequest {
            id,
            selector,
            target,
            ttl,
            distinct_egress,
            holder,
        } = request;
        self.expire(now);
        let target = target.map(|mut target| {
            target.make_ascii_lowercase();
            target
        });
        let wanted = Wanted {
            selector: &selector,
            distinct_egress,
            avoid: &sticky.avoid,
        };
        let mut moved = None;
        if let Some(name) = &sticky.session
            && let Some(held) = self.sessions.lease_of(name)
            && let Some(lease) = self.ledger.get(held)
        {
            match self.must_move(lease, &wanted, target.as_deref(), now) {
                None => return Ok(Grant::Resumed(lease.clone())),
                Some(why) => {
                    let (held, from) = (lease.id.clone(), lease.proxy.clone());
                    self.release(&held, now);
                    moved = Some((from, why));
                }
            }
        }
        if self.ledger.contains(&id) {
            return Err(AcquireError::IdInUse);
        }
        let Some((slot, proxy)) = self.best(&wanted, target.as_deref(), now) else {
            let stats = self.no_match(&wanted, target.as_deref(), now);
            return Err(AcquireError::NoMatch(stats));
        };
        let lease = Lease {
            id,
            proxy: proxy.key.clone(),
            host: proxy.host.clone(),
            port: proxy.port,
            target,
            granted_at: now,
            expires_at: later(now, ttl),
            ttl,
            holder,
        };
        self.circuits.granted(&lease.proxy, now);
        self.admit(lease.clone(), slot);
        if let Some(name) = &sticky.session {
            self.sessions.bind(name.clone(), &lease.id);
        }
        Ok(match moved {
            None => Grant::New(lease),
            Some((from, why)) => Grant::Moved { lease, from, why },
        })
    }

    /// Why the session lease `lease` cannot serve a request for `target` that wants
    /// `wanted`, or `None` when it can.
    fn must_move(
        &self,
        lease: &Lease,
        wanted: &Wanted<'_>,
        target: Option<&str>,
        now: Timestamp,
    ) -> Option<MoveReason> {
        if wanted.avoid.contains(&lease.proxy) {
            return Some(MoveReason::Avoided);
        }
        let Some(proxy) = self.fleet.view(&lease.proxy) else {
            return Some(MoveReason::Gone);
        };
        if !proxy.healthy {
            Some(MoveReason::Unhealthy)
        } else if !wanted.accepts(proxy) {
            Some(MoveReason::Unselected)
        } else if self.cooldowns.for_target(target).holds(&proxy.key, now) {
            Some(MoveReason::CoolingDown)
        } else if !self.circuits.keeps_session(&proxy.key, now) {
            Some(MoveReason::Unreachable)
        } else {
            None
        }
    }

    /// Ends the lease if it is active, freeing its place on the proxy, and returns whether
    /// it did. Unknown, released and expired leases are fine: `false`, nothing changes.
    pub fn release(&mut self, id: &str, now: Timestamp) -> bool {
        self.expire(now);
        match self.ledger.release(id, now, self.retention()) {
            Some(slot) => {
                self.lease_ended(slot, &LeaseKey::of(id));
                true
            }
            None => false,
        }
    }

    /// The leases of `holder` (of every holder, and of none, when `None`) that are active at
    /// `now`, by ID. Reads the book as of `now` without changing it, as
    /// [`sites`](Self::sites) does. O(k · log L) for a holder's k leases; O(a · log a) for
    /// every one of the a active leases.
    pub fn leases(&self, holder: Option<&str>, now: Timestamp) -> Vec<&Lease> {
        let mut leases = self.ledger.active_of(holder);
        leases.retain(|lease| lease.expires_at > now);
        leases
    }

    /// Ends every active lease of `holder`, as [`release`](Self::release) would one by one,
    /// and returns how many it ended. For a crawler that lost track of its leases (it
    /// crashed, or a grant's answer never reached it). O(k · ((t + 1) · log n + log L)).
    pub fn release_held_by(&mut self, holder: &str, now: Timestamp) -> usize {
        self.expire(now);
        let ids: Vec<String> = self
            .ledger
            .active_of(Some(holder))
            .into_iter()
            .map(|lease| lease.id.clone())
            .collect();
        ids.iter().filter(|id| self.release(id, now)).count()
    }

    /// Records what a crawler saw through the lease's proxy, for `target` or else the
    /// lease's target, and returns the cooldown it started or extended, if any. The lease
    /// may be active or retained (expired or released less than
    /// [`LeaseConfig::retention`] ago). A report naming a target counts in the site
    /// statistics of the proxy while it is in the book ([`sites`](Self::sites)). A
    /// `rate_limited` or `blocked` report on the active lease of a session ends that lease:
    /// a session is sticky until its TTL or a ban, and its next request gets another proxy.
    ///
    /// An `unreachable` report counts toward the proxy's breaker and nowhere else (not in
    /// the site's statistics: the site was never reached); `ok`, `rate_limited` and
    /// `blocked` say the proxy was reached (module `circuit`).
    pub fn report(
        &mut self,
        id: &str,
        result: ReportResult,
        target: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<Cooldown>, UnknownLease> {
        self.record(id, result, target, now)
            .map(|(cooldown, _)| cooldown)
    }

    /// [`report`](Self::report), with what the report did to the proxy's breaker.
    fn record(
        &mut self,
        id: &str,
        result: ReportResult,
        target: Option<&str>,
        now: Timestamp,
    ) -> Result<(Option<Cooldown>, Option<Turn>), UnknownLease> {
        self.expire(now);
        let lease = self.ledger.get(id).ok_or(UnknownLease)?;
        let (proxy, granted_at) = (lease.proxy.clone(), lease.granted_at);
        let target = target
            .map(str::to_ascii_lowercase)
            .or_else(|| lease.target.clone());
        let turn = match result {
            ReportResult::Unreachable => {
                self.circuits
                    .unreachable(&proxy, granted_at, now, &self.config.circuit)
            }
            ReportResult::Ok | ReportResult::RateLimited | ReportResult::Blocked => {
                self.circuits.reached(&proxy, granted_at)
            }
            ReportResult::Error => None,
        };
        if let Some(site) = &target
            && self.fleet.view(&proxy).is_some()
        {
            self.sites
                .record(&proxy, site, result, now, self.config.site_window);
        }
        if matches!(result, ReportResult::RateLimited | ReportResult::Blocked)
            && self.sessions.session_of(id).is_some()
        {
            self.release(id, now);
        }
        let cooldown = self.config.cooldown(result);
        if cooldown.is_zero() {
            return Ok((None, turn));
        }
        let until = self
            .cooldowns
            .extend(proxy.clone(), target.clone(), later(now, cooldown));
        if let Some(site) = &target {
            self.network_penalised(&proxy, site, until, now);
        }
        let cooldown = Cooldown {
            proxy,
            target,
            until,
        };
        Ok((Some(cooldown), turn))
    }

    /// Counts a penalty of `proxy` by `site` against its network (module `networks`): once
    /// the network reached the threshold, every proxy of it in the fleet cools for the site
    /// until `until` at least, as `proxy` does. O(log p), and O(n) for n proxies when the
    /// threshold is reached.
    fn network_penalised(
        &mut self,
        proxy: &ProxyKey,
        site: &str,
        until: Timestamp,
        now: Timestamp,
    ) {
        let Some(network) = self.fleet.view(proxy).and_then(ProxyView::network) else {
            return;
        };
        let network = network.to_owned();
        if !self
            .networks
            .penalised(site, &network, proxy, now, &self.config.networks)
        {
            return;
        }
        let same: Vec<ProxyKey> = self
            .fleet
            .views()
            .filter(|(view, _)| view.network() == Some(network.as_str()) && view.key != *proxy)
            .map(|(view, _)| view.key.clone())
            .collect();
        for key in same {
            self.cooldowns.extend(key, Some(site.to_owned()), until);
        }
    }

    /// Hears a crawler's report on the lease `id` as the API takes it, and answers what the
    /// crawler acts on ([`Reported`]): the result recorded, whether to lease again, and the
    /// end of the proxy's cooldown for the site, from the book's own clock. The report is
    /// recorded as [`report`](Self::report) records it, once: a report whose
    /// [`id`](Report::id) was heard on this lease within [`REPORT_ID_MEMORY`] records nothing
    /// and answers as things stand ([`Reported::repeated`]). A 407 records nothing either.
    /// Unknown leases (never granted, or forgotten after the retention) are an error.
    /// O(log L + log c + log m) for m report IDs remembered.
    pub fn submit(
        &mut self,
        id: &str,
        report: &Report,
        now: Timestamp,
    ) -> Result<Reported, UnknownLease> {
        self.expire(now);
        let lease = self.ledger.get(id).ok_or(UnknownLease)?;
        let proxy = lease.proxy.clone();
        let target = report
            .target
            .as_deref()
            .map(str::to_ascii_lowercase)
            .or_else(|| lease.target.clone());
        let repeated = report
            .id
            .as_ref()
            .is_some_and(|heard| !self.report_ids.first_time(LeaseKey::of(id), heard, now));
        let mut circuit = None;
        if !repeated && let Some(result) = report.saw.result() {
            let turn = self.record(id, result, target.as_deref(), now)?.1;
            circuit = turn.map(|turn| Turned {
                proxy: proxy.clone(),
                turn,
            });
        }
        let cooldown_until = self
            .cooldowns
            .for_target(target.as_deref())
            .until(&proxy)
            .filter(|until| *until > now);
        let lease_again =
            report.saw.lease_again() || cooldown_until.is_some() || !self.ledger.is_active(id);
        Ok(Reported {
            result: report.saw.result(),
            lease_again,
            target,
            cooldown_until,
            repeated,
            circuit,
        })
    }

    /// [`submit`](Self::submit) on the active lease of the session `name`.
    pub fn submit_session(
        &mut self,
        name: &SessionName,
        report: &Report,
        now: Timestamp,
    ) -> Result<Reported, UnknownSession> {
        self.expire(now);
        let id = self
            .sessions
            .lease_of(name)
            .ok_or(UnknownSession)?
            .to_owned();
        self.submit(&id, report, now)
            .map_err(|UnknownLease| UnknownSession)
    }

    /// Ends the session `name`: releases its lease, so its next request gets a new choice.
    /// Returns whether it had an active lease.
    pub fn end_session(&mut self, name: &SessionName, now: Timestamp) -> bool {
        self.expire(now);
        match self.sessions.lease_of(name).map(str::to_owned) {
            Some(id) => self.release(&id, now),
            None => false,
        }
    }

    /// The active lease of the session `name`, if it has one at `now`.
    pub fn session_lease(&mut self, name: &SessionName, now: Timestamp) -> Option<&Lease> {
        self.expire(now);
        let id = self.sessions.lease_of(name)?;
        self.ledger.get(id)
    }

    /// How many sessions have an active lease at `now` (ending what is due first).
    pub fn sessions_total(&mut self, now: Timestamp) -> usize {
        self.expire(now);
        self.sessions.len()
    }

    /// Whether a lease with this ID is known at `now`, active or retained: whether a report
    /// on it would land.
    pub fn knows(&mut self, id: &str, now: Timestamp) -> bool {
        self.expire(now);
        self.ledger.contains(id)
    }

    /// Ends every lease that expired at or before `now` and forgets retained leases,
    /// cooldowns and report IDs whose time is up. Every call taking `now` that changes the
    /// book or counts leases does this first, so that no view counts a lease past its end.
    pub fn expire(&mut self, now: Timestamp) {
        while let Some((slot, key)) = self.ledger.expire_next(now, self.retention()) {
            self.lease_ended(slot, &key);
        }
        self.ledger.forget_ended(now);
        self.cooldowns.forget_ended(now);
        self.sites.forget_ended(now, self.config.site_window);
        self.report_ids.forget_ended(now);
    }

    /// How each target treated the proxy within the site window, by target, with the end
    /// of the proxy's cooldown for it (if one runs at `now`). Empty for an unknown proxy.
    /// Reads the statistics as of `now` without changing the book: counts of a window that
    /// ended are shown as zero. O(s · log c) for s sites.
    pub fn sites(&self, key: &ProxyKey, now: Timestamp) -> Vec<Site<'_>> {
        let window = self.config.site_window;
        self.sites
            .of(key)
            .into_iter()
            .flatten()
            .filter(|(_, stats)| later(stats.last_at, window) > now)
            .map(|(target, stats)| Site {
                target,
                stats: stats.as_of(now, window),
                cooldown_until: self
                    .cooldowns
                    .for_target(Some(target))
                    .until(key)
                    .filter(|until| *until > now),
            })
            .collect()
    }

    /// How many distinct targets reported the proxy `blocked` within the site window before
    /// `now`: the count the `Banned` condition judges ([`crate::banned`]). O(s).
    pub fn blocked_sites(&self, key: &ProxyKey, now: Timestamp) -> u32 {
        self.sites.blocked_within(key, now, self.config.site_window)
    }

    /// The breaker of the proxy with this key (closed with no failures for a proxy it has
    /// never heard of), as of the last report: an open one whose time is up still shows
    /// `Open` until its trial is granted. O(log b) for b breakers not at rest.
    pub fn circuit(&self, key: &ProxyKey) -> Circuit {
        self.circuits.of(key)
    }

    /// Whether `lease` is its proxy's trial lease: the one its breaker let through after its
    /// time out (module `circuit`). Its holder reports what it saw, `ok` included, since
    /// that report closes or reopens the breaker. O(log b).
    pub fn on_trial(&self, lease: &Lease) -> bool {
        matches!(
            self.circuits.of(&lease.proxy),
            Circuit::Trial { since, .. } if since == lease.granted_at
        )
    }

    /// The labels of the proxy with this key, as its last [`upsert`](Self::upsert) said: what
    /// a lease answer tells of where its proxy stands. O(log n).
    pub fn labels(&self, key: &ProxyKey) -> Option<&Labels> {
        self.fleet.view(key).map(|view| &view.labels)
    }

    /// How many proxies' breakers are open or running a trial. O(b).
    pub fn open_circuits(&self) -> usize {
        self.circuits.open()
    }

    /// The book's configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// How long, and how many, ended leases are kept.
    fn retention(&self) -> Retention {
        Retention {
            period: self.config.retention(),
            most: self.config.max_retained,
        }
    }

    /// How many proxies the book holds. O(1).
    pub fn proxies(&self) -> usize {
        self.fleet.len()
    }

    /// How many leases are active at `now`, on all proxies (removed ones included), ending
    /// what is due first.
    pub fn active_total(&mut self, now: Timestamp) -> usize {
        self.expire(now);
        self.ledger.active()
    }

    /// How many ended leases are kept for late reports at `now`, ending and forgetting what
    /// is due first: at most [`LeaseConfig::max_retained`]; a book at its bound forgets
    /// leases before their retention is over.
    pub fn retained_total(&mut self, now: Timestamp) -> usize {
        self.expire(now);
        self.ledger.retained()
    }

    /// How many leases are active at `now` on the proxy with this key (0 for an unknown
    /// key), ending what is due first. O(log n) plus the expiry's amortized cost.
    pub fn active_leases(&mut self, key: &ProxyKey, now: Timestamp) -> u32 {
        self.expire(now);
        self.fleet.active(key)
    }

    /// [`active_leases`](Self::active_leases) of each of `keys`, walking the book's keys
    /// from one to the next when they ascend, as a page of the listing does: a key within
    /// 16 of the previous one is reached by stepping, any other (a step back, or a filtered
    /// page's gap) is looked up. So k keys cost at most k lookups, O(k · log n), and a dense
    /// page O(k), where a lookup per key searched the whole book's keys each time and kept
    /// its lock longer. Keys in any order get the same answers. Counts as of `now`, ending
    /// what is due first.
    pub fn active_leases_in_order<'a>(
        &mut self,
        keys: impl IntoIterator<Item = &'a ProxyKey>,
        now: Timestamp,
    ) -> Vec<u32> {
        self.expire(now);
        self.fleet.active_in_order(keys)
    }

    /// The proxies the selector matches, only the healthy ones if `healthy_only`, ordered
    /// by key, with their active leases at `now` (ending what is due first). O(n · s).
    pub fn list(
        &mut self,
        selector: &Selector,
        healthy_only: bool,
        now: Timestamp,
    ) -> Vec<ListedProxy<'_>> {
        self.list_distinct(selector, healthy_only, false, now)
    }

    /// [`list`](Self::list), without the proxies that share their egress address with
    /// another when `distinct_egress`.
    pub fn list_distinct(
        &mut self,
        selector: &Selector,
        healthy_only: bool,
        distinct_egress: bool,
        now: Timestamp,
    ) -> Vec<ListedProxy<'_>> {
        self.expire(now);
        let wanted = Wanted {
            selector,
            distinct_egress,
            avoid: &[],
        };
        self.fleet
            .views()
            .filter(|(proxy, _)| wanted.accepts(proxy))
            .filter(|(proxy, _)| proxy.healthy || !healthy_only)
            .map(|(proxy, active)| ListedProxy { proxy, active })
            .collect()
    }

    /// The proxy with this key, if it is in the book, with its active leases, the distinct
    /// sites that blocked it, how each site treated it and its breaker, all as of `now` (ending what is
    /// due first). O(log n + s · log c) for s sites.
    pub fn detail(&mut self, key: &ProxyKey, now: Timestamp) -> Option<ProxyDetail<'_>> {
        self.expire(now);
        let book = &*self;
        let member = book.fleet.member(book.fleet.slot(key)?);
        let proxy = member.view.as_ref()?;
        Some(ProxyDetail {
            listed: ListedProxy {
                proxy,
                active: member.active,
            },
            blocked_sites: book.blocked_sites(key, now),
            sites: book.sites(key, now),
            circuit: book.circuit(key),
        })
    }

    /// The first proxy in rank order that the selector matches and that is not cooling
    /// down for the target, with its slot.
    fn best(
        &self,
        wanted: &Wanted<'_>,
        target: Option<&str>,
        now: Timestamp,
    ) -> Option<(Slot, &ProxyView)> {
        let cooling = self.cooldowns.for_target(target);
        let circuit = &self.config.circuit;
        self.eligible
            .narrowest(wanted.selector)?
            .iter()
            .find_map(|rank| {
                let proxy = self.fleet.member(rank.slot).view.as_ref()?;
                let fits = wanted.accepts(proxy)
                    && !cooling.holds(&rank.key, now)
                    && self.circuits.gate(&rank.key, now, circuit) == Gate::Pass;
                fits.then_some((rank.slot, proxy))
            })
    }

    /// Records `lease` as active and counts it against the proxy in `slot` (which need not
    /// be in the fleet). Its ID must be new.
    fn admit(&mut self, lease: Lease, slot: Slot) {
        self.ledger.grant(lease, slot);
        self.unindex(slot);
        self.fleet.lease_started(slot);
        self.index(slot);
    }

    /// The lease `key` on the proxy in `slot` ended: the proxy has a place more, and the
    /// lease's session (if any) no longer names it.
    fn lease_ended(&mut self, slot: Slot, key: &LeaseKey) {
        self.sessions.lease_ended(key);
        self.unindex(slot);
        self.fleet.lease_ended(slot);
        self.index(slot);
    }

    /// Counts why each proxy the selector matches was passed over.
    fn no_match(&self, wanted: &Wanted<'_>, target: Option<&str>, now: Timestamp) -> NoMatch {
        let cooling = self.cooldowns.for_target(target);
        let mut stats = NoMatch::default();
        for (proxy, active) in self.fleet.views() {
            if !wanted.accepts(proxy) {
                continue;
            }
            stats.considered += 1;
            let gate = self.circuits.gate(&proxy.key, now, &self.config.circuit);
            match (unavailable(proxy, active), gate) {
                (Some(Unavailable::Unhealthy), _) => stats.unhealthy += 1,
                (Some(Unavailable::AtCapacity), _) => stats.at_capacity += 1,
                (None, Gate::Shut(until)) => {
                    stats.unreachable += 1;
                    stats.retry_at = stats.retry_at.into_iter().chain([until]).min();
                }
                (None, Gate::Pass) if cooling.holds(&proxy.key, now) => {
                    stats.in_cooldown += 1;
                    let until = cooling.until(&proxy.key);
                    stats.retry_at = stats.retry_at.into_iter().chain(until).min();
                }
                (None, Gate::Pass) => {}
            }
        }
        stats
    }

    /// Takes the proxy in `slot` out of the eligible index if it is in it. Call before
    /// changing anything that [`Fleet::rank`] reads, and [`index`](Self::index) after.
    fn unindex(&mut self, slot: Slot) {
        if let Some((rank, terms)) = self.fleet.rank(slot) {
            self.eligible.remove(&rank, terms);
        }
    }

    /// Puts the proxy in `slot` in the eligible index if it can take a lease.
    fn index(&mut self, slot: Slot) {
        if let Some((rank, terms)) = self.fleet.rank(slot) {
            self.eligible.insert(rank, terms);
        }
    }
}

/// Which proxies a request accepts at all: the selector's, without the ones sharing an
/// egress address when it wants distinct ones, and without the ones it avoids.
struct Wanted<'a> {
    selector: &'a Selector,
    distinct_egress: bool,
    avoid: &'a [ProxyKey],
}

impl Wanted<'_> {
    fn accepts(&self, proxy: &ProxyView) -> bool {
        self.selector.matches(&proxy.labels)
            && !(self.distinct_egress && proxy.shared_egress)
            && !self.avoid.contains(&proxy.key)
    }
}

/// Why `proxy`, holding `active` leases, cannot take another one, cooldowns aside.
fn unavailable(proxy: &ProxyView, active: u32) -> Option<Unavailable> {
    if !proxy.healthy {
        Some(Unavailable::Unhealthy)
    } else if active >= proxy.max_leases {
        Some(Unavailable::AtCapacity)
    } else {
        None
    }
}

/// `at + duration`, saturating at the end of time (a huge TTL means "until released").
fn later(at: Timestamp, duration: Duration) -> Timestamp {
    // Only calendar units make `saturating_add` fail, and a `Duration` has none.
    at.saturating_add(duration).unwrap_or(Timestamp::MAX)
}
