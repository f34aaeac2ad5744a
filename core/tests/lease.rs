//! Table tests of the lease book: selection order, capacity, the 409 statistics, TTL and
//! retention, reports and cooldowns, selectors, upsert and removal.

#[path = "support/fleet.rs"]
mod fleet;

use std::time::Duration;

use fleet::{at, key, proxy};
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireError, AcquireRequest, Cooldown, Lease, LeaseBook, LeaseConfig, NoMatch, ProxyView,
    ReportResult, Selector, UnknownLease,
};

const MINUTE: i64 = 60;
/// How long ended leases are kept with the default config: the longest cooldown, `blocked`'s.
const RETENTION: i64 = 30 * MINUTE;

fn labelled(mut view: ProxyView, labels: &[(&str, &str)]) -> ProxyView {
    view.labels = labels
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    view
}

fn unhealthy(mut view: ProxyView) -> ProxyView {
    view.healthy = false;
    view
}

fn book(proxies: impl IntoIterator<Item = ProxyView>) -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig::default());
    for proxy in proxies {
        book.upsert(proxy);
    }
    book
}

/// Selector terms in a table.
type Terms = &'static [(&'static str, &'static str)];

fn selector(terms: &[(&str, &str)]) -> Selector {
    terms.iter().copied().collect()
}

fn request(id: &str, selector: Selector, target: Option<&str>, ttl_secs: u64) -> AcquireRequest {
    AcquireRequest {
        id: id.to_owned(),
        selector,
        target: target.map(str::to_owned),
        ttl: Duration::from_secs(ttl_secs),
        distinct_egress: false,
        holder: None,
    }
}

/// Acquires a 10-minute lease for `target` from any proxy.
fn acquire(
    book: &mut LeaseBook,
    id: &str,
    target: Option<&str>,
    now: i64,
) -> Result<Lease, AcquireError> {
    book.acquire(request(id, Selector::all(), target, 600), at(now))
}

/// The key of the proxy [`acquire`] leases, or `None` when it grants nothing.
fn leased(book: &mut LeaseBook, id: &str, target: Option<&str>, now: i64) -> Option<String> {
    acquire(book, id, target, now)
        .ok()
        .map(|lease| lease.proxy.to_string())
}

fn no_match(considered: u32, at_capacity: u32, in_cooldown: u32, unhealthy: u32) -> AcquireError {
    AcquireError::NoMatch(NoMatch {
        considered,
        at_capacity,
        in_cooldown,
        unhealthy,
        unreachable: 0,
        retry_at: None,
    })
}

#[test]
fn order_is_fewest_leases_then_lowest_latency_then_key() {
    let mut book = book([proxy("a", 50, 5), proxy("c", 10, 5), proxy("b", 10, 5)]);
    let expected = ["b", "c", "a", "b", "c", "a", "b"];
    for (i, name) in expected.iter().enumerate() {
        let got = leased(&mut book, &format!("l{i}"), None, 0);
        assert_eq!(got, Some(format!("default/{name}")), "acquire {i}");
    }
}

#[test]
fn a_lease_carries_the_proxy_address_target_and_times() {
    let mut book = book([proxy("a", 10, 5)]);
    let lease = book
        .acquire(
            request("l1", Selector::all(), Some("Example.COM"), 90),
            at(5),
        )
        .unwrap();
    let expected = Lease {
        id: "l1".into(),
        proxy: key("a"),
        host: "10.0.0.1".into(),
        port: 3128,
        target: Some("example.com".into()),
        granted_at: at(5),
        expires_at: at(95),
        ttl: Duration::from_secs(90),
        holder: None,
    };
    assert_eq!(lease, expected);
}

#[test]
fn max_leases_zero_is_never_leased() {
    let mut book = book([proxy("drained", 1, 0)]);
    assert_eq!(acquire(&mut book, "l1", None, 0), Err(no_match(1, 1, 0, 0)));
    assert_eq!(book.active_leases(&key("drained"), at(0)), 0);
}

#[test]
fn capacity_is_never_exceeded() {
    let mut book = book([proxy("a", 10, 2), proxy("b", 20, 1)]);
    let got: Vec<_> = (0..4)
        .map(|i| leased(&mut book, &format!("l{i}"), None, 0))
        .collect();
    let a = Some("default/a".to_owned());
    let b = Some("default/b".to_owned());
    assert_eq!(got, [a.clone(), b, a, None]);
    assert_eq!(book.active_leases(&key("a"), at(0)), 2);
    assert_eq!(book.active_leases(&key("b"), at(0)), 1);
    assert_eq!(book.active_total(at(0)), 3);
}

#[test]
fn a_failed_acquire_counts_why_each_matching_proxy_was_passed_over() {
    let eu = [("geo", "eu")];
    let mut book = book([
        labelled(proxy("full", 10, 1), &eu),
        labelled(proxy("drained", 10, 0), &eu),
        labelled(unhealthy(proxy("sick", 10, 5)), &eu),
        labelled(unhealthy(proxy("sick-and-full", 10, 0)), &eu),
        labelled(proxy("cooling", 10, 5), &eu),
        labelled(proxy("elsewhere", 10, 5), &[("geo", "us")]),
    ]);
    let shop = |id: &str| request(id, selector(&eu), Some("shop.example"), 60);
    let first = book.acquire(shop("l1"), at(0)).unwrap();
    assert_eq!(first.proxy, "default/cooling");
    book.report("l1", ReportResult::Blocked, None, at(0))
        .unwrap();
    book.release("l1", at(0));
    assert_eq!(
        book.acquire(shop("l2"), at(0)).unwrap().proxy,
        "default/full"
    );

    // `elsewhere` is not considered; sick and sick-and-full are unhealthy (health is tested
    // first); full and drained are at capacity; cooling cools down for the target, for the
    // 30 minutes of a block: the answer says when it is free again.
    let AcquireError::NoMatch(stats) = no_match(5, 2, 1, 2) else {
        unreachable!()
    };
    let cooling_until = NoMatch {
        retry_at: Some(at(30 * MINUTE)),
        ..stats
    };
    assert_eq!(
        book.acquire(shop("l3"), at(0)),
        Err(AcquireError::NoMatch(cooling_until))
    );

    let nothing = book.acquire(request("l6", selector(&[("geo", "mars")]), None, 60), at(0));
    assert_eq!(nothing, Err(no_match(0, 0, 0, 0)));
}

#[test]
fn a_cooldown_holds_for_its_target_only() {
    let mut book = book([proxy("fast", 10, 5), proxy("slow", 90, 5)]);
    let lease = acquire(&mut book, "l1", Some("a.example"), 0).unwrap();
    assert_eq!(lease.proxy, "default/fast");
    let cooldown = book.report("l1", ReportResult::RateLimited, None, at(10));
    let expected = Cooldown {
        proxy: key("fast"),
        target: Some("a.example".into()),
        until: at(10 + 5 * MINUTE),
    };
    assert_eq!(cooldown, Ok(Some(expected)));
    book.release("l1", at(10));

    let cases = [
        (Some("a.example"), 20, "default/slow"),
        (Some("A.Example"), 20, "default/slow"),
        (Some("b.example"), 20, "default/fast"),
        (None, 20, "default/fast"),
        (Some("a.example"), 10 + 5 * MINUTE - 1, "default/slow"),
        (Some("a.example"), 10 + 5 * MINUTE, "default/fast"),
    ];
    for (i, (target, now, expected)) in cases.into_iter().enumerate() {
        let id = format!("c{i}");
        let got = leased(&mut book, &id, target, now);
        assert_eq!(got.as_deref(), Some(expected), "{target:?} at +{now}s");
        book.release(&id, at(now));
    }
}

#[test]
fn a_report_without_any_target_cools_requests_without_a_target() {
    let mut book = book([proxy("fast", 10, 5), proxy("slow", 90, 5)]);
    acquire(&mut book, "l1", None, 0).unwrap();
    let cooldown = book
        .report("l1", ReportResult::Blocked, None, at(0))
        .unwrap();
    assert_eq!(cooldown.unwrap().target, None);
    book.release("l1", at(0));
    assert_eq!(
        leased(&mut book, "l2", None, 1).as_deref(),
        Some("default/slow")
    );
    assert_eq!(
        leased(&mut book, "l3", Some("a.example"), 1).as_deref(),
        Some("default/fast")
    );
}

#[test]
fn the_report_target_overrides_the_lease_target() {
    let mut book = book([proxy("fast", 10, 5), proxy("slow", 90, 5)]);
    acquire(&mut book, "l1", Some("a.example"), 0).unwrap();
    let cooldown = book
        .report("l1", ReportResult::Blocked, Some("B.example"), at(0))
        .unwrap();
    assert_eq!(cooldown.unwrap().target.as_deref(), Some("b.example"));
    book.release("l1", at(0));
    let got = leased(&mut book, "l2", Some("b.example"), 1);
    assert_eq!(got.as_deref(), Some("default/slow"));
    let got = leased(&mut book, "l3", Some("a.example"), 1);
    assert_eq!(got.as_deref(), Some("default/fast"));
}

#[test]
fn each_result_cools_down_for_its_configured_time() {
    let error_cools = LeaseConfig {
        error_cooldown: Duration::from_secs(30),
        ..LeaseConfig::default()
    };
    let cases = [
        (LeaseConfig::default(), ReportResult::Ok, None),
        (LeaseConfig::default(), ReportResult::RateLimited, Some(300)),
        (LeaseConfig::default(), ReportResult::Blocked, Some(1_800)),
        (LeaseConfig::default(), ReportResult::Error, None),
        (error_cools, ReportResult::Error, Some(30)),
        (error_cools, ReportResult::Ok, None),
    ];
    for (config, result, secs) in cases {
        let mut book = LeaseBook::new(config);
        book.upsert(proxy("a", 10, 5));
        acquire(&mut book, "l1", Some("t.example"), 0).unwrap();
        let until = book
            .report("l1", result, None, at(100))
            .unwrap()
            .map(|cooldown| cooldown.until);
        assert_eq!(
            until,
            secs.map(|s| at(100 + s)),
            "{result:?} with {config:?}"
        );
    }
}

#[test]
fn a_later_report_never_shortens_a_cooldown() {
    let mut book = book([proxy("a", 10, 5)]);
    acquire(&mut book, "l1", Some("t.example"), 0).unwrap();
    let blocked = book
        .report("l1", ReportResult::Blocked, None, at(0))
        .unwrap();
    let limited = book
        .report("l1", ReportResult::RateLimited, None, at(60))
        .unwrap();
    assert_eq!(blocked.unwrap().until, at(30 * MINUTE));
    assert_eq!(limited.unwrap().until, at(30 * MINUTE));
    let got = leased(&mut book, "l2", Some("t.example"), 30 * MINUTE - 1);
    assert_eq!(got, None);
    let got = leased(&mut book, "l3", Some("t.example"), 30 * MINUTE);
    assert_eq!(got.as_deref(), Some("default/a"));
}

#[test]
fn ttl_expiry_frees_capacity_without_a_release() {
    let mut book = book([proxy("a", 10, 1)]);
    let ttl = |id: &str| request(id, Selector::all(), None, 60);
    book.acquire(ttl("l1"), at(0)).unwrap();
    assert_eq!(book.acquire(ttl("l2"), at(59)), Err(no_match(1, 1, 0, 0)));
    assert_eq!(book.active_total(at(59)), 1);
    assert_eq!(book.acquire(ttl("l3"), at(60)).unwrap().proxy, "default/a");
    assert_eq!(book.active_leases(&key("a"), at(60)), 1);
    // No call ended the lease: the view ends it before it counts.
    assert_eq!(book.active_total(at(120)), 0);
    assert_eq!(book.active_leases(&key("a"), at(120)), 0);
}

#[test]
fn a_late_report_lands_until_the_retention_window_ends() {
    let mut book = book([proxy("a", 10, 5)]);
    book.acquire(request("l1", Selector::all(), Some("t.example"), 60), at(0))
        .unwrap();
    let retention_end = 60 + RETENTION;
    let late = book.report("l1", ReportResult::RateLimited, None, at(retention_end - 1));
    assert_eq!(late.unwrap().unwrap().target.as_deref(), Some("t.example"));
    let too_late = book.report("l1", ReportResult::RateLimited, None, at(retention_end));
    assert_eq!(too_late, Err(UnknownLease));
}

#[test]
fn retention_follows_the_longest_cooldown() {
    let secs = Duration::from_secs;
    // At least 15 minutes, the memory of report IDs: a report held up by an API outage, or
    // sent again, lands whatever the cooldowns.
    for (rate_limited, blocked, error, retention) in [
        (300, 1800, 0, 1800),
        (1200, 60, 0, 1200),
        (300, 60, 1000, 1000),
        (300, 60, 0, 900),
        (10, 10, 0, 900),
        (0, 0, 0, 900),
    ] {
        let config = LeaseConfig {
            rate_limited_cooldown: secs(rate_limited),
            blocked_cooldown: secs(blocked),
            error_cooldown: secs(error),
            ..LeaseConfig::default()
        };
        assert_eq!(config.retention(), secs(retention), "{config:?}");
    }
    // A book with a 20-minute longest cooldown keeps an ended lease for 20 minutes.
    let config = LeaseConfig {
        rate_limited_cooldown: secs(60),
        blocked_cooldown: secs(1200),
        error_cooldown: Duration::ZERO,
        ..LeaseConfig::default()
    };
    let mut book = LeaseBook::new(config);
    book.upsert(proxy("a", 10, 5));
    acquire(&mut book, "l1", None, 0).unwrap();
    assert!(book.release("l1", at(0)));
    let late = book.report("l1", ReportResult::RateLimited, None, at(20 * MINUTE - 1));
    assert!(matches!(late, Ok(Some(_))), "{late:?}");
    let too_late = book.report("l1", ReportResult::RateLimited, None, at(20 * MINUTE));
    assert_eq!(too_late, Err(UnknownLease));
}

#[test]
fn a_report_after_release_lands() {
    let mut book = book([proxy("a", 10, 5)]);
    acquire(&mut book, "l1", Some("t.example"), 0).unwrap();
    assert!(book.release("l1", at(10)));
    let report = book.report("l1", ReportResult::Blocked, None, at(10 + RETENTION - 1));
    assert!(matches!(report, Ok(Some(_))));
    let report = book.report("l1", ReportResult::Blocked, None, at(10 + RETENTION));
    assert_eq!(report, Err(UnknownLease));
}

#[test]
fn release_is_idempotent() {
    let mut book = book([proxy("a", 10, 1)]);
    acquire(&mut book, "l1", None, 0).unwrap();
    let cases = [
        ("l1", 1, true),
        ("l1", 1, false),
        ("l1", 2, false),
        ("never-granted", 2, false),
    ];
    for (id, now, changed) in cases {
        assert_eq!(
            book.release(id, at(now)),
            changed,
            "release {id} at +{now}s"
        );
        assert_eq!(book.active_total(at(now)), 0);
    }
    book.acquire(request("short", Selector::all(), None, 1), at(3))
        .unwrap();
    assert!(!book.release("short", at(4)), "already expired");
    assert_eq!(book.active_total(at(4)), 0);
}

#[test]
fn a_report_on_an_unknown_lease_is_an_error() {
    let mut book = book([proxy("a", 10, 1)]);
    for result in [
        ReportResult::Ok,
        ReportResult::RateLimited,
        ReportResult::Blocked,
        ReportResult::Error,
    ] {
        assert_eq!(book.report("nope", result, None, at(0)), Err(UnknownLease));
    }
}

#[test]
fn a_lease_id_in_use_is_refused_while_the_lease_is_known() {
    let mut book = book([proxy("a", 10, 5)]);
    acquire(&mut book, "l1", None, 0).unwrap();
    assert_eq!(
        acquire(&mut book, "l1", None, 1),
        Err(AcquireError::IdInUse)
    );
    book.release("l1", at(1));
    assert_eq!(
        acquire(&mut book, "l1", None, 2),
        Err(AcquireError::IdInUse)
    );
    assert_eq!(
        leased(&mut book, "l1", None, 1 + RETENTION).as_deref(),
        Some("default/a")
    );
}

#[test]
fn selectors_match_every_term() {
    let mut book = book([
        labelled(proxy("eu-a", 30, 5), &[("geo", "eu"), ("tier", "a")]),
        labelled(proxy("eu-b", 10, 5), &[("geo", "eu"), ("tier", "b")]),
        labelled(proxy("us-a", 20, 5), &[("geo", "us"), ("tier", "a")]),
        proxy("bare", 40, 5),
    ]);
    // (selector terms, what list shows, what acquire leases)
    let cases: [(Terms, &[&str], Option<&str>); 6] = [
        (&[], &["bare", "eu-a", "eu-b", "us-a"], Some("eu-b")),
        (&[("geo", "eu")], &["eu-a", "eu-b"], Some("eu-b")),
        (&[("tier", "a")], &["eu-a", "us-a"], Some("us-a")),
        (&[("geo", "eu"), ("tier", "a")], &["eu-a"], Some("eu-a")),
        (&[("geo", "us"), ("tier", "b")], &[], None),
        (&[("zone", "x")], &[], None),
    ];
    for (i, (terms, listed, chosen)) in cases.into_iter().enumerate() {
        let names: Vec<_> = book
            .list(&selector(terms), false, at(0))
            .iter()
            .map(|listed| listed.proxy.key.name().to_owned())
            .collect();
        assert_eq!(names, listed, "list {terms:?}");
        let id = format!("s{i}");
        let lease = book.acquire(request(&id, selector(terms), None, 60), at(0));
        let got = lease.ok().map(|lease| lease.proxy);
        assert_eq!(got, chosen.map(key), "acquire {terms:?}");
        book.release(&id, at(0));
    }
}

#[test]
fn the_key_tie_break_is_the_order_of_the_namespace_slash_name_text() {
    // `-` sorts before `/`: `crawl-eu/b` before `crawl/a`, as when keys were strings.
    let view = |namespace: &str, name: &str| ProxyView {
        key: ProxyKey::new(namespace, name),
        ..proxy(name, 10, 1)
    };
    let mut book = book([
        view("crawl", "a"),
        view("crawl-eu", "b"),
        view("crawl", "c"),
    ]);
    let listed: Vec<String> = book
        .list(&Selector::all(), false, at(0))
        .iter()
        .map(|listed| listed.proxy.key.to_string())
        .collect();
    assert_eq!(listed, ["crawl-eu/b", "crawl/a", "crawl/c"]);
    let order: Vec<Option<String>> = (0..4)
        .map(|i| leased(&mut book, &format!("l{i}"), None, 0))
        .collect();
    assert_eq!(
        order,
        [Some("crawl-eu/b"), Some("crawl/a"), Some("crawl/c"), None].map(|k| k.map(String::from))
    );
}

#[test]
fn listing_is_ordered_by_key_with_an_optional_health_filter() {
    let mut book = book([
        proxy("c", 10, 5),
        unhealthy(proxy("b", 10, 5)),
        proxy("a", 99, 5),
    ]);
    acquire(&mut book, "l1", None, 0).unwrap();
    let listing = |book: &mut LeaseBook, healthy_only| -> Vec<(String, u32)> {
        book.list(&Selector::all(), healthy_only, at(0))
            .iter()
            .map(|listed| (listed.proxy.key.to_string(), listed.active))
            .collect()
    };
    let all = [("default/a", 0), ("default/b", 0), ("default/c", 1)];
    let all: Vec<_> = all.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    assert_eq!(listing(&mut book, false), all);
    let healthy: Vec<_> = [all[0].clone(), all[2].clone()].into();
    assert_eq!(listing(&mut book, true), healthy);
}

#[test]
fn an_unhealthy_proxy_leaves_selection_and_keeps_its_leases() {
    let mut book = book([proxy("a", 10, 2), proxy("b", 50, 2)]);
    assert_eq!(
        leased(&mut book, "l1", None, 0).as_deref(),
        Some("default/a")
    );
    book.upsert(unhealthy(proxy("a", 10, 2)));
    assert_eq!(book.active_leases(&key("a"), at(0)), 1);
    assert_eq!(
        leased(&mut book, "l2", None, 0).as_deref(),
        Some("default/b")
    );
    assert_eq!(
        leased(&mut book, "l3", None, 0).as_deref(),
        Some("default/b")
    );
    assert_eq!(acquire(&mut book, "l4", None, 0), Err(no_match(2, 1, 0, 1)));
    book.upsert(proxy("a", 10, 2));
    assert_eq!(
        leased(&mut book, "l5", None, 0).as_deref(),
        Some("default/a")
    );
    assert_eq!(book.active_leases(&key("a"), at(0)), 2);
}

#[test]
fn lowering_max_leases_revokes_nothing_and_takes_no_new_lease_until_below() {
    let mut book = book([proxy("a", 10, 3)]);
    for id in ["l1", "l2", "l3"] {
        acquire(&mut book, id, None, 0).unwrap();
    }
    book.upsert(proxy("a", 10, 1));
    assert_eq!(book.active_leases(&key("a"), at(0)), 3);
    assert!(book.release("l1", at(1)));
    assert_eq!(acquire(&mut book, "l4", None, 1), Err(no_match(1, 1, 0, 0)));
    assert!(book.release("l2", at(1)));
    assert_eq!(acquire(&mut book, "l5", None, 1), Err(no_match(1, 1, 0, 0)));
    assert!(book.release("l3", at(1)));
    assert_eq!(
        leased(&mut book, "l6", None, 1).as_deref(),
        Some("default/a")
    );
}

#[test]
fn a_removed_proxy_leaves_selection_and_listing_but_its_leases_stay() {
    let mut book = book([proxy("a", 10, 1), proxy("b", 50, 1)]);
    assert_eq!(
        leased(&mut book, "l1", Some("t.example"), 0).as_deref(),
        Some("default/a")
    );
    assert!(book.remove(&key("a")));
    assert!(!book.remove(&key("a")));
    assert_eq!(book.list(&Selector::all(), false, at(1)).len(), 1);
    assert_eq!(book.active_leases(&key("a"), at(1)), 1);
    assert_eq!(book.active_total(at(1)), 1);
    let report = book.report("l1", ReportResult::RateLimited, None, at(1));
    assert!(matches!(report, Ok(Some(_))));

    // Back under the same key while the lease is held: still at capacity.
    book.upsert(proxy("a", 10, 1));
    assert_eq!(
        leased(&mut book, "l2", None, 1).as_deref(),
        Some("default/b")
    );
    assert_eq!(acquire(&mut book, "l3", None, 1), Err(no_match(2, 2, 0, 0)));
    assert!(book.release("l1", at(2)));
    assert_eq!(
        leased(&mut book, "l4", None, 2).as_deref(),
        Some("default/a")
    );
}

#[test]
fn active_leases_in_order_reads_every_key_as_one_lookup_would() {
    let mut book = book([proxy("a", 10, 2), proxy("c", 20, 2), proxy("e", 30, 2)]);
    for (id, now) in [("l1", 0), ("l2", 0), ("l3", 0), ("l4", 0)] {
        assert!(leased(&mut book, id, None, now).is_some());
    }
    // a: 2, c: 1, e: 1; then c removed while it holds its lease.
    assert!(book.remove(&key("c")));
    let keys: Vec<ProxyKey> = ["a", "b", "c", "e", "f"].map(key).into();
    let one_by_one: Vec<u32> = keys.iter().map(|k| book.active_leases(k, at(0))).collect();
    assert_eq!(one_by_one, [2, 0, 1, 1, 0]);
    assert_eq!(book.active_leases_in_order(&keys, at(0)), one_by_one);
    // Gaps, repeats and steps back answer the same.
    let shuffled: Vec<ProxyKey> = ["e", "a", "a", "f", "c", "b"].map(key).into();
    assert_eq!(
        book.active_leases_in_order(&shuffled, at(0)),
        [1, 2, 2, 0, 1, 0]
    );
    assert_eq!(
        book.active_leases_in_order(&[] as &[ProxyKey], at(0)),
        Vec::<u32>::new()
    );
}

#[test]
fn active_leases_in_order_jumps_the_gaps_of_a_sparse_page() {
    let names: Vec<String> = (0..100).map(|i| format!("p{i:03}")).collect();
    let mut book = book(names.iter().map(|name| proxy(name, 10, 100)));
    for i in 0..150 {
        assert!(leased(&mut book, &format!("l{i}"), None, 0).is_some());
    }
    // Every 37th proxy, then a tail of neighbours, then keys the book does not know.
    let mut keys: Vec<ProxyKey> = (0..100).step_by(37).map(|i| key(&names[i])).collect();
    keys.extend((95..100).map(|i| key(&names[i])));
    keys.extend(["p100", "zz"].map(key));
    let one_by_one: Vec<u32> = keys.iter().map(|k| book.active_leases(k, at(0))).collect();
    // One lease each, then 50 more on the first 50 by key (the tie-break).
    assert_eq!(one_by_one, [2, 2, 1, 1, 1, 1, 1, 1, 0, 0]);
    assert_eq!(book.active_leases_in_order(&keys, at(0)), one_by_one);
}

#[test]
fn an_upsert_moves_the_proxy_in_the_order() {
    let mut book = book([proxy("a", 10, 5), proxy("b", 20, 5)]);
    book.upsert(proxy("a", 30, 5));
    assert_eq!(
        leased(&mut book, "l1", None, 0).as_deref(),
        Some("default/b")
    );
    book.upsert(labelled(proxy("b", 20, 5), &[("geo", "eu")]));
    let lease = book.acquire(request("l2", selector(&[("geo", "eu")]), None, 60), at(0));
    assert_eq!(lease.unwrap().proxy, "default/b");
    book.upsert(proxy("b", 20, 5));
    let lease = book.acquire(request("l3", selector(&[("geo", "eu")]), None, 60), at(0));
    assert_eq!(lease, Err(no_match(0, 0, 0, 0)));
}

#[test]
fn the_same_calls_give_the_same_book() {
    let run = || {
        let mut book = book([proxy("a", 10, 1), proxy("b", 10, 2), proxy("c", 5, 0)]);
        let mut answers = Vec::new();
        for (i, now) in [0, 1, 30, 61, 62].into_iter().enumerate() {
            answers.push(leased(&mut book, &format!("l{i}"), Some("t"), now));
            book.report(&format!("l{i}"), ReportResult::RateLimited, None, at(now))
                .ok();
        }
        (book, answers)
    };
    assert_eq!(run(), run());
}

#[test]
fn api_values_serialize_as_the_discovery_api_spells_them() {
    let mut stats = NoMatch {
        considered: 8,
        at_capacity: 2,
        in_cooldown: 2,
        unhealthy: 3,
        unreachable: 1,
        retry_at: None,
    };
    let expected = serde_json::json!({"considered": 8, "atCapacity": 2, "inCooldown": 2,
                                      "unhealthy": 3, "unreachable": 1});
    assert_eq!(serde_json::to_value(stats).unwrap(), expected);
    stats.retry_at = Some(at(0));
    let expected = serde_json::json!({"considered": 8, "atCapacity": 2, "inCooldown": 2,
                                      "unhealthy": 3, "unreachable": 1,
                                      "retryAt": "2026-05-28T20:26:40Z"});
    assert_eq!(serde_json::to_value(stats).unwrap(), expected);
    assert_eq!(serde_json::from_value::<NoMatch>(expected).unwrap(), stats);

    let results: Vec<ReportResult> =
        serde_json::from_str(r#"["ok", "rate_limited", "blocked", "error", "unreachable"]"#)
            .unwrap();
    use ReportResult::*;
    assert_eq!(results, [Ok, RateLimited, Blocked, Error, Unreachable]);
    assert!(serde_json::from_str::<ReportResult>(r#""banned""#).is_err());

    let parsed: Selector = serde_json::from_str(r#"{"geo": "eu", "tier": "a"}"#).unwrap();
    assert_eq!(parsed, selector(&[("tier", "a"), ("geo", "eu")]));
}

/// Past `max_retained` ended leases, the one that ended first is forgotten before its
/// retention is over (a report on it answers unknown), whether it ended by release or by
/// expiry; an active lease is never touched.
#[test]
fn past_max_retained_the_lease_that_ended_first_is_forgotten() {
    let config = LeaseConfig {
        max_retained: 2,
        ..LeaseConfig::default()
    };
    let mut book = LeaseBook::new(config);
    book.upsert(proxy("a", 10, 10));
    // Granted at 0 to 3 s, each for 600 s.
    for (i, id) in ["l1", "l2", "l3", "l4"].into_iter().enumerate() {
        acquire(&mut book, id, None, i as i64).unwrap();
    }
    assert!(book.release("l2", at(10)));
    assert!(book.release("l3", at(20)));
    for id in ["l1", "l2", "l3", "l4"] {
        assert!(book.knows(id, at(20)), "two ended, two active: {id}");
    }
    assert_eq!(
        (book.active_total(at(20)), book.retained_total(at(20))),
        (2, 2)
    );
    // l1 expires at 600 s: three ended, and l2 ended first.
    assert!(!book.knows("l2", at(600)));
    let forgotten = book.report("l2", ReportResult::Blocked, None, at(600));
    assert_eq!(forgotten, Err(UnknownLease));
    assert!(matches!(
        book.report("l3", ReportResult::Blocked, None, at(600)),
        Ok(Some(_))
    ));
    assert!(book.knows("l1", at(600)) && book.knows("l4", at(600)));
    assert_eq!(
        book.active_leases(&key("a"), at(600)),
        1,
        "l4 still holds its place"
    );
    // l4 expires at 603 s: l3 goes.
    assert!(!book.knows("l3", at(603)));
    assert!(book.knows("l1", at(603)) && book.knows("l4", at(603)));
    assert_eq!(book.active_leases(&key("a"), at(603)), 0);
    assert_eq!(
        (book.active_total(at(603)), book.retained_total(at(603))),
        (0, 2)
    );
}

/// A lease names its holder: the book lists a holder's active leases (or every active lease)
/// by ID, and ends them all at once, for a crawler that lost track of them.
#[test]
fn a_holders_active_leases_are_listed_and_released_together() {
    let mut book = book([proxy("a", 10, 5), proxy("b", 20, 5)]);
    let held = |id: &str, holder: Option<&str>, ttl: u64, now: i64, book: &mut LeaseBook| {
        let mut request = request(id, Selector::all(), Some("shop.example"), ttl);
        request.holder = holder.map(str::to_owned);
        book.acquire(request, at(now)).unwrap()
    };
    let first = held("l2", Some("crawler/1"), 600, 0, &mut book);
    assert_eq!(first.holder.as_deref(), Some("crawler/1"));
    held("l1", Some("crawler/1"), 600, 0, &mut book);
    held("l3", Some("crawler/1"), 10, 0, &mut book);
    held("l4", Some("crawler/2"), 600, 0, &mut book);
    held("l5", None, 600, 0, &mut book);
    let ids = |leases: Vec<&Lease>| leases.iter().map(|l| l.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(book.leases(Some("crawler/1"), at(1))),
        ["l1", "l2", "l3"]
    );
    // Read as of `now`: an expired lease is not listed, though nothing expired it yet.
    assert_eq!(ids(book.leases(Some("crawler/1"), at(10))), ["l1", "l2"]);
    assert_eq!(ids(book.leases(None, at(10))), ["l1", "l2", "l4", "l5"]);
    assert_eq!(
        ids(book.leases(Some("nobody"), at(10))),
        Vec::<String>::new()
    );
    // Holders compare exactly.
    assert!(book.leases(Some("Crawler/1"), at(1)).is_empty());

    assert!(book.release("l1", at(11)));
    assert_eq!(
        book.release_held_by("crawler/1", at(12)),
        1,
        "l2 alone was left"
    );
    assert_eq!(book.release_held_by("crawler/1", at(12)), 0);
    assert_eq!(book.active_total(at(12)), 2);
    assert!(book.leases(Some("crawler/1"), at(12)).is_empty());
    // Ended leases are retained as any release leaves them: a late report still lands.
    assert!(
        book.report("l2", ReportResult::Blocked, None, at(13))
            .is_ok()
    );
    assert_eq!(ids(book.leases(None, at(13))), ["l4", "l5"]);
}

#[test]
fn a_report_result_is_written_as_the_api_reads_it() {
    use proxy_core::lease::ReportResult;
    for result in [
        ReportResult::Ok,
        ReportResult::RateLimited,
        ReportResult::Blocked,
        ReportResult::Error,
    ] {
        assert_eq!(serde_json::to_value(result).unwrap(), result.as_str());
    }
}
