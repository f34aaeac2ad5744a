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
//! The decision runs these steps in order, each a module of its own:
//!
//! | step | rule |
//! |---|---|
//! | `undrain` | a draining Proxy the user has since marked do-not-disrupt takes leases again |
//! | `delete` | a draining Proxy once the lease book says it has no active lease (and at least [`MIN_DRAIN`] after the drain began), or once `drainGraceSeconds` are over |
//! | `create` | each entry gets Proxies until its non-retiring ones reach its share; all owned Proxies (draining and deleting ones too: they still run a machine) stay within `desired + maxSurge` |
//! | `drain` | a retiring Proxy, or one above its entry's share, gets no new lease (`maxLeases` 0 and the draining annotation), only while the available Proxies stay at least `desired - maxUnavailable` (so with the default 0 a successor is Ready first); retiring ones also only while fewer than the disruption budget are draining |
//! | `update` | a Proxy whose labels, `maxLeases` or health check differ from its entry's is patched in place (no new machine) |
//!
//! Then the status: the counts, the conditions (module `conditions`: `Available`,
//! `Progressing`, `CircuitBreaker`) and the zones the machines landed in. What a Proxy is to
//! the decision (its slot, drain, availability, why it retires) is module `members`; the
//! settings resolved for the desired size, `settings`; when to look again, `deadline`.
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
mod conditions;
mod create;
mod deadline;
mod decision;
mod delete;
mod drain;
mod members;
mod observed;
mod settings;
pub mod spread;
mod undrain;
mod update;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use proxy_crd::pool::{self as api, POOL_LABEL};
use proxy_crd::{Phase, ProxyPoolSpec, ProxyPoolStatus};

use crate::event::{Event, EventType};
use crate::wake::{self, Interruption};

pub use self::autoscale::Demand;
use self::conditions::{Breaker, Counts, Judged};
use self::deadline::Deadline;
pub use self::decision::{PoolAction, PoolDecision, Why};
pub use self::members::expiry;
use self::members::{Seen, count, landed_zones, see};
pub use self::observed::{Health, Member, PoolObserved};
use self::settings::Settings;
pub use self::settings::{Limits, limits};
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

/// What every step of one pool decision reads.
struct Pool<'a> {
    spec: &'a ProxyPoolSpec,
    /// The pool's name.
    name: &'a str,
    now: Timestamp,
    /// How many Proxies the pool should have (`replicas`, or what autoscale decided).
    desired: u32,
    /// The spread entries' shares of `desired`.
    slots: Vec<Slot>,
    settings: Settings,
    /// The Proxies the pool owns.
    members: &'a [Member],
    /// Each of them as the decision sorts it, by name.
    seen: Vec<Seen<'a>>,
    /// The name leaves room for `-<ordinal>` in a label value: else nothing is created.
    valid_name: bool,
}

/// The decision as its steps draft it, in their order.
struct Draft {
    actions: Vec<PoolAction>,
    events: Vec<Event>,
    proxy_events: Vec<(String, Event)>,
    deadline: Deadline,
}

impl Draft {
    /// A Normal Event on the pool.
    fn on_pool(&mut self, reason: &str, message: String) {
        self.events.push(normal(reason, message));
    }

    /// A Normal Event on the pool's Proxy `proxy`.
    fn on_proxy(&mut self, proxy: &str, reason: &str, message: String) {
        self.proxy_events
            .push((proxy.to_owned(), normal(reason, message)));
    }
}

/// Decides what the pool `spec` with `status` does, given what was `observed`.
///
/// Deterministic: the same inputs give the same decision. See the module documentation for
/// the rules; each step of the table is a module: `undrain`, `delete`, `create`, `drain`,
/// `update`, in that order, then the conditions.
pub fn decide_pool(
    spec: &ProxyPoolSpec,
    status: &ProxyPoolStatus,
    observed: &PoolObserved,
) -> PoolDecision {
    let now = observed.now;
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
    let mut deadline = Deadline::new(now);
    if spec.autoscale.is_some() {
        deadline.within(BUSY_POLL);
    }
    if let Some(left) = scaled.as_ref().and_then(|s| s.wake) {
        deadline.within(left);
    }
    if spec.recycle.as_ref().and_then(|r| r.banned_sites).is_some() {
        deadline.within(BAN_POLL);
    }
    let breaker = Breaker::of(&observed.members, &settings);
    let mut seen: Vec<Seen<'_>> = observed
        .members
        .iter()
        .map(|m| see(m, &slots, &settings, breaker.open, now, &mut deadline))
        .collect();
    seen.sort_by(|a, b| a.member.name.cmp(&b.member.name));
    let pool = Pool {
        spec,
        name: &observed.name,
        now,
        desired,
        slots,
        settings,
        members: &observed.members,
        seen,
        valid_name: observed.name.len() <= MAX_POOL_NAME,
    };
    let mut draft = Draft {
        actions: Vec::new(),
        events: Vec::new(),
        proxy_events: Vec::new(),
        deadline,
    };

    undrain::step(&pool, &mut draft);
    delete::step(&pool, &mut draft);
    let next_ordinal = create::step(&pool, status, &mut draft);
    let drained = drain::step(&pool, &mut draft);
    update::step(&pool, &drained, &mut draft);

    let seen = &pool.seen;
    let total = u32::try_from(observed.members.len()).unwrap_or(u32::MAX);
    let progressing = !draft.actions.is_empty()
        || seen
            .iter()
            .any(|s| s.retire.is_some() || s.draining.is_some() || s.member.deleting)
        || seen.iter().any(|s| s.live() && !s.available)
        || total != desired;
    if progressing {
        draft.deadline.within(BUSY_POLL);
    }
    let counts = Counts {
        total,
        desired,
        ready: count(seen, |s| s.member.phase == Some(Phase::Ready)),
        available: count(seen, |s| s.available),
        updated: count(seen, |s| {
            s.live()
                && s.slot
                    .is_some_and(|i| s.member.template_hash.as_deref() == Some(&pool.slots[i].hash))
        }),
    };
    let judged = Judged {
        progressing,
        valid_name: pool.valid_name,
        breaker,
        max_unavailable: pool.settings.max_unavailable,
    };
    let conditions = conditions::conditions(
        status,
        observed.generation,
        now,
        &counts,
        &judged,
        &mut draft.events,
    );
    let autoscale = scaled.map(|s| s.status);
    if let (Some(before), Some(after)) = (&status.autoscale, &autoscale)
        && before.desired_replicas != after.desired_replicas
    {
        draft.on_pool(
            "Autoscaled",
            format!(
                "autoscale: {} -> {} proxies (utilization {}%)",
                before.desired_replicas, after.desired_replicas, after.utilization_percent
            ),
        );
    }
    PoolDecision {
        actions: draft.actions,
        status: ProxyPoolStatus {
            replicas: to_i32(counts.total),
            desired_replicas: to_i32(desired),
            ready_replicas: to_i32(counts.ready),
            available_replicas: to_i32(counts.available),
            updated_replicas: to_i32(counts.updated),
            selector: format!("{POOL_LABEL}={}", observed.name),
            next_ordinal: i64::try_from(next_ordinal).unwrap_or(i64::MAX),
            observed_generation: Some(observed.generation),
            autoscale,
            conditions,
            zones: landed_zones(seen),
        },
        events: draft.events,
        proxy_events: draft.proxy_events,
        wake: draft.deadline.delay(),
    }
}

/// A Normal Event.
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
