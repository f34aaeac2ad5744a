//! The health engine: probes every proxy through itself and tells the controller when the
//! verdict (or the latency, rarely) changes.
//!
//! The decisions (thresholds, when to report) are the core's `HealthBook`; this module
//! schedules probes, runs them with bounded concurrency, feeds the results to the book, and
//! delivers its reports by triggering a reconcile of the proxy. The controller stays the only
//! writer of status: it reads the delivered verdict through [`HealthEngine::reported`].
//!
//! Seeding: a process that starts, or becomes the leader, has an empty book. The verdict a
//! proxy's status shows is seeded into it before anything can write that proxy's status: by
//! [`HealthEngine::reported`], which every reconcile calls before it decides, and by the
//! schedule's refresh, whichever comes first. Without it the first reconcile after a restart
//! or a handover (the new leader reconciles every object at once) would find no verdict and
//! write `Healthy=Unknown`, and a Ready proxy would leave the lease book until its next probe.
//!
//! Scheduling: each proxy is due every `intervalSeconds`, on a fixed grid (a slow probe does
//! not push the next one later). A proxy with no verdict (a new one, a replaced machine) is
//! probed as soon as the schedule takes it in; one with a verdict (seeded after a start or a
//! handover) is served on it meanwhile, and its first probe is jittered over one interval so
//! that a restart never fires every probe at once (`HealthBook::first_probe_in`). A probe
//! that cannot get a concurrency permit stays due and runs as soon as one frees up; a hung
//! proxy holds one permit for at most its timeout, so it never delays anyone else's probes
//! while permits remain.

pub mod probe;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use proxy_core::HealthVerdict;
use proxy_core::health::{HealthBook, Probe, ProxyKey, Target, Thresholds};
use proxy_crd::Proxy;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use self::probe::{ProbeResult, ProbeSpec, Prober};
use crate::leadership::Leadership;
use crate::metrics::Metrics;
use crate::supervise::{self, Loop, lock};

/// Probes at once by default: enough for thousands of proxies at a 30 s interval even when
/// many of them hang until their timeout.
pub const DEFAULT_CONCURRENCY: usize = 512;

/// How often the engine starts the probes that are due.
const TICK: Duration = Duration::from_millis(100);

/// How often the engine brings its schedule in line with the cache (proxies added, gone,
/// readdressed or with a new health check). Rebuilding it costs a few microseconds per
/// proxy, so doing it on every tick would be most of the engine's CPU on a large fleet
/// (`docs/benchmarks.md`, health probing); a second of delay for a new proxy costs nothing.
const REFRESH_EVERY: u32 = 10;

/// The health engine of one operator process.
#[derive(Debug)]
pub struct HealthEngine {
    book: Mutex<HealthBook>,
    prober: Prober,
    permits: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

/// One proxy the engine probes.
#[derive(Debug, Clone, PartialEq)]
struct Scheduled {
    target: Target,
    spec: ProbeSpec,
    thresholds: Thresholds,
    interval: Duration,
    due: Instant,
    in_flight: bool,
}

/// What a probe task sends back.
#[derive(Debug)]
enum Done {
    /// The probe ran.
    Probed(Finished),
    /// The probe panicked (logged and counted at the boundary): the proxy is free for its
    /// next slot.
    Panicked(ProxyKey),
}

impl Done {
    fn key(&self) -> &ProxyKey {
        match self {
            Self::Probed(finished) => &finished.key,
            Self::Panicked(key) => key,
        }
    }
}

/// A finished probe, back from its task.
#[derive(Debug)]
struct Finished {
    key: ProxyKey,
    target: Target,
    result: ProbeResult,
    at: jiff::Timestamp,
}

impl HealthEngine {
    /// An engine that probes with `prober`, at most `concurrency` probes at once, and
    /// records every probe in `metrics`.
    pub fn new(prober: Prober, concurrency: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            book: Mutex::default(),
            prober,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            metrics,
        }
    }

    /// The verdict last delivered to the controller for `proxy`, if it is still the same
    /// object (its UID). When the book does not hold the proxy yet (this process just
    /// started or just became the leader), it is first seeded from the verdict the proxy's
    /// status shows: the reconcile that asks is about to decide, and without the seed it
    /// would write "awaiting probe" over a Ready proxy.
    pub fn reported(&self, proxy: &Proxy) -> Option<HealthVerdict> {
        let key = ProxyKey::new(proxy.namespace().unwrap_or_default(), proxy.name_any());
        let uid = proxy.uid().unwrap_or_default();
        let mut book = lock(&self.book);
        if let Some(status) = &proxy.status {
            book.seed_from_status(&key, &uid, status);
        }
        book.reported(&key, &uid).cloned()
    }

    /// Probes the proxies of `store` until the task is dropped, and sends the reference of
    /// each proxy whose verdict must be written to `reconcile`.
    ///
    /// Only the leader probes: a follower keeps no state, so when it becomes the leader it
    /// starts from the verdicts the statuses show (seeded by the first of
    /// [`HealthEngine::reported`] and the refresh).
    pub async fn run(
        self: Arc<Self>,
        store: Store<Proxy>,
        reconcile: mpsc::Sender<ObjectRef<Proxy>>,
        leadership: Arc<Leadership>,
    ) {
        let mut scheduled: BTreeMap<ProxyKey, Scheduled> = BTreeMap::new();
        let mut due: BTreeSet<(Instant, ProxyKey)> = BTreeSet::new();
        let (finished_tx, mut finished_rx) = mpsc::unbounded_channel::<Done>();
        let jitter = std::collections::hash_map::RandomState::new();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u32 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if !leadership.is_leader() {
                        if !scheduled.is_empty() {
                            self.forget_everything(&mut scheduled, &mut due);
                        }
                        continue;
                    }
                    let now = Instant::now();
                    if ticks.is_multiple_of(REFRESH_EVERY) {
                        self.refresh(&store, &mut scheduled, &mut due, now, &jitter);
                    }
                    ticks = ticks.wrapping_add(1);
                    self.launch_due(&mut scheduled, &mut due, now, &finished_tx);
                }
                Some(done) = finished_rx.recv() => {
                    let thresholds = scheduled.get_mut(done.key()).map(|entry| {
                        entry.in_flight = false;
                        entry.thresholds
                    });
                    if let (Done::Probed(finished), Some(thresholds)) = (done, thresholds) {
                        self.deliver(finished, thresholds, &reconcile);
                    }
                }
            }
        }
    }

    /// Drops every schedule, verdict and per-proxy series (leadership was lost).
    fn forget_everything(
        &self,
        scheduled: &mut BTreeMap<ProxyKey, Scheduled>,
        due: &mut BTreeSet<(Instant, ProxyKey)>,
    ) {
        for key in scheduled.keys() {
            self.metrics.forget_proxy(&key.namespace, &key.name);
        }
        scheduled.clear();
        due.clear();
        *lock(&self.book) = HealthBook::new();
    }

    /// Brings the schedule in line with the proxies that have a probeable address.
    fn refresh(
        &self,
        store: &Store<Proxy>,
        scheduled: &mut BTreeMap<ProxyKey, Scheduled>,
        due: &mut BTreeSet<(Instant, ProxyKey)>,
        now: Instant,
        jitter: &std::collections::hash_map::RandomState,
    ) {
        let mut live = BTreeMap::new();
        let mut book = lock(&self.book);
        for proxy in store.state() {
            let uid = proxy.uid().unwrap_or_default();
            let Some(target) = Target::of(&uid, &proxy.spec, proxy.status.as_ref()) else {
                continue;
            };
            let key = ProxyKey::new(proxy.namespace().unwrap_or_default(), proxy.name_any());
            let check = proxy.spec.health_check_or_default();
            let interval =
                Duration::from_secs(u64::try_from(check.interval_seconds).unwrap_or(1).max(1));
            let host = if target.host.contains(':') {
                format!("[{}]", target.host)
            } else {
                target.host.clone()
            };
            let spec = ProbeSpec {
                proxy: format!("{host}:{}", proxy.spec.effective_port()),
                url: check.probe_url.clone(),
                timeout: Duration::from_secs(
                    u64::try_from(check.timeout_seconds).unwrap_or(1).max(1),
                ),
                expected_status_codes: check
                    .expected_status_codes
                    .iter()
                    .filter_map(|c| u16::try_from(*c).ok())
                    .collect(),
            };
            let thresholds = Thresholds::of(&check);
            match scheduled.get_mut(&key) {
                Some(entry) if entry.target == target => {
                    entry.spec = spec;
                    entry.thresholds = thresholds;
                    entry.interval = interval;
                }
                _ => {
                    // New here, or a new object or address under this name: seed the verdict
                    // the status already shows, unless a reconcile did (a restart or a new
                    // leader must not flap it); then the first probe: at once without a
                    // verdict, jittered over one interval with one.
                    if let Some(status) = &proxy.status {
                        book.seed_from_status(&key, &uid, status);
                    }
                    let first =
                        now + book.first_probe_in(&key, &target, interval, jitter.hash_one(&key));
                    if let Some(old) = scheduled.insert(
                        key.clone(),
                        Scheduled {
                            target: target.clone(),
                            spec,
                            thresholds,
                            interval,
                            due: first,
                            in_flight: false,
                        },
                    ) {
                        due.remove(&(old.due, key.clone()));
                    }
                    due.insert((first, key.clone()));
                }
            }
            live.insert(key, target);
        }
        for gone in book.prune(&live) {
            tracing::debug!(proxy = %gone, "no longer probed");
            self.metrics.forget_proxy(&gone.namespace, &gone.name);
        }
        scheduled.retain(|key, entry| {
            let keep = live.contains_key(key);
            if !keep {
                due.remove(&(entry.due, key.clone()));
            }
            keep
        });
    }

    /// Starts every due probe that gets a permit.
    fn launch_due(
        &self,
        scheduled: &mut BTreeMap<ProxyKey, Scheduled>,
        due: &mut BTreeSet<(Instant, ProxyKey)>,
        now: Instant,
        finished: &mpsc::UnboundedSender<Done>,
    ) {
        while let Some((at, key)) = due.first().cloned() {
            if at > now {
                break;
            }
            let Some(entry) = scheduled.get_mut(&key) else {
                due.pop_first();
                continue;
            };
            if entry.in_flight {
                // The previous probe still runs (it can take up to its timeout): skip this
                // slot rather than pile probes onto one proxy.
                due.pop_first();
                entry.due = next_slot(at, entry.interval, now);
                due.insert((entry.due, key));
                continue;
            }
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                break;
            };
            due.pop_first();
            entry.in_flight = true;
            entry.due = next_slot(at, entry.interval, now);
            due.insert((entry.due, key.clone()));
            let (prober, spec, target, finished, metrics) = (
                self.prober.clone(),
                entry.spec.clone(),
                entry.target.clone(),
                finished.clone(),
                self.metrics.clone(),
            );
            // Under the panic boundary: a probe task that died would leave its proxy in
            // flight, never probed again.
            tokio::spawn(async move {
                let at = jiff::Timestamp::now();
                let object = key.to_string();
                let probed =
                    supervise::guard(Loop::Health, &object, &metrics, prober.probe(&spec)).await;
                drop(permit);
                let _ = finished.send(match probed {
                    Ok(result) => Done::Probed(Finished {
                        key,
                        target,
                        result,
                        at,
                    }),
                    Err(_) => Done::Panicked(key),
                });
            });
        }
    }

    /// Feeds a result to the book and delivers the report it may produce.
    fn deliver(
        &self,
        finished: Finished,
        thresholds: Thresholds,
        reconcile: &mpsc::Sender<ObjectRef<Proxy>>,
    ) {
        let Finished {
            key,
            target,
            result,
            at,
        } = finished;
        if let Some(error) = &result.error {
            tracing::debug!(proxy = %key, cause = ?error.cause, error = %error.detail, "probe failed");
        }
        self.metrics.probe(
            &key.namespace,
            &key.name,
            result.ok,
            result.latency.as_secs_f64(),
        );
        let latency_ms = u32::try_from(result.latency.as_millis()).unwrap_or(u32::MAX);
        let mut book = lock(&self.book);
        let Some(report) = book.record(
            &key,
            &target,
            Probe {
                ok: result.ok,
                latency_ms,
                at,
                failure: result.error.map(|error| error.cause),
            },
            thresholds,
        ) else {
            return;
        };
        // Never wait on the controller: when its queue is full the report is not marked
        // delivered, and the next probe reports again.
        let reference = ObjectRef::new(&key.name).within(&key.namespace);
        if reconcile.try_send(reference).is_ok() {
            book.delivered(&report);
            tracing::info!(proxy = %key, healthy = report.verdict.healthy, latency_ms = report.verdict.latency_ms, reason = ?report.reason, "health reported");
        }
    }
}

/// The first slot of the fixed grid `scheduled + k * interval` that is after `now`.
fn next_slot(scheduled: Instant, interval: Duration, now: Instant) -> Instant {
    let mut next = scheduled + interval;
    while next <= now {
        next += interval;
    }
    next
}
