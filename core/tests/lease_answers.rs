//! Table tests of what the lease book answers a crawler, so that the crawler keeps no clock
//! and no table of its own: a report's answer (what was recorded, whether to lease again,
//! when the proxy's cooldown for the site ends, a report heard before), when a refused
//! lease can be granted (`retryAt`), and views that end expired leases before they count.

#[path = "support/fleet.rs"]
mod fleet;

use std::time::Duration;

use fleet::{at, key, proxy};
use jiff::Timestamp;
use proxy_core::lease::{
    AcquireError, AcquireRequest, LeaseBook, LeaseConfig, NoMatch, ProxyView, REPORT_ID_MEMORY,
    Report, ReportId, ReportResult, Reported, Selector, SessionName, StatusMeaning, Sticky,
    UnknownLease, UnknownSession, meaning_of, seconds_until,
};

const MINUTE: i64 = 60;

/// Cooldowns of 10 s for a rate limit and 60 s for a block.
fn config() -> LeaseConfig {
    LeaseConfig {
        rate_limited_cooldown: Duration::from_secs(10),
        blocked_cooldown: Duration::from_secs(60),
        ..LeaseConfig::default()
    }
}

fn book(proxies: impl IntoIterator<Item = ProxyView>) -> LeaseBook {
    let mut book = LeaseBook::new(config());
    for proxy in proxies {
        book.upsert(proxy);
    }
    book
}

fn request(id: &str, target: Option<&str>, ttl_secs: u64) -> AcquireRequest {
    AcquireRequest {
        id: id.to_owned(),
        selector: Selector::all(),
        target: target.map(str::to_owned),
        ttl: Duration::from_secs(ttl_secs),
        distinct_egress: false,
        holder: None,
    }
}

fn status(code: u16) -> StatusMeaning {
    meaning_of(code).unwrap()
}

fn result(result: ReportResult) -> StatusMeaning {
    StatusMeaning::Report(result)
}

fn report(saw: StatusMeaning, id: Option<&str>) -> Report {
    Report {
        saw,
        target: None,
        id: id.map(|id| ReportId::parse(id).unwrap()),
    }
}

fn answer(
    result: Option<ReportResult>,
    lease_again: bool,
    cooldown_until: Option<Timestamp>,
    repeated: bool,
) -> Reported {
    Reported {
        result,
        lease_again,
        target: Some("shop.example".into()),
        cooldown_until,
        repeated,
        circuit: None,
    }
}

/// The site statistics of proxy `a` for shop.example: (ok, rate limited, blocked).
fn counts(book: &LeaseBook, now: Timestamp) -> (u32, u32, u32) {
    book.sites(&key("a"), now)
        .iter()
        .find(|site| site.target == "shop.example")
        .map_or((0, 0, 0), |site| {
            (site.stats.ok, site.stats.rate_limited, site.stats.blocked)
        })
}

#[test]
fn a_report_is_answered_with_what_was_recorded_and_what_to_do_next() {
    use ReportResult::{Blocked, Error, Ok as Page, RateLimited};
    // (what the crawler saw, at, the answer, site counts after: ok, rate limited, blocked)
    type Case = (StatusMeaning, i64, Reported, (u32, u32, u32));
    let cases: [Case; 7] = [
        // A page: keep the lease, nothing cools down.
        (
            status(200),
            1,
            answer(Some(Page), false, None, false),
            (1, 0, 0),
        ),
        // 407: nothing recorded, lease again (the credentials changed).
        (status(407), 2, answer(None, true, None, false), (1, 0, 0)),
        // 429: cools down for 10 s.
        (
            status(429),
            3,
            answer(Some(RateLimited), true, Some(at(13)), false),
            (1, 1, 0),
        ),
        // A page that was on its way: recorded, and the answer says the proxy cools down.
        (
            status(200),
            4,
            answer(Some(Page), true, Some(at(13)), false),
            (2, 1, 0),
        ),
        // A ban page the crawler recognised: 60 s from now, never shortened.
        (
            result(Blocked),
            5,
            answer(Some(Blocked), true, Some(at(65)), false),
            (2, 1, 1),
        ),
        // A later 429 does not shorten the block.
        (
            status(429),
            6,
            answer(Some(RateLimited), true, Some(at(65)), false),
            (2, 2, 1),
        ),
        // After the cooldown: an error keeps the lease.
        (
            status(503),
            70,
            answer(Some(Error), false, None, false),
            (2, 0, 0),
        ),
    ];
    let mut book = book([proxy("a", 10, 5)]);
    book.acquire(request("l1", Some("shop.example"), 600), at(0))
        .unwrap();
    for (saw, now, expected, after) in cases {
        let answered = book.submit("l1", &report(saw, None), at(now));
        assert_eq!(answered, Ok(expected), "{saw:?} at {now}");
        if now < 70 {
            assert_eq!(counts(&book, at(now)), after, "{saw:?} at {now}");
        }
    }
}

#[test]
fn a_report_on_an_ended_lease_lands_and_says_to_lease_again_and_an_unknown_one_is_refused() {
    let mut book = book([proxy("a", 10, 5)]);
    book.acquire(request("l1", Some("shop.example"), 600), at(0))
        .unwrap();
    assert!(book.release("l1", at(1)));
    let late = book.submit("l1", &report(status(200), None), at(2));
    assert_eq!(
        late,
        Ok(answer(Some(ReportResult::Ok), true, None, false)),
        "recorded, and the lease is over"
    );
    assert_eq!(counts(&book, at(2)), (1, 0, 0));
    assert_eq!(
        book.submit("nope", &report(status(200), None), at(2)),
        Err(UnknownLease)
    );
}

#[test]
fn a_report_heard_again_is_recorded_once_on_its_lease() {
    let mut book = book([proxy("a", 10, 5)]);
    for id in ["l1", "l2"] {
        book.acquire(request(id, Some("shop.example"), 3600), at(0))
            .unwrap();
    }
    let first = book.submit("l1", &report(status(429), Some("r-1")), at(1));
    assert_eq!(
        first,
        Ok(answer(
            Some(ReportResult::RateLimited),
            true,
            Some(at(11)),
            false
        ))
    );
    // Sent again 5 s later (its first answer was lost): counted once, the cooldown not
    // pushed back, and the answer says so.
    let again = book.submit("l1", &report(status(429), Some("r-1")), at(6));
    assert_eq!(
        again,
        Ok(answer(
            Some(ReportResult::RateLimited),
            true,
            Some(at(11)),
            true
        ))
    );
    assert_eq!(counts(&book, at(6)), (0, 1, 0));
    // The same ID on another lease is another report.
    let other = book.submit("l2", &report(status(429), Some("r-1")), at(7));
    assert_eq!(
        other,
        Ok(answer(
            Some(ReportResult::RateLimited),
            true,
            Some(at(17)),
            false
        ))
    );
    assert_eq!(counts(&book, at(7)), (0, 2, 0));
    // A report with no ID counts every time.
    book.submit("l2", &report(status(200), None), at(8))
        .unwrap();
    book.submit("l2", &report(status(200), None), at(8))
        .unwrap();
    assert_eq!(counts(&book, at(8)), (2, 2, 0));
    // Past the memory, the ID is heard anew.
    let memory = REPORT_ID_MEMORY.as_secs() as i64;
    let late = book.submit("l1", &report(status(200), Some("r-1")), at(1 + memory));
    assert!(!late.unwrap().repeated);
}

#[test]
fn a_session_report_answers_alike_and_a_ban_ends_the_session() {
    let mut book = book([proxy("a", 10, 5), proxy("b", 20, 5)]);
    let name = SessionName::parse("acme:s1").unwrap();
    let sticky = Sticky {
        session: Some(name.clone()),
        avoid: Vec::new(),
    };
    book.acquire_with(request("s", Some("shop.example"), 600), &sticky, at(0))
        .unwrap();
    let ok = book.submit_session(&name, &report(status(200), None), at(1));
    assert_eq!(ok, Ok(answer(Some(ReportResult::Ok), false, None, false)));
    let banned = book.submit_session(&name, &report(status(403), None), at(2));
    assert_eq!(
        banned,
        Ok(answer(
            Some(ReportResult::Blocked),
            true,
            Some(at(62)),
            false
        ))
    );
    assert_eq!(
        book.submit_session(&name, &report(status(200), None), at(3)),
        Err(UnknownSession),
        "the ban ended it"
    );
}

#[test]
fn a_refused_lease_says_when_the_first_proxy_cooling_down_for_the_target_is_free() {
    // a and b cool down for shop.example (b for longer); c is full and cools down too,
    // so its cooldown's end is no promise; d is unhealthy.
    let mut book = book([
        proxy("a", 10, 5),
        proxy("b", 10, 5),
        proxy("c", 10, 1),
        ProxyView {
            healthy: false,
            ..proxy("d", 10, 5)
        },
    ]);
    for (id, rate_limited) in [("la", true), ("lb", false), ("lc", true)] {
        let lease = book
            .acquire(request(id, Some("shop.example"), 600), at(0))
            .unwrap();
        let result = if rate_limited {
            ReportResult::RateLimited
        } else {
            ReportResult::Blocked
        };
        book.report(id, result, None, at(0)).unwrap();
        if lease.proxy != key("c") {
            book.release(id, at(0));
        }
    }
    let refused = |book: &mut LeaseBook, id: &str, target: Option<&str>, now: i64| -> NoMatch {
        match book.acquire(request(id, target, 60), at(now)) {
            Err(AcquireError::NoMatch(stats)) => stats,
            other => panic!("{id}: expected no match, got {other:?}"),
        }
    };
    // (target, at, considered, at capacity, in cooldown, unhealthy, retry at)
    let cases = [
        (Some("shop.example"), 1, 4, 1, 2, 1, Some(at(10))),
        (Some("SHOP.example"), 9, 4, 1, 2, 1, Some(at(10))),
        // a is free again at 10 s: leased.
    ];
    for (n, (target, now, considered, at_capacity, in_cooldown, unhealthy, retry_at)) in
        cases.into_iter().enumerate()
    {
        let stats = refused(&mut book, &format!("r{n}"), target, now);
        assert_eq!(
            stats,
            NoMatch {
                considered,
                at_capacity,
                in_cooldown,
                unhealthy,
                unreachable: 0,
                retry_at
            },
            "{target:?} at {now}"
        );
        assert_eq!(stats.retry_after(at(now)), Some(10 - now as u64));
    }
    assert_eq!(
        book.acquire(request("free", Some("shop.example"), 60), at(10))
            .unwrap()
            .proxy,
        key("a")
    );
    // a is rate-limited again at 10 s: the first end is a's, 10 s later, before b's.
    book.report("free", ReportResult::RateLimited, None, at(10))
        .unwrap();
    let stats = refused(&mut book, "r9", Some("shop.example"), 11);
    assert_eq!((stats.in_cooldown, stats.retry_at), (2, Some(at(20))));
    // Another target: nothing cools down, so nothing to promise.
    for id in ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9"] {
        book.acquire(request(id, Some("other.example"), 600), at(12))
            .unwrap();
    }
    let full = refused(&mut book, "r10", Some("other.example"), 12);
    assert_eq!(
        (full.at_capacity, full.in_cooldown, full.retry_at),
        (3, 0, None)
    );
    assert_eq!(full.retry_after(at(12)), None);
}

#[test]
fn seconds_until_round_up_and_are_at_least_one() {
    let now = at(100);
    let cases = [
        (at(110), 10),
        (
            now.checked_add(jiff::SignedDuration::from_millis(10_001))
                .unwrap(),
            11,
        ),
        (
            now.checked_add(jiff::SignedDuration::from_millis(1))
                .unwrap(),
            1,
        ),
        (now, 1),
        (at(50), 1),
    ];
    for (until, seconds) in cases {
        assert_eq!(seconds_until(until, now), seconds, "{until}");
    }
}

#[test]
fn every_view_ends_the_leases_that_expired_before_it_counts() {
    // A lease of 1 s on a, and nothing else happens until 30 s later: every view that
    // counts leases says 0, without any call ending it first.
    let fresh = || {
        let mut book = book([proxy("a", 10, 5)]);
        book.acquire(request("short", None, 1), at(0)).unwrap();
        book
    };
    let later = at(30);
    assert_eq!(fresh().active_total(later), 0);
    assert_eq!(fresh().active_leases(&key("a"), later), 0);
    assert_eq!(fresh().active_leases_in_order(&[key("a")], later), [0]);
    assert_eq!(fresh().list(&Selector::all(), false, later)[0].active, 0);
    assert_eq!(fresh().detail(&key("a"), later).unwrap().listed.active, 0);
    assert_eq!(
        fresh().retained_total(later),
        1,
        "ended, kept for late reports"
    );
    // And before its end, each counts it.
    assert_eq!(fresh().active_total(at(0)), 1);
    assert_eq!(fresh().detail(&key("a"), at(0)).unwrap().listed.active, 1);
    let minute = at(MINUTE);
    let mut session = book([proxy("a", 10, 5)]);
    let sticky = Sticky {
        session: Some(SessionName::parse("acme:s1").unwrap()),
        avoid: Vec::new(),
    };
    session
        .acquire_with(request("s", None, 1), &sticky, at(0))
        .unwrap();
    assert_eq!(session.sessions_total(minute), 0);
}
