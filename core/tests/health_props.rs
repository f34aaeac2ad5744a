//! Properties of the health state machine, with simulated time.
//!
//! Proptest generates sequences of [`Step`]s for one proxy (probe results, some of whose
//! reports the shell fails to deliver, time passing, a delete and recreate, a replaced
//! machine, scheduling passes that prune) and checks the book after every step against a
//! reference model: the results since the state last started over, and the verdict last
//! delivered. Then: an hour of probes reports a bounded number of times, nothing survives a
//! new UID or host, and the same inputs give the same outputs.
//!
//! Failing cases are saved under `core/proptest-regressions/health_props.txt`: commit that
//! file. `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use jiff::{SignedDuration, Timestamp};
use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::HealthVerdict;
use proxy_core::ProxyKey;
use proxy_core::health::{
    HealthBook, LATENCY_RUN, Probe, Report, ReportReason, Target, Thresholds,
};
use proxy_core::testing::{NAME, NAMESPACE, T0, at};

/// Something that happens to the one proxy under test.
#[derive(Clone, Debug)]
enum Step {
    /// A probe result, one second after the previous step. `deliver` is whether the shell's
    /// send of the report, if there is one, succeeds.
    Probe {
        ok: bool,
        latency_ms: u32,
        deliver: bool,
    },
    /// Time passes.
    Tick { secs: u16 },
    /// The proxy is deleted and recreated under the same name: a new UID.
    Recreate,
    /// The machine is replaced: a new address.
    Move,
    /// A scheduling pass. `probeable` is whether the proxy still has an address.
    Prune { probeable: bool },
}

fn latency() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..=100, 0u32..=10_000]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (any::<bool>(), latency(), prop::bool::weighted(0.8))
            .prop_map(|(ok, latency_ms, deliver)| Step::Probe { ok, latency_ms, deliver }),
        4 => (0u16..=120).prop_map(|secs| Step::Tick { secs }),
        1 => Just(Step::Recreate),
        1 => Just(Step::Move),
        2 => prop::bool::weighted(0.8).prop_map(|probeable| Step::Prune { probeable }),
    ]
}

fn thresholds() -> impl Strategy<Value = (u32, u32)> {
    (1u32..=5, 1u32..=5)
}

fn key() -> ProxyKey {
    ProxyKey::new(NAMESPACE, NAME)
}

/// The simulated world around the book: the clock and the proxy's identity.
#[derive(Debug)]
struct World {
    now: Timestamp,
    uid: u32,
    host: u32,
}

impl World {
    fn new() -> Self {
        Self {
            now: at(T0),
            uid: 0,
            host: 0,
        }
    }

    fn target(&self) -> Target {
        Target {
            uid: format!("uid-{}", self.uid),
            host: format!("10.0.{}.7", self.host),
            since: None,
        }
    }

    fn advance(&mut self, secs: i64) {
        self.now += SignedDuration::from_secs(secs);
    }

    /// Applies `step` to the world and the book, as the shell would, and returns the report
    /// the step produced, if any.
    fn apply(
        &mut self,
        book: &mut HealthBook,
        step: &Step,
        thresholds: Thresholds,
    ) -> Option<Report> {
        match *step {
            Step::Probe {
                ok,
                latency_ms,
                deliver,
            } => {
                self.advance(1);
                let probe = Probe {
                    ok,
                    latency_ms,
                    at: self.now,
                    failure: None,
                    egress: None,
                };
                let report = book.record(&key(), &self.target(), probe, thresholds);
                if let (true, Some(report)) = (deliver, &report) {
                    assert!(book.delivered(report));
                }
                report
            }
            Step::Tick { secs } => {
                self.advance(i64::from(secs));
                None
            }
            Step::Recreate => {
                self.uid += 1;
                None
            }
            Step::Move => {
                self.host += 1;
                None
            }
            Step::Prune { probeable } => {
                let live = self.target();
                let pruned =
                    book.prune(|key_, target| probeable && *key_ == key() && *target == live);
                assert!(pruned.iter().all(|pruned| *pruned == key()));
                None
            }
        }
    }
}

/// The reference model: what the book must know about the current target.
#[derive(Debug, Default)]
struct Model {
    /// Every result since the state last started over.
    results: Vec<bool>,
    /// The verdict last delivered.
    delivered: Option<HealthVerdict>,
    /// Passing probes in a row whose latency moved from the delivered one, since the last
    /// delivery.
    moved: u32,
}

impl Model {
    /// How many of the last results equal the last one.
    fn run(&self) -> u32 {
        let last = self.results.last().copied();
        let run = self
            .results
            .iter()
            .rev()
            .take_while(|result| Some(**result) == last)
            .count();
        u32::try_from(run).unwrap()
    }

    /// The report the rule asks for after `probe` left the verdict at `healthy`,
    /// counting the probe's latency in the run of moved latencies first.
    fn expected_reason(&mut self, probe: &Probe, healthy: bool) -> Option<ReportReason> {
        let Some(delivered) = &self.delivered else {
            return Some(ReportReason::First);
        };
        let change = f64::from(delivered.latency_ms.abs_diff(probe.latency_ms));
        let moved = change > f64::max(20.0, 0.5 * f64::from(delivered.latency_ms));
        self.moved = if probe.ok && healthy && delivered.healthy && moved {
            self.moved + 1
        } else {
            0
        };
        if delivered.healthy != healthy {
            return Some(ReportReason::VerdictChanged);
        }
        let minute_over =
            probe.at.duration_since(delivered.probed_at) >= SignedDuration::from_secs(60);
        (healthy && self.moved >= LATENCY_RUN && minute_over).then_some(ReportReason::Latency)
    }
}

proptest! {
    #![proptest_config(regressions::config("health_props", None))]

    /// After every step the book agrees with the model: the counters are the last run, a
    /// verdict flips exactly when a run reaches its threshold (never before, never later),
    /// reports follow the emission rule against the verdict last *delivered*, and the
    /// reconciler sees exactly what was delivered.
    #[test]
    fn the_book_follows_the_reference_model(
        steps in vec(step(), 1..200),
        (failure, success) in thresholds(),
    ) {
        let thresholds = Thresholds::new(failure, success);
        let mut world = World::new();
        let mut book = HealthBook::new();
        let mut model = Model::default();
        for step in &steps {
            let before = book
                .get(&key())
                .filter(|state| *state.target() == world.target())
                .and_then(|state| state.verdict());
            let report = world.apply(&mut book, step, thresholds);
            let target = world.target();
            match *step {
                Step::Probe { ok, latency_ms, deliver } => {
                    model.results.push(ok);
                    let run = model.run();
                    let state = book.get(&key()).unwrap();
                    prop_assert_eq!(state.target(), &target);
                    let counters = if ok { (run, 0) } else { (0, run) };
                    prop_assert_eq!((state.successes(), state.failures()), counters);

                    let healthy = state.verdict().unwrap();
                    let threshold = if ok { success } else { failure };
                    match before {
                        None => prop_assert_eq!(healthy, ok, "the first result decides"),
                        Some(before) if before != healthy => {
                            prop_assert_eq!(healthy, ok, "flips towards the last result");
                            prop_assert_eq!(run, threshold, "flips exactly at the threshold");
                        }
                        Some(_) => {}
                    }
                    if run >= threshold {
                        prop_assert_eq!(healthy, ok, "a full run decides");
                    }

                    let probe = Probe { ok, latency_ms, at: world.now, failure: None, egress: None};
                    let expected = model.expected_reason(&probe, healthy).map(|reason| Report {
                        key: key(),
                        uid: target.uid.clone(),
                        reason,
                        verdict: HealthVerdict {
                            host: target.host.clone(),
                            healthy,
                            latency_ms,
                            probed_at: probe.at,
                            failure: None,
                            egress_ip: None,
                        },
                    });
                    prop_assert_eq!(&report, &expected);
                    if let (true, Some(report)) = (deliver, report) {
                        model.delivered = Some(report.verdict);
                        model.moved = 0;
                    }
                }
                Step::Tick { .. } => {}
                Step::Recreate | Step::Move | Step::Prune { probeable: false } => {
                    model = Model::default();
                }
                Step::Prune { probeable: true } => {
                    let state = book.get(&key());
                    prop_assert!(state.is_none_or(|state| *state.target() == target));
                }
            }
            let seen = book
                .reported(&key(), &target.uid)
                .filter(|verdict| verdict.host == target.host);
            prop_assert_eq!(seen, model.delivered.as_ref());
        }
    }

    /// A healthy proxy whose latency wanders anywhere in a band (40 <-> 61 ms among them),
    /// probed every `interval` seconds for an hour, is reported at most 61 times: the first
    /// result and at most one latency change a minute. In general, an hour holds at most 60
    /// latency reports, each a minute or more after the report before it, plus the first
    /// report and one per verdict change.
    #[test]
    fn an_hour_of_probes_reports_at_most_once_a_minute_plus_flips(
        interval in 1i64..=30,
        (low, high) in prop_oneof![
            Just((40u32, 61u32)),
            (0u32..=300, 0u32..=300).prop_map(|(low, width)| (low, low + width)),
        ],
        noise in vec(any::<u32>(), 3600),
        failure_rate in prop_oneof![Just(0.0), 0.0..0.3],
        coins in vec(0.0..1.0, 3600),
        (failure, success) in thresholds(),
    ) {
        let thresholds = Thresholds::new(failure, success);
        let mut book = HealthBook::new();
        let target = World::new().target();
        let mut reports = Vec::new();
        for n in 0..3600 / interval {
            let index = usize::try_from(n).unwrap();
            let probe = Probe {
                ok: coins[index] >= failure_rate,
                latency_ms: low + noise[index] % (high - low + 1),
                at: at(T0) + SignedDuration::from_secs(n * interval),
                failure: None,
                egress: None,
            };
            if let Some(report) = book.record(&key(), &target, probe, thresholds) {
                prop_assert!(book.delivered(&report));
                reports.push(report);
            }
        }

        let count = |reason| reports.iter().filter(|report| report.reason == reason).count();
        let (first, changes, latency) = (
            count(ReportReason::First),
            count(ReportReason::VerdictChanged),
            count(ReportReason::Latency),
        );
        prop_assert_eq!(first, 1);
        prop_assert!(latency <= 60, "{} latency reports", latency);
        prop_assert!(reports.len() <= 61 + changes);
        if failure_rate == 0.0 {
            prop_assert_eq!(changes, 0);
            prop_assert!(reports.len() <= 61);
        }
        for pair in reports.windows(2) {
            if pair[1].reason == ReportReason::Latency {
                let gap = pair[1].verdict.probed_at.duration_since(pair[0].verdict.probed_at);
                prop_assert!(gap >= SignedDuration::from_secs(60), "{:?}", pair);
            }
        }
    }

    /// Whatever happened to a proxy, its first probe under a new UID (deleted and
    /// recreated) or at a new address (machine replaced) gives exactly what it gives in an
    /// empty book.
    #[test]
    fn nothing_survives_a_new_uid_or_host(
        steps in vec(step(), 0..100),
        (failure, success) in thresholds(),
        new_uid in any::<bool>(),
        ok in any::<bool>(),
        latency_ms in latency(),
    ) {
        let thresholds = Thresholds::new(failure, success);
        let mut world = World::new();
        let mut book = HealthBook::new();
        for step in &steps {
            let _report = world.apply(&mut book, step, thresholds);
        }
        let step = if new_uid { Step::Recreate } else { Step::Move };
        prop_assert_eq!(world.apply(&mut book, &step, thresholds), None);

        let probe = Probe { ok, latency_ms, at: world.now, failure: None, egress: None};
        let mut fresh = HealthBook::new();
        let expected = fresh.record(&key(), &world.target(), probe, thresholds);
        let report = book.record(&key(), &world.target(), probe, thresholds);
        prop_assert_eq!(report.as_ref().map(|report| report.reason), Some(ReportReason::First));
        prop_assert_eq!(report, expected);
        prop_assert_eq!(book, fresh);
    }

    /// The same steps give the same reports and the same book.
    #[test]
    fn same_inputs_same_outputs(
        steps in vec(step(), 0..200),
        (failure, success) in thresholds(),
    ) {
        let thresholds = Thresholds::new(failure, success);
        let run = || {
            let mut world = World::new();
            let mut book = HealthBook::new();
            let reports: Vec<_> = steps
                .iter()
                .map(|step| world.apply(&mut book, step, thresholds))
                .collect();
            (reports, book)
        };
        prop_assert_eq!(run(), run());
    }
}
