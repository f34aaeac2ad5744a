//! The lease book's vocabulary: what goes in and what comes out.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::feedback::StatusMeaning;
use super::report_ids::ReportId;
use crate::key::ProxyKey;

/// A proxy's labels: `metadata.labels` of its `Proxy` object.
pub type Labels = crate::topology::Labels;

/// One proxy of the fleet as the shell sees it in the controller's cache.
///
/// The shell [upserts](super::LeaseBook::upsert) it whenever one of these fields changes and
/// [removes](super::LeaseBook::remove) it when the `Proxy` object goes away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyView {
    /// The `Proxy` object: the proxy's identity in the book, and the last key of the
    /// selection order.
    pub key: ProxyKey,
    /// The object's labels, which [`Selector`]s match.
    pub labels: Labels,
    /// Whether the proxy may take new leases: its `Ready` condition is `True` (it has an
    /// address and passes its health check). An unhealthy proxy keeps the leases it has.
    pub healthy: bool,
    /// Latency of the last reported probe, in milliseconds: the second key of the selection
    /// order.
    pub latency_ms: u32,
    /// How many leases the proxy serves at once
    /// ([`max_leases_or_default`](proxy_crd::ProxySpec::max_leases_or_default)); 0 means
    /// it is never leased.
    pub max_leases: u32,
    /// The host crawlers connect to: the published IP, or the endpoint's host (possibly a
    /// DNS name) for an External proxy.
    pub host: String,
    /// The port crawlers connect to.
    pub port: u16,
    /// Whether another proxy of the fleet leaves from the same egress address (its
    /// `EgressVerified` condition says `Shared`): a request with
    /// [`distinct_egress`](AcquireRequest::distinct_egress) never gets it.
    pub shared_egress: bool,
}

impl ProxyView {
    /// The egress network its [`NETWORK_LABEL`](crate::topology::NETWORK_LABEL) says, which
    /// a site's penalties are also counted by (module `networks`).
    pub fn network(&self) -> Option<&str> {
        self.labels
            .get(crate::topology::NETWORK_LABEL)
            .map(String::as_str)
    }
}

/// Which proxies a request accepts: equality terms over labels, all of which must hold.
///
/// `{"geo": "eu", "tier": "a"}` matches proxies labelled `geo=eu` and `tier=a`; the empty
/// selector ([`Selector::all`]) matches every proxy. Serialized as that JSON object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Selector {
    terms: Labels,
    /// Two terms ask for different values of one label (`geo=eu,geo=us`): all of them
    /// cannot hold, so the selector matches nothing.
    #[serde(skip)]
    contradictory: bool,
}

impl Selector {
    /// The selector that matches every proxy.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether `labels` satisfy every term.
    pub fn matches(&self, labels: &Labels) -> bool {
        !self.contradictory
            && self
                .terms()
                .all(|(name, value)| labels.get(name).is_some_and(|v| v == value))
    }

    /// Whether two terms ask for different values of one label, so nothing can match.
    pub fn is_contradictory(&self) -> bool {
        self.contradictory
    }

    /// This selector, marked as matching nothing.
    pub(super) fn contradicted(self) -> Self {
        Self {
            contradictory: true,
            ..self
        }
    }

    /// The terms as `(label, value)` pairs, ordered by label.
    pub fn terms(&self) -> impl Iterator<Item = (&str, &str)> {
        self.terms.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

impl From<Labels> for Selector {
    /// The selector of these terms, as they are (no map is rebuilt).
    fn from(terms: Labels) -> Self {
        Self {
            terms,
            contradictory: false,
        }
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Selector {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(terms: I) -> Self {
        let terms = terms
            .into_iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        Self {
            terms,
            contradictory: false,
        }
    }
}

/// A crawler's request for a lease (`POST /v1/leases`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRequest {
    /// The new lease's ID. The shell draws it at random: randomness is an input here.
    pub id: String,
    /// Which proxies are acceptable.
    pub selector: Selector,
    /// The site the crawler is going to (a host name), if it says: proxies cooling down for
    /// it are skipped. Compared case-insensitively (ASCII).
    pub target: Option<String>,
    /// How long the lease lasts unless released earlier. The shell caps it.
    pub ttl: Duration,
    /// Leave out the proxies that share their egress address with another
    /// ([`ProxyView::shared_egress`]): they are not candidates at all, so the 409 counts
    /// do not consider them either.
    pub distinct_egress: bool,
    /// Who holds the lease, as the crawler names itself ([`checked_holder`](super::checked_holder)):
    /// [`leases`](super::LeaseBook::leases) finds a holder's active leases and
    /// [`release_held_by`](super::LeaseBook::release_held_by) ends them, so the leases of a
    /// crawler that died, or whose grant answer was lost, need not wait for their TTL.
    pub holder: Option<String>,
}

/// A lease granted by [`acquire`](super::LeaseBook::acquire).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The ID the request supplied.
    pub id: String,
    /// The leased proxy.
    pub proxy: ProxyKey,
    /// The host to connect to, as it was when the lease was granted.
    pub host: String,
    /// The port to connect to, as it was when the lease was granted.
    pub port: u16,
    /// The request's target, lowercased.
    pub target: Option<String>,
    /// When the lease was granted (the `now` of the acquire).
    pub granted_at: Timestamp,
    /// When the lease ends unless released earlier: `granted_at + ttl`.
    pub expires_at: Timestamp,
    /// The requested duration.
    pub ttl: Duration,
    /// Who holds it, as the request said.
    pub holder: Option<String>,
}

/// What a crawler saw through a leased proxy (`POST /v1/leases/{id}/report`).
///
/// Serialized in snake case: `ok`, `rate_limited`, `blocked`, `error`, `unreachable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportResult {
    /// The request went through. Changes nothing: a cooldown runs its course, so one lucky
    /// request cannot undo a block.
    Ok,
    /// The target throttled the proxy (HTTP 429 or the like): the proxy cools down for the
    /// target for [`LeaseConfig::rate_limited_cooldown`].
    RateLimited,
    /// The target refused the proxy (403, a captcha): the proxy cools down for the target
    /// for [`LeaseConfig::blocked_cooldown`].
    Blocked,
    /// Something else failed (connection reset, timeout). Whose fault it was is unknown, and
    /// the health engine judges the proxy itself, so this cools down only when
    /// [`LeaseConfig::error_cooldown`] is set.
    Error,
    /// The client could not reach the proxy itself: its TCP connection refused, reset or
    /// not made in time, a close before it answered, its 407. Never a site the proxy could
    /// not reach (that is the proxy's answer, an `error`). Counts toward the proxy's
    /// breaker, fleet-wide ([`LeaseConfig::circuit`]), not toward any site.
    Unreachable,
}

impl ReportResult {
    /// The result as the API writes it: `ok`, `rate_limited`, `blocked`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::RateLimited => "rate_limited",
            Self::Blocked => "blocked",
            Self::Error => "error",
            Self::Unreachable => "unreachable",
        }
    }
}

/// How long reports keep a proxy away from a target; ended leases are kept as long as the
/// longest of them ([`retention`](Self::retention)), and at most
/// [`max_retained`](Self::max_retained) of them at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Cooldown after [`ReportResult::RateLimited`]. Default 5 minutes.
    pub rate_limited_cooldown: Duration,
    /// Cooldown after [`ReportResult::Blocked`]. Default 30 minutes.
    pub blocked_cooldown: Duration,
    /// Cooldown after [`ReportResult::Error`]; zero (the default) means none.
    pub error_cooldown: Duration,
    /// The window of the per-site statistics ([`SiteStats`](super::SiteStats)) and of the
    /// distinct blocked sites that ban a proxy: a site is forgotten this long after its last
    /// report. Default 1 hour.
    pub site_window: Duration,
    /// When `unreachable` reports take a proxy out of selection, and for how long.
    pub circuit: super::CircuitConfig,
    /// When a site's penalties within one egress network cool the whole network for it.
    pub networks: super::NetworkConfig,
    /// The most ended leases kept at once for late reports. Past it the lease that ended
    /// first is forgotten before its retention is over, and a report on it answers
    /// [`UnknownLease`]. The retention alone keeps every lease of the last 30 minutes, so a
    /// sustained lease rate would grow the book without end (half a million leases at 300
    /// a second); each costs about 600 bytes. Default [`DEFAULT_MAX_RETAINED`].
    pub max_retained: usize,
}

/// The default of [`LeaseConfig::max_retained`]: 10 000 ended leases, about 6 MiB, every
/// lease of the retention window up to 5.5 leases a second.
pub const DEFAULT_MAX_RETAINED: usize = 10_000;

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            rate_limited_cooldown: Duration::from_secs(5 * 60),
            blocked_cooldown: Duration::from_secs(30 * 60),
            error_cooldown: Duration::ZERO,
            site_window: Duration::from_secs(60 * 60),
            max_retained: DEFAULT_MAX_RETAINED,
            circuit: super::CircuitConfig::default(),
            networks: super::NetworkConfig::default(),
        }
    }
}

impl LeaseConfig {
    /// How long a lease is kept after it expired or was released, so that a late report
    /// still lands: the longest cooldown (30 minutes by default, the `blocked` one), and at
    /// least as long as the book remembers report IDs ([`REPORT_ID_MEMORY`], 15 minutes). A
    /// report matters for as long as the cooldown it starts could last, and a site often
    /// shows its rate limit or block only after the crawler is done with the proxy; and a
    /// crawler sends a report late when the API was away (it sends a penalty's report until
    /// it lands) or sends it again when an answer was lost, which must land, and count once,
    /// whatever the cooldowns: with cooldowns of 10 s, a report held up by an API outage of
    /// 20 s would otherwise find its lease forgotten.
    ///
    /// [`REPORT_ID_MEMORY`]: super::REPORT_ID_MEMORY
    pub fn retention(&self) -> Duration {
        self.rate_limited_cooldown
            .max(self.blocked_cooldown)
            .max(self.error_cooldown)
            .max(super::REPORT_ID_MEMORY)
    }

    /// How long `result` keeps a proxy away from a target; zero means not at all (an
    /// `unreachable` proxy is kept away from every target by its breaker instead).
    pub fn cooldown(&self, result: ReportResult) -> Duration {
        match result {
            ReportResult::Ok | ReportResult::Unreachable => Duration::ZERO,
            ReportResult::RateLimited => self.rate_limited_cooldown,
            ReportResult::Blocked => self.blocked_cooldown,
            ReportResult::Error => self.error_cooldown,
        }
    }
}

/// Why [`acquire`](super::LeaseBook::acquire) granted nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// No proxy the selector matches can take the lease (the API answers 409 with these
    /// counts).
    NoMatch(NoMatch),
    /// A lease with this ID exists, active or retained. IDs are random, so this is a
    /// collision: the shell draws a new ID and asks again.
    IdInUse,
}

/// The body of the 409 answer: why each proxy the selector matches was passed over.
///
/// Counts the proxies in the book (upserted and not removed) that the selector matches,
/// each in exactly one class, tested in this order:
/// `unhealthy` (not [`healthy`](ProxyView::healthy)), then `at_capacity` (active leases at or
/// above `max_leases`, which includes every proxy with `max_leases` 0), then `unreachable`
/// (its breaker is open: clients could not reach it), then `in_cooldown` (cooling down for
/// the request's target). Any other matching proxy would have been leased, so on a failed
/// acquire `considered == unhealthy + at_capacity + unreachable + in_cooldown`.
/// Serialized in camel case: `considered`, `atCapacity`, `inCooldown`, `unhealthy`,
/// `unreachable`, `retryAt`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NoMatch {
    /// Proxies the selector matches.
    pub considered: u32,
    /// Healthy proxies with no free lease.
    pub at_capacity: u32,
    /// Healthy proxies with a free lease, cooling down for the target.
    pub in_cooldown: u32,
    /// Proxies that are not healthy.
    pub unhealthy: u32,
    /// Healthy proxies with a free lease whose breaker is open (module `circuit`).
    #[serde(default)]
    pub unreachable: u32,
    /// The earliest end of a cooldown among the proxies counted in `in_cooldown`, or of an
    /// open breaker among those counted in `unreachable`: by then one of them can take the
    /// lease, unless another request takes its place first. `None` when
    /// none is cooling down (proxies at capacity free a place at a release, at any time, and
    /// unhealthy ones at their next probes: neither has an end the book knows). Serialized
    /// as `retryAt`, absent when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
}

impl NoMatch {
    /// Whole seconds from `now` to [`retry_at`](Self::retry_at), rounded up and at least 1,
    /// as an HTTP `Retry-After` says it: a client that waits that long on its own clock
    /// finds the cooldown over whatever its clock's offset from the server's.
    pub fn retry_after(&self, now: Timestamp) -> Option<u64> {
        self.retry_at.map(|at| seconds_until(at, now))
    }
}

/// Whole seconds from `now` to `at`, rounded up, at least 1.
pub fn seconds_until(at: Timestamp, now: Timestamp) -> u64 {
    let nanos = at.as_nanosecond().saturating_sub(now.as_nanosecond());
    let seconds = (nanos + 999_999_999).div_euclid(1_000_000_000);
    u64::try_from(seconds.max(1)).unwrap_or(u64::MAX)
}

/// A report on a lease the book does not know (never granted, or forgotten after
/// [`LeaseConfig::retention`]): the API answers 404.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownLease;

/// A cooldown a report started or extended: `proxy` is not leased for `target` until
/// `until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cooldown {
    /// The proxy cooling down.
    pub proxy: ProxyKey,
    /// The target, lowercased; `None` cools the proxy down for requests without a target.
    pub target: Option<String>,
    /// The end of the cooldown: the later of the previous end and `now` plus this report's
    /// cooldown.
    pub until: Timestamp,
}

/// One proxy in a [listing](super::LeaseBook::list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedProxy<'a> {
    /// The proxy as last upserted.
    pub proxy: &'a ProxyView,
    /// Its active leases.
    pub active: u32,
}

/// What a lease request adds when it comes from a gateway: the session it belongs to, and
/// the proxies it must not get.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sticky {
    /// The session the lease is for: its active lease is resumed while it still fits the
    /// request, and a new lease is bound to it otherwise ([`LeaseBook::acquire_with`](super::LeaseBook::acquire_with)).
    pub session: Option<super::SessionName>,
    /// Proxies the request does not take, as if the selector did not match them: the ones
    /// a gateway failed to connect to a moment ago. A session on one of them moves.
    pub avoid: Vec<ProxyKey>,
}

/// What [`acquire_with`](super::LeaseBook::acquire_with) granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A new lease: the request named no session, or its session had no active lease.
    New(Lease),
    /// The session's active lease, unchanged (its proxy, its expiry, its ID).
    Resumed(Lease),
    /// The session's lease ended for `why` and this new lease, on another proxy, took its
    /// place.
    Moved {
        /// The new lease.
        lease: Lease,
        /// The proxy the session left.
        from: ProxyKey,
        /// Why it left.
        why: MoveReason,
    },
}

impl Grant {
    /// The lease the request gets.
    pub fn lease(&self) -> &Lease {
        match self {
            Self::New(lease) | Self::Resumed(lease) | Self::Moved { lease, .. } => lease,
        }
    }

    /// Whether the book changed (a lease was granted), so that it must be saved.
    pub fn changed_book(&self) -> bool {
        !matches!(self, Self::Resumed(_))
    }
}

/// Why a session left its proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveReason {
    /// The request avoids the proxy (the gateway could not connect to it).
    Avoided,
    /// The proxy left the fleet (its `Proxy` was deleted, or it has no address).
    Gone,
    /// The proxy is not healthy.
    Unhealthy,
    /// The proxy cools down for the request's target (a site rate-limited or blocked it).
    CoolingDown,
    /// The proxy no longer matches the request's selector or its distinct-egress demand.
    Unselected,
    /// Clients could not reach the proxy: its breaker is open.
    Unreachable,
}

impl MoveReason {
    /// The reason as a word, for answers, logs and metrics: `avoided`, `gone`, `unhealthy`,
    /// `cooling_down`, `unselected`, `unreachable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Avoided => "avoided",
            Self::Gone => "gone",
            Self::Unhealthy => "unhealthy",
            Self::CoolingDown => "cooling_down",
            Self::Unselected => "unselected",
            Self::Unreachable => "unreachable",
        }
    }
}

/// A report as a crawler sends it (`POST /v1/leases/{id}/report`), for
/// [`submit`](super::LeaseBook::submit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// What the crawler saw: a result it names, or the meaning of the status code it saw
    /// ([`meaning_of`](super::meaning_of)); a result named directly is
    /// [`StatusMeaning::Report`].
    pub saw: StatusMeaning,
    /// The site, when it is not the lease's target. Compared case-insensitively (ASCII).
    pub target: Option<String>,
    /// The client's name for this report: the same report sent again (its first attempt
    /// may have landed without an answer) is heard once.
    pub id: Option<ReportId>,
}

/// What the book made of a [`Report`]: the answer a crawler acts on, so that it keeps no
/// table of status codes and no clock of cooldowns of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    /// The result recorded (`None` for a 407, which records nothing).
    pub result: Option<ReportResult>,
    /// Whether the crawler should stop using the lease and lease again for the site: the
    /// report asks for it (`rate_limited`, `blocked`, a 407), the lease's proxy cools down for
    /// the target (another report put it there), or the lease is no longer active.
    pub lease_again: bool,
    /// The site the report counted for, lowercased: the report's target, else the lease's.
    pub target: Option<String>,
    /// When the proxy's cooldown for that site ends, while one runs after this report
    /// (started by it, or by an earlier one): the book's own clock, the one it leases by.
    pub cooldown_until: Option<Timestamp>,
    /// The report's ID was heard before: nothing was recorded again.
    pub repeated: bool,
    /// What the report did to the proxy's breaker, if anything: the shell tells it (an
    /// Event, a metric, a probe at once).
    pub circuit: Option<super::Turned>,
}

/// A report or an end naming a session that has no active lease (it never had one, its TTL
/// ran out, or a ban or a release ended it): the API answers 404.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownSession;
