//! Passive health in the lease book: `unreachable` reports open a proxy's breaker for every
//! site, one trial lease after the backoff, a success closes it; and the properties the
//! issue names: never opened by what a site did, always closed by a success, the backoff
//! bounded.

#[path = "support/fleet.rs"]
mod fleet;

use std::time::Duration;

use fleet::{at, key, proxy};
use jiff::Timestamp;
use proptest::prelude::*;
use proxy_core::lease::{
    AcquireError, AcquireRequest, Circuit, CircuitConfig, Grant, LeaseBook, LeaseConfig,
    MoveReason, NoMatch, ProxyView, Report, ReportResult, SessionName, StatusMeaning, Sticky, Turn,
    Turned, meaning_of,
};

fn book(proxies: impl IntoIterator<Item = ProxyView>) -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig::default());
    for proxy in proxies {
        book.upsert(proxy);
    }
    book
}

fn request(id: &str, target: Option<&str>) -> AcquireRequest {
    AcquireRequest {
        id: id.to_owned(),
        selector: Default::default(),
        target: target.map(str::to_owned),
        ttl: Duration::from_secs(600),
        distinct_egress: false,
        holder: None,
    }
}

/// The proxy a lease for `target` gets at `now`, or why none.
fn leased(
    book: &mut LeaseBook,
    id: &str,
    target: Option<&str>,
    now: Timestamp,
) -> Result<String, NoMatch> {
    match book.acquire(request(id, target), now) {
        Ok(lease) => Ok(lease.proxy.name().to_owned()),
        Err(AcquireError::NoMatch(stats)) => Err(stats),
        Err(AcquireError::IdInUse) => panic!("IDs are unique here"),
    }
}

fn report(result: ReportResult) -> Report {
    Report {
        saw: StatusMeaning::Report(result),
        target: None,
        id: None,
    }
}

/// Leases `a` (the only proxy) `n` times at `now` and reports each lease unreachable.
fn unreachable_times(book: &mut LeaseBook, n: usize, now: Timestamp) -> Vec<Option<Turned>> {
    (0..n)
        .map(|i| {
            let id = format!("u{i}-{}", now.as_second());
            let lease = book
                .acquire(request(&id, Some("shop.example")), now)
                .unwrap();
            book.submit(&lease.id, &report(ReportResult::Unreachable), now)
                .unwrap()
                .circuit
        })
        .collect()
}

#[test]
fn the_third_unreachable_report_takes_the_proxy_out_for_every_site_and_the_409_says_until_when() {
    let mut book = book([proxy("a", 5, 100)]);
    let turns = unreachable_times(&mut book, 3, at(0));
    assert_eq!(turns[..2], [None, None]);
    assert_eq!(
        turns[2],
        Some(Turned {
            proxy: key("a"),
            turn: Turn::Opened {
                until: at(5),
                trips: 1,
                failures: 3
            }
        })
    );
    for target in [Some("shop.example"), Some("other.example"), None] {
        let refused = leased(&mut book, &format!("x{target:?}"), target, at(1)).unwrap_err();
        assert_eq!(
            refused,
            NoMatch {
                considered: 1,
                unreachable: 1,
                retry_at: Some(at(5)),
                ..NoMatch::default()
            },
            "{target:?}"
        );
        assert_eq!(refused.retry_after(at(1)), Some(4));
    }
    assert_eq!(book.open_circuits(), 1);
    assert!(matches!(book.circuit(&key("a")), Circuit::Open { .. }));
}

#[test]
fn a_healthy_neighbour_takes_the_leases_while_the_breaker_is_open() {
    let mut book = book([proxy("a", 5, 100), proxy("b", 50, 100)]);
    for i in 0..3 {
        let lease = book
            .acquire(request(&format!("u{i}"), None), at(0))
            .unwrap();
        assert_eq!(lease.proxy, key("a"), "a is faster and has room");
        book.report(&lease.id, ReportResult::Unreachable, None, at(0))
            .unwrap();
        // Give the lease back, so that a stays the first choice by its lease count.
        book.release(&lease.id, at(0));
    }
    for i in 0..10 {
        assert_eq!(
            leased(&mut book, &format!("n{i}"), None, at(1)).as_deref(),
            Ok("b")
        );
    }
}

#[test]
fn what_a_site_answered_never_opens_the_breaker_whatever_its_count() {
    let mut book = book([proxy("a", 5, 1000)]);
    let mut seen = Vec::new();
    // The proxy's 502 and 503 for a site it cannot reach, the site's 500, 403, 429, 404.
    for status in [502, 503, 504, 500, 403, 429, 404, 200] {
        for i in 0..10 {
            let id = format!("s{status}-{i}");
            let lease = book
                .acquire(
                    request(&id, Some(&format!("dead{status}-{i}.example"))),
                    at(0),
                )
                .unwrap();
            let saw = meaning_of(status).unwrap();
            let reported = book
                .submit(
                    &lease.id,
                    &Report {
                        saw,
                        target: None,
                        id: None,
                    },
                    at(0),
                )
                .unwrap();
            seen.push(reported.circuit);
        }
    }
    assert!(seen.iter().all(Option::is_none));
    assert_eq!(book.circuit(&key("a")), Circuit::Closed { failures: 0 });
    assert_eq!(book.open_circuits(), 0);
}

#[test]
fn one_trial_lease_after_the_backoff_and_a_good_report_on_it_closes_the_breaker() {
    let mut book = book([proxy("a", 5, 100), proxy("b", 50, 100)]);
    for i in 0..3 {
        let lease = book
            .acquire(request(&format!("u{i}"), None), at(0))
            .unwrap();
        book.report(&lease.id, ReportResult::Unreachable, None, at(0))
            .unwrap();
        book.release(&lease.id, at(0));
    }
    assert_eq!(leased(&mut book, "before", None, at(4)).as_deref(), Ok("b"));
    book.release("before", at(4));
    let trial = book.acquire(request("trial", None), at(5)).unwrap();
    assert_eq!(trial.proxy, key("a"), "the trial");
    for i in 0..5 {
        assert_eq!(
            leased(&mut book, &format!("during{i}"), None, at(6)).as_deref(),
            Ok("b"),
            "one trial at a time"
        );
    }
    // An old lease's good report says nothing about the proxy now.
    book.report("u0", ReportResult::Ok, None, at(6)).unwrap();
    assert!(matches!(book.circuit(&key("a")), Circuit::Trial { .. }));
    let reported = book
        .submit("trial", &report(ReportResult::Blocked), at(6))
        .unwrap();
    assert_eq!(
        reported.circuit,
        Some(Turned {
            proxy: key("a"),
            turn: Turn::Closed
        }),
        "blocked by a site: the proxy reached it"
    );
    assert_eq!(book.circuit(&key("a")), Circuit::Closed { failures: 0 });
    assert_eq!(
        leased(&mut book, "after", Some("other.example"), at(6)).as_deref(),
        Ok("a")
    );
}

#[test]
fn a_failed_trial_doubles_the_time_out_up_to_the_longest() {
    let config = LeaseConfig {
        circuit: CircuitConfig {
            failures: 1,
            backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(15),
        },
        ..LeaseConfig::default()
    };
    let mut book = LeaseBook::new(config);
    book.upsert(proxy("a", 5, 100));
    let mut now = 0;
    let mut outs = Vec::new();
    for i in 0..4 {
        let lease = book
            .acquire(request(&format!("t{i}"), None), at(now))
            .unwrap();
        let reported = book
            .submit(&lease.id, &report(ReportResult::Unreachable), at(now))
            .unwrap();
        let Some(Turned {
            turn: Turn::Opened { until, .. },
            ..
        }) = reported.circuit
        else {
            panic!("trial {i} failed and reopened nothing: {reported:?}");
        };
        let out = until.as_second() - at(now).as_second();
        assert!(leased(&mut book, &format!("early{i}"), None, at(now + out - 1)).is_err());
        outs.push(out);
        now += out;
    }
    assert_eq!(outs, [5, 10, 15, 15]);
}

#[test]
fn the_health_engine_seeing_the_proxy_pass_again_closes_its_breaker() {
    let mut book = book([proxy("a", 5, 100)]);
    unreachable_times(&mut book, 3, at(0));
    let mut down = proxy("a", 5, 100);
    down.healthy = false;
    book.upsert(down);
    assert!(
        matches!(book.circuit(&key("a")), Circuit::Open { .. }),
        "unhealthy: still open"
    );
    book.upsert(proxy("a", 5, 100));
    assert_eq!(book.circuit(&key("a")), Circuit::Closed { failures: 0 });
    assert_eq!(leased(&mut book, "back", None, at(1)).as_deref(), Ok("a"));
}

#[test]
fn a_session_on_a_proxy_whose_breaker_opened_moves_and_says_why() {
    let mut book = book([proxy("a", 5, 100), proxy("b", 50, 100)]);
    let session = Sticky {
        session: Some(SessionName::parse("acme:s1").unwrap()),
        avoid: Vec::new(),
    };
    let first = book
        .acquire_with(request("s1", None), &session, at(0))
        .unwrap();
    assert_eq!(first.lease().proxy, key("a"));
    for i in 0..3 {
        let lease = book
            .acquire(request(&format!("u{i}"), None), at(0))
            .unwrap();
        assert_eq!(
            lease.proxy,
            key("b"),
            "a holds the session's lease: b is emptier"
        );
        book.release(&lease.id, at(0));
        // Reports name a's lease: the session's own, sent three times under other IDs.
        book.report("s1", ReportResult::Unreachable, None, at(0))
            .unwrap();
    }
    let moved = book
        .acquire_with(request("s2", None), &session, at(1))
        .unwrap();
    assert!(
        matches!(&moved, Grant::Moved { from, why: MoveReason::Unreachable, .. } if *from == key("a")),
        "{moved:?}"
    );
}

#[test]
fn an_unreachable_report_counts_for_no_site_and_asks_for_another_lease() {
    let mut book = book([proxy("a", 5, 100)]);
    let lease = book
        .acquire(request("l", Some("shop.example")), at(0))
        .unwrap();
    let reported = book
        .submit(&lease.id, &report(ReportResult::Unreachable), at(0))
        .unwrap();
    assert!(reported.lease_again);
    assert_eq!(reported.cooldown_until, None, "no cooldown for the site");
    assert!(book.sites(&key("a"), at(0)).is_empty());
}

/// One step of a crawl on one proxy, `a`, alone in the book.
#[derive(Clone, Debug)]
enum Step {
    /// Time passes.
    Wait(u8),
    /// A lease is asked for; the crawler reports this on it at once, if it got one.
    Lease(ReportResult),
    /// A late report on the first lease ever granted.
    Late(ReportResult),
}

fn steps(results: impl Strategy<Value = ReportResult> + Clone) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            (0u8..30).prop_map(Step::Wait),
            results.clone().prop_map(Step::Lease),
            results.prop_map(Step::Late),
        ],
        1..80,
    )
}

fn any_result() -> impl Strategy<Value = ReportResult> + Clone {
    prop_oneof![
        Just(ReportResult::Ok),
        Just(ReportResult::RateLimited),
        Just(ReportResult::Blocked),
        Just(ReportResult::Error),
        Just(ReportResult::Unreachable),
    ]
}

fn site_results() -> impl Strategy<Value = ReportResult> + Clone {
    prop_oneof![
        Just(ReportResult::Ok),
        Just(ReportResult::RateLimited),
        Just(ReportResult::Blocked),
        Just(ReportResult::Error),
    ]
}

fn config() -> impl Strategy<Value = CircuitConfig> {
    (1u32..5, 1u64..20, 1u64..200).prop_map(|(failures, backoff, max)| CircuitConfig {
        failures,
        backoff: Duration::from_secs(backoff),
        max_backoff: Duration::from_secs(max),
    })
}

/// What one run saw, step by step.
struct Run {
    /// The breaker after each step, with the time.
    circuits: Vec<(Timestamp, Circuit)>,
    /// Grants of leases while the breaker was not closed (trials), with their time.
    trials: Vec<Timestamp>,
    /// A good report (ok, rate_limited, blocked) on a lease granted as a trial was followed
    /// by a closed breaker every time.
    closed_after_success: bool,
}

fn run(config: CircuitConfig, steps: &[Step]) -> Run {
    let mut book = LeaseBook::new(LeaseConfig {
        circuit: config,
        ..LeaseConfig::default()
    });
    book.upsert(proxy("a", 5, u32::MAX));
    let (mut now, mut first) = (at(0), None::<String>);
    let mut seen = Run {
        circuits: Vec::new(),
        trials: Vec::new(),
        closed_after_success: true,
    };
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Wait(seconds) => {
                now = now
                    .checked_add(Duration::from_secs(u64::from(*seconds)))
                    .unwrap()
            }
            Step::Lease(result) => {
                let before = book.circuit(&key("a"));
                if let Ok(lease) = book.acquire(request(&format!("l{i}"), None), now) {
                    let trial = !matches!(before, Circuit::Closed { .. });
                    if trial {
                        seen.trials.push(now);
                    }
                    first.get_or_insert(lease.id.clone());
                    book.report(&lease.id, *result, None, now).unwrap();
                    let success =
                        !matches!(result, ReportResult::Error | ReportResult::Unreachable);
                    if success && book.circuit(&key("a")) != (Circuit::Closed { failures: 0 }) {
                        seen.closed_after_success = false;
                    }
                }
            }
            Step::Late(result) => {
                if let Some(id) = &first {
                    // Forgotten after the retention: nothing to say then.
                    let _ = book.report(id, *result, None, now);
                }
            }
        }
        seen.circuits.push((now, book.circuit(&key("a"))));
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever sites answer, in any number, the breaker never opens.
    #[test]
    fn never_opened_by_what_sites_answered(config in config(), steps in steps(site_results())) {
        let seen = run(config, &steps);
        let opened = seen.circuits.iter().find(|(_, c)| !matches!(c, Circuit::Closed { .. }));
        prop_assert_eq!(opened, None);
        prop_assert!(seen.trials.is_empty());
    }

    /// A good report on a lease granted now always leaves the breaker closed; an open
    /// breaker's time out is within [backoff, max(backoff, max_backoff)]; at most one trial
    /// is granted per backoff.
    #[test]
    fn closed_by_a_success_bounded_out_one_trial_at_a_time(config in config(), steps in steps(any_result())) {
        let seen = run(config, &steps);
        prop_assert!(seen.closed_after_success);
        let longest = config.max_backoff.max(config.backoff);
        for (_, circuit) in &seen.circuits {
            if let Circuit::Open { since, until, .. } = circuit {
                let out = since.duration_until(*until).unsigned_abs();
                prop_assert!(out >= config.backoff && out <= longest, "{out:?} out of {config:?}");
            }
        }
        for pair in seen.trials.windows(2) {
            let apart = pair[0].duration_until(pair[1]).unsigned_abs();
            prop_assert!(apart >= config.backoff, "two trials {apart:?} apart under {config:?}");
        }
    }
}
