//! State-machine properties of the lease book, against a naive reference model.
//!
//! The model keeps the fleet, the leases and the cooldowns in plain vectors and sorts every
//! candidate on every acquire, the way the Go prototype did: easy to read, so it serves as
//! the specification. Proptest generates interleavings of upserts, removals, acquires,
//! releases (one by one and by holder), reports, holder listings and time passing (TTLs, cooldowns and retention are short, and at most
//! three ended leases are kept, so ticks and runs cross them); every call goes to both, and after each step the answers and the lease
//! counts must agree and the invariants must hold:
//!
//! - a proxy's active leases only grow by a grant, and a grant never takes them above
//!   `max_leases` (so capacity holds under any interleaving; a lowered `max_leases` is only
//!   ever approached from above);
//! - a grant goes to a healthy proxy that is not cooling down for the request's target;
//! - a successful release, and every expiry, frees exactly that lease's place;
//! - a failed acquire's statistics add up;
//! - the same steps give the same answers and the same book.
//!
//! Failing cases are saved under `core/proptest-regressions/lease_props.txt`: commit it.
//! `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireError, AcquireRequest, Cooldown, Labels, Lease, LeaseBook, LeaseConfig, NoMatch,
    ProxyView, ReportResult, Selector, UnknownLease,
};

/// `ns-x/f` sorts before `ns/a` as text (`-` before `/`): the selection order's last key is
/// the text `namespace/name`.
const PROXIES: [&str; 7] = [
    "ns/a", "ns/b", "ns/c", "ns/d", "other/a", "other/e", "ns-x/f",
];
const GEOS: [&str; 2] = ["eu", "us"];
const TIERS: [&str; 2] = ["a", "b"];
/// Mixed case on purpose: targets compare case-insensitively.
const TARGETS: [&str; 3] = ["a.example", "B.example", "b.EXAMPLE"];
/// The crawlers that name themselves; an acquire may name neither.
const HOLDERS: [&str; 2] = ["crawler-1", "crawler/2"];
const SELECTORS: [&[(&str, &str)]; 6] = [
    &[],
    &[("geo", "eu")],
    &[("geo", "us")],
    &[("tier", "a")],
    &[("geo", "eu"), ("tier", "b")],
    &[("zone", "x")],
];

fn config() -> LeaseConfig {
    LeaseConfig {
        rate_limited_cooldown: Duration::from_secs(20),
        blocked_cooldown: Duration::from_secs(60),
        error_cooldown: Duration::from_secs(5),
        // Few, so that runs reach the bound on ended leases.
        max_retained: 3,
        ..LeaseConfig::default()
    }
}

fn start() -> Timestamp {
    Timestamp::from_second(1_780_000_000).unwrap()
}

/// What the test does next, before it is resolved against the run so far.
#[derive(Clone, Debug)]
enum Step {
    /// The controller's cache shows this proxy (indexes into the constants above).
    Upsert {
        proxy: usize,
        geo: usize,
        tier: Option<usize>,
        healthy: bool,
        latency_ms: u32,
        max_leases: u32,
    },
    /// The proxy object goes away.
    Remove(usize),
    /// A crawler asks for a lease; `reuse` picks the ID of an earlier request instead of a
    /// fresh one.
    Acquire {
        selector: usize,
        target: Option<usize>,
        ttl_secs: u64,
        reuse: Option<Index>,
        holder: Option<usize>,
    },
    /// A crawler releases an earlier lease (or one that was never granted).
    Release(Index),
    /// Someone releases every lease of a holder.
    ReleaseHeldBy(usize),
    /// Someone lists the active leases of a holder, or all of them.
    Held(Option<usize>),
    /// A crawler reports on an earlier lease (or one that was never granted).
    Report {
        lease: Index,
        result: ReportResult,
        target: Option<usize>,
    },
    /// Time passes, and the shell expires what is due.
    Tick(u64),
}

fn step() -> impl Strategy<Value = Step> {
    let upsert = (
        0..PROXIES.len(),
        0..GEOS.len(),
        prop::option::of(0..TIERS.len()),
        prop::bool::weighted(0.8),
        0..4u32,
        0..4u32,
    )
        .prop_map(
            |(proxy, geo, tier, healthy, latency_ms, max_leases)| Step::Upsert {
                proxy,
                geo,
                tier,
                healthy,
                latency_ms,
                max_leases,
            },
        );
    let acquire = (
        0..SELECTORS.len(),
        prop::option::of(0..TARGETS.len()),
        0..60u64,
        prop::option::weighted(0.1, any::<Index>()),
        prop::option::of(0..HOLDERS.len()),
    )
        .prop_map(
            |(selector, target, ttl_secs, reuse, holder)| Step::Acquire {
                selector,
                target,
                ttl_secs,
                reuse,
                holder,
            },
        );
    let result = prop_oneof![
        Just(ReportResult::Ok),
        Just(ReportResult::RateLimited),
        Just(ReportResult::Blocked),
        Just(ReportResult::Error),
    ];
    let report = (
        any::<Index>(),
        result,
        prop::option::weighted(0.3, 0..TARGETS.len()),
    )
        .prop_map(|(lease, result, target)| Step::Report {
            lease,
            result,
            target,
        });
    prop_oneof![
        4 => upsert,
        1 => (0..PROXIES.len()).prop_map(Step::Remove),
        8 => acquire,
        3 => any::<Index>().prop_map(Step::Release),
        3 => report,
        1 => (0..HOLDERS.len()).prop_map(Step::ReleaseHeldBy),
        1 => prop::option::of(0..HOLDERS.len()).prop_map(Step::Held),
        3 => (0..=40u64).prop_map(Step::Tick),
    ]
}

/// A step resolved into one call on the book, with everything spelled out.
#[derive(Clone, Debug)]
enum Call {
    Upsert(ProxyView),
    Remove(ProxyKey),
    Acquire(AcquireRequest),
    Release(String),
    ReleaseHeldBy(String),
    Held(Option<String>),
    Report {
        id: String,
        result: ReportResult,
        target: Option<String>,
    },
    Expire,
}

/// What a call answered.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Upserted,
    Removed(bool),
    Acquired(Result<Lease, AcquireError>),
    Released(bool),
    ReleasedHeld(usize),
    /// The IDs listed, in the order the book gave them.
    Held(Vec<String>),
    Reported(Result<Option<Cooldown>, UnknownLease>),
    Expired,
}

/// Turns steps into calls: keeps the clock and the IDs requested so far.
#[derive(Debug)]
struct Driver {
    now: Timestamp,
    ids: Vec<String>,
}

impl Driver {
    fn new() -> Self {
        Self {
            now: start(),
            ids: Vec::new(),
        }
    }

    fn resolve(&mut self, step: &Step) -> Call {
        match step {
            Step::Upsert {
                proxy,
                geo,
                tier,
                healthy,
                latency_ms,
                max_leases,
            } => Call::Upsert(view(
                *proxy,
                *geo,
                *tier,
                *healthy,
                *latency_ms,
                *max_leases,
            )),
            Step::Remove(proxy) => Call::Remove(key(*proxy)),
            Step::Acquire {
                selector,
                target,
                ttl_secs,
                reuse,
                holder,
            } => Call::Acquire(AcquireRequest {
                id: self.request_id(reuse.as_ref()),
                selector: SELECTORS[*selector].iter().copied().collect(),
                target: target.map(|t| TARGETS[t].to_owned()),
                ttl: Duration::from_secs(*ttl_secs),
                distinct_egress: false,
                holder: holder.map(|h| HOLDERS[h].to_owned()),
            }),
            Step::Release(lease) => Call::Release(self.known_id(lease)),
            Step::ReleaseHeldBy(holder) => Call::ReleaseHeldBy(HOLDERS[*holder].to_owned()),
            Step::Held(holder) => Call::Held(holder.map(|h| HOLDERS[h].to_owned())),
            Step::Report {
                lease,
                result,
                target,
            } => Call::Report {
                id: self.known_id(lease),
                result: *result,
                target: target.map(|t| TARGETS[t].to_owned()),
            },
            Step::Tick(secs) => {
                self.now += Duration::from_secs(*secs);
                Call::Expire
            }
        }
    }

    /// A fresh ID, or an earlier one when `reuse` says so and there is one.
    fn request_id(&mut self, reuse: Option<&Index>) -> String {
        match reuse {
            Some(index) if !self.ids.is_empty() => self.ids[index.index(self.ids.len())].clone(),
            _ => {
                let id = format!("lease-{}", self.ids.len());
                self.ids.push(id.clone());
                id
            }
        }
    }

    /// An ID requested earlier, or one that never was.
    fn known_id(&self, lease: &Index) -> String {
        let i = lease.index(self.ids.len() + 1);
        self.ids
            .get(i)
            .cloned()
            .unwrap_or_else(|| "never-requested".to_owned())
    }
}

fn key(proxy: usize) -> ProxyKey {
    PROXIES[proxy].parse().unwrap()
}

fn view(
    proxy: usize,
    geo: usize,
    tier: Option<usize>,
    healthy: bool,
    latency_ms: u32,
    max_leases: u32,
) -> ProxyView {
    let mut labels = Labels::from([("geo".to_owned(), GEOS[geo].to_owned())]);
    if let Some(tier) = tier {
        labels.insert("tier".to_owned(), TIERS[tier].to_owned());
    }
    ProxyView {
        key: key(proxy),
        labels,
        healthy,
        latency_ms,
        max_leases,
        host: format!("10.0.{proxy}.{latency_ms}"),
        port: 3128,
        shared_egress: false,
    }
}

fn call_book(book: &mut LeaseBook, call: &Call, now: Timestamp) -> Answer {
    match call {
        Call::Upsert(proxy) => {
            book.upsert(proxy.clone());
            Answer::Upserted
        }
        Call::Remove(key) => Answer::Removed(book.remove(key)),
        Call::Acquire(request) => Answer::Acquired(book.acquire(request.clone(), now)),
        Call::Release(id) => Answer::Released(book.release(id, now)),
        Call::ReleaseHeldBy(holder) => Answer::ReleasedHeld(book.release_held_by(holder, now)),
        Call::Held(holder) => Answer::Held(
            book.leases(holder.as_deref(), now)
                .into_iter()
                .map(|lease| lease.id.clone())
                .collect(),
        ),
        Call::Report { id, result, target } => {
            Answer::Reported(book.report(id, *result, target.as_deref(), now))
        }
        Call::Expire => {
            book.expire(now);
            Answer::Expired
        }
    }
}

/// The reference model: vectors, linear scans, a sort per acquire.
#[derive(Debug)]
struct Model {
    config: LeaseConfig,
    proxies: Vec<ProxyView>,
    leases: Vec<ModelLease>,
    cooldowns: Vec<Cooldown>,
}

#[derive(Debug)]
struct ModelLease {
    lease: Lease,
    /// `None` while active; when it ended, the time it is forgotten.
    forget_at: Option<Timestamp>,
}

impl Model {
    fn new() -> Self {
        Self {
            config: config(),
            proxies: Vec::new(),
            leases: Vec::new(),
            cooldowns: Vec::new(),
        }
    }

    fn call(&mut self, call: &Call, now: Timestamp) -> Answer {
        match call {
            Call::Upsert(proxy) => {
                self.proxies.retain(|p| p.key != proxy.key);
                self.proxies.push(proxy.clone());
                Answer::Upserted
            }
            Call::Remove(key) => {
                let before = self.proxies.len();
                self.proxies.retain(|p| p.key != *key);
                Answer::Removed(self.proxies.len() < before)
            }
            Call::Acquire(request) => Answer::Acquired(self.acquire(request, now)),
            Call::Release(id) => Answer::Released(self.release(id, now)),
            Call::ReleaseHeldBy(holder) => {
                self.expire(now);
                let held = self.held(Some(holder), now);
                let released = held.iter().filter(|id| self.release(id, now)).count();
                Answer::ReleasedHeld(released)
            }
            Call::Held(holder) => Answer::Held(self.held(holder.as_deref(), now)),
            Call::Report { id, result, target } => {
                Answer::Reported(self.report(id, *result, target.as_deref(), now))
            }
            Call::Expire => {
                self.expire(now);
                Answer::Expired
            }
        }
    }

    fn expire(&mut self, now: Timestamp) {
        let retention = self.config.retention();
        for entry in &mut self.leases {
            if entry.forget_at.is_none() && entry.lease.expires_at <= now {
                entry.forget_at = Some(later(entry.lease.expires_at, retention));
            }
        }
        self.leases
            .retain(|entry| entry.forget_at.is_none_or(|at| at > now));
        self.cooldowns.retain(|cooldown| cooldown.until > now);
        self.bound();
    }

    /// Keeps the `max_retained` ended leases forgotten last (ties: by ID, as the book's
    /// keys order text IDs).
    fn bound(&mut self) {
        let mut ended: Vec<(Timestamp, String)> = self
            .leases
            .iter()
            .filter_map(|entry| Some((entry.forget_at?, entry.lease.id.clone())))
            .collect();
        ended.sort();
        let excess = ended.len().saturating_sub(self.config.max_retained);
        let forgotten = &ended[..excess];
        self.leases.retain(|entry| {
            entry
                .forget_at
                .is_none_or(|at| !forgotten.contains(&(at, entry.lease.id.clone())))
        });
    }

    fn active(&self, key: &str) -> u32 {
        let active = self
            .leases
            .iter()
            .filter(|entry| entry.forget_at.is_none() && entry.lease.proxy == key)
            .count();
        u32::try_from(active).unwrap()
    }

    /// The leases on `key` that are active at `now`, whatever the last call ended: what a
    /// view of the book counts.
    fn active_at(&self, key: &str, now: Timestamp) -> u32 {
        let active = self
            .leases
            .iter()
            .filter(|entry| entry.forget_at.is_none() && entry.lease.proxy == key)
            .filter(|entry| entry.lease.expires_at > now)
            .count();
        u32::try_from(active).unwrap()
    }

    fn cooling(&self, key: &str, target: Option<&str>, now: Timestamp) -> bool {
        self.cooldowns.iter().any(|cooldown| {
            cooldown.proxy == key && cooldown.target.as_deref() == target && cooldown.until > now
        })
    }

    fn acquire(&mut self, request: &AcquireRequest, now: Timestamp) -> Result<Lease, AcquireError> {
        self.expire(now);
        if self.leases.iter().any(|entry| entry.lease.id == request.id) {
            return Err(AcquireError::IdInUse);
        }
        let target = request.target.as_deref().map(str::to_ascii_lowercase);
        let mut candidates: Vec<&ProxyView> = self
            .proxies
            .iter()
            .filter(|p| request.selector.matches(&p.labels))
            .filter(|p| p.healthy && self.active(&p.key.to_string()) < p.max_leases)
            .filter(|p| !self.cooling(&p.key.to_string(), target.as_deref(), now))
            .collect();
        // The spec's order, with the key compared as its text.
        candidates.sort_by_key(|p| {
            let key = p.key.to_string();
            (self.active(&key), p.latency_ms, key)
        });
        let Some(chosen) = candidates.first() else {
            return Err(AcquireError::NoMatch(self.no_match(
                &request.selector,
                target.as_deref(),
                now,
            )));
        };
        let lease = Lease {
            id: request.id.clone(),
            proxy: chosen.key.clone(),
            host: chosen.host.clone(),
            port: chosen.port,
            target,
            granted_at: now,
            expires_at: later(now, request.ttl),
            ttl: request.ttl,
            holder: request.holder.clone(),
        };
        self.leases.push(ModelLease {
            lease: lease.clone(),
            forget_at: None,
        });
        Ok(lease)
    }

    fn no_match(&self, selector: &Selector, target: Option<&str>, now: Timestamp) -> NoMatch {
        let matching = || self.proxies.iter().filter(|p| selector.matches(&p.labels));
        let count = |pred: &dyn Fn(&ProxyView) -> bool| {
            u32::try_from(matching().filter(|p| pred(p)).count()).unwrap()
        };
        let in_cooldown = |p: &ProxyView| {
            let key = p.key.to_string();
            p.healthy && self.active(&key) < p.max_leases && self.cooling(&key, target, now)
        };
        // The first of them to leave its cooldown.
        let retry_at = matching()
            .filter(|p| in_cooldown(p))
            .flat_map(|p| {
                self.cooldowns
                    .iter()
                    .filter(move |c| c.proxy == p.key && c.target.as_deref() == target)
                    .map(|c| c.until)
            })
            .min();
        NoMatch {
            considered: count(&|_| true),
            unhealthy: count(&|p| !p.healthy),
            at_capacity: count(&|p| p.healthy && self.active(&p.key.to_string()) >= p.max_leases),
            in_cooldown: count(&in_cooldown),
            unreachable: 0,
            retry_at,
        }
    }

    /// The IDs of the leases of `holder` (of all, when `None`) active at `now`, sorted.
    fn held(&self, holder: Option<&str>, now: Timestamp) -> Vec<String> {
        let mut ids: Vec<String> = self
            .leases
            .iter()
            .filter(|entry| entry.forget_at.is_none() && entry.lease.expires_at > now)
            .filter(|entry| holder.is_none() || entry.lease.holder.as_deref() == holder)
            .map(|entry| entry.lease.id.clone())
            .collect();
        ids.sort();
        ids
    }

    fn release(&mut self, id: &str, now: Timestamp) -> bool {
        self.expire(now);
        let retention = self.config.retention();
        let active = self
            .leases
            .iter_mut()
            .find(|entry| entry.lease.id == id && entry.forget_at.is_none());
        let released = active
            .map(|entry| entry.forget_at = Some(later(now, retention)))
            .is_some();
        self.bound();
        released
    }

    fn report(
        &mut self,
        id: &str,
        result: ReportResult,
        target: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<Cooldown>, UnknownLease> {
        self.expire(now);
        let entry = self
            .leases
            .iter()
            .find(|entry| entry.lease.id == id)
            .ok_or(UnknownLease)?;
        let duration = match result {
            // Never drawn here (the breaker's own properties are in lease_circuit.rs).
            ReportResult::Ok | ReportResult::Unreachable => Duration::ZERO,
            ReportResult::RateLimited => self.config.rate_limited_cooldown,
            ReportResult::Blocked => self.config.blocked_cooldown,
            ReportResult::Error => self.config.error_cooldown,
        };
        if duration.is_zero() {
            return Ok(None);
        }
        let proxy = entry.lease.proxy.clone();
        let target = target
            .map(str::to_ascii_lowercase)
            .or_else(|| entry.lease.target.clone());
        let same = |c: &Cooldown| c.proxy == proxy && c.target == target;
        let previous = self.cooldowns.iter().find(|c| same(c)).map(|c| c.until);
        let until = previous.into_iter().fold(later(now, duration), Ord::max);
        self.cooldowns.retain(|c| !same(c));
        let cooldown = Cooldown {
            proxy,
            target,
            until,
        };
        self.cooldowns.push(cooldown.clone());
        Ok(Some(cooldown))
    }
}

fn later(at: Timestamp, duration: Duration) -> Timestamp {
    at.saturating_add(duration).unwrap()
}

/// Active leases per proxy key at `now`, as the book reports them.
fn active_counts(book: &mut LeaseBook, now: Timestamp) -> BTreeMap<&'static str, u32> {
    PROXIES
        .iter()
        .map(|text| (*text, book.active_leases(&text.parse().unwrap(), now)))
        .collect()
}

/// Runs the steps on a book and the model, checking after each one.
fn run_checked(steps: &[Step]) -> Result<(LeaseBook, Vec<Answer>), TestCaseError> {
    let mut book = LeaseBook::new(config());
    let mut model = Model::new();
    let mut driver = Driver::new();
    let mut answers = Vec::new();
    for step in steps {
        let call = driver.resolve(step);
        let now = driver.now;
        let before = active_counts(&mut book, now);
        let answer = call_book(&mut book, &call, now);
        let expected = model.call(&call, now);
        prop_assert_eq!(&answer, &expected, "{:?} at {}", call, now);
        let after = active_counts(&mut book, now);
        check_counts(&mut book, &model, &before, &after, now)?;
        check_call(&model, &call, &answer, &before, &after, now)?;
        answers.push(answer);
    }
    Ok((book, answers))
}

/// Runs the steps on a book alone.
fn run(steps: &[Step]) -> (LeaseBook, Vec<Answer>) {
    let mut book = LeaseBook::new(config());
    let mut driver = Driver::new();
    let answers = steps
        .iter()
        .map(|step| {
            let call = driver.resolve(step);
            call_book(&mut book, &call, driver.now)
        })
        .collect();
    (book, answers)
}

/// The book's counts agree with the model's, and no count grows except by a grant.
fn check_counts(
    book: &mut LeaseBook,
    model: &Model,
    before: &BTreeMap<&str, u32>,
    after: &BTreeMap<&str, u32>,
    now: Timestamp,
) -> Result<(), TestCaseError> {
    for (key, active) in after {
        prop_assert_eq!(
            *active,
            model.active_at(key, now),
            "active leases on {}",
            key
        );
    }
    prop_assert_eq!(book.active_total(now), after.values().sum::<u32>() as usize);
    let listed: Vec<(String, u32)> = book
        .list(&Selector::all(), false, now)
        .iter()
        .map(|listed| (listed.proxy.key.to_string(), listed.active))
        .collect();
    let mut expected: Vec<(String, u32)> = model
        .proxies
        .iter()
        .map(|p| (p.key.to_string(), model.active_at(&p.key.to_string(), now)))
        .collect();
    expected.sort();
    prop_assert_eq!(listed, expected);
    // The listing's walk reads what one lookup per key reads, in key order and in the order
    // of `PROXIES`, whose last key sorts first (a step back).
    let keys: Vec<ProxyKey> = PROXIES.iter().map(|text| text.parse().unwrap()).collect();
    let one_by_one = PROXIES.iter().map(|key| after[*key]).collect::<Vec<_>>();
    prop_assert_eq!(book.active_leases_in_order(&keys, now), one_by_one);
    let mut sorted = keys;
    sorted.sort();
    let one_by_one: Vec<u32> = sorted
        .iter()
        .map(|key| book.active_leases(key, now))
        .collect();
    prop_assert_eq!(book.active_leases_in_order(&sorted, now), one_by_one);
    let grew = PROXIES
        .iter()
        .filter(|key| after[**key] > before[**key])
        .count();
    prop_assert!(grew <= 1, "more than one proxy gained a lease in one step");
    Ok(())
}

/// What each kind of call must have done.
fn check_call(
    model: &Model,
    call: &Call,
    answer: &Answer,
    before: &BTreeMap<&str, u32>,
    after: &BTreeMap<&str, u32>,
    now: Timestamp,
) -> Result<(), TestCaseError> {
    let grown = |key: &str| after[key] > before[key];
    match (call, answer) {
        (Call::Acquire(_), Answer::Acquired(Ok(lease))) => {
            let key = lease.proxy.to_string();
            let key = key.as_str();
            let proxy = model.proxies.iter().find(|p| p.key == key).unwrap();
            prop_assert!(proxy.healthy, "granted an unhealthy proxy");
            // One more than before, less whatever expired at `now` on the way.
            prop_assert!(after[key] <= before[key] + 1);
            prop_assert!(after[key] <= proxy.max_leases, "over capacity");
            let cooling = model.cooling(key, lease.target.as_deref(), now);
            prop_assert!(!cooling, "granted a proxy cooling down for the target");
            prop_assert!(!PROXIES.iter().any(|other| *other != key && grown(other)));
        }
        (Call::Acquire(_), Answer::Acquired(Err(AcquireError::NoMatch(stats)))) => {
            let classified = stats.unhealthy + stats.at_capacity + stats.in_cooldown;
            prop_assert_eq!(stats.considered, classified);
            prop_assert!(!PROXIES.iter().any(|key| grown(key)));
        }
        (Call::Release(id), Answer::Released(true)) => {
            let freed = |key: &str| after[key] < before[key];
            prop_assert!(
                PROXIES.iter().any(|key| freed(key)),
                "a release freed nothing"
            );
            // Unless the bound on ended leases already forgot it (it ended at the same time
            // as others), the released lease names the proxy it freed.
            if let Some(released) = model.leases.iter().find(|entry| &entry.lease.id == id) {
                let proxy = released.lease.proxy.to_string();
                prop_assert!(freed(&proxy), "the release freed another proxy");
            }
            prop_assert!(!PROXIES.iter().any(|key| grown(key)));
        }
        (Call::ReleaseHeldBy(holder), Answer::ReleasedHeld(released)) => {
            let freed: u32 = PROXIES
                .iter()
                .map(|key| before[key] - after[key].min(before[key]))
                .sum();
            prop_assert!(freed as usize >= *released, "released more than it freed");
            prop_assert!(
                model.held(Some(holder), now).is_empty(),
                "the holder keeps a lease"
            );
            prop_assert!(!PROXIES.iter().any(|key| grown(key)));
        }
        (Call::Expire, Answer::Expired) => {
            let due = model
                .leases
                .iter()
                .filter(|entry| entry.forget_at.is_none());
            prop_assert!(due.clone().all(|entry| entry.lease.expires_at > now));
        }
        _ => prop_assert!(!PROXIES.iter().any(|key| grown(key))),
    }
    Ok(())
}

proptest! {
    #![proptest_config(regressions::config("lease_props", None))]

    #[test]
    fn the_book_agrees_with_the_reference_model_and_keeps_every_invariant(
        steps in vec(step(), 1..80)
    ) {
        run_checked(&steps)?;
    }

    #[test]
    fn the_same_steps_give_the_same_answers_and_the_same_book(steps in vec(step(), 1..80)) {
        prop_assert_eq!(run(&steps), run(&steps));
    }
}
