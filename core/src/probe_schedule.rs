//! The probe schedule: which proxy the health engine probes, and when.
//!
//! The shell lists the proxies of its cache, holds the concurrency permits, spawns the
//! probes and sleeps; this module decides everything else. A [`ProbeSchedule`] has no clock:
//! every call takes `now` as a [`Moment`], a point on a monotonic clock the shell keeps
//! (time since an epoch it picks, such as the engine's start).
//!
//! # Driving it
//!
//! The leader's shell owns one schedule (next to the [`HealthBook`]) and loops:
//!
//! 1. now and then (the shell picks how often), [`ProbeSchedule::refresh`] with every proxy
//!    of its cache ([`CachedProxy`]), which brings the schedule in line with them and seeds and
//!    prunes the book;
//! 2. [`ProbeSchedule::due`] with the permits it has free: the probes to start now
//!    ([`Start`]), each marked in flight; the shell runs each one under one permit;
//! 3. for each probe that ends (or whose task died), [`ProbeSchedule::finished`] with its
//!    [`ProbeId`]: it frees the proxy for its next slot and gives the thresholds to record
//!    the result with;
//! 4. sleeps until [`ProbeSchedule::next_wakeup`] (when it has a permit free), a probe ends,
//!    or the next refresh, whichever comes first.
//!
//! When the shell stops leading, [`ProbeSchedule::clear`] forgets every proxy.
//!
//! # Why the rules are what they are
//!
//! - **A fixed grid per proxy.** A proxy is due every `intervalSeconds`, at `first + k ×
//!   interval`: the next slot is counted from the slot, not from when the probe started or
//!   ended ([`next_slot`]), so a slow probe or a late wake-up never pushes the later ones
//!   back, and the mean period is exact.
//! - **Probes whose slots are close start together.** A probe may start up to
//!   [`LAUNCH_WINDOW`] ahead of its slot, with the probe whose slot woke the shell, so that
//!   they share the prober's wake-ups; its next slot is still on its grid.
//! - **Never two probes of one proxy at once.** A proxy whose probe is still in flight when
//!   its slot comes skips that slot, and a probe that ends after one of its slots (a timeout
//!   longer than the interval) frees the proxy for the first slot after it ends. A hung proxy
//!   is probed once per timeout at most, and never holds more than one permit.
//! - **A probe that gets no permit stays due.** [`ProbeSchedule::due`] starts at most as
//!   many probes as there are free permits, in the order of their slots; the rest stay due
//!   and start, late, as soon as permits free up, then go back on their grid.
//! - **A proxy with no verdict is probed as soon as the schedule takes it in**; one with a
//!   verdict (seeded from its status after a start or a handover) has its first probe spread
//!   over one interval, so that a restart never fires every probe of the fleet at once
//!   ([`HealthBook::first_probe_in`]). The spread is a hash of the proxy's key and the salt
//!   the shell gives [`ProbeSchedule::new`] (random per process, so that no two operators
//!   place the same proxy at the same point).
//! - **A new object or a new address under the same name starts over**: a fresh grid, as a
//!   new proxy, and so does a proxy that left the schedule and came back. The result of a
//!   probe started before, still in flight, frees nothing and is not recorded: it is about
//!   a schedule entry that no longer exists (often an address no longer probed), and
//!   freeing the new entry with it could start a second probe while the new one runs. Each
//!   probe has its own [`ProbeId`] for this.
//! - **New health-check settings apply at once, on the same grid**: a new probe URL,
//!   timeout, status codes or thresholds reach the next probe; a new interval the slot after
//!   the one already planned.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Add;
use std::time::Duration;

use proxy_crd::{HealthCheck, ProxySpec, ProxyStatus};

use crate::health::{HealthBook, Target, Thresholds, machine_since};
use crate::key::ProxyKey;

/// A point on the schedule's monotonic clock: the time since an epoch the shell picks. Only
/// differences mean anything; the shell converts to and from its own clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment(Duration);

impl Moment {
    /// The epoch itself.
    pub const EPOCH: Self = Self(Duration::ZERO);

    /// The moment `elapsed` after the epoch.
    pub const fn after(elapsed: Duration) -> Self {
        Self(elapsed)
    }

    /// The time from the epoch to this moment.
    pub const fn since_epoch(self) -> Duration {
        self.0
    }

    /// The time from `earlier` to this moment; zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Moment {
    type Output = Self;

    /// Saturates at the end of time rather than overflow.
    fn add(self, later: Duration) -> Self {
        Self(self.0.saturating_add(later))
    }
}

/// What one probe checks: a request to `url` through the proxy at `proxy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The proxy, `host:port` (`[v6]:port` for an IPv6 address).
    pub proxy: String,
    /// The URL requested through it.
    pub url: String,
    /// The deadline of the whole probe, at least one second.
    pub timeout: Duration,
    /// Status codes that count as a good probe (values that are not HTTP status codes, which
    /// an object that never went through the API server may hold, are left out).
    pub expected_status_codes: Vec<u16>,
    /// The health check's `egressURL`: after a good probe, requested through the proxy too,
    /// its body is the address the site saw.
    pub egress_url: Option<String>,
}

impl ProbeSpec {
    /// The probe of the proxy at `host`, on `spec`'s port ([`ProxySpec::effective_port`]),
    /// with the health check `check`.
    pub fn of(host: &str, spec: &ProxySpec, check: &HealthCheck) -> Self {
        let port = spec.effective_port();
        Self {
            proxy: if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            },
            url: check.probe_url.clone(),
            timeout: at_least_one_second(check.timeout_seconds),
            expected_status_codes: check
                .expected_status_codes
                .iter()
                .filter_map(|code| u16::try_from(*code).ok())
                .collect(),
            egress_url: check.egress_url.clone(),
        }
    }
}

/// The time between two probes of a proxy with the health check `check`: its
/// `intervalSeconds`, at least one second.
pub fn interval_of(check: &HealthCheck) -> Duration {
    at_least_one_second(check.interval_seconds)
}

/// `seconds`, or one second when it is below that (the CRD rejects such values, but an
/// object that never went through the API server may hold them).
fn at_least_one_second(seconds: i32) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(1).max(1))
}

/// One proxy as the shell's cache lists it, for [`ProbeSchedule::refresh`].
#[derive(Clone, Debug)]
pub struct CachedProxy<'a> {
    /// Its key.
    pub key: ProxyKey,
    /// `metadata.uid`.
    pub uid: &'a str,
    /// `metadata.generation`: the API server raises it on every change of the spec, so an
    /// entry listed again under the same one keeps its probe spec rather than building it
    /// anew (`None`, an object built by hand, is rebuilt every time).
    pub generation: Option<i64>,
    /// Its spec.
    pub spec: &'a ProxySpec,
    /// Its status, if it has one: where a Managed proxy's address comes from, and the
    /// verdict seeded into the book.
    pub status: Option<&'a ProxyStatus>,
}

/// Which probe a result is of: one per [`Start`], never reused by a schedule (also not
/// after [`ProbeSchedule::clear`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProbeId(u64);

/// A probe to start now, from [`ProbeSchedule::due`]. Its proxy is in flight until
/// [`ProbeSchedule::finished`] is called with its key and id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// The proxy.
    pub key: ProxyKey,
    /// This probe: give it back to [`ProbeSchedule::finished`].
    pub id: ProbeId,
    /// The object and address probed, for [`HealthBook::record`].
    pub target: Target,
    /// What to probe.
    pub probe: ProbeSpec,
    /// The slot of the grid this probe serves: at or before the `now` it was started at, or
    /// at most [`LAUNCH_WINDOW`] after it.
    pub slot: Moment,
}

/// One scheduled proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    target: Target,
    /// The generation `probe`, `thresholds` and `interval` were built for.
    generation: Option<i64>,
    /// The refresh that last listed it (the schedule's `refreshes` then).
    listed: u64,
    probe: ProbeSpec,
    thresholds: Thresholds,
    interval: Duration,
    /// Its next slot; it is in the queue under this moment.
    slot: Moment,
    /// The probe in flight, if one is.
    in_flight: Option<ProbeId>,
}

/// The probe schedule of every proxy the engine probes. See the [module docs](self) for how
/// to drive it and why the rules are what they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeSchedule {
    salt: u64,
    /// The id of the next probe started.
    next_id: u64,
    /// How many refreshes ran: an entry not listed by the latest one is dropped.
    refreshes: u64,
    entries: BTreeMap<ProxyKey, Entry>,
    /// Every entry under its next slot, earliest first.
    queue: BTreeSet<(Moment, ProxyKey)>,
}

impl ProbeSchedule {
    /// An empty schedule. `salt` places each seeded proxy's first probe in its interval (see
    /// [`HealthBook::first_probe_in`]): the shell gives a random number, a test a fixed one.
    pub fn new(salt: u64) -> Self {
        Self {
            salt,
            ..Self::default()
        }
    }

    /// Brings the schedule in line with `listed`, every proxy of the cache, at `now`:
    ///
    /// - a proxy with nothing to probe yet ([`Target::of`]) is not scheduled;
    /// - one new to the schedule, or under a new UID, at a new address or on a new machine at
    ///   the same address ([`Target::since`]), gets a fresh grid:
    ///   first the verdict its status shows is seeded into `book`
    ///   ([`HealthBook::seed_from_status`]; a restart or a new leader must not flap it), then
    ///   its first slot is `now` plus [`HealthBook::first_probe_in`];
    /// - one already scheduled keeps its grid and takes the new probe spec, thresholds and
    ///   interval (built only when its generation moved: a refresh of an unchanged fleet
    ///   allocates nothing per proxy but its key);
    /// - one no longer listed (or no longer probeable) is dropped, and so is the state of the
    ///   book about any proxy not probed at its listed target ([`HealthBook::prune`]).
    ///
    /// Returns the keys the book dropped, in order, for the shell to drop their metric
    /// series.
    pub fn refresh<'a>(
        &mut self,
        listed: impl IntoIterator<Item = CachedProxy<'a>>,
        now: Moment,
        book: &mut HealthBook,
    ) -> Vec<ProxyKey> {
        self.refreshes += 1;
        let refresh = self.refreshes;
        for proxy in listed {
            let Some(host) = proxy.spec.effective_host(proxy.status) else {
                continue;
            };
            let since = machine_since(proxy.spec, proxy.status);
            match self.entries.get_mut(&proxy.key) {
                Some(entry) if entry.target.is(proxy.uid, host, since) => {
                    entry.listed = refresh;
                    if proxy.generation.is_none() || entry.generation != proxy.generation {
                        let check = proxy.spec.health_check_or_default();
                        entry.probe = ProbeSpec::of(host, proxy.spec, &check);
                        entry.thresholds = Thresholds::of(&check);
                        entry.interval = interval_of(&check);
                        entry.generation = proxy.generation;
                    }
                }
                _ => {
                    let target = Target {
                        uid: proxy.uid.to_owned(),
                        host: host.to_owned(),
                        since: since.map(str::to_owned),
                    };
                    if let Some(status) = proxy.status {
                        book.seed_from_status(&proxy.key, proxy.uid, proxy.spec, status);
                    }
                    let check = proxy.spec.health_check_or_default();
                    let interval = interval_of(&check);
                    let spread = self.spread(&proxy.key);
                    let slot = now + book.first_probe_in(&proxy.key, &target, interval, spread);
                    let entry = Entry {
                        probe: ProbeSpec::of(host, proxy.spec, &check),
                        thresholds: Thresholds::of(&check),
                        target,
                        generation: proxy.generation,
                        listed: refresh,
                        interval,
                        slot,
                        in_flight: None,
                    };
                    if let Some(old) = self.entries.insert(proxy.key.clone(), entry) {
                        self.queue.remove(&(old.slot, proxy.key.clone()));
                    }
                    self.queue.insert((slot, proxy.key));
                }
            }
        }
        let queue = &mut self.queue;
        self.entries.retain(|key, entry| {
            let keep = entry.listed == refresh;
            if !keep {
                queue.remove(&(entry.slot, key.clone()));
            }
            keep
        });
        let entries = &self.entries;
        book.prune(|key, target| {
            entries
                .get(key)
                .is_some_and(|entry| entry.target == *target)
        })
    }

    /// The probes to start at `now`, at most `permits` of them, in the order of their slots:
    /// those whose slot has come, and with them those whose slot comes within
    /// [`LAUNCH_WINDOW`] (a batch, see there). Each is in flight from here on, and its
    /// proxy's next slot is the first one of its grid after the slot it serves and after
    /// `now`.
    ///
    /// A proxy still in flight when its slot has come skips that slot (to the first one
    /// after `now`) and is not counted against `permits`; one whose slot is only within the
    /// window keeps it, and is looked at again when it comes. The due probes beyond `permits`
    /// stay due: [`ProbeSchedule::next_wakeup`] is then at or before `now` plus the window,
    /// and the shell calls again when a permit frees up.
    pub fn due(&mut self, now: Moment, permits: usize) -> Vec<Start> {
        let until = now + LAUNCH_WINDOW;
        // First what to take off the queue (to start, or to skip a slot), then take it.
        let mut taken = Vec::new();
        let mut starting = 0;
        for (slot, key) in &self.queue {
            if *slot > until {
                break;
            }
            match self.entries.get(key) {
                Some(entry) if entry.in_flight.is_some() => {
                    if *slot <= now {
                        taken.push((*slot, key.clone()));
                    }
                }
                Some(_) if starting >= permits => break,
                Some(_) => {
                    starting += 1;
                    taken.push((*slot, key.clone()));
                }
                // Never: every queued key has an entry. Dropped below rather than stall.
                None => taken.push((*slot, key.clone())),
            }
        }
        let mut starts = Vec::with_capacity(starting);
        for (slot, key) in taken {
            self.queue.remove(&(slot, key.clone()));
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            entry.slot = next_slot(slot, entry.interval, now.max(slot));
            self.queue.insert((entry.slot, key.clone()));
            if entry.in_flight.is_some() {
                continue;
            }
            let id = ProbeId(self.next_id);
            self.next_id = self.next_id.wrapping_add(1);
            entry.in_flight = Some(id);
            starts.push(Start {
                key,
                id,
                target: entry.target.clone(),
                probe: entry.probe.clone(),
                slot,
            });
        }
        starts
    }

    /// Records that the probe `id` of the proxy under `key` ended (or its task died) at
    /// `now`, and returns the thresholds to record its result with.
    ///
    /// The proxy is free again for its next slot; when that slot passed while the probe ran,
    /// it is skipped for the first one after `now`, as if the proxy had been in flight when
    /// the schedule looked (it was). Returns `None`, changing nothing, when `id` is not the
    /// probe in flight for `key` (the proxy was dropped, recreated or readdressed meanwhile,
    /// or the schedule cleared): that result is about a schedule entry that no longer exists,
    /// and must not be recorded.
    pub fn finished(&mut self, key: &ProxyKey, id: ProbeId, now: Moment) -> Option<Thresholds> {
        let entry = self
            .entries
            .get_mut(key)
            .filter(|entry| entry.in_flight == Some(id))?;
        entry.in_flight = None;
        if entry.slot < now {
            self.queue.remove(&(entry.slot, key.clone()));
            entry.slot = next_slot(entry.slot, entry.interval, now);
            self.queue.insert((entry.slot, key.clone()));
        }
        Some(entry.thresholds)
    }

    /// The earliest slot of any proxy, in flight or not; `None` when nothing is scheduled.
    /// Within [`LAUNCH_WINDOW`] of the `now` of the last [`ProbeSchedule::due`] only when
    /// probes were left waiting for permits.
    pub fn next_wakeup(&self) -> Option<Moment> {
        self.queue.first().map(|(slot, _)| *slot)
    }

    /// Forgets every proxy (leadership was lost) and returns their keys in order, for the
    /// shell to drop their metric series. Probes still in flight then free nothing.
    pub fn clear(&mut self) -> Vec<ProxyKey> {
        self.queue.clear();
        std::mem::take(&mut self.entries).into_keys().collect()
    }

    /// Whether no proxy is scheduled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many proxies are scheduled.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The next slot of the proxy under `key`, if it is scheduled.
    pub fn slot(&self, key: &ProxyKey) -> Option<Moment> {
        self.entries.get(key).map(|entry| entry.slot)
    }

    /// Whether the probe of the proxy under `key` is in flight.
    pub fn in_flight(&self, key: &ProxyKey) -> bool {
        self.entries
            .get(key)
            .is_some_and(|entry| entry.in_flight.is_some())
    }

    /// Where in its interval the proxy under `key` gets its first probe, when it has a
    /// verdict: a hash of the key and the salt.
    fn spread(&self, key: &ProxyKey) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.salt.hash(&mut hasher);
        key.hash(&mut hasher);
        hasher.finish()
    }
}

/// How far ahead of its slot a probe may start, so that probes whose slots are close start
/// together: [`ProbeSchedule::due`] at the earliest slot also starts every probe due within
/// this window after it.
///
/// Each wake-up of the prober costs about as much CPU as a probe's own work (a context
/// switch, the I/O driver, and on a VM an exit from idle), and a probe's connections,
/// tunnels and handshakes are further wake-ups; probes that start together share them.
/// Measured with real squids, probes spread evenly cost about twice the CPU of probes
/// started in batches (docs/benchmarks.md, health probing). 100 ms batches a fleet of
/// 10 000 at 30 s into about 33 probes each, ten times a second, and never moves a probe by
/// more than a tenth of the shortest interval; the grid, and so the mean period, stay exact.
pub const LAUNCH_WINDOW: Duration = Duration::from_millis(100);

/// The first slot of the grid `scheduled + k × interval` (k ≥ 1) that is after `now`. A zero
/// interval counts as one nanosecond, so the answer is always after `now`.
pub fn next_slot(scheduled: Moment, interval: Duration, now: Moment) -> Moment {
    let interval = interval.max(Duration::from_nanos(1));
    let behind = now.saturating_since(scheduled).as_nanos();
    let steps = behind / interval.as_nanos() + 1;
    let ahead = interval
        .as_nanos()
        .saturating_mul(steps)
        .try_into()
        .map_or(Duration::MAX, Duration::from_nanos);
    scheduled + ahead
}
