//! The `ProxyPool` decision: which Proxies a pool creates, updates, drains and deletes, and
//! the status it writes, as one pure function, [`decide_pool`], recorded and replayed like
//! [`decide`](fn@crate::decide).
//!
//! # What a pool keeps
//!
//! `desired` Proxies (`replicas`, or what [`autoscale`] decided), split over the spread
//! entries by weight ([`spread`]). Each Proxy carries the template hash of its entry; one
//! whose hash is not its entry's current one is *outdated*. A Proxy is *retiring* when it is
//! outdated, older than `expireAfterSeconds` (less a fixed per-Proxy jitter of up to a tenth),
//! blocked on at least `recycle.bannedSites` distinct sites, or `Healthy=False` for
//! `recycle.replaceUnhealthyAfterSeconds` while the circuit breaker is closed. A Proxy the
//! user annotated `crawl.example.com/do-not-disrupt: "true"` never retires, is never drained
//! and never deleted; one annotated while it drains is taken back (`Undrain`).
//!
//! # How it gets there
//!
//! | step | rule |
//! |---|---|
//! | create | each entry gets Proxies until its non-retiring ones reach its share; all owned Proxies (draining and deleting ones too: they still run a machine) stay within `desired + maxSurge` |
//! | drain | a retiring Proxy, or one above its entry's share, gets no new lease (`maxLeases` 0 and the draining annotation), only while the available Proxies stay at least `desired - maxUnavailable` (so with the default 0 a successor is Ready first); retiring ones also only while fewer than the disruption budget are draining |
//! | delete | a draining Proxy once the lease book says it has no active lease (and at least [`MIN_DRAIN`] after the drain began), or once `drainGraceSeconds` are over |
//! | update | a Proxy whose labels, `maxLeases` or health check differ from its entry's is patched in place (no new machine) |
//!
//! Which Proxy goes first: the ones not available (they cost no capacity), then, for a
//! scale-down, the one with the fewest active leases, then the oldest (the fleet keeps its
//! freshest IPs); for replacements unhealthy, then banned, expired, outdated; ties by name.
//!
//! # The circuit breaker
//!
//! When more Proxies than `circuitBreaker.maxUnhealthy` (rounded up) are `Healthy=False` at
//! once, it is most likely the probe URL or the network, not the proxies: replacing them
//! would churn the whole fleet for nothing. The pool then replaces none for unhealth, and
//! its `CircuitBreaker` condition and a Warning Event say so; it closes by itself.
//!
//! Names are `<pool>-<ordinal>`, with an ordinal that only grows (kept in the status, and
//! never below the highest one in use), so a recycled Proxy's successor is a new name, and
//! does not inherit the lease book's per-site statistics of a banned one.

pub mod amount;
pub mod autoscale;
pub mod spread;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use proxy_crd::pool::{self as api, POOL_LABEL};
use proxy_crd::{
    Condition, HealthCheck, IntOrPercent, Phase, ProxyPoolSpec, ProxyPoolStatus, ProxySpec,
};
use serde::{Deserialize, Serialize};

use crate::conditions::{FALSE, TRUE, condition_among, format_time};
use crate::event::{Event, EventType};
use crate::spec_hash::canonical_digest;
use crate::wake::{self, Interruption};

use self::amount::{Round, resolve};
pub use self::autoscale::Demand;
use self::spread::Slot;

/// Type of the condition saying the pool has its minimum of available Proxies.
pub const AVAILABLE: &str = "Available";
/// Type of the condition saying a scale or a replacement is under way.
pub const PROGRESSING: &str = "Progressing";
/// Type of the condition saying replacing for unhealth is paused.
pub const CIRCUIT_BREAKER: &str = "CircuitBreaker";

/// The longest a pool waits before it looks again when nothing is due: the lease book and
/// the bans are not watched.
const IDLE_POLL: Duration = Duration::from_secs(60);
/// How often a pool looks while a drain waits for leases to end, or autoscale follows
/// demand: active leases are not watched either.
const BUSY_POLL: Duration = Duration::from_secs(5);
/// How often a pool that recycles banned Proxies looks at the ban counts.
const BAN_POLL: Duration = Duration::from_secs(15);
/// The shortest drain: the lease book learns of a drain (`maxLeases` 0) at its next fleet
/// sync (every 0.5 s), so a Proxy deleted sooner, with no lease yet, could still be leased
/// in between and then vanish under its crawler.
pub const MIN_DRAIN: SignedDuration = SignedDuration::from_secs(2);
/// The longest pool name: `<pool>-<ordinal>` must stay a label value (63 characters).
pub const MAX_POOL_NAME: usize = 52;

/// Everything the shell observed for one pool decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolObserved {
    /// The pool's name.
    pub name: String,
    /// The pool's `metadata.generation`.
    pub generation: i64,
    /// The Proxies the pool owns.
    pub members: Vec<Member>,
    /// The lease book's demand on the pool's Proxies; `None` when this replica does not own
    /// the book.
    pub demand: Option<Demand>,
    /// The time of the decision.
    pub now: Timestamp,
}

/// One Proxy a pool owns, as the pool sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Member {
    /// The Proxy's name.
    pub name: String,
    /// Its `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// Its template hash annotation.
    pub template_hash: Option<String>,
    /// Its `spec.provider`.
    pub provider: Option<String>,
    /// Its `spec.placement.zone`.
    pub zone: Option<String>,
    /// Its `status.zone`: where its machine landed (without `placement.zone`, the provider
    /// chose, and a stockout may have moved it). Left out of a recording when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its `spec.maxLeases`.
    pub max_leases: Option<i32>,
    /// Its `spec.healthCheck`.
    pub health_check: Option<HealthCheck>,
    /// Its `status.phase`.
    pub phase: Option<Phase>,
    /// Its `Healthy` condition: the status and since when.
    pub healthy: Option<Health>,
    /// Its draining annotation, as written (RFC 3339).
    pub draining_since: Option<String>,
    /// Whether it carries `crawl.example.com/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// Whether its `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Its active leases, from the lease book; `None` when this replica does not own it.
    pub active_leases: Option<u32>,
    /// Distinct sites that blocked it within the site window; `None` when unknown.
    pub blocked_sites: Option<u32>,
}

/// A Proxy's `Healthy` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Health {
    /// `true` for `True`; `false` for `False` (an `Unknown` condition is no [`Health`]).
    pub healthy: bool,
    /// Its `lastTransitionTime`.
    pub since: Timestamp,
}

/// Why a Proxy leaves the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Why {
    /// Unhealthy for longer than `replaceUnhealthyAfterSeconds`.
    Unhealthy,
    /// Blocked on at least `recycle.bannedSites` sites.
    Banned,
    /// Older than `expireAfterSeconds`.
    Expired,
    /// Made from another template (or a spread entry that is gone).
    Outdated,
    /// Above its entry's share.
    ScaleDown,
}

impl Why {
    /// What the reason means, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unhealthy => "unhealthy for too long",
            Self::Banned => "blocked on too many sites",
            Self::Expired => "expired",
            Self::Outdated => "made from an older template",
            Self::ScaleDown => "above the desired count",
        }
    }
}

/// What the pool does to one Proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum PoolAction {
    /// Create this Proxy, owned by the pool.
    Create {
        /// Its name.
        name: String,
        /// Its labels.
        labels: BTreeMap<String, String>,
        /// Its annotations (the template's and the template hash).
        annotations: BTreeMap<String, String>,
        /// Its spec.
        spec: Box<ProxySpec>,
    },
    /// Patch these fields of a Proxy in place: none of them makes a new machine.
    Update {
        /// The Proxy.
        name: String,
        /// Labels to set.
        labels: BTreeMap<String, String>,
        /// Its `maxLeases`.
        max_leases: Option<i32>,
        /// Its health check.
        health_check: Option<HealthCheck>,
    },
    /// Stop new leases on the Proxy: `maxLeases` 0, and the draining annotation set to
    /// `since`.
    Drain {
        /// The Proxy.
        name: String,
        /// The draining annotation's value.
        since: String,
        /// Why.
        why: Why,
    },
    /// Take the Proxy back from its drain: remove the draining annotation and set its
    /// `maxLeases` again (a do-not-disrupt annotation came after the drain began).
    Undrain {
        /// The Proxy.
        name: String,
        /// Its `maxLeases`.
        max_leases: Option<i32>,
    },
    /// Delete the Proxy (its finalizer deletes the machine).
    Delete {
        /// The Proxy.
        name: String,
    },
}

/// A pool decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolDecision {
    /// What to do, in order.
    pub actions: Vec<PoolAction>,
    /// The status to write (whole).
    pub status: ProxyPoolStatus,
    /// The Events to emit on the pool.
    pub events: Vec<Event>,
    /// The Events to emit on one of its Proxies (named first): why it drains or goes, where
    /// `kubectl describe px` shows it.
    pub proxy_events: Vec<(String, Event)>,
    /// When to decide again at the latest.
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub wake: Duration,
}

/// A member as the decision sorts it.
struct Seen<'a> {
    member: &'a Member,
    slot: Option<usize>,
    draining: Option<Timestamp>,
    available: bool,
    retire: Option<Why>,
}

/// Decides what the pool `spec` with `status` does, given what was `observed`.
///
/// Deterministic: the same inputs give the same decision. See the module documentation for
/// the rules.
pub fn decide_pool(
    spec: &ProxyPoolSpec,
    status: &ProxyPoolStatus,
    observed: &PoolObserved,
) -> PoolDecision {
    let now = observed.now;
    let name = observed.name.as_str();
    let replicas = u32::try_from(spec.replicas.unwrap_or(api::DEFAULT_REPLICAS)).unwrap_or(0);
    let scaled = spec
        .autoscale
        .as_ref()
        .map(|a| autoscale::scale(a, replicas, status.autoscale.as_ref(), observed.demand, now));
    let desired = scaled
        .as_ref()
        .and_then(|s| u32::try_from(s.status.desired_replicas).ok())
        .unwrap_or(replicas);
    let slots = spread::slots(spec, desired);
    let settings = Settings::of(spec, desired);
    let mut wake = Wake::new(now);
    if spec.autoscale.is_some() {
        wake.within(BUSY_POLL);
    }
    if let Some(left) = scaled.as_ref().and_then(|s| s.wake) {
        wake.within(left);
    }
    if spec.recycle.as_ref().and_then(|r| r.banned_sites).is_some() {
        wake.within(BAN_POLL);
    }

    let live_unhealthy = observed
        .members
        .iter()
        .filter(|m| is_live(m) && m.healthy.is_some_and(|h| !h.healthy))
        .count();
    let live_count = observed.members.iter().filter(|m| is_live(m)).count();
    let unhealthy_limit = resolve(
        &settings.max_unhealthy,
        u32::try_from(live_count).unwrap_or(u32::MAX),
        Round::Up,
    );
    let breaker_open = u32::try_from(live_unhealthy).unwrap_or(u32::MAX) > unhealthy_limit;

    let mut seen: Vec<Seen<'_>> = observed
        .members
        .iter()
        .map(|m| see(m, &slots, &settings, breaker_open, now, &mut wake))
        .collect();
    seen.sort_by(|a, b| a.member.name.cmp(&b.member.name));

    let mut actions = Vec::new();
    let mut events = Vec::new();
    let mut proxy_events = Vec::new();
    let valid_name = name.len() <= MAX_POOL_NAME;

    // A draining Proxy the user has since marked do-not-disrupt is kept: it takes leases
    // again, and no longer counts as draining.
    for s in seen
        .iter()
        .filter(|s| s.draining.is_some() && s.member.do_not_disrupt && !s.member.deleting)
    {
        let max_leases = s
            .slot
            .map_or(spec.template.spec.max_leases, |i| slots[i].spec.max_leases);
        actions.push(PoolAction::Undrain {
            name: s.member.name.clone(),
            max_leases,
        });
        proxy_events.push((
            s.member.name.clone(),
            normal(
                "UndrainingProxy",
                format!(
                    "pool {name} keeps proxy {}: it is marked do-not-disrupt; it takes leases again",
                    s.member.name
                ),
            ),
        ));
    }

    // Deletes: drained Proxies whose leases are gone or whose grace is over.
    for s in seen
        .iter()
        .filter(|s| !s.member.deleting && !s.member.do_not_disrupt)
    {
        let Some(since) = s.draining else { continue };
        let ends = since.saturating_add(settings.drain_grace).unwrap_or(since);
        let settled = since.saturating_add(MIN_DRAIN).unwrap_or(since);
        let leases_done = s.member.active_leases == Some(0) && now >= settled;
        if leases_done || now >= ends {
            actions.push(PoolAction::Delete {
                name: s.member.name.clone(),
            });
            let why = if leases_done {
                "its leases are over"
            } else {
                "its drain grace is over"
            };
            proxy_events.push((
                s.member.name.clone(),
                normal(
                    "DeletingProxy",
                    format!("pool {name} deletes proxy {}: {why}", s.member.name),
                ),
            ));
        } else {
            wake.at(ends);
            wake.at(settled);
            wake.within(BUSY_POLL);
        }
    }

    // Creates: each entry up to its share of non-retiring Proxies, within the surge.
    let total = u32::try_from(observed.members.len()).unwrap_or(u32::MAX);
    let mut room = (desired + settings.max_surge).saturating_sub(total);
    let mut ordinal = next_ordinal(name, status, &observed.members);
    for (index, slot) in slots.iter().enumerate() {
        let good = seen
            .iter()
            .filter(|s| s.slot == Some(index) && s.live() && s.retire.is_none())
            .count();
        let need = slot
            .desired
            .saturating_sub(u32::try_from(good).unwrap_or(u32::MAX));
        let count = need.min(room);
        room -= count;
        for _ in 0..count {
            if !valid_name {
                break;
            }
            let proxy = format!("{name}-{ordinal}");
            ordinal += 1;
            events.push(normal("CreatingProxy", format!("creating proxy {proxy}")));
            actions.push(create(spec, name, slot, proxy));
        }
    }

    // Drains: the Proxies not available first, then scale-downs, then retiring ones by
    // reason; never below the minimum available, retiring ones within the budget.
    let draining = seen
        .iter()
        .filter(|s| s.draining.is_some() && !s.member.do_not_disrupt)
        .count();
    let mut budget_left = settings
        .budget
        .saturating_sub(u32::try_from(draining).unwrap_or(u32::MAX));
    let mut available = seen.iter().filter(|s| s.available).count();
    let min_available =
        usize::try_from(desired.saturating_sub(settings.max_unavailable)).unwrap_or(0);
    let mut drained = BTreeSet::new();
    for (index, why) in drain_candidates(&seen, &slots) {
        let s = &seen[index];
        let costs = usize::from(s.available);
        if available.saturating_sub(costs) < min_available && costs == 1 {
            continue;
        }
        if why != Why::ScaleDown {
            if budget_left == 0 {
                continue;
            }
            budget_left -= 1;
        }
        available -= costs;
        drained.insert(s.member.name.as_str());
        actions.push(PoolAction::Drain {
            name: s.member.name.clone(),
            since: format_time(now),
            why,
        });
        proxy_events.push((
            s.member.name.clone(),
            normal(
                "DrainingProxy",
                format!(
                    "pool {name} drains proxy {}: {}; it gets no new lease",
                    s.member.name,
                    why.describe()
                ),
            ),
        ));
        wake.within(BUSY_POLL);
    }

    // Updates in place: labels, maxLeases and the health check of each live Proxy (not of
    // one drained just now: its maxLeases stays 0).
    let labels = spread::member_labels(spec, name);
    for s in seen
        .iter()
        .filter(|s| s.live() && !drained.contains(s.member.name.as_str()))
    {
        let Some(slot) = s.slot.map(|i| &slots[i]) else {
            continue;
        };
        let labels_differ = labels
            .iter()
            .any(|(k, v)| s.member.labels.get(k) != Some(v));
        if labels_differ
            || s.member.max_leases != slot.spec.max_leases
            || s.member.health_check != slot.spec.health_check
        {
            actions.push(PoolAction::Update {
                name: s.member.name.clone(),
                labels: labels.clone(),
                max_leases: slot.spec.max_leases,
                health_check: slot.spec.health_check.clone(),
            });
        }
    }

    let progressing = !actions.is_empty()
        || seen
            .iter()
            .any(|s| s.retire.is_some() || s.draining.is_some() || s.member.deleting)
        || seen.iter().any(|s| s.live() && !s.available)
        || total != desired;
    if progressing {
        wake.within(BUSY_POLL);
    }
    let counts = Counts {
        total,
        desired,
        ready: count(&seen, |s| s.member.phase == Some(Phase::Ready)),
        available: count(&seen, |s| s.available),
        updated: count(&seen, |s| {
            s.live()
                && s.slot
                    .is_some_and(|i| s.member.template_hash.as_deref() == Some(&slots[i].hash))
        }),
    };
    let conditions = conditions(
        status,
        observed,
        &counts,
        &settings,
        progressing,
        valid_name,
        (breaker_open, live_unhealthy, live_count),
        &mut events,
    );
    let autoscale = scaled.map(|s| s.status);
    if let (Some(before), Some(after)) = (&status.autoscale, &autoscale)
        && before.desired_replicas != after.desired_replicas
    {
        events.push(normal(
            "Autoscaled",
            format!(
                "autoscale: {} -> {} proxies (utilization {}%)",
                before.desired_replicas, after.desired_replicas, after.utilization_percent
            ),
        ));
    }
    PoolDecision {
        actions,
        status: ProxyPoolStatus {
            replicas: to_i32(counts.total),
            desired_replicas: to_i32(desired),
            ready_replicas: to_i32(counts.ready),
            available_replicas: to_i32(counts.available),
            updated_replicas: to_i32(counts.updated),
            selector: format!("{POOL_LABEL}={name}"),
            next_ordinal: i64::try_from(ordinal).unwrap_or(i64::MAX),
            observed_generation: Some(observed.generation),
            autoscale,
            conditions,
            zones: landed_zones(&seen),
        },
        events,
        proxy_events,
        wake: wake.delay(),
    }
}

/// The live Proxies by the zone their machines landed in (`status.zones`): a Proxy its
/// spread entry does not pin to a zone is counted where the provider placed it, after a
/// stockout too; one not placed yet is not counted.
fn landed_zones(seen: &[Seen<'_>]) -> BTreeMap<String, i32> {
    let mut zones = BTreeMap::new();
    for landed in seen
        .iter()
        .filter(|s| s.live())
        .filter_map(|s| s.member.landed.as_ref())
    {
        *zones.entry(landed.clone()).or_insert(0) += 1;
    }
    zones
}

/// The rollout limits of a pool of `desired` Proxies, resolved from its counts and
/// percentages: what the decision never exceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How many Proxies above `desired` may exist while replacing.
    pub max_surge: u32,
    /// How many of `desired` may be unavailable because of a drain.
    pub max_unavailable: u32,
    /// How many Proxies may drain at once for a replacement.
    pub budget: u32,
}

/// The [`Limits`] of `spec` for `desired` Proxies.
pub fn limits(spec: &ProxyPoolSpec, desired: u32) -> Limits {
    let settings = Settings::of(spec, desired);
    Limits {
        max_surge: settings.max_surge,
        max_unavailable: settings.max_unavailable,
        budget: settings.budget,
    }
}

/// The pool's resolved settings for `desired` Proxies.
struct Settings {
    max_surge: u32,
    max_unavailable: u32,
    budget: u32,
    drain_grace: SignedDuration,
    max_unhealthy: IntOrPercent,
    replace_unhealthy_after: Option<SignedDuration>,
    banned_sites: Option<u32>,
    expire_after: Option<SignedDuration>,
}

impl Settings {
    fn of(spec: &ProxyPoolSpec, desired: u32) -> Self {
        let disruption = spec.disruption.clone().unwrap_or_default();
        let recycle = spec.recycle.clone().unwrap_or_default();
        let percent = |text: &str| IntOrPercent::Percent(text.to_owned());
        let seconds = |s: i64| SignedDuration::from_secs(s.max(0));
        let max_unavailable = resolve(
            &disruption
                .max_unavailable
                .unwrap_or(IntOrPercent::Int(api::DEFAULT_MAX_UNAVAILABLE)),
            desired,
            Round::Down,
        );
        let max_surge = resolve(
            &disruption
                .max_surge
                .unwrap_or_else(|| percent(api::DEFAULT_MAX_SURGE)),
            desired,
            Round::Up,
        );
        Self {
            // With neither a surge nor an unavailable proxy allowed, a replacement could
            // never move: it then surges by one, the safe way.
            max_surge: if max_surge == 0 && max_unavailable == 0 {
                1
            } else {
                max_surge
            },
            max_unavailable,
            budget: resolve(
                &disruption
                    .disruption_budget
                    .unwrap_or_else(|| percent(api::DEFAULT_DISRUPTION_BUDGET)),
                desired,
                Round::Up,
            )
            .max(1),
            drain_grace: seconds(i64::from(
                disruption
                    .drain_grace_seconds
                    .unwrap_or(api::DEFAULT_DRAIN_GRACE_SECONDS),
            )),
            max_unhealthy: spec
                .circuit_breaker
                .clone()
                .and_then(|c| c.max_unhealthy)
                .unwrap_or_else(|| percent(api::DEFAULT_MAX_UNHEALTHY)),
            replace_unhealthy_after: Some(i64::from(
                recycle
                    .replace_unhealthy_after_seconds
                    .unwrap_or(api::DEFAULT_REPLACE_UNHEALTHY_AFTER_SECONDS),
            ))
            .filter(|s| *s > 0)
            .map(seconds),
            banned_sites: recycle
                .banned_sites
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| n.max(1)),
            expire_after: spec.expire_after_seconds.map(seconds),
        }
    }
}

impl Seen<'_> {
    /// Neither draining nor being deleted.
    fn live(&self) -> bool {
        self.draining.is_none() && !self.member.deleting
    }
}

fn is_live(member: &Member) -> bool {
    !member.deleting && draining_since(member).is_none()
}

/// The member's drain start, when it drains (an annotation that does not parse is no drain:
/// the pool drains it again if it must, which rewrites the annotation).
fn draining_since(member: &Member) -> Option<Timestamp> {
    member.draining_since.as_deref()?.parse().ok()
}

/// Sorts one member: its slot, whether it drains, whether it is available, whether it must
/// go and why; and notes on `wake` when its next deadline (expiry, unhealth) falls due.
fn see<'a>(
    member: &'a Member,
    slots: &[Slot],
    settings: &Settings,
    breaker_open: bool,
    now: Timestamp,
    wake: &mut Wake,
) -> Seen<'a> {
    let slot = slots
        .iter()
        .position(|s| member.template_hash.as_deref() == Some(&s.hash))
        .or_else(|| {
            slots
                .iter()
                .position(|s| s.holds(member.provider.as_deref(), member.zone.as_deref()))
        });
    let draining = if member.deleting {
        None
    } else {
        draining_since(member)
    };
    let live = draining.is_none() && !member.deleting;
    let available = live && member.phase == Some(Phase::Ready);
    let mut retire = None;
    if live && !member.do_not_disrupt {
        let outdated = slot.is_none_or(|i| member.template_hash.as_deref() != Some(&slots[i].hash));
        let banned = settings
            .banned_sites
            .is_some_and(|n| member.blocked_sites.is_some_and(|b| b >= n));
        let unhealthy = match (settings.replace_unhealthy_after, member.healthy) {
            (Some(after), Some(h)) if !h.healthy && !breaker_open => {
                let due = h.since.saturating_add(after).unwrap_or(h.since);
                if now < due {
                    wake.at(due);
                }
                now >= due
            }
            _ => false,
        };
        let expired = settings.expire_after.is_some_and(|after| {
            let due = expiry(member, after);
            if now < due {
                wake.at(due);
            }
            now >= due
        });
        retire = [
            (unhealthy, Why::Unhealthy),
            (banned, Why::Banned),
            (expired, Why::Expired),
            (outdated, Why::Outdated),
        ]
        .into_iter()
        .find_map(|(applies, why)| applies.then_some(why));
    }
    Seen {
        member,
        slot,
        draining,
        available,
        retire,
    }
}

/// When `member` expires: `after` past its creation, less a jitter of up to a tenth of
/// `after` that depends only on its name, so a fleet created at once does not recycle at
/// once, and the same Proxy always gets the same deadline.
pub fn expiry(member: &Member, after: SignedDuration) -> Timestamp {
    let digest = canonical_digest(&serde_json::Value::String(member.name.clone()));
    let seed = u64::from_str_radix(&digest[..12], 16).unwrap_or(0);
    let tenth = u64::try_from(after.as_secs() / 10).unwrap_or(0);
    let jitter = if tenth == 0 { 0 } else { seed % tenth };
    let lifetime = after - SignedDuration::from_secs(i64::try_from(jitter).unwrap_or(0));
    member
        .created
        .saturating_add(lifetime)
        .unwrap_or(member.created)
}

/// The members that may be drained, in the order they are considered, with why: per slot,
/// the live non-retiring ones above the slot's share (scale-down), and every retiring one.
fn drain_candidates(seen: &[Seen<'_>], slots: &[Slot]) -> Vec<(usize, Why)> {
    let mut candidates = Vec::new();
    for (index, slot) in slots.iter().enumerate() {
        let mut keepers: Vec<usize> = (0..seen.len())
            .filter(|&i| {
                let s = &seen[i];
                s.slot == Some(index) && s.live() && s.retire.is_none()
            })
            .collect();
        // Victims first: not available, fewest leases, oldest, by name.
        keepers.sort_by(|&a, &b| {
            let (a, b) = (&seen[a], &seen[b]);
            a.available
                .cmp(&b.available)
                .then(a.member.active_leases.cmp(&b.member.active_leases))
                .then(a.member.created.cmp(&b.member.created))
                .then(a.member.name.cmp(&b.member.name))
        });
        let surplus = keepers
            .len()
            .saturating_sub(usize::try_from(slot.desired).unwrap_or(usize::MAX));
        candidates.extend(
            keepers
                .into_iter()
                .filter(|&i| !seen[i].member.do_not_disrupt)
                .take(surplus)
                .map(|i| (i, Why::ScaleDown)),
        );
    }
    candidates.extend(
        seen.iter()
            .enumerate()
            .filter_map(|(i, s)| s.retire.map(|why| (i, why))),
    );
    candidates.sort_by(|&(a, why_a), &(b, why_b)| {
        let (a_seen, b_seen) = (&seen[a], &seen[b]);
        a_seen
            .available
            .cmp(&b_seen.available)
            .then((why_a != Why::ScaleDown).cmp(&(why_b != Why::ScaleDown)))
            .then(why_a.cmp(&why_b))
            .then(a_seen.member.created.cmp(&b_seen.member.created))
            .then(a_seen.member.name.cmp(&b_seen.member.name))
    });
    candidates
}

/// The Create action of a new Proxy `proxy` in `slot`.
fn create(spec: &ProxyPoolSpec, pool: &str, slot: &Slot, proxy: String) -> PoolAction {
    let mut annotations = spec
        .template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(api::TEMPLATE_HASH_ANNOTATION.to_owned(), slot.hash.clone());
    PoolAction::Create {
        name: proxy,
        labels: spread::member_labels(spec, pool),
        annotations,
        spec: Box::new(slot.spec.clone()),
    }
}

/// The ordinal of the next new Proxy: the status's, and never one in use.
fn next_ordinal(pool: &str, status: &ProxyPoolStatus, members: &[Member]) -> u64 {
    let prefix = format!("{pool}-");
    let in_use = members
        .iter()
        .filter_map(|m| m.name.strip_prefix(&prefix)?.parse::<u64>().ok())
        .max()
        .map_or(0, |n| n + 1);
    u64::try_from(status.next_ordinal).unwrap_or(0).max(in_use)
}

struct Counts {
    total: u32,
    desired: u32,
    ready: u32,
    available: u32,
    updated: u32,
}

fn count(seen: &[Seen<'_>], keep: impl Fn(&Seen<'_>) -> bool) -> u32 {
    u32::try_from(seen.iter().filter(|s| keep(s)).count()).unwrap_or(u32::MAX)
}

/// The pool's conditions, and the Events of the circuit breaker's flips.
#[allow(clippy::too_many_arguments)]
fn conditions(
    status: &ProxyPoolStatus,
    observed: &PoolObserved,
    counts: &Counts,
    settings: &Settings,
    progressing: bool,
    valid_name: bool,
    (open, unhealthy, live): (bool, usize, usize),
    events: &mut Vec<Event>,
) -> Vec<Condition> {
    let previous = &status.conditions;
    let (generation, now) = (observed.generation, observed.now);
    let minimum = counts.desired.saturating_sub(settings.max_unavailable);
    let available = condition_among(
        previous,
        AVAILABLE,
        if counts.available >= minimum {
            TRUE
        } else {
            FALSE
        },
        if counts.available >= minimum {
            "MinimumAvailable"
        } else {
            "TooFewAvailable"
        },
        format!(
            "{} of {} desired proxies available (minimum {minimum})",
            counts.available, counts.desired
        ),
        generation,
        now,
    );
    let (state, reason, message) = if !valid_name {
        (
            FALSE,
            "NameTooLong",
            format!(
                "the pool's name is longer than {MAX_POOL_NAME} characters: its proxies' names would not fit in a label; nothing is created"
            ),
        )
    } else if progressing {
        (
            TRUE,
            "Reconciling",
            format!(
                "{} proxies, {} updated, {} available, {} desired",
                counts.total, counts.updated, counts.available, counts.desired
            ),
        )
    } else {
        (
            FALSE,
            "Stable",
            format!("{} proxies, all up to date and available", counts.total),
        )
    };
    let progressing = condition_among(
        previous,
        PROGRESSING,
        state,
        reason,
        message,
        generation,
        now,
    );
    let was_open = previous
        .iter()
        .any(|c| c.type_ == CIRCUIT_BREAKER && c.status == TRUE);
    let (state, reason, message) = if open {
        (
            TRUE,
            "TooManyUnhealthy",
            format!(
                "{unhealthy} of {live} proxies are unhealthy at once: most likely the probe URL or the network, not the proxies; replacing for unhealth is paused"
            ),
        )
    } else {
        (
            FALSE,
            "Closed",
            format!("{unhealthy} of {live} proxies unhealthy"),
        )
    };
    if open && !was_open {
        events.push(Event {
            type_: EventType::Warning,
            reason: "CircuitOpen".into(),
            message: message.clone(),
        });
    } else if !open && was_open {
        events.push(normal(
            "CircuitClosed",
            format!("{message}: replacing for unhealth again"),
        ));
    }
    let breaker = condition_among(
        previous,
        CIRCUIT_BREAKER,
        state,
        reason,
        message,
        generation,
        now,
    );
    vec![available, progressing, breaker]
}

fn normal(reason: &str, message: String) -> Event {
    Event {
        type_: EventType::Normal,
        reason: reason.into(),
        message,
    }
}

fn to_i32(count: u32) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// The earliest of the deadlines noted, as a delay from `now`.
struct Wake {
    now: Timestamp,
    delay: Duration,
}

impl Wake {
    fn new(now: Timestamp) -> Self {
        Self {
            now,
            delay: IDLE_POLL,
        }
    }

    fn within(&mut self, delay: Duration) {
        self.delay = self.delay.min(delay);
    }

    fn at(&mut self, when: Timestamp) {
        let left = self.now.duration_until(when);
        let left = if left.is_positive() {
            left.unsigned_abs()
        } else {
            Duration::ZERO
        };
        // A second past the deadline, so the decision then finds it passed.
        self.within(left + Duration::from_secs(1));
    }

    fn delay(&self) -> Duration {
        self.delay
    }
}
/// How long a pool reconcile that failed waits before the next: an API call that failed,
/// a name another object took, or a panic. Pools are few and each reconcile is cheap, so a
/// fixed short wait, not the Proxies' growing backoff.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// When a pool reconcile that stopped early (`interruption`) runs again: a replica that lost
/// its leadership waits for a change (the next leader reconciles every pool); a failure
/// retries after [`RETRY_AFTER_FAILURE`].
pub fn after_interruption(interruption: Interruption) -> wake::Wake {
    match interruption {
        Interruption::NotLeader => wake::Wake::OnChange,
        Interruption::Failed => wake::Wake::After(RETRY_AFTER_FAILURE),
    }
}
