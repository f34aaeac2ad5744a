//! Ban feedback: what a status code a crawler saw means, the per-site statistics the
//! reports build (their window, their cap, what a checkpoint keeps of them), and the count
//! of distinct blocked sites that bans a proxy.

use std::time::Duration;

use jiff::Timestamp;
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireRequest, InvalidStatus, LeaseBook, LeaseConfig, ProxyView, ReportResult,
    SITES_PER_PROXY, Selector, StatusMeaning, meaning_of,
};
use proxy_core::testing::proxy_view;

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

fn key(name: &str) -> ProxyKey {
    ProxyKey::new("default", name)
}

fn proxy(name: &str) -> ProxyView {
    ProxyView {
        max_leases: 100,
        ..proxy_view(key(name))
    }
}

/// A book of the proxy `a`, with a one-hour site window.
fn book() -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig::default());
    book.upsert(proxy("a"));
    book
}

/// Leases `a` as `id` for `target` (a day long) at `now`.
fn lease(book: &mut LeaseBook, id: &str, target: Option<&str>, now: i64) {
    let request = AcquireRequest {
        id: id.into(),
        selector: Selector::all(),
        target: target.map(str::to_owned),
        ttl: Duration::from_secs(24 * 3600),
        distinct_egress: false,
        holder: None,
    };
    assert_eq!(book.acquire(request, at(now)).unwrap().proxy, key("a"));
}

#[test]
fn status_codes_map_to_crawler_conventions() {
    use ReportResult::{Blocked, Error, RateLimited};
    use StatusMeaning::{Report, WrongCredentials};
    let ok = Ok(Report(ReportResult::Ok));
    let cases = [
        (100, ok),
        (200, ok),
        (204, ok),
        (301, ok),
        (399, ok),
        (400, ok),
        (401, Ok(Report(Blocked))),
        (403, Ok(Report(Blocked))),
        (404, ok),
        (407, Ok(WrongCredentials)),
        (410, ok),
        (429, Ok(Report(RateLimited))),
        (499, ok),
        (500, Ok(Report(Error))),
        (502, Ok(Report(Error))),
        (503, Ok(Report(Error))),
        (599, Ok(Report(Error))),
        (0, Err(InvalidStatus(0))),
        (99, Err(InvalidStatus(99))),
        (600, Err(InvalidStatus(600))),
        (u16::MAX, Err(InvalidStatus(u16::MAX))),
    ];
    for (status, expected) in cases {
        assert_eq!(meaning_of(status), expected, "{status}");
    }
    // Lease again exactly when the proxy now cools down for the site, or refused the
    // credentials.
    for (status, lease_again, result) in [
        (200, false, Some(ReportResult::Ok)),
        (404, false, Some(ReportResult::Ok)),
        (401, true, Some(ReportResult::Blocked)),
        (403, true, Some(ReportResult::Blocked)),
        (407, true, None),
        (429, true, Some(ReportResult::RateLimited)),
        (503, false, Some(ReportResult::Error)),
    ] {
        let meaning = meaning_of(status).unwrap();
        assert_eq!(
            (meaning.lease_again(), meaning.result()),
            (lease_again, result),
            "{status}"
        );
    }
    assert_eq!(
        InvalidStatus(600).to_string(),
        "status must be an HTTP status code (100 to 599), not 600"
    );
}

#[test]
fn reports_count_per_site_with_the_last_result_and_the_cooldown() {
    let mut book = book();
    lease(&mut book, "l1", Some("Shop.example"), 0);
    for (result, now) in [
        (ReportResult::Ok, 1),
        (ReportResult::Ok, 2),
        (ReportResult::RateLimited, 3),
        (ReportResult::Error, 4),
    ] {
        book.report("l1", result, None, at(now)).unwrap();
    }
    // Another site, named by the report rather than the lease; a report without any target
    // names no site.
    book.report("l1", ReportResult::Blocked, Some("News.example"), at(5))
        .unwrap();
    lease(&mut book, "l2", None, 5);
    book.report("l2", ReportResult::Blocked, None, at(6))
        .unwrap();

    let sites = book.sites(&key("a"), at(10));
    let got: Vec<_> = sites
        .iter()
        .map(|site| {
            let s = site.stats;
            (
                site.target,
                (s.ok, s.rate_limited, s.blocked, s.error),
                s.last,
                s.last_at,
                s.window_start,
                site.cooldown_until,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "news.example",
                (0, 0, 1, 0),
                ReportResult::Blocked,
                at(5),
                at(5),
                Some(at(5 + 30 * MINUTE)),
            ),
            (
                "shop.example",
                (2, 1, 0, 1),
                ReportResult::Error,
                at(4),
                at(1),
                Some(at(3 + 5 * MINUTE)),
            ),
        ]
    );
    // A cooldown that ended is not shown; the statistics stay.
    let later = book.sites(&key("a"), at(10 * MINUTE));
    assert_eq!(later[1].cooldown_until, None);
    assert_eq!(later[1].stats.ok, 2);
    assert!(book.sites(&key("nobody"), at(10)).is_empty());
}

#[test]
fn the_window_restarts_the_counts_and_a_site_is_forgotten_a_window_after_its_last_report() {
    let mut book = book();
    lease(&mut book, "l1", Some("shop.example"), 0);
    book.report("l1", ReportResult::Blocked, None, at(0))
        .unwrap();
    book.report("l1", ReportResult::Ok, None, at(50 * MINUTE))
        .unwrap();
    // Read at 70 min: the window (0 to 60 min) ended, so the counts read zero; the last
    // report is kept.
    let stale = book.sites(&key("a"), at(70 * MINUTE))[0].stats;
    assert_eq!(
        (stale.ok, stale.blocked, stale.last),
        (0, 0, ReportResult::Ok)
    );
    // A report after the window starts a new one.
    book.report("l1", ReportResult::Ok, None, at(70 * MINUTE))
        .unwrap();
    let fresh = book.sites(&key("a"), at(71 * MINUTE))[0].stats;
    assert_eq!((fresh.ok, fresh.blocked), (1, 0));
    assert_eq!(fresh.window_start, at(70 * MINUTE));
    // One window after the last report the site is gone, also from the checkpoint.
    book.expire(at(130 * MINUTE));
    assert!(book.sites(&key("a"), at(130 * MINUTE)).is_empty());
    assert!(
        book.checkpoint(at(130 * MINUTE), usize::MAX)
            .sites
            .is_empty()
    );
}

#[test]
fn a_proxy_keeps_at_most_the_cap_of_sites_and_drops_the_one_reported_longest_ago() {
    let mut book = book();
    lease(&mut book, "l1", None, 0);
    let cap = i64::try_from(SITES_PER_PROXY).unwrap();
    for i in 0..=cap {
        let site = format!("s{i}.example");
        book.report("l1", ReportResult::Ok, Some(&site), at(i))
            .unwrap();
        // s0 is reported again, so s1 is the one reported longest ago.
        if i == 0 {
            book.report("l1", ReportResult::Ok, Some("s0.example"), at(cap))
                .unwrap();
        }
    }
    let sites: Vec<String> = book
        .sites(&key("a"), at(cap))
        .iter()
        .map(|site| site.target.to_owned())
        .collect();
    assert_eq!(sites.len(), SITES_PER_PROXY);
    assert!(sites.contains(&"s0.example".to_owned()));
    assert!(!sites.contains(&"s1.example".to_owned()));
    assert!(sites.contains(&format!("s{cap}.example")));
}

#[test]
fn blocked_sites_count_distinct_targets_within_the_window() {
    let mut book = book();
    lease(&mut book, "l1", None, 0);
    let block = |book: &mut LeaseBook, site: &str, now: i64| {
        book.report("l1", ReportResult::Blocked, Some(site), at(now))
            .unwrap();
    };
    block(&mut book, "a.example", 0);
    block(&mut book, "a.example", 10);
    block(&mut book, "b.example", 20 * MINUTE);
    book.report(
        "l1",
        ReportResult::RateLimited,
        Some("c.example"),
        at(30 * MINUTE),
    )
    .unwrap();
    assert_eq!(book.blocked_sites(&key("a"), at(30 * MINUTE)), 2);
    // a.example's block is older than the window at 61 min; an ok on it since does not
    // matter, its last block does.
    book.report("l1", ReportResult::Ok, Some("a.example"), at(40 * MINUTE))
        .unwrap();
    assert_eq!(book.blocked_sites(&key("a"), at(HOUR + 11)), 1);
    assert_eq!(book.blocked_sites(&key("a"), at(HOUR + 20 * MINUTE)), 0);
    assert_eq!(book.blocked_sites(&key("other"), at(0)), 0);
}

#[test]
fn a_removed_proxy_loses_its_statistics_and_gains_none() {
    let mut book = book();
    lease(&mut book, "l1", Some("shop.example"), 0);
    book.report("l1", ReportResult::Blocked, None, at(1))
        .unwrap();
    assert!(book.remove(&key("a")));
    assert!(book.sites(&key("a"), at(2)).is_empty());
    // Its leases still take reports (a cooldown starts), but count in no statistics.
    assert!(
        book.report("l1", ReportResult::Blocked, None, at(3))
            .unwrap()
            .is_some()
    );
    assert_eq!(book.blocked_sites(&key("a"), at(3)), 0);
}

#[test]
fn site_statistics_survive_a_checkpoint_and_the_later_report_wins_a_merge() {
    let mut book = book();
    lease(&mut book, "l1", Some("shop.example"), 0);
    book.report("l1", ReportResult::Blocked, None, at(1))
        .unwrap();
    book.report("l1", ReportResult::Ok, Some("news.example"), at(2))
        .unwrap();
    let checkpoint = book.checkpoint(at(3), usize::MAX);
    let json = serde_json::to_string(&checkpoint).unwrap();
    assert!(
        json.contains(r#""sites":[{"proxy":"default/a","target":"news.example""#),
        "{json}"
    );
    let checkpoint = serde_json::from_str(&json).unwrap();

    let mut other = LeaseBook::new(LeaseConfig::default());
    other.upsert(proxy("a"));
    lease(&mut other, "m1", Some("news.example"), 0);
    // The other book saw news.example later: its statistics stay.
    other
        .report("m1", ReportResult::Error, None, at(4))
        .unwrap();
    let merged = other.restore(&checkpoint, at(5)).unwrap();
    assert_eq!(merged.sites, 1);
    let sites = other.sites(&key("a"), at(5));
    let got: Vec<_> = sites.iter().map(|s| (s.target, s.stats.last)).collect();
    assert_eq!(
        got,
        [
            ("news.example", ReportResult::Error),
            ("shop.example", ReportResult::Blocked)
        ]
    );
    assert_eq!(other.blocked_sites(&key("a"), at(5)), 1);
    // Restoring again changes nothing.
    assert_eq!(other.restore(&checkpoint, at(5)).unwrap().sites, 0);

    // A checkpoint without sites (an older build's) reads as none.
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    old.as_object_mut().unwrap().remove("sites");
    let old: proxy_core::lease::Checkpoint = serde_json::from_value(old).unwrap();
    assert!(old.sites.is_empty());
}

#[test]
fn trimming_sites_keeps_the_latest_reports() {
    let mut book = book();
    lease(&mut book, "l1", None, 0);
    for (i, site) in ["x.example", "y.example", "z.example"].iter().enumerate() {
        let now = i64::try_from(i).unwrap();
        book.report("l1", ReportResult::Ok, Some(site), at(now))
            .unwrap();
    }
    let mut checkpoint = book.checkpoint(at(5), usize::MAX);
    assert_eq!(checkpoint.trim_sites(2), 1);
    let kept: Vec<_> = checkpoint.sites.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(kept, ["y.example", "z.example"]);
}
