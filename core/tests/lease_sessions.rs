//! Sessions in the lease book: a session is its one active lease, resumed while its proxy
//! still fits, moved when it does not, ended by its TTL, a release or a ban report, and
//! saved with the book's checkpoint. Also the proxies a request avoids.

use std::time::Duration;

use jiff::Timestamp;
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireError, AcquireRequest, Grant, LeaseBook, LeaseConfig, MoveReason, ProxyView, Report,
    ReportResult, Selector, SessionName, StatusMeaning, Sticky, UnknownSession,
};
use proxy_core::testing::proxy_view;

/// A report of `result` on `target` (else the lease's), without an ID.
fn by(result: ReportResult, target: Option<&str>) -> Report {
    Report {
        saw: StatusMeaning::Report(result),
        target: target.map(str::to_owned),
        id: None,
    }
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

fn key(name: &str) -> ProxyKey {
    ProxyKey::new("crawl", name)
}

fn proxy(name: &str, geo: &str, max_leases: u32) -> ProxyView {
    ProxyView {
        labels: [("geo".to_owned(), geo.to_owned())].into(),
        max_leases,
        ..proxy_view(key(name))
    }
}

/// Three proxies in `eu`, each taking two leases.
fn fleet() -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig::default());
    for name in ["a", "b", "c"] {
        book.upsert(proxy(name, "eu", 2));
    }
    book
}

fn request(id: &str, target: &str) -> AcquireRequest {
    AcquireRequest {
        id: id.to_owned(),
        selector: [("geo", "eu")].into_iter().collect(),
        target: Some(target.to_owned()),
        ttl: Duration::from_secs(300),
        distinct_egress: false,
        holder: None,
    }
}

fn session(name: &str) -> Sticky {
    Sticky {
        session: Some(SessionName::parse(name).unwrap()),
        avoid: Vec::new(),
    }
}

/// Acquires for `sticky`; the grant's kind and proxy name.
fn ask(
    book: &mut LeaseBook,
    id: &str,
    target: &str,
    sticky: &Sticky,
    now: i64,
) -> (String, String) {
    let grant = book
        .acquire_with(request(id, target), sticky, at(now))
        .unwrap_or_else(|e| panic!("{id}: {e:?}"));
    let kind = match &grant {
        Grant::New(_) => "new".to_owned(),
        Grant::Resumed(_) => "resumed".to_owned(),
        Grant::Moved { from, why, .. } => format!("moved from {} ({})", from.name(), why.as_str()),
    };
    (kind, grant.lease().proxy.name().to_owned())
}

#[test]
fn a_session_keeps_its_proxy_until_its_ttl_and_a_new_session_gets_another() {
    let mut book = fleet();
    let s1 = session("acme:s1");
    assert_eq!(
        ask(&mut book, "1", "shop.example", &s1, 0),
        ("new".into(), "a".into())
    );
    // Every later request of the session, whatever its ID and target, resumes the lease.
    for (i, target) in ["shop.example", "other.example", "SHOP.example"]
        .iter()
        .enumerate()
    {
        let id = format!("again-{i}");
        assert_eq!(
            ask(&mut book, &id, target, &s1, 10),
            ("resumed".into(), "a".into())
        );
    }
    assert_eq!(book.active_total(at(10)), 1, "one session, one lease");
    // A second session takes the least-leased proxy.
    assert_eq!(
        ask(&mut book, "2", "shop.example", &session("acme:s2"), 20),
        ("new".into(), "b".into())
    );
    // The TTL ends the session: the next request is a new lease (a is again least leased).
    assert_eq!(
        ask(&mut book, "3", "shop.example", &s1, 301),
        ("new".into(), "a".into())
    );
    let lease = book
        .session_lease(&SessionName::parse("acme:s1").unwrap(), at(301))
        .map(|l| l.id.clone());
    assert_eq!(lease.as_deref(), Some("3"));
}

#[test]
fn a_ban_report_ends_the_session_and_its_next_request_moves() {
    let mut book = fleet();
    let s1 = session("acme:s1");
    let name = s1.session.clone().unwrap();
    ask(&mut book, "1", "shop.example", &s1, 0);
    // `ok` and `error` keep the session.
    for result in [ReportResult::Ok, ReportResult::Error] {
        book.submit_session(&name, &by(result, None), at(1))
            .unwrap();
        assert_eq!(ask(&mut book, "x", "shop.example", &s1, 2).0, "resumed");
    }
    // A 429 from the site: the lease ends, the proxy cools down for the site.
    let reported = book
        .submit_session(
            &name,
            &by(ReportResult::RateLimited, Some("shop.example")),
            at(3),
        )
        .unwrap();
    assert!(
        reported.lease_again && reported.cooldown_until.is_some(),
        "{reported:?}"
    );
    assert_eq!(book.active_leases(&key("a"), at(3)), 0);
    assert_eq!(
        book.submit_session(&name, &by(ReportResult::Blocked, None), at(4)),
        Err(UnknownSession),
        "the session has no active lease until its next request"
    );
    assert_eq!(
        ask(&mut book, "2", "shop.example", &s1, 5),
        ("new".into(), "b".into())
    );
    // The report by lease ID ends a session lease the same way.
    book.report("2", ReportResult::Blocked, None, at(6))
        .unwrap();
    assert_eq!(
        ask(&mut book, "3", "shop.example", &s1, 7),
        ("new".into(), "c".into())
    );
    // A lease of no session is not ended by a ban report: its crawler decides.
    ask(&mut book, "plain", "shop.example", &Sticky::default(), 8);
    book.report("plain", ReportResult::Blocked, None, at(9))
        .unwrap();
    assert_eq!(book.active_total(at(9)), 2);
}

#[test]
fn a_session_moves_when_its_proxy_no_longer_fits() {
    let mut book = fleet();
    let s1 = session("acme:s1");
    ask(&mut book, "1", "shop.example", &s1, 0);
    // Cooling down for this target (reported by another crawler's lease on a).
    let on_a = Sticky {
        session: None,
        avoid: vec![key("b"), key("c")],
    };
    ask(&mut book, "other", "shop.example", &on_a, 1);
    book.report("other", ReportResult::RateLimited, None, at(2))
        .unwrap();
    // Still fine for another site, moved for the cooled one.
    assert_eq!(ask(&mut book, "x", "news.example", &s1, 3).0, "resumed");
    assert_eq!(
        ask(&mut book, "2", "shop.example", &s1, 4),
        ("moved from a (cooling_down)".into(), "b".into())
    );
    // Unhealthy.
    let mut sick = proxy("b", "eu", 2);
    sick.healthy = false;
    book.upsert(sick);
    assert_eq!(
        ask(&mut book, "3", "news.example", &s1, 5).0,
        "moved from b (unhealthy)"
    );
    // Gone from the fleet.
    let on = ask(&mut book, "4", "news.example", &s1, 6).1;
    book.remove(&key(&on));
    assert_eq!(
        ask(&mut book, "5", "news.example", &s1, 7).0,
        format!("moved from {on} (gone)")
    );
    // Avoided (the gateway could not connect to it); the removed proxy is back.
    book.upsert(proxy(&on, "eu", 2));
    let on = ask(&mut book, "6", "news.example", &s1, 8).1;
    let avoiding = Sticky {
        avoid: vec![key(&on)],
        ..s1.clone()
    };
    let (kind, now_on) = ask(&mut book, "7", "news.example", &avoiding, 9);
    assert_eq!(kind, format!("moved from {on} (avoided)"));
    assert_ne!(now_on, on);
    // No longer selected: the request asks for another label value.
    book.upsert(proxy("us", "us", 2));
    let mut elsewhere = request("8", "news.example");
    elsewhere.selector = [("geo", "us")].into_iter().collect::<Selector>();
    let grant = book.acquire_with(elsewhere, &s1, at(10)).unwrap();
    assert!(
        matches!(
            grant,
            Grant::Moved {
                why: MoveReason::Unselected,
                ..
            }
        ),
        "{grant:?}"
    );
    assert_eq!(grant.lease().proxy, key("us"));
}

#[test]
fn a_session_holds_one_place_and_a_move_with_nothing_left_ends_it() {
    let mut book = LeaseBook::new(LeaseConfig::default());
    book.upsert(proxy("a", "eu", 1));
    let s1 = session("acme:s1");
    ask(&mut book, "1", "shop.example", &s1, 0);
    // Full, but the session resumes: it holds its place.
    assert_eq!(ask(&mut book, "2", "shop.example", &s1, 1).0, "resumed");
    let refused = book.acquire_with(request("3", "shop.example"), &session("acme:s2"), at(2));
    assert!(
        matches!(refused, Err(AcquireError::NoMatch(_))),
        "{refused:?}"
    );
    // Avoiding the only proxy: the session's lease ends and nothing replaces it.
    let avoiding = Sticky {
        avoid: vec![key("a")],
        ..s1.clone()
    };
    let refused = book.acquire_with(request("4", "shop.example"), &avoiding, at(3));
    match refused {
        Err(AcquireError::NoMatch(stats)) => {
            assert_eq!(stats.considered, 0, "an avoided proxy is no candidate")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(book.active_total(at(3)), 0);
    assert!(
        book.session_lease(&s1.session.clone().unwrap(), at(3))
            .is_none()
    );
}

#[test]
fn ending_a_session_frees_its_place_and_a_release_unbinds_it() {
    let mut book = fleet();
    let s1 = session("acme:s1");
    let name = s1.session.clone().unwrap();
    ask(&mut book, "1", "shop.example", &s1, 0);
    assert!(book.end_session(&name, at(1)));
    assert!(!book.end_session(&name, at(1)), "ended already");
    assert_eq!(book.sessions_total(at(1)), 0);
    ask(&mut book, "2", "shop.example", &s1, 2);
    assert!(book.release("2", at(3)));
    assert_eq!(ask(&mut book, "3", "shop.example", &s1, 4).0, "new");
}

#[test]
fn sessions_survive_a_checkpoint_and_a_book_keeps_its_own_on_a_merge() {
    let mut book = fleet();
    let s1 = session("acme:s1");
    ask(&mut book, "1", "shop.example", &s1, 0);
    ask(&mut book, "ended", "shop.example", &session("acme:gone"), 0);
    book.release("ended", at(1));
    let checkpoint = book.checkpoint(at(2), 100);
    let saved: Vec<_> = checkpoint
        .leases
        .iter()
        .map(|l| (l.id.as_str(), l.session.as_deref()))
        .collect();
    assert_eq!(saved, [("1", Some("acme:s1")), ("ended", None)]);
    let text = serde_json::to_string(&checkpoint).unwrap();
    assert!(text.contains(r#""session":"acme:s1""#), "{text}");

    let mut restored = LeaseBook::new(LeaseConfig::default());
    for name in ["a", "b", "c"] {
        restored.upsert(proxy(name, "eu", 2));
    }
    restored.restore(&checkpoint, at(3)).unwrap();
    assert_eq!(
        ask(&mut restored, "2", "shop.example", &s1, 4),
        ("resumed".into(), "a".into())
    );

    // A book that bound the session itself keeps its own lease for it.
    let mut own = fleet();
    ask(&mut own, "mine", "x.example", &session("acme:s1"), 0);
    own.upsert(proxy("a", "eu", 2));
    own.restore(&checkpoint, at(3)).unwrap();
    let lease = own
        .session_lease(&s1.session.clone().unwrap(), at(4))
        .map(|l| l.id.clone());
    assert_eq!(lease.as_deref(), Some("mine"));
    assert_eq!(own.active_total(at(4)), 2, "both leases hold their places");

    // A bad session name is refused with its path.
    let mut bad = checkpoint.clone();
    bad.leases[0].session = Some("no spaces".into());
    let error = own.restore(&bad, at(3)).unwrap_err();
    assert!(error.0.starts_with("leases[0].session: "), "{error}");
}

#[test]
fn avoided_proxies_are_no_candidates_for_a_request_without_a_session() {
    let mut book = fleet();
    let avoid = Sticky {
        session: None,
        avoid: vec![key("a"), key("b")],
    };
    assert_eq!(ask(&mut book, "1", "shop.example", &avoid, 0).1, "c");
    let avoid_all = Sticky {
        session: None,
        avoid: vec![key("a"), key("b"), key("c")],
    };
    let refused = book.acquire_with(request("2", "shop.example"), &avoid_all, at(1));
    match refused {
        Err(AcquireError::NoMatch(stats)) => assert_eq!(stats.considered, 0),
        other => panic!("{other:?}"),
    }
}
