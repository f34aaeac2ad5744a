//! The per-proxy health state machine: probe results in, [`HealthVerdict`]s out.
//!
//! The shell probes; this module decides what the probes mean and when the controller hears
//! about it. A [`HealthBook`] holds one [`ProxyHealth`] per proxy: the consecutive successes
//! and failures, the current verdict, and the verdict last delivered to the controller. It
//! has no clock: every time it uses is the time a probe ran, given with the [`Probe`].
//!
//! # Driving it
//!
//! The leader's shell owns one book and, for each probe result of each proxy:
//!
//! 1. calls [`HealthBook::record`], which may return a [`Report`];
//! 2. tries to deliver the report (a non-blocking send that triggers a reconcile of the
//!    proxy);
//! 3. when the send succeeded, calls [`HealthBook::delivered`] with the report, before
//!    recording the next result of that proxy. When it failed, the shell does nothing: the
//!    book still holds the previous report as the controller's view, so the next probe
//!    reports again.
//!
//! A reconcile reads [`HealthBook::reported`] into
//! [`Observed::health`](crate::Observed::health): the verdict last delivered, never one that
//! was dropped on the way. Every refresh of the probe schedule
//! ([`ProbeSchedule::refresh`](crate::probe_schedule::ProbeSchedule::refresh)) calls
//! [`HealthBook::prune`] with the proxies it can probe ([`Target::of`]). After a start or a
//! leader handover, before the first [`HealthBook::reported`] of each object (before its
//! reconcile can write), the shell calls [`HealthBook::seed_from_status`], which seeds the
//! verdict the status already shows ([`reported_in_status`]); the schedule's refresh does too,
//! for each proxy it takes in. [`HealthBook::first_probe_in`] says when a proxy new to the
//! schedule gets its first probe: at once when it has no verdict, spread over one interval
//! when it has one.
//!
//! # Why the rules are what they are
//!
//! - **The first result decides the first verdict.** `failureThreshold` and
//!   `successThreshold` guard transitions ("turn a healthy proxy unhealthy", "turn an
//!   unhealthy proxy healthy again"); before the first result there is nothing to guard. A
//!   new proxy whose first probe passes is leasable after that probe instead of after
//!   `successThreshold` of them, and one whose first probe fails says so at once instead of
//!   showing "awaiting probe" for `failureThreshold` intervals.
//! - **...but a machine not up yet gives none.** A new machine (a new Managed proxy's, or a
//!   replacement's) whose port refuses the connection is still starting: a VM shows its
//!   address before its cloud-init has started squid. Such refusals decide no first verdict
//!   until `failureThreshold` of them come in a row: the proxy says "awaiting probe" until
//!   its first probe after its machine is up, rather than `Unhealthy` for one probe (issue
//!   50). Any other failure, and every failure of an External proxy, decides at once.
//! - **A verdict flips exactly when the opposite run reaches its threshold**: a success
//!   resets the failures and a failure resets the successes, so only consecutive results
//!   count. The comparison is "at least", so a threshold lowered below a run already in
//!   progress flips on the next result of that run rather than never.
//! - **Reports are transitions, not probes.** Every report becomes a status write, and a
//!   fleet probed every few seconds would otherwise write status continuously. A report goes
//!   out on the first result, when the verdict differs from the one last delivered (a flip,
//!   or a flip whose delivery failed), and, while healthy, when [`LATENCY_RUN`] passing
//!   probes in a row saw the latency moved by more than [`LATENCY_FLOOR_MS`] and more than
//!   half of the last reported latency, at least [`LATENCY_REPORT_INTERVAL`] after the last
//!   report, and on a good probe that saw another egress address (`healthCheck.egressURL`)
//!   than the last delivered one: the status shows it. Metrics carry every probe.
//! - **The status latency is coarse on purpose.** Every report is a status write, and the
//!   status latency is what the lease book orders by, where a few milliseconds mean nothing.
//!   A probe's latency jitters (a slow TLS handshake, a busy origin): compared probe by
//!   probe, a fleet of 10 000 proxies wrote 60 to 160 statuses a second of pure jitter, for
//!   nobody. Only a latency that stays moved for [`LATENCY_RUN`] probes is news: a change
//!   of the proxy, not of one probe. The metrics keep every probe's latency.
//! - **The latency rule has a floor and a rate limit.** The bare "latency changed by more
//!   than 50%" rule is undefined at 0 ms and fires on every millisecond of jitter at low
//!   latencies. Read against the previous probe, it writes status forever for a proxy
//!   jittering between 40 and 61 ms (40 -> 61 is +52%, on every other probe). Comparing
//!   against the last *reported* latency absorbs that jitter after one report (from 61 ms,
//!   40 ms is not a 50% change), and the once-a-minute limit bounds the worst case (30 <->
//!   61 ms moves more than half in both directions) to 60 latency reports an hour, whatever
//!   the sequence. The run of [`LATENCY_RUN`] moved probes makes alternating jitter silent
//!   altogether: every other probe is back near the reported latency, and ends the run.
//! - **Latency reports only while healthy, and only from a passing probe.** A proxy still
//!   reported unhealthy, in a success run below `successThreshold`, must not produce
//!   latency-only reports (the seed's emission-rule bug), and a failed probe's duration is a
//!   timeout, not the proxy's latency.
//! - **Markers move only on delivery.** The shell drops a report when the controller's
//!   queue is full rather than stall the probing. Had the "last reported" markers moved when
//!   the report was made, a dropped flip would never reach the controller. Here
//!   [`HealthBook::record`] never touches them; only [`HealthBook::delivered`] does, so a
//!   dropped report goes out again with the next probe, and a forgotten acknowledgement
//!   makes the book repeat itself rather than fall silent.
//! - **A new UID or a new host is a new proxy.** A proxy deleted and recreated under the
//!   same name, or whose machine was replaced (a new address), starts with no counters and
//!   no verdict: nothing it inherited would describe it.
//! - **Leader handover seeds the verdict with zero counters.** The new leader starts with
//!   an empty book. Seeding the verdict from status keeps a healthy proxy from flapping to
//!   "awaiting probe"; zero counters mean a real transition still needs a full threshold
//!   run.
//! - **Proxies with no probeable host are pruned**, so the book holds only what is probed,
//!   and a replacement machine always starts fresh.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use jiff::Timestamp;
use proxy_crd::{HealthCheck, ProxySpec, ProxyStatus};

use crate::conditions::{self, FALSE, HEALTHY, TRUE};
use crate::key::ProxyKey;
use crate::observed::HealthVerdict;
use crate::probe_failure::ProbeFailure;

/// A latency change of this many milliseconds or less is never reported.
pub const LATENCY_FLOOR_MS: u32 = 20;

/// The least time between a report and a latency-only report of the same proxy.
pub const LATENCY_REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// How many passing probes in a row must see the latency moved (from the one last
/// delivered) before a latency-only report goes out: one slow probe is jitter, not news.
pub const LATENCY_RUN: u32 = 5;

/// What is probed: one object, at one address, since one moment. State about another
/// target says nothing about this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `metadata.uid`: a proxy deleted and recreated under the same name is another proxy.
    pub uid: String,
    /// The address probed: a replaced machine is another proxy.
    pub host: String,
    /// Since when the machine at that address serves: the `Provisioned` condition's
    /// `lastTransitionTime` while it is `True` ([`provisioned_since`]). A replacement that
    /// reuses its predecessor's address (a static IP, a recycled Pod IP) is another machine,
    /// and starts with no verdict. `None` for targets recorded before it existed.
    pub since: Option<String>,
}

impl Target {
    /// The target of the proxy with `uid`, `spec` and `status`, or `None` when there is
    /// nothing to probe yet ([`ProxySpec::effective_host`]).
    pub fn of(uid: &str, spec: &ProxySpec, status: Option<&ProxyStatus>) -> Option<Self> {
        spec.effective_host(status).map(|host| Self {
            uid: uid.to_owned(),
            host: host.to_owned(),
            since: machine_since(spec, status).map(str::to_owned),
        })
    }

    /// Whether this is the object `uid` at `host`, serving there since `since`.
    pub fn is(&self, uid: &str, host: &str, since: Option<&str>) -> bool {
        self.uid == uid && self.host == host && self.since.as_deref() == since
    }
}

/// Since when the machine of a Managed proxy serves ([`provisioned_since`]); `None` for an
/// External proxy, whose endpoint is its identity (it is probed from its spec before any
/// status, and its first verdict must count).
pub fn machine_since<'a>(spec: &ProxySpec, status: Option<&'a ProxyStatus>) -> Option<&'a str> {
    match spec.mode {
        proxy_crd::Mode::Managed => status.and_then(provisioned_since),
        proxy_crd::Mode::External => None,
    }
}

/// Since when the machine `status` publishes serves: the `Provisioned` condition's
/// `lastTransitionTime` while it is `True`.
pub fn provisioned_since(status: &ProxyStatus) -> Option<&str> {
    crate::conditions::find(status, crate::conditions::PROVISIONED)
        .filter(|condition| condition.status == crate::conditions::TRUE)
        .map(|condition| condition.last_transition_time.as_str())
}

/// How many consecutive results flip a verdict. Both are at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    failure: u32,
    success: u32,
}

impl Thresholds {
    /// `failure` consecutive failures turn a healthy proxy unhealthy; `success` consecutive
    /// successes turn an unhealthy proxy healthy. A 0 counts as 1.
    pub fn new(failure: u32, success: u32) -> Self {
        Self {
            failure: failure.max(1),
            success: success.max(1),
        }
    }

    /// The thresholds of a health check. Values below 1, which the CRD rejects but an
    /// object that never went through the API server may hold, count as 1.
    pub fn of(check: &HealthCheck) -> Self {
        let at_least_one = |value: i32| u32::try_from(value).unwrap_or(1);
        Self::new(
            at_least_one(check.failure_threshold),
            at_least_one(check.success_threshold),
        )
    }
}

/// One probe result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Whether the probe passed.
    pub ok: bool,
    /// How long the probe took, in milliseconds; for a failed probe, until it failed.
    pub latency_ms: u32,
    /// When the probe ran. This is the book's only clock.
    pub at: Timestamp,
    /// Why it failed, when it failed and the prober could tell; `None` when it passed.
    pub failure: Option<ProbeFailure>,
    /// The address the health check's `egressURL` saw the probe come from; `None` when the
    /// check has no `egressURL`, the probe failed, or the answer was no address.
    pub egress: Option<IpAddr>,
}

/// Why a [`Report`] goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReportReason {
    /// Nothing was delivered for this proxy yet: the first verdict.
    First,
    /// The verdict differs from the one last delivered.
    VerdictChanged,
    /// Still healthy, but the latency moved a lot since the last report.
    Latency,
    /// A good probe saw another egress address than the one last delivered.
    Egress,
}

/// A verdict for the controller. Deliver it, then acknowledge it with
/// [`HealthBook::delivered`]; a report that was not delivered is simply dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "deliver the report, then call HealthBook::delivered"]
pub struct Report {
    /// The proxy it is about.
    pub key: ProxyKey,
    /// The UID of the object that was probed.
    pub uid: String,
    /// Why it goes out.
    pub reason: ReportReason,
    /// The verdict, with the latency and time of the probe that produced it.
    pub verdict: HealthVerdict,
}

/// The health state of one proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyHealth {
    target: Target,
    successes: u32,
    failures: u32,
    verdict: Option<bool>,
    reported: Option<HealthVerdict>,
    latency_run: u32,
}

impl ProxyHealth {
    fn fresh(target: Target) -> Self {
        Self {
            target,
            successes: 0,
            failures: 0,
            verdict: None,
            reported: None,
            latency_run: 0,
        }
    }

    /// What is probed.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Consecutive passing probes, up to the last one.
    pub fn successes(&self) -> u32 {
        self.successes
    }

    /// Consecutive failed probes, up to the last one.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether the proxy is healthy, after the thresholds; `None` before the first result.
    pub fn verdict(&self) -> Option<bool> {
        self.verdict
    }

    /// The verdict last delivered to the controller.
    pub fn reported(&self) -> Option<&HealthVerdict> {
        self.reported.as_ref()
    }

    /// Consecutive passing probes of a proxy healthy and reported healthy, up to the last
    /// one, whose latency moved from the one last delivered (by more than
    /// [`LATENCY_FLOOR_MS`] and half of it); 0 after a delivery.
    pub fn latency_run(&self) -> u32 {
        self.latency_run
    }

    /// Counts whether `probe`, which left the verdict at `verdict`, saw the latency moved
    /// from the one last delivered.
    fn observe_latency(&mut self, probe: &Probe, verdict: bool) {
        let moved = probe.ok
            && verdict
            && self.reported.as_ref().is_some_and(|reported| {
                reported.healthy && latency_moved(reported.latency_ms, probe.latency_ms)
            });
        self.latency_run = if moved {
            self.latency_run.saturating_add(1)
        } else {
            0
        };
    }

    /// Counts `probe` and returns the verdict that follows; `None` while there is none yet.
    fn observe(&mut self, probe: &Probe, thresholds: Thresholds) -> Option<bool> {
        if probe.ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let verdict = match self.verdict {
            // A machine whose port refuses the probe is not up yet (its squid still starts:
            // a VM shows its address before its cloud-init ran): no first verdict, until
            // a probe reaches it or `failureThreshold` refusals in a row.
            None if self.still_starting(probe) && self.failures < thresholds.failure => {
                return None;
            }
            None => probe.ok,
            Some(true) => self.failures < thresholds.failure,
            Some(false) => self.successes >= thresholds.success,
        };
        self.verdict = Some(verdict);
        Some(verdict)
    }

    /// Whether `probe` found a machine that is not up yet: a new machine (a Managed proxy's,
    /// [`Target::since`]) refused the connection. An External proxy's endpoint that refuses
    /// is as down as it looks.
    fn still_starting(&self, probe: &Probe) -> bool {
        self.target.since.is_some() && probe.failure == Some(ProbeFailure::ConnectionRefused)
    }

    /// Why `probe`, which left the verdict at `verdict`, must be reported, if it must.
    fn due(&self, probe: &Probe, verdict: bool) -> Option<ReportReason> {
        match &self.reported {
            None => Some(ReportReason::First),
            Some(reported) if reported.healthy != verdict => Some(ReportReason::VerdictChanged),
            Some(reported)
                if probe.egress.is_some_and(|egress| {
                    reported.egress_ip.as_deref() != Some(egress.to_string().as_str())
                }) =>
            {
                Some(ReportReason::Egress)
            }
            Some(reported)
                if verdict
                    && self.latency_run >= LATENCY_RUN
                    && reported
                        .probed_at
                        .checked_add(LATENCY_REPORT_INTERVAL)
                        .is_ok_and(|allowed| probe.at >= allowed) =>
            {
                Some(ReportReason::Latency)
            }
            Some(_) => None,
        }
    }
}

/// Whether a latency moving from `reported` to `latest` is worth a report: by more than
/// [`LATENCY_FLOOR_MS`] and by more than half of `reported`.
fn latency_moved(reported: u32, latest: u32) -> bool {
    let change = reported.abs_diff(latest);
    change > LATENCY_FLOOR_MS && u64::from(change) * 2 > u64::from(reported)
}

/// The health state of every probed proxy, by key. See the [module docs](self) for how to
/// drive it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthBook {
    proxies: BTreeMap<ProxyKey, ProxyHealth>,
}

impl HealthBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one probe result of `target` and returns the report the controller must get,
    /// if any. A state about another UID or host under the same key is discarded first.
    ///
    /// The verdict last delivered does not change here: only [`HealthBook::delivered`]
    /// moves it, so a report that could not be delivered goes out again on the next probe.
    #[must_use = "deliver the report, then call HealthBook::delivered"]
    pub fn record(
        &mut self,
        key: &ProxyKey,
        target: &Target,
        probe: Probe,
        thresholds: Thresholds,
    ) -> Option<Report> {
        let state = self
            .proxies
            .entry(key.clone())
            .or_insert_with(|| ProxyHealth::fresh(target.clone()));
        if state.target != *target {
            *state = ProxyHealth::fresh(target.clone());
        }
        let verdict = state.observe(&probe, thresholds)?;
        state.observe_latency(&probe, verdict);
        let reason = state.due(&probe, verdict)?;
        // A probe that learned nothing about the egress keeps the last known address.
        let egress_ip = probe.egress.map(|egress| egress.to_string()).or_else(|| {
            state
                .reported
                .as_ref()
                .and_then(|reported| reported.egress_ip.clone())
        });
        Some(Report {
            key: key.clone(),
            uid: target.uid.clone(),
            reason,
            verdict: HealthVerdict {
                host: target.host.clone(),
                healthy: verdict,
                latency_ms: probe.latency_ms,
                probed_at: probe.at,
                failure: probe.failure.filter(|_| !probe.ok),
                egress_ip,
            },
        })
    }

    /// Records that `report` reached the controller: it becomes the verdict last delivered.
    /// Returns `false`, changing nothing, when the book no longer holds the target the report
    /// is about (the proxy was pruned, recreated or moved since).
    pub fn delivered(&mut self, report: &Report) -> bool {
        match self.proxies.get_mut(&report.key) {
            Some(state)
                if state.target.uid == report.uid && state.target.host == report.verdict.host =>
            {
                state.reported = Some(report.verdict.clone());
                state.latency_run = 0;
                true
            }
            Some(_) | None => false,
        }
    }

    /// Seeds the state of a proxy the book does not hold yet, after a leader handover, from
    /// the verdict its status shows ([`reported_in_status`]): that verdict as both the
    /// current and the delivered one, with zero counters. Returns `false`, changing nothing,
    /// when the book already holds `key`.
    ///
    /// The delivered verdict is what [`HealthBook::reported`] gives the reconciler, so the
    /// status keeps its `Healthy` condition instead of falling back to "awaiting probe", and
    /// the latency rule measures from the status's latency and time.
    /// `since` is when the machine it is about became provisioned ([`Target::since`]).
    pub fn seed(
        &mut self,
        key: &ProxyKey,
        uid: &str,
        since: Option<String>,
        reported: HealthVerdict,
    ) -> bool {
        if self.proxies.contains_key(key) {
            return false;
        }
        let target = Target {
            uid: uid.to_owned(),
            host: reported.host.clone(),
            since,
        };
        let state = ProxyHealth {
            verdict: Some(reported.healthy),
            reported: Some(reported),
            ..ProxyHealth::fresh(target)
        };
        self.proxies.insert(key.clone(), state);
        true
    }

    /// Seeds `key` from the verdict `status` shows ([`reported_in_status`]) when the book
    /// does not hold `key` yet, as [`HealthBook::seed`] does; returns whether it seeded.
    ///
    /// Call it before the first [`HealthBook::reported`] for an object after a start or a
    /// leader handover, that is, before its reconcile can write: a reconcile that finds no
    /// verdict writes `Healthy=Unknown` ("awaiting probe"), and a Ready proxy would leave
    /// `Ready`, and the lease book, until its next probe.
    pub fn seed_from_status(
        &mut self,
        key: &ProxyKey,
        uid: &str,
        spec: &ProxySpec,
        status: &ProxyStatus,
    ) -> bool {
        !self.proxies.contains_key(key)
            && reported_in_status(status).is_some_and(|verdict| {
                let since = machine_since(spec, Some(status)).map(str::to_owned);
                self.seed(key, uid, since, verdict)
            })
    }

    /// When the first probe of `target` under `key` is due, counted from the moment the
    /// schedule takes it in. `spread` places the proxy in the interval (the schedule hashes
    /// the key with a salt): `spread % 10_000` ten-thousandths of `interval`.
    ///
    /// - The book holds a verdict for `target` (seeded from status after a start or a
    ///   handover, or probed before): the proxy is served on that verdict meanwhile, so its
    ///   first probe is spread over one interval, and a restart does not fire every probe of
    ///   the fleet at once.
    /// - It holds none (a new proxy, a replaced machine): at once. Nothing waits for a
    ///   spread here, only the proxy, which cannot be leased before its first verdict.
    pub fn first_probe_in(
        &self,
        key: &ProxyKey,
        target: &Target,
        interval: Duration,
        spread: u64,
    ) -> Duration {
        let has_verdict = self
            .proxies
            .get(key)
            .is_some_and(|state| state.target == *target && state.verdict.is_some());
        if !has_verdict {
            return Duration::ZERO;
        }
        let place = u32::try_from(spread % 10_000).unwrap_or(0);
        interval.saturating_mul(place) / 10_000
    }

    /// Drops every state for which `is_live(key, target)` is false (its proxy is gone, can
    /// no longer be probed, or is probed at another target now), and returns their keys in
    /// order (for the shell to drop their metric series).
    pub fn prune(&mut self, is_live: impl Fn(&ProxyKey, &Target) -> bool) -> Vec<ProxyKey> {
        self.proxies
            .extract_if(.., |key, state| !is_live(key, &state.target))
            .map(|(key, _)| key)
            .collect()
    }

    /// The verdict last delivered for the object `uid` under `key`: the value of
    /// [`Observed::health`](crate::Observed::health) for its reconcile.
    pub fn reported(&self, key: &ProxyKey, uid: &str) -> Option<&HealthVerdict> {
        self.proxies
            .get(key)
            .filter(|state| state.target.uid == uid)
            .and_then(ProxyHealth::reported)
    }

    /// The state of the proxy under `key`, if the book holds one.
    pub fn get(&self, key: &ProxyKey) -> Option<&ProxyHealth> {
        self.proxies.get(key)
    }

    /// Drops the state of `key` (the Proxy is gone); returns whether the book held one.
    pub fn forget(&mut self, key: &ProxyKey) -> bool {
        self.proxies.remove(key).is_some()
    }

    /// How many proxies the book holds a state for.
    pub fn tracked(&self) -> usize {
        self.proxies.len()
    }
}

/// The verdict `status` shows, for [`HealthBook::seed`]: `None` unless it has an address, a
/// `Healthy` condition that is `True` or `False`, a latency and a health check time.
pub fn reported_in_status(status: &ProxyStatus) -> Option<HealthVerdict> {
    let healthy = match conditions::find(status, HEALTHY)?.status.as_str() {
        TRUE => true,
        FALSE => false,
        _ => return None,
    };
    Some(HealthVerdict {
        host: status.ip.clone().filter(|ip| !ip.is_empty())?,
        healthy,
        latency_ms: u32::try_from(status.last_probe_latency_ms?).ok()?,
        probed_at: status.last_health_check_time.as_deref()?.parse().ok()?,
        failure: None,
        egress_ip: status.egress_ip.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_a_proxy_drops_its_state_and_only_its() {
        let verdict = |host: &str| HealthVerdict {
            host: host.to_owned(),
            healthy: true,
            latency_ms: 5,
            probed_at: jiff::Timestamp::UNIX_EPOCH,
            failure: None,
            egress_ip: None,
        };
        let (a, b) = (ProxyKey::new("ns", "a"), ProxyKey::new("ns", "b"));
        let mut book = HealthBook::new();
        assert!(book.seed(&a, "uid-a", None, verdict("10.0.0.1")));
        assert!(book.seed(&b, "uid-b", None, verdict("10.0.0.2")));
        assert_eq!(book.tracked(), 2);
        assert!(book.forget(&a));
        assert!(!book.forget(&a), "a second forget finds nothing");
        assert_eq!(book.tracked(), 1);
        assert_eq!(book.reported(&a, "uid-a"), None);
        assert!(book.reported(&b, "uid-b").is_some());
    }

    #[test]
    fn latency_moves_by_more_than_the_floor_and_half_the_reported_value() {
        let cases = [
            // (reported, latest, moved)
            (0, 20, false),
            (0, 21, true),
            (10, 30, false),
            (10, 31, true),
            (40, 61, true),
            (61, 40, false),
            (61, 30, true),
            (30, 61, true),
            (100, 150, false),
            (100, 151, true),
            (100, 49, true),
            (100, 50, false),
            (u32::MAX, 0, true),
        ];
        for (reported, latest, moved) in cases {
            assert_eq!(
                latency_moved(reported, latest),
                moved,
                "{reported} ms -> {latest} ms"
            );
        }
    }

    #[test]
    fn thresholds_below_one_count_as_one() {
        let check = HealthCheck {
            failure_threshold: 0,
            success_threshold: -3,
            ..HealthCheck::default()
        };
        assert_eq!(Thresholds::of(&check), Thresholds::new(1, 1));
        assert_eq!(Thresholds::new(0, 0), Thresholds::new(1, 1));
        let defaults = Thresholds::of(&HealthCheck::default());
        assert_eq!(
            defaults,
            Thresholds::new(
                proxy_crd::DEFAULT_FAILURE_THRESHOLD.unsigned_abs(),
                proxy_crd::DEFAULT_SUCCESS_THRESHOLD.unsigned_abs()
            )
        );
    }
}
