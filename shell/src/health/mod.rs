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
//! Scheduling: the core's `ProbeSchedule` says which proxy to probe when (a fixed grid per
//! proxy, never two probes of one proxy at once, a seeded proxy's first probe spread over one
//! interval; its module docs say why). This loop only keeps the time and sleeps: until the
//! schedule's next wake-up (when a permit is free), a probe ending, a change of leadership,
//! or the next refresh from the cache, whichever comes first. A probe that cannot get a
//! concurrency permit stays due and runs as soon as one frees up; a hung proxy holds one
//! permit for at most its timeout, so it never delays anyone else's probes while permits
//! remain.
//!
//! The engine and its probes run on a thread of their own ([`HealthEngine::start`], a
//! [`Dedicated`] current-thread runtime). A probe is a handful of waits (the connection, the
//! tunnel's answer, the handshake, the answer), each a wake-up of the prober; on the shared
//! multi-thread runtime a wake-up often woke, or was taken over by, a second worker as well,
//! and measured with real squids the same probes cost 10 to 15% more CPU there
//! (`docs/benchmarks.md`, health probing). On its own thread, too, a probe's latency is the
//! proxy's, not the time it waited behind reconciles and list answers.
//!
//! The refresh from the cache is periodic ([`REFRESH_EVERY`]), not driven by changes: the
//! cache is the controller's plain reflector store, which notifies no one of a change (a
//! subscribing store would change how the controller builds its cache, and every
//! benchmark's), and a refresh costs a few microseconds per proxy (`docs/benchmarks.md`,
//! health probing), so once a second is cheap even on a large fleet, and a new proxy waits at
//! most that long for its first probe.

mod flags;
mod metrics;
pub mod probe;

pub use self::flags::Flags;

pub use self::metrics::ProbeMetrics;

use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use proxy_core::HealthVerdict;
use proxy_core::ProxyKey;
use proxy_core::egress::EgressBook;
use proxy_core::health::{HealthBook, Probe, Target, Thresholds};
use proxy_core::probe_schedule::{CachedProxy, Moment, ProbeId, ProbeSchedule, Start};
use proxy_crd::Proxy;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::{Instant, MissedTickBehavior};

use self::probe::{ProbeResult, Prober};
use crate::credentials::{Credentials, CredentialsCache};
use crate::dedicated::Dedicated;
use crate::leadership::Leadership;
use crate::locks::lock;
use crate::per_proxy::PerProxy;
use crate::runtime::supervise::{self, Panics};
use crate::tasks::Loop;

/// Probes at once by default: enough for thousands of proxies at a 30 s interval even when
/// many of them hang until their timeout.
pub const DEFAULT_CONCURRENCY: usize = 512;

/// How often the engine brings its schedule in line with the cache (proxies added, gone,
/// readdressed or with a new health check). Rebuilding it costs a few microseconds per
/// proxy, so doing it much more often would be most of the engine's CPU on a large fleet
/// (`docs/benchmarks.md`, health probing); a second of delay for a new proxy costs nothing.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

// A new External proxy holds its first status write for its first verdict, for
// `FIRST_VERDICT_SLACK` past its probe's timeout: the refresh takes it in well before that.
const _: () = assert!(REFRESH_EVERY.as_millis() * 2 < proxy_core::FIRST_VERDICT_SLACK.as_millis());

/// The name of the thread the engine and its probes run on ([`HealthEngine::start`]).
pub const THREAD: &str = "prober";

/// The health engine of one operator process.
#[derive(Debug)]
pub struct HealthEngine {
    book: Mutex<HealthBook>,
    /// The egress address of every proxy whose `egressURL` answered, and who shares one.
    egress: Mutex<EgressBook>,
    prober: Prober,
    permits: Arc<Semaphore>,
    metrics: Arc<ProbeMetrics>,
    panics: Panics,
}

/// Why the engine's loop woke up.
#[derive(Debug)]
enum Woken {
    /// Time to bring the schedule in line with the cache (also after a change of
    /// leadership), then start what is due.
    Refresh,
    /// The schedule's next wake-up came.
    Due,
    /// A probe ended.
    Finished(Done),
}

/// What a probe task sends back.
#[derive(Debug)]
enum Done {
    /// The probe ran.
    Probed(Finished),
    /// The probe panicked (logged and counted at the boundary): the proxy is free for its
    /// next slot.
    Panicked(ProxyKey, ProbeId),
}

impl Done {
    /// The proxy and the probe.
    fn probe(&self) -> (&ProxyKey, ProbeId) {
        match self {
            Self::Probed(finished) => (&finished.key, finished.id),
            Self::Panicked(key, id) => (key, *id),
        }
    }
}

/// A finished probe, back from its task.
#[derive(Debug)]
struct Finished {
    key: ProxyKey,
    id: ProbeId,
    target: Target,
    result: ProbeResult,
    at: jiff::Timestamp,
}

/// The schedule's clock: [`Moment`]s are counted from the engine's start, on tokio's
/// monotonic clock (the one its timers sleep on).
#[derive(Debug, Clone, Copy)]
struct Clock {
    epoch: Instant,
}

impl Clock {
    fn start() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    fn now(self) -> Moment {
        Moment::after(self.epoch.elapsed())
    }

    /// The instant of `moment`; `None` past the end of tokio's time.
    fn instant(self, moment: Moment) -> Option<Instant> {
        self.epoch.checked_add(moment.since_epoch())
    }
}

impl HealthEngine {
    /// An engine that probes with `prober`, at most `concurrency` probes at once, records
    /// every probe in `metrics`, and counts a panic of its loop or a probe in `panics`.
    pub fn new(
        prober: Prober,
        concurrency: usize,
        metrics: Arc<ProbeMetrics>,
        panics: Panics,
    ) -> Self {
        Self {
            book: Mutex::default(),
            egress: Mutex::default(),
            prober,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            metrics,
            panics,
        }
    }

    /// The probes' metrics, also a per-Proxy store to free ([`PerProxy`]).
    pub fn metrics(&self) -> &Arc<ProbeMetrics> {
        &self.metrics
    }

    /// The verdict last delivered to the controller for `proxy`, if it is still the same
    /// object (its UID). When the book does not hold the proxy yet (this process just
    /// started or just became the leader), it is first seeded from the verdict the proxy's
    /// status shows: the reconcile that asks is about to decide, and without the seed it
    /// would write "awaiting probe" over a Ready proxy.
    pub fn reported(&self, proxy: &Proxy) -> Option<HealthVerdict> {
        let key = ProxyKey::of(proxy);
        let uid = proxy.uid().unwrap_or_default();
        let mut book = lock(&self.book);
        if let Some(status) = &proxy.status {
            book.seed_from_status(&key, &uid, &proxy.spec, status);
        }
        book.reported(&key, &uid).cloned()
    }

    /// The other proxies seen leaving from the egress address of `key`, for its
    /// observation ([`proxy_core::Observed::egress_shared_with`]).
    pub fn egress_shared_with(&self, key: &ProxyKey) -> Vec<ProxyKey> {
        lock(&self.egress).shared_with(key)
    }

    /// Probes the proxies of `store` on a thread of its own named [`THREAD`], with a
    /// current-thread runtime that its probes run on too (see the module docs), under the
    /// panic boundary, until the returned [`Dedicated`] is stopped; sends the reference of
    /// each proxy whose verdict must be written to `reconcile`. Fails only when the OS
    /// refuses the thread or the runtime.
    pub fn start(
        self: Arc<Self>,
        store: Store<Proxy>,
        credentials: CredentialsCache,
        reconcile: mpsc::Sender<ObjectRef<Proxy>>,
        leadership: Arc<Leadership>,
    ) -> std::io::Result<Dedicated> {
        let panics = self.panics.clone();
        Dedicated::spawn(THREAD, move || {
            supervise::forever(Loop::Health.label(), panics, move || {
                self.clone().run(
                    store.clone(),
                    credentials.clone(),
                    reconcile.clone(),
                    leadership.clone(),
                )
            })
        })
    }

    /// Probes the proxies of `store` until the task is dropped, and sends the reference of
    /// each proxy whose verdict must be written to `reconcile`.
    ///
    /// Only the leader probes: a follower keeps no state, so when it becomes the leader it
    /// starts from the verdicts the statuses show (seeded by the first of
    /// [`HealthEngine::reported`] and the refresh, which runs at once on a gain).
    ///
    /// A proxy with credentials (`credentials`) is probed with them.
    async fn run(
        self: Arc<Self>,
        store: Store<Proxy>,
        credentials: CredentialsCache,
        reconcile: mpsc::Sender<ObjectRef<Proxy>>,
        leadership: Arc<Leadership>,
    ) {
        let clock = Clock::start();
        // Random per process: no two operators spread the same proxy to the same point.
        let mut schedule = ProbeSchedule::new(RandomState::new().hash_one(leadership.identity()));
        let (finished_tx, mut finished_rx) = mpsc::unbounded_channel::<Done>();
        let mut elections = leadership.subscribe();
        let mut refresh = tokio::time::interval(REFRESH_EVERY);
        refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            // Probes left waiting for a permit start when a probe ends and frees one, so the
            // next slot is worth waking for only while a permit is free.
            let wakeup = schedule
                .next_wakeup()
                .filter(|_| self.permits.available_permits() > 0)
                .and_then(|moment| clock.instant(moment));
            let woken = tokio::select! {
                _ = refresh.tick() => Woken::Refresh,
                // A gain refreshes at once; a loss forgets at once.
                Ok(()) = elections.changed() => Woken::Refresh,
                () = tokio::time::sleep_until(wakeup.unwrap_or_else(Instant::now)), if wakeup.is_some() => Woken::Due,
                Some(done) = finished_rx.recv() => Woken::Finished(done),
            };
            let refresh_first = match woken {
                Woken::Refresh => true,
                Woken::Due => false,
                Woken::Finished(done) => {
                    let (key, id) = done.probe();
                    let thresholds = schedule.finished(key, id, clock.now());
                    if let (Done::Probed(finished), Some(thresholds)) = (done, thresholds) {
                        self.deliver(finished, thresholds, &reconcile);
                    }
                    continue;
                }
            };
            if self.leads(&leadership, &mut schedule) {
                if refresh_first {
                    self.refresh(&store, &mut schedule, clock.now());
                }
                self.launch_due(&mut schedule, clock.now(), &finished_tx, |key| {
                    let reference = ObjectRef::new(key.name()).within(key.namespace());
                    store
                        .get(&reference)
                        .and_then(|proxy| credentials.of(&proxy))
                });
            }
        }
    }

    /// Whether this replica leads now; when it does not, drops every schedule, verdict and
    /// per-proxy series first (leadership was lost), once.
    fn leads(&self, leadership: &Leadership, schedule: &mut ProbeSchedule) -> bool {
        if leadership.is_leader() {
            return true;
        }
        if !schedule.is_empty() {
            for key in schedule.clear() {
                self.metrics.forget(&key);
            }
            *lock(&self.book) = HealthBook::new();
            *lock(&self.egress) = EgressBook::new();
        }
        false
    }

    /// Brings the schedule in line with the proxies of `store`, and drops the metric series
    /// of the proxies it no longer probes.
    fn refresh(&self, store: &Store<Proxy>, schedule: &mut ProbeSchedule, now: Moment) {
        let proxies = store.state();
        let listed = proxies.iter().map(|proxy| CachedProxy {
            key: ProxyKey::of(proxy),
            uid: proxy.metadata.uid.as_deref().unwrap_or_default(),
            generation: proxy.metadata.generation,
            spec: &proxy.spec,
            status: proxy.status.as_ref(),
        });
        let gone = schedule.refresh(listed, now, &mut lock(&self.book));
        for gone in gone {
            tracing::debug!(proxy = %gone, "no longer probed");
            self.metrics.forget(&gone);
            let _ = lock(&self.egress).forget(&gone);
        }
    }

    /// Starts the probes that are due, as many as there are free permits, each with the
    /// credentials `credentials_of` finds for its proxy.
    fn launch_due(
        &self,
        schedule: &mut ProbeSchedule,
        now: Moment,
        finished: &mpsc::UnboundedSender<Done>,
        credentials_of: impl Fn(&ProxyKey) -> Option<Credentials>,
    ) {
        for start in schedule.due(now, self.permits.available_permits()) {
            // Only this loop takes permits, and it asked for no more than were free; were one
            // missing after all, the proxy is freed for its next slot, not left in flight.
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                let _ = schedule.finished(&start.key, start.id, now);
                continue;
            };
            let Start {
                key,
                id,
                target,
                probe,
                ..
            } = start;
            let (prober, finished, panics) =
                (self.prober.clone(), finished.clone(), self.panics.clone());
            let credentials = credentials_of(&key);
            // Under the panic boundary: a probe task that died would leave its proxy in
            // flight, never probed again.
            tokio::spawn(async move {
                let at = jiff::Timestamp::now();
                let object = key.to_string();
                let probed = supervise::guard(
                    Loop::Health.label(),
                    &object,
                    &panics,
                    prober.probe(&probe, credentials.as_ref()),
                )
                .await;
                drop(permit);
                let _ = finished.send(match probed {
                    Ok(result) => Done::Probed(Finished {
                        key,
                        id,
                        target,
                        result,
                        at,
                    }),
                    Err(_) => Done::Panicked(key, id),
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
            ..
        } = finished;
        if let Some(error) = &result.error {
            tracing::debug!(proxy = %key, cause = ?error.cause, error = %error.detail, "probe failed");
        }
        self.metrics
            .probe(&key, result.ok, result.latency.as_secs_f64());
        let latency_ms = u32::try_from(result.latency.as_millis()).unwrap_or(u32::MAX);
        // The proxies whose sharing of an egress address changed (another one joined or
        // left theirs) are reconciled too: their `EgressVerified` condition changes.
        let changed = match result.egress {
            Some(egress) => lock(&self.egress).record(&key, Some(egress)),
            None => Vec::new(),
        };
        for other in changed.iter().filter(|other| **other != key) {
            let reference = ObjectRef::new(other.name()).within(other.namespace());
            let _ = reconcile.try_send(reference);
        }
        let mut book = lock(&self.book);
        let Some(report) = book.record(
            &key,
            &target,
            Probe {
                ok: result.ok,
                latency_ms,
                at,
                failure: result.error.map(|error| error.cause),
                egress: result.egress,
            },
            thresholds,
        ) else {
            return;
        };
        // Never wait on the controller: when its queue is full the report is not marked
        // delivered, and the next probe reports again.
        let reference = ObjectRef::new(key.name()).within(key.namespace());
        if reconcile.try_send(reference).is_ok() {
            book.delivered(&report);
            tracing::info!(proxy = %key, healthy = report.verdict.healthy, latency_ms = report.verdict.latency_ms, reason = ?report.reason, "health reported");
        }
    }
}

impl crate::per_proxy::PerProxy for HealthEngine {
    /// Forgets the verdicts of `key`, which is gone. (Its schedule goes at the next refresh,
    /// and with it any verdict a probe still in flight delivers.) The proxies that shared
    /// its egress address no longer do: they are reconciled by the next probe that reports,
    /// or their next poll.
    fn forget(&self, key: &ProxyKey) {
        lock(&self.book).forget(key);
        let _ = lock(&self.egress).forget(key);
    }

    /// How many proxies the book holds a state for.
    fn tracked(&self) -> usize {
        lock(&self.book).tracked()
    }
}
