//! Egress verification: the sharing table over a fleet, the egress book's changes, the
//! verdict words, the `EgressVerified` condition in the status `decide` writes, the health
//! book's egress report, and `distinctEgress` in the lease book.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use proxy_core::conditions::EGRESS_VERIFIED;
use proxy_core::egress::{EgressBook, EgressReason, in_cidr, sharing, verify};
use proxy_core::health::{HealthBook, Probe, ReportReason, Target, Thresholds};
use proxy_core::lease::{
    AcquireError, AcquireRequest, LeaseBook, LeaseConfig, ProxyView, Selector,
};
use proxy_core::testing::{self, managed_spec, proxy_view};
use proxy_core::{HealthVerdict, InstanceView, Observed, ProxyKey, decide};
use proxy_crd::{HealthCheck, ProxySpec, ProxyStatus};

fn key(name: &str) -> ProxyKey {
    ProxyKey::new("crawl", name)
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A fleet: (name, egress address).
type Fleet<'a> = &'a [(&'a str, &'a str)];
/// Who shares: (name, the others on its address).
type Shared<'a> = &'a [(&'a str, &'a [&'a str])];

#[test]
fn sharing_is_a_table_over_the_fleet() {
    let cases: [(Fleet<'_>, Shared<'_>); 4] = [
        (&[], &[]),
        (&[("a", "10.0.0.1"), ("b", "10.0.0.2")], &[]),
        (
            &[("a", "10.0.0.1"), ("b", "10.0.0.1"), ("c", "10.0.0.3")],
            &[("a", &["b"]), ("b", &["a"])],
        ),
        (
            &[
                ("a", "10.0.0.9"),
                ("b", "10.0.0.9"),
                ("c", "10.0.0.9"),
                ("d", "fd00::1"),
                ("e", "fd00::1"),
            ],
            &[
                ("a", &["b", "c"]),
                ("b", &["a", "c"]),
                ("c", &["a", "b"]),
                ("d", &["e"]),
                ("e", &["d"]),
            ],
        ),
    ];
    for (fleet, expected) in cases {
        let fleet: BTreeMap<ProxyKey, IpAddr> = fleet
            .iter()
            .map(|(name, egress)| (key(name), ip(egress)))
            .collect();
        let expected: BTreeMap<ProxyKey, Vec<ProxyKey>> = expected
            .iter()
            .map(|(name, others)| (key(name), others.iter().map(|o| key(o)).collect()))
            .collect();
        assert_eq!(sharing(&fleet), expected, "{fleet:?}");
    }
}

#[test]
fn the_book_says_whose_sharing_changed() {
    const NONE: [ProxyKey; 0] = [];
    let mut book = EgressBook::new();
    assert_eq!(book.record(&key("a"), Some(ip("10.0.0.1"))), NONE);
    assert_eq!(book.record(&key("b"), Some(ip("10.0.0.2"))), NONE);
    // b moves onto a's address: both change.
    assert_eq!(
        book.record(&key("b"), Some(ip("10.0.0.1"))),
        [key("a"), key("b")]
    );
    assert_eq!(book.shared_with(&key("a")), [key("b")]);
    // The same again changes nothing.
    assert_eq!(book.record(&key("b"), Some(ip("10.0.0.1"))), NONE);
    // c joins: all three change (each has a new companion).
    assert_eq!(
        book.record(&key("c"), Some(ip("10.0.0.1"))),
        [key("a"), key("b"), key("c")]
    );
    // c goes: a and b still share, with one companion fewer.
    assert_eq!(book.forget(&key("c")), [key("a"), key("b")]);
    // b's address is no longer known: a is alone.
    assert_eq!(book.record(&key("b"), None), [key("a"), key("b")]);
    assert_eq!(book.shared_with(&key("a")), NONE);
    assert_eq!(book.address(&key("a")), Some(ip("10.0.0.1")));
}

#[test]
fn the_verdict_in_words() {
    let cidrs = ["203.0.113.0/24".to_owned()];
    let cases = [
        (
            None,
            Some("10.0.0.7"),
            &[][..],
            &[][..],
            EgressReason::Unknown,
        ),
        (
            Some("10.0.0.7"),
            Some("10.0.0.7"),
            &[],
            &[],
            EgressReason::Matches,
        ),
        (
            Some("203.0.113.9"),
            Some("10.0.0.7"),
            &cidrs,
            &[],
            EgressReason::Matches,
        ),
        (
            Some("198.51.100.1"),
            Some("10.0.0.7"),
            &cidrs,
            &[],
            EgressReason::Differs,
        ),
        (
            Some("10.0.0.7"),
            Some("proxy.example"),
            &[],
            &[],
            EgressReason::Differs,
        ),
        // Sharing wins over a match.
        (
            Some("10.0.0.7"),
            Some("10.0.0.7"),
            &[],
            &[key("b")][..],
            EgressReason::Shared,
        ),
    ];
    for (egress, published, cidrs, shared, want) in cases {
        let (reason, message) = verify(egress, published, cidrs, shared);
        assert_eq!(reason, want, "{egress:?} {published:?}: {message}");
        if let Some(egress) = egress {
            assert!(message.contains(egress), "{message}");
        }
    }
    let (_, message) = verify(Some("10.0.0.7"), Some("10.0.0.7"), &[], &[key("b")]);
    assert!(message.contains("crawl/b"), "{message}");
    assert_eq!(
        (
            EgressReason::Matches.status(),
            EgressReason::Shared.status(),
            EgressReason::Unknown.status()
        ),
        ("True", "False", "Unknown")
    );
}

#[test]
fn cidrs_of_both_families() {
    for (address, cidr, inside) in [
        ("10.1.2.3", "10.0.0.0/8", true),
        ("11.1.2.3", "10.0.0.0/8", false),
        ("10.1.2.3", "10.1.2.3/32", true),
        ("10.1.2.3", "0.0.0.0/0", true),
        ("2001:db8::5", "2001:db8::/32", true),
        ("2001:db9::5", "2001:db8::/32", false),
        ("10.1.2.3", "2001:db8::/32", false),
        ("10.1.2.3", "10.0.0.0/33", false),
        ("10.1.2.3", "not-a-range", false),
    ] {
        assert_eq!(in_cidr(ip(address), cidr), inside, "{address} in {cidr}");
    }
}

fn with_egress_check(egress_cidrs: Vec<String>) -> ProxySpec {
    ProxySpec {
        health_check: Some(HealthCheck {
            egress_url: Some("https://probe.test/client-address".to_owned()),
            egress_cidrs,
            ..HealthCheck::default()
        }),
        ..managed_spec()
    }
}

fn running_observed(egress: Option<&str>, shared: Vec<ProxyKey>) -> Observed {
    let mut observed = Observed::test()
        .annotated(testing::hash_of(
            &with_egress_check(Vec::new()),
            Some(testing::CLOUD_INIT),
        ))
        .instance(InstanceView::Running {
            ip: "10.0.0.7".to_owned(),
        });
    observed.health = Some(HealthVerdict {
        host: "10.0.0.7".to_owned(),
        healthy: true,
        latency_ms: 12,
        probed_at: testing::at(testing::T0),
        failure: None,
        egress_ip: egress.map(str::to_owned),
    });
    observed.egress_shared_with = shared;
    observed
}

fn running_status() -> ProxyStatus {
    ProxyStatus {
        provider_id: Some("crawl/proxy-kbqzhquppopaia3n".to_owned()),
        ..ProxyStatus::default()
    }
}

#[test]
fn the_status_shows_the_egress_and_whether_it_is_verified() {
    let spec = with_egress_check(Vec::new());
    let cases = [
        (Some("10.0.0.7"), vec![], "True", "Matches"),
        (Some("198.51.100.1"), vec![], "False", "Differs"),
        (Some("10.0.0.7"), vec![key("other")], "False", "Shared"),
        (None, vec![], "Unknown", "Unknown"),
    ];
    for (egress, shared, status, reason) in cases {
        let decision = decide(&spec, &running_status(), &running_observed(egress, shared));
        let written = decision.status();
        assert_eq!(written.egress_ip.as_deref(), egress);
        let condition = written
            .conditions
            .iter()
            .find(|c| c.type_ == EGRESS_VERIFIED)
            .expect("an EgressVerified condition");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            (status, reason)
        );
    }
    // One event per change of the verdict: Matches, then Shared; none for the same again.
    let matches = decide(
        &spec,
        &running_status(),
        &running_observed(Some("10.0.0.7"), vec![]),
    );
    let egress_events = |decision: &proxy_core::Decision| -> Vec<(proxy_core::EventType, String)> {
        decision
            .events()
            .iter()
            .filter(|e| e.reason.starts_with("Egress"))
            .map(|e| (e.type_, e.reason.clone()))
            .collect()
    };
    assert_eq!(
        egress_events(&matches),
        [(proxy_core::EventType::Normal, "EgressMatches".to_owned())]
    );
    let again = decide(
        &spec,
        matches.status(),
        &running_observed(Some("10.0.0.7"), vec![]),
    );
    assert_eq!(egress_events(&again), []);
    let shared = decide(
        &spec,
        matches.status(),
        &running_observed(Some("10.0.0.7"), vec![key("other")]),
    );
    assert_eq!(
        egress_events(&shared),
        [(proxy_core::EventType::Warning, "EgressShared".to_owned())]
    );
    // Without an egressURL: no egress in status and no condition, whatever the verdict says.
    let decision = decide(
        &managed_spec(),
        &running_status(),
        &running_observed(Some("10.0.0.7"), vec![]),
    );
    assert_eq!(decision.status().egress_ip, None);
    assert!(
        decision
            .status()
            .conditions
            .iter()
            .all(|c| c.type_ != EGRESS_VERIFIED)
    );
}

#[test]
fn a_good_probe_that_sees_a_new_egress_is_reported_and_a_failed_one_keeps_the_last() {
    let mut book = HealthBook::new();
    let target = Target {
        uid: "uid-1".to_owned(),
        host: "10.0.0.7".to_owned(),
        since: None,
    };
    let thresholds = Thresholds::new(3, 1);
    let probe = |secs: i64, ok: bool, egress: Option<&str>| Probe {
        ok,
        latency_ms: 10,
        at: jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap(),
        failure: None,
        egress: egress.map(ip),
    };
    let deliver = |book: &mut HealthBook, probe: Probe| {
        let report = book.record(&key("a"), &target, probe, thresholds);
        if let Some(report) = &report {
            assert!(book.delivered(report));
        }
        report
    };
    let first = deliver(&mut book, probe(0, true, Some("10.0.0.7"))).unwrap();
    assert_eq!(first.verdict.egress_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(deliver(&mut book, probe(2, true, Some("10.0.0.7"))), None);
    let moved = deliver(&mut book, probe(4, true, Some("10.0.0.8"))).unwrap();
    assert_eq!(moved.reason, ReportReason::Egress);
    assert_eq!(moved.verdict.egress_ip.as_deref(), Some("10.0.0.8"));
    // A good probe whose egress URL said nothing, and failed probes: no egress report, and
    // the flip that comes keeps the last known address.
    assert_eq!(deliver(&mut book, probe(6, true, None)), None);
    for secs in [8, 10] {
        assert_eq!(deliver(&mut book, probe(secs, false, None)), None);
    }
    let down = deliver(&mut book, probe(12, false, None)).unwrap();
    assert_eq!(down.reason, ReportReason::VerdictChanged);
    assert_eq!(down.verdict.egress_ip.as_deref(), Some("10.0.0.8"));
}

fn view(name: &str, shared_egress: bool) -> ProxyView {
    ProxyView {
        labels: [("geo".to_owned(), "eu".to_owned())].into(),
        latency_ms: if shared_egress { 1 } else { 50 },
        max_leases: 5,
        shared_egress,
        ..proxy_view(key(name))
    }
}

#[test]
fn distinct_egress_leaves_the_shared_proxies_out_of_leases_and_listings() {
    let mut book = LeaseBook::new(LeaseConfig::default());
    book.upsert(view("shared-1", true));
    book.upsert(view("shared-2", true));
    book.upsert(view("alone", false));
    let selector: Selector = [("geo", "eu")].into_iter().collect();
    let request = |id: &str, distinct_egress: bool| AcquireRequest {
        id: id.to_owned(),
        selector: selector.clone(),
        target: None,
        ttl: Duration::from_secs(60),
        distinct_egress,
        holder: None,
    };
    let now = testing::at(testing::T0);
    // Without it, the fastest (a shared one) wins; with it, only the one alone qualifies.
    assert_eq!(
        book.acquire(request("l1", false), now).unwrap().proxy,
        key("shared-1")
    );
    assert_eq!(
        book.acquire(request("l2", true), now).unwrap().proxy,
        key("alone")
    );
    let listed: Vec<ProxyKey> = book
        .list_distinct(&selector, true, true, now)
        .into_iter()
        .map(|listed| listed.proxy.key.clone())
        .collect();
    assert_eq!(listed, [key("alone")]);
    assert_eq!(book.list_distinct(&selector, true, false, now).len(), 3);
    // Only shared proxies left: nothing matches, and they are not counted as considered.
    let mut only_shared = LeaseBook::new(LeaseConfig::default());
    only_shared.upsert(view("shared-1", true));
    match only_shared.acquire(request("l3", true), now) {
        Err(AcquireError::NoMatch(stats)) => assert_eq!(stats.considered, 0, "{stats:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_shared_egress_condition_marks_the_view() {
    let mut status = testing::status_of(
        proxy_crd::Phase::Ready,
        Some("crawl/p"),
        Some("10.0.0.7"),
        1,
        [
            ("True", "Created", "m", testing::T0),
            ("True", "ProbeSucceeded", "m", testing::T0),
            ("True", "Ready", "m", testing::T0),
        ],
    );
    let shared = |status: &ProxyStatus| {
        proxy_core::lease::view_of(key("p"), BTreeMap::new(), &managed_spec(), Some(status))
            .unwrap()
            .shared_egress
    };
    assert!(!shared(&status));
    let mut egress = status.conditions[0].clone();
    egress.type_ = EGRESS_VERIFIED.to_owned();
    egress.status = "False".to_owned();
    egress.reason = "Shared".to_owned();
    status.conditions.push(egress.clone());
    assert!(shared(&status));
    egress.reason = "Differs".to_owned();
    *status.conditions.last_mut().unwrap() = egress;
    assert!(!shared(&status));
}
