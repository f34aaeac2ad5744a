//! The health state machine, one test per rule: thresholds, the first verdict, the emission
//! rule, delivery, identity resets, seeding after a leader handover, and pruning. Time is
//! simulated: every probe carries its time, counted in seconds from `T0`.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use proxy_core::conditions::{FALSE, TRUE, UNKNOWN};
use proxy_core::health::{
    HealthBook, LATENCY_RUN, Probe, Report, ReportReason, Target, Thresholds, reported_in_status,
};
use proxy_core::testing::{
    EXTERNAL_HOST, NAME, NAMESPACE, T0, UID, at, external_spec, managed_spec, status_of,
};
use proxy_core::{HealthVerdict, ProbeFailure, ProxyKey};
use proxy_crd::{Phase, ProxyStatus};

const IP: &str = "10.0.0.7";
const OTHER_IP: &str = "10.0.0.8";
const OTHER_UID: &str = "0e5c1f7a-3b2d-4f6e-8a91-2c4d6e8f0a1b";

fn key() -> ProxyKey {
    ProxyKey::new(NAMESPACE, NAME)
}

fn target() -> Target {
    target_of(UID, IP)
}

fn target_of(uid: &str, host: &str) -> Target {
    Target {
        uid: uid.to_owned(),
        host: host.to_owned(),
        since: None,
    }
}

/// `secs` seconds after `T0`.
fn t(secs: i64) -> Timestamp {
    at(T0) + SignedDuration::from_secs(secs)
}

fn ok(secs: i64, latency_ms: u32) -> Probe {
    Probe {
        ok: true,
        latency_ms,
        at: t(secs),
        failure: None,
        egress: None,
    }
}

/// A probe that timed out after 5 s.
fn fail(secs: i64) -> Probe {
    Probe {
        ok: false,
        latency_ms: 5_000,
        at: t(secs),
        failure: Some(ProbeFailure::Timeout),
        egress: None,
    }
}

/// The verdict a report of `probe` carries: an unhealthy one names the probe's cause.
fn verdict(healthy: bool, probe: Probe) -> HealthVerdict {
    HealthVerdict {
        host: IP.to_owned(),
        healthy,
        latency_ms: probe.latency_ms,
        probed_at: probe.at,
        failure: if healthy { None } else { probe.failure },
        egress_ip: None,
    }
}

fn report(reason: ReportReason, healthy: bool, probe: Probe) -> Report {
    Report {
        key: key(),
        uid: UID.to_owned(),
        reason,
        verdict: verdict(healthy, probe),
    }
}

/// Records `probe` of [`target`] and, like a shell whose send succeeded, acknowledges the
/// report.
fn deliver(book: &mut HealthBook, probe: Probe, thresholds: Thresholds) -> Option<Report> {
    let report = book.record(&key(), &target(), probe, thresholds);
    if let Some(report) = &report {
        assert!(
            book.delivered(report),
            "{report:?} is about the book's target"
        );
    }
    report
}

/// Feeds `probes` of [`target`], delivering every report, and returns the reports.
fn run(book: &mut HealthBook, probes: &[Probe], thresholds: Thresholds) -> Vec<Report> {
    probes
        .iter()
        .filter_map(|&probe| deliver(book, probe, thresholds))
        .collect()
}

#[test]
fn the_first_result_is_the_first_verdict_and_is_reported() {
    let thresholds = Thresholds::new(3, 2);
    for (probe, healthy) in [(ok(0, 40), true), (fail(0), false)] {
        let mut book = HealthBook::new();
        let first = deliver(&mut book, probe, thresholds);
        assert_eq!(first, Some(report(ReportReason::First, healthy, probe)));
        let state = book.get(&key()).unwrap();
        assert_eq!(state.verdict(), Some(healthy));
        assert_eq!(book.reported(&key(), UID), Some(&verdict(healthy, probe)));
    }
}

/// A probe whose connection the proxy's address refused: nothing listens on its port.
fn refused(secs: i64) -> Probe {
    Probe {
        ok: false,
        latency_ms: 1,
        at: t(secs),
        failure: Some(ProbeFailure::ConnectionRefused),
        egress: None,
    }
}

#[test]
fn a_new_machine_whose_port_refuses_gets_no_verdict_until_it_is_up() {
    // A VM shows its address before its cloud-init started squid: a replacement (or a new
    // Proxy) says "awaiting probe" until its first probe after its machine is up, not
    // Unhealthy for a probe (issue 50). A machine is a target with a `since`.
    let machine = Target {
        since: Some("2026-01-01T00:00:00Z".to_owned()),
        ..target()
    };
    let thresholds = Thresholds::new(3, 1);
    // (the probes, the verdict last reported after them)
    let cases: [(&[Probe], Option<bool>); 5] = [
        (&[refused(0)], None),
        (&[refused(0), refused(5)], None),
        (&[refused(0), refused(5), ok(10, 40)], Some(true)),
        // A machine that never comes up is Unhealthy after the failure threshold.
        (&[refused(0), refused(5), refused(10)], Some(false)),
        // Any other failure decides at once, as before.
        (&[refused(0), fail(5)], Some(false)),
    ];
    for (probes, want) in cases {
        let mut book = HealthBook::new();
        for probe in probes {
            if let Some(report) = book.record(&key(), &machine, *probe, thresholds) {
                assert!(book.delivered(&report));
            }
        }
        let got = book.reported(&key(), UID).map(|v| v.healthy);
        assert_eq!(got, want, "{probes:?}");
    }
    // An External proxy's endpoint that refuses is as down as it looks: at once.
    let mut book = HealthBook::new();
    let first = book.record(&key(), &target(), refused(0), thresholds);
    assert_eq!(first.map(|r| r.verdict.healthy), Some(false));
}

#[test]
fn healthy_turns_unhealthy_exactly_at_the_failure_threshold() {
    for threshold in 1..=4 {
        let mut book = HealthBook::new();
        let thresholds = Thresholds::new(threshold, 1);
        assert!(deliver(&mut book, ok(0, 40), thresholds).is_some());
        for n in 1..threshold {
            assert_eq!(
                deliver(&mut book, fail(i64::from(n)), thresholds),
                None,
                "failure {n} of {threshold}"
            );
            assert_eq!(book.get(&key()).unwrap().verdict(), Some(true));
            assert_eq!(book.get(&key()).unwrap().failures(), n);
        }
        let last = fail(i64::from(threshold));
        assert_eq!(
            deliver(&mut book, last, thresholds),
            Some(report(ReportReason::VerdictChanged, false, last)),
            "failure {threshold} of {threshold}"
        );
        // Further failures change nothing.
        assert_eq!(deliver(&mut book, fail(100), thresholds), None);
    }
}

#[test]
fn unhealthy_turns_healthy_exactly_at_the_success_threshold() {
    for threshold in 1..=4 {
        let mut book = HealthBook::new();
        let thresholds = Thresholds::new(1, threshold);
        assert!(deliver(&mut book, fail(0), thresholds).is_some());
        for n in 1..threshold {
            assert_eq!(
                deliver(&mut book, ok(i64::from(n), 40), thresholds),
                None,
                "success {n} of {threshold}"
            );
            assert_eq!(book.get(&key()).unwrap().verdict(), Some(false));
            assert_eq!(book.get(&key()).unwrap().successes(), n);
        }
        let last = ok(i64::from(threshold), 40);
        assert_eq!(
            deliver(&mut book, last, thresholds),
            Some(report(ReportReason::VerdictChanged, true, last)),
            "success {threshold} of {threshold}"
        );
        assert_eq!(deliver(&mut book, ok(100, 40), thresholds), None);
    }
}

#[test]
fn only_consecutive_results_count() {
    let thresholds = Thresholds::new(3, 3);

    // Healthy: two failures, a success, two failures: never three in a row.
    let mut book = HealthBook::new();
    let probes = [ok(0, 40), fail(1), fail(2), ok(3, 40), fail(4), fail(5)];
    assert_eq!(run(&mut book, &probes, thresholds).len(), 1);
    let state = book.get(&key()).unwrap();
    assert_eq!(
        (state.verdict(), state.successes(), state.failures()),
        (Some(true), 0, 2)
    );
    assert_eq!(
        deliver(&mut book, fail(6), thresholds),
        Some(report(ReportReason::VerdictChanged, false, fail(6)))
    );

    // Unhealthy: two successes, a failure, two successes.
    let mut book = HealthBook::new();
    let probes = [fail(0), ok(1, 40), ok(2, 40), fail(3), ok(4, 40), ok(5, 40)];
    assert_eq!(run(&mut book, &probes, thresholds).len(), 1);
    let state = book.get(&key()).unwrap();
    assert_eq!(
        (state.verdict(), state.successes(), state.failures()),
        (Some(false), 2, 0)
    );
    assert_eq!(
        deliver(&mut book, ok(6, 40), thresholds),
        Some(report(ReportReason::VerdictChanged, true, ok(6, 40)))
    );
}

#[test]
fn a_lowered_threshold_applies_to_the_run_in_progress() {
    let mut book = HealthBook::new();
    let probes = [ok(0, 40), fail(1), fail(2), fail(3)];
    assert_eq!(run(&mut book, &probes, Thresholds::new(5, 1)).len(), 1);
    // failureThreshold edited from 5 to 2 with three failures counted: the next one flips.
    assert_eq!(
        deliver(&mut book, fail(4), Thresholds::new(2, 1)),
        Some(report(ReportReason::VerdictChanged, false, fail(4)))
    );
}

#[test]
fn latency_is_reported_while_healthy_when_it_moves_a_lot_at_most_once_a_minute() {
    let thresholds = Thresholds::new(3, 2);
    // (what, the latency of a healthy report at 0 s, the next probe, whether it is reported)
    let rows = [
        ("same latency, later", 40, ok(600, 40), false),
        ("within the 20 ms floor", 40, ok(120, 60), false),
        ("the floor exactly", 40, ok(120, 20), false),
        ("beyond the floor, within 50%", 100, ok(120, 149), false),
        ("beyond both, 59 s later", 40, ok(59, 100), false),
        ("beyond both, 60 s later", 40, ok(60, 100), true),
        ("beyond both downwards, later", 40, ok(60, 19), true),
        ("beyond 50% of 100, later", 100, ok(120, 151), true),
        ("failed probe below the threshold", 40, fail(600), false),
    ];
    for (what, latency_ms, probe, reported) in rows {
        let mut book = HealthBook::new();
        assert!(deliver(&mut book, ok(0, latency_ms), thresholds).is_some());
        // The probe is the last of a run: the passing probes just before it saw the same.
        if probe.ok {
            for before in [4, 3, 2, 1] {
                let earlier = Probe {
                    at: probe
                        .at
                        .checked_sub(jiff::SignedDuration::from_secs(before))
                        .unwrap(),
                    ..probe
                };
                assert_eq!(deliver(&mut book, earlier, thresholds), None, "{what}");
            }
        }
        let expected = reported.then(|| report(ReportReason::Latency, true, probe));
        assert_eq!(deliver(&mut book, probe, thresholds), expected, "{what}");
    }
}

#[test]
fn a_latency_is_news_only_when_five_passing_probes_in_a_row_see_it_moved() {
    assert_eq!(LATENCY_RUN, 5);
    let thresholds = Thresholds::new(3, 1);
    let mut book = HealthBook::new();
    assert!(deliver(&mut book, ok(0, 40), thresholds).is_some());
    // One slow probe, then four: each run ends on a probe back near 40 ms.
    let mut jitter = vec![ok(60, 400), ok(61, 41)];
    jitter.extend((62..66).map(|secs| ok(secs, 400)));
    jitter.push(ok(66, 45));
    assert_eq!(run(&mut book, &jitter, thresholds), []);
    // A failed probe ends a run too (its duration is a timeout, not a latency).
    let mut interrupted: Vec<_> = (67..70).map(|secs| ok(secs, 400)).collect();
    interrupted.push(fail(70));
    interrupted.extend((71..75).map(|secs| ok(secs, 400)));
    assert_eq!(run(&mut book, &interrupted, thresholds), []);
    assert_eq!(book.get(&key()).unwrap().latency_run(), 4);
    // The fifth in a row: the proxy got slower.
    assert_eq!(
        deliver(&mut book, ok(75, 380), thresholds),
        Some(report(ReportReason::Latency, true, ok(75, 380)))
    );
    assert_eq!(book.get(&key()).unwrap().latency_run(), 0, "delivered");
}

#[test]
fn latency_is_never_reported_while_unhealthy() {
    let thresholds = Thresholds::new(1, 3);
    let mut book = HealthBook::new();
    assert!(deliver(&mut book, fail(0), thresholds).is_some());
    // A success run below successThreshold: the proxy is still reported unhealthy, and the
    // latency moved far from the failed probe's 5000 ms, long after the report.
    assert_eq!(deliver(&mut book, ok(600, 40), thresholds), None);
    assert_eq!(deliver(&mut book, ok(1200, 400), thresholds), None);
    assert_eq!(book.get(&key()).unwrap().verdict(), Some(false));
}

#[test]
fn a_flip_restarts_the_latency_minute() {
    let thresholds = Thresholds::new(1, 1);
    let mut book = HealthBook::new();
    let probes = [
        ok(0, 40),
        fail(100),
        ok(110, 40),
        ok(166, 200),
        ok(167, 200),
        ok(168, 200),
        ok(169, 200),
        ok(170, 200),
    ];
    let reasons: Vec<_> = run(&mut book, &probes, thresholds)
        .into_iter()
        .map(|report| (report.reason, report.verdict.probed_at))
        .collect();
    assert_eq!(
        reasons,
        [
            (ReportReason::First, t(0)),
            (ReportReason::VerdictChanged, t(100)),
            (ReportReason::VerdictChanged, t(110)),
            (ReportReason::Latency, t(170)),
        ]
    );
}

/// A proxy alternating between `low` and `high` ms, probed every second for an hour.
fn jitter_for_an_hour(low: u32, high: u32) -> Vec<Report> {
    let mut book = HealthBook::new();
    let probes: Vec<_> = (0..3600)
        .map(|secs| ok(secs, if secs % 2 == 0 { low } else { high }))
        .collect();
    run(&mut book, &probes, Thresholds::new(3, 1))
}

#[test]
fn a_proxy_jittering_between_two_latencies_reports_no_latency_all_hour() {
    // From 40 ms, 61 ms is a change of 21 ms and of 52%, and from 30 ms, 61 ms too (and the
    // other way): every other probe is back at the reported latency and ends the run. (Probe
    // by probe, 30 <-> 61 ms wrote a status every minute, held back by the rate limit only.)
    for (low, high) in [(40, 61), (30, 61)] {
        let reports = jitter_for_an_hour(low, high);
        let at: Vec<_> = reports.iter().map(|r| r.verdict.probed_at).collect();
        assert_eq!(at, [t(0)], "{low} <-> {high} ms");
    }
}

#[test]
fn a_proxy_that_stays_slower_is_reported_at_most_once_a_minute() {
    // 40 ms, then 200 ms from second 10 on: reported once the minute is over, then never
    // again while it stays there.
    let mut book = HealthBook::new();
    let probes: Vec<_> = (0..3600)
        .map(|secs| ok(secs, if secs < 10 { 40 } else { 200 }))
        .collect();
    let reports = run(&mut book, &probes, Thresholds::new(3, 1));
    let at: Vec<_> = reports
        .iter()
        .map(|r| (r.reason, r.verdict.probed_at))
        .collect();
    assert_eq!(
        at,
        [(ReportReason::First, t(0)), (ReportReason::Latency, t(60))]
    );
}

#[test]
fn an_undelivered_report_goes_out_again_with_the_next_probe() {
    let thresholds = Thresholds::new(2, 1);
    let mut book = HealthBook::new();

    // The first report is dropped: the next probe is a first result again.
    let dropped = book.record(&key(), &target(), ok(0, 40), thresholds);
    assert_eq!(dropped, Some(report(ReportReason::First, true, ok(0, 40))));
    assert_eq!(book.reported(&key(), UID), None);
    assert_eq!(
        deliver(&mut book, ok(1, 42), thresholds),
        Some(report(ReportReason::First, true, ok(1, 42)))
    );

    // The flip is dropped: every following probe reports it until one is delivered.
    assert_eq!(deliver(&mut book, fail(2), thresholds), None);
    let dropped = book.record(&key(), &target(), fail(3), thresholds);
    assert_eq!(
        dropped,
        Some(report(ReportReason::VerdictChanged, false, fail(3)))
    );
    assert_eq!(book.reported(&key(), UID), Some(&verdict(true, ok(1, 42))));
    let dropped = book.record(&key(), &target(), fail(4), thresholds);
    assert_eq!(
        dropped,
        Some(report(ReportReason::VerdictChanged, false, fail(4)))
    );
    assert_eq!(
        deliver(&mut book, fail(5), thresholds),
        Some(report(ReportReason::VerdictChanged, false, fail(5)))
    );
    assert_eq!(book.reported(&key(), UID), Some(&verdict(false, fail(5))));
    assert_eq!(deliver(&mut book, fail(6), thresholds), None);

    // A dropped latency report: the next probe that still qualifies reports again.
    assert_eq!(
        deliver(&mut book, ok(7, 40), thresholds).map(|r| r.reason),
        Some(ReportReason::VerdictChanged)
    );
    for secs in 96..100 {
        assert_eq!(deliver(&mut book, ok(secs, 200), thresholds), None);
    }
    let dropped = book.record(&key(), &target(), ok(100, 200), thresholds);
    assert_eq!(dropped.map(|r| r.reason), Some(ReportReason::Latency));
    assert_eq!(
        deliver(&mut book, ok(101, 210), thresholds),
        Some(report(ReportReason::Latency, true, ok(101, 210)))
    );
}

#[test]
fn a_flip_back_before_delivery_needs_no_report() {
    let thresholds = Thresholds::new(1, 1);
    let mut book = HealthBook::new();
    assert!(deliver(&mut book, ok(0, 40), thresholds).is_some());
    let dropped = book.record(&key(), &target(), fail(1), thresholds);
    assert_eq!(
        dropped.map(|r| r.reason),
        Some(ReportReason::VerdictChanged)
    );
    // Healthy again, which is what the controller last heard.
    assert_eq!(deliver(&mut book, ok(2, 41), thresholds), None);
}

#[test]
fn a_new_uid_or_host_is_a_fresh_proxy() {
    let thresholds = Thresholds::new(3, 3);
    for other in [target_of(OTHER_UID, IP), target_of(UID, OTHER_IP)] {
        let mut book = HealthBook::new();
        assert_eq!(
            run(&mut book, &[ok(0, 40), fail(1), fail(2)], thresholds).len(),
            1
        );
        // Two failures of the old target are not inherited: one failure of the new one is
        // its first result, and is reported at once.
        let report = book.record(&key(), &other, fail(3), thresholds).unwrap();
        assert_eq!(report.reason, ReportReason::First);
        assert_eq!(report.uid, other.uid);
        assert_eq!(report.verdict.host, other.host);
        assert!(!report.verdict.healthy);
        assert!(book.delivered(&report));
        let state = book.get(&key()).unwrap();
        assert_eq!(state.target(), &other);
        assert_eq!((state.successes(), state.failures()), (0, 1));
        assert_eq!(book.reported(&key(), &other.uid), Some(&report.verdict));
    }
}

#[test]
fn a_report_about_a_replaced_target_is_not_acknowledged() {
    let thresholds = Thresholds::new(3, 1);
    let mut book = HealthBook::new();
    let stale = book
        .record(&key(), &target(), ok(0, 40), thresholds)
        .unwrap();
    let fresh = book
        .record(&key(), &target_of(OTHER_UID, IP), fail(1), thresholds)
        .unwrap();
    assert!(!book.delivered(&stale));
    assert_eq!(book.reported(&key(), OTHER_UID), None);
    assert!(book.delivered(&fresh));
    assert_eq!(book.reported(&key(), UID), None, "another object's verdict");
    assert_eq!(book.reported(&key(), OTHER_UID), Some(&fresh.verdict));
}

#[test]
fn a_seeded_verdict_needs_a_full_threshold_run_to_flip() {
    let thresholds = Thresholds::new(3, 2);
    for healthy in [true, false] {
        let mut book = HealthBook::new();
        let seeded = verdict(healthy, ok(-30, 40));
        assert!(book.seed(&key(), UID, None, seeded.clone()));
        // The reconciler sees the status's verdict before any probe.
        assert_eq!(book.reported(&key(), UID), Some(&seeded));
        let state = book.get(&key()).unwrap();
        assert_eq!(
            (state.verdict(), state.successes(), state.failures()),
            (Some(healthy), 0, 0)
        );

        let against = |secs| if healthy { fail(secs) } else { ok(secs, 40) };
        let threshold = if healthy { 3 } else { 2 };
        for secs in 1..threshold {
            assert_eq!(deliver(&mut book, against(secs), thresholds), None);
        }
        assert_eq!(
            deliver(&mut book, against(threshold), thresholds),
            Some(report(
                ReportReason::VerdictChanged,
                !healthy,
                against(threshold)
            ))
        );
    }
}

#[test]
fn a_seeded_proxy_reports_latency_against_the_status() {
    let thresholds = Thresholds::new(3, 1);
    let mut book = HealthBook::new();
    assert!(book.seed(&key(), UID, None, verdict(true, ok(-30, 40))));
    assert_eq!(deliver(&mut book, ok(0, 45), thresholds), None);
    for secs in 25..29 {
        assert_eq!(deliver(&mut book, ok(secs, 100), thresholds), None);
    }
    assert_eq!(
        deliver(&mut book, ok(29, 100), thresholds),
        None,
        "29 s + 30 s"
    );
    assert_eq!(
        deliver(&mut book, ok(30, 100), thresholds),
        Some(report(ReportReason::Latency, true, ok(30, 100)))
    );
}

#[test]
fn seeding_a_known_proxy_changes_nothing() {
    let thresholds = Thresholds::new(3, 1);
    let mut book = HealthBook::new();
    assert_eq!(run(&mut book, &[ok(0, 40), fail(1)], thresholds).len(), 1);
    let before = book.clone();
    assert!(!book.seed(&key(), UID, None, verdict(false, ok(2, 40))));
    assert!(!book.seed(&key(), OTHER_UID, None, verdict(false, ok(2, 40))));
    assert_eq!(book, before);
}

#[test]
fn prune_drops_what_is_not_probed_any_more() {
    let thresholds = Thresholds::new(3, 1);
    let mut book = HealthBook::new();
    let keys = ["a", "b", "c", "d"].map(|name| ProxyKey::new(NAMESPACE, name));
    for key in &keys {
        let report = book.record(key, &target(), ok(0, 40), thresholds).unwrap();
        assert!(book.delivered(&report));
    }
    let live = BTreeMap::from([
        // a: unchanged; b: recreated; c: moved; d: no host any more (absent).
        (keys[0].clone(), target()),
        (keys[1].clone(), target_of(OTHER_UID, IP)),
        (keys[2].clone(), target_of(UID, OTHER_IP)),
    ]);
    assert_eq!(
        book.prune(|key, target| live.get(key) == Some(target)),
        keys[1..].to_vec()
    );
    assert!(book.get(&keys[0]).is_some());
    assert_eq!(
        book.prune(|key, target| live.get(key) == Some(target)),
        Vec::<ProxyKey>::new()
    );
    assert_eq!(book.prune(|_, _| false), [keys[0].clone()]);
    assert_eq!(book, HealthBook::new());
}

#[test]
fn a_pruned_proxy_starts_over() {
    let thresholds = Thresholds::new(3, 1);
    let mut book = HealthBook::new();
    assert_eq!(
        run(&mut book, &[ok(0, 40), fail(1), fail(2)], thresholds).len(),
        1
    );
    assert_eq!(book.prune(|_, _| false), [key()]);
    assert_eq!(
        deliver(&mut book, fail(3), thresholds),
        Some(report(ReportReason::First, false, fail(3)))
    );
}

#[test]
fn the_target_is_the_address_crawlers_connect_to() {
    let running = ProxyStatus {
        ip: Some(IP.to_owned()),
        ..ProxyStatus::default()
    };
    let no_ip = ProxyStatus {
        ip: Some(String::new()),
        ..ProxyStatus::default()
    };
    let managed = managed_spec();
    assert_eq!(Target::of(UID, &managed, Some(&running)), Some(target()));
    assert_eq!(Target::of(UID, &managed, Some(&no_ip)), None);
    assert_eq!(Target::of(UID, &managed, None), None);
    assert_eq!(
        Target::of(UID, &external_spec(), None),
        Some(target_of(UID, EXTERNAL_HOST))
    );
}

#[test]
fn the_seed_is_the_verdict_the_status_shows() {
    let status = |healthy: &str, ip: Option<&str>, latency: Option<i64>, time: Option<&str>| {
        let condition = (TRUE, "Reason", "message", T0);
        ProxyStatus {
            last_probe_latency_ms: latency,
            last_health_check_time: time.map(str::to_owned),
            ..status_of(
                Phase::Ready,
                None,
                ip,
                1,
                [condition, (healthy, "Reason", "message", T0), condition],
            )
        }
    };
    let seeded = |healthy| HealthVerdict {
        host: IP.to_owned(),
        healthy,
        latency_ms: 42,
        probed_at: at("2026-01-01T00:05:00Z"),
        failure: None,
        egress_ip: None,
    };
    let time = Some("2026-01-01T00:05:00Z");
    let rows = [
        (status(TRUE, Some(IP), Some(42), time), Some(seeded(true))),
        (status(FALSE, Some(IP), Some(42), time), Some(seeded(false))),
        (status(UNKNOWN, Some(IP), Some(42), time), None),
        (status(TRUE, None, Some(42), time), None),
        (status(TRUE, Some(""), Some(42), time), None),
        (status(TRUE, Some(IP), None, time), None),
        (status(TRUE, Some(IP), Some(-1), time), None),
        (status(TRUE, Some(IP), Some(42), None), None),
        (status(TRUE, Some(IP), Some(42), Some("yesterday")), None),
        (ProxyStatus::default(), None),
    ];
    for (status, expected) in rows {
        assert_eq!(reported_in_status(&status), expected, "{status:?}");
    }
}

/// A Ready status whose `Healthy` condition is `healthy`, probed at `IP`.
fn status_showing(healthy: &str) -> ProxyStatus {
    let condition = (TRUE, "Reason", "message", T0);
    ProxyStatus {
        last_probe_latency_ms: Some(42),
        last_health_check_time: Some(T0.to_owned()),
        ..status_of(
            Phase::Ready,
            None,
            Some(IP),
            1,
            [condition, (healthy, "Reason", "message", T0), condition],
        )
    }
}

#[test]
fn seeding_from_status_fills_only_what_the_book_does_not_hold() {
    let thresholds = Thresholds::new(3, 1);
    let shown = HealthVerdict {
        host: IP.to_owned(),
        healthy: true,
        latency_ms: 42,
        probed_at: at(T0),
        failure: None,
        egress_ip: None,
    };
    // (the book probed the proxy before, the status, seeded?, what a reconcile then reads)
    let rows = [
        (false, status_showing(TRUE), true, Some(shown)),
        (false, status_showing(UNKNOWN), false, None),
        (false, ProxyStatus::default(), false, None),
        // A verdict of this process's own probes wins over the status.
        (
            true,
            status_showing(TRUE),
            false,
            Some(verdict(false, fail(1))),
        ),
    ];
    for (probed_before, status, seeded, reads) in rows {
        let mut book = HealthBook::new();
        if probed_before {
            let report = book.record(&key(), &target(), fail(1), thresholds).unwrap();
            assert!(book.delivered(&report));
        }
        assert_eq!(
            book.seed_from_status(&key(), UID, &managed_spec(), &status),
            seeded,
            "{status:?}"
        );
        assert_eq!(book.reported(&key(), UID).cloned(), reads, "{status:?}");
    }
}

#[test]
fn only_a_proxy_with_a_verdict_waits_for_its_place_in_the_interval() {
    let interval = std::time::Duration::from_secs(30);
    let thresholds = Thresholds::new(3, 1);
    let mut seeded = HealthBook::new();
    assert!(seeded.seed_from_status(&key(), UID, &managed_spec(), &status_showing(TRUE)));
    let mut probed = HealthBook::new();
    let report = probed
        .record(&key(), &target(), ok(0, 40), thresholds)
        .unwrap();
    assert!(probed.delivered(&report));
    let secs = std::time::Duration::from_secs;
    let millis = std::time::Duration::from_millis;
    // The machine the status shows has served since T0.
    let shown = Target {
        since: Some(T0.to_owned()),
        ..target()
    };
    // (book, target, spread, first probe in)
    let rows = [
        (HealthBook::new(), target(), 5_000, secs(0)),
        (HealthBook::new(), target(), 9_999, secs(0)),
        (seeded.clone(), shown.clone(), 0, secs(0)),
        (seeded.clone(), shown.clone(), 5_000, secs(15)),
        (seeded.clone(), shown.clone(), 19_999, millis(29_997)),
        (seeded.clone(), shown.clone(), u64::MAX, millis(4_845)),
        (probed.clone(), target(), 2_500, millis(7_500)),
        // A verdict about another machine or object says nothing about this one: another
        // address, another UID, or a machine that replaced it at the same address.
        (seeded.clone(), target_of(UID, OTHER_IP), 5_000, secs(0)),
        (seeded.clone(), target_of(OTHER_UID, IP), 5_000, secs(0)),
        (
            seeded,
            Target {
                since: Some("2026-01-01T00:10:00Z".to_owned()),
                ..target()
            },
            5_000,
            secs(0),
        ),
    ];
    for (book, target, spread, expected) in rows {
        assert_eq!(
            book.first_probe_in(&key(), &target, interval, spread),
            expected,
            "{target:?} spread {spread} in {book:?}"
        );
    }
}

#[test]
fn keys_read_as_namespace_slash_name() {
    assert_eq!(key().to_string(), "crawl/px-1");
}

#[test]
fn the_verdict_carries_the_cause_of_the_probe_that_made_it() {
    let mut book = HealthBook::new();
    let thresholds = Thresholds::new(2, 1);
    let refused = |secs| Probe {
        failure: Some(ProbeFailure::ConnectionRefused),
        ..fail(secs)
    };
    let first = book
        .record(&key(), &target(), refused(0), thresholds)
        .unwrap();
    assert_eq!(first.verdict.failure, Some(ProbeFailure::ConnectionRefused));
    assert!(book.delivered(&first));
    // Healthy again: no cause.
    let back = book
        .record(&key(), &target(), ok(1, 30), thresholds)
        .unwrap();
    assert_eq!(back.verdict.failure, None);
    assert!(book.delivered(&back));
    // One failure below the threshold changes nothing; the one that flips it names its own
    // cause, not the first one's.
    assert_eq!(book.record(&key(), &target(), refused(2), thresholds), None);
    let status_500 = Probe {
        failure: Some(ProbeFailure::UnexpectedStatus { status: 500 }),
        ..fail(3)
    };
    let flipped = book
        .record(&key(), &target(), status_500, thresholds)
        .unwrap();
    assert_eq!(flipped.reason, ReportReason::VerdictChanged);
    assert_eq!(
        flipped.verdict.failure,
        Some(ProbeFailure::UnexpectedStatus { status: 500 })
    );
    // A passing probe never carries a cause, even when the prober gave one.
    let mut fresh = HealthBook::new();
    let odd = Probe {
        failure: Some(ProbeFailure::Other),
        ..ok(0, 30)
    };
    let report = fresh.record(&key(), &target(), odd, thresholds).unwrap();
    assert_eq!(report.verdict.failure, None);
}

#[test]
fn an_external_proxys_target_is_its_endpoint_status_or_not() {
    // Probed from its spec before any status: the status its first reconcile writes must
    // not make it another target (its first verdict would be thrown away).
    let spec = external_spec();
    let before = Target::of(UID, &spec, None).unwrap();
    let after = Target::of(UID, &spec, Some(&status_showing(TRUE))).unwrap();
    assert_eq!(before, after);
    assert_eq!(before.since, None);
    // A Managed proxy's machine is its provisioned moment.
    let managed = Target::of(UID, &managed_spec(), Some(&status_showing(TRUE))).unwrap();
    assert_eq!(managed.since.as_deref(), Some(T0));
}
