//! One lease book for the fleet: checkpoints and what a restored book holds, how a
//! checkpoint merges into a book, the journal's fence, and where a request is routed.

use std::time::Duration;

use jiff::Timestamp;
use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::ProxyKey;
use proxy_core::lease::{
    AcquireError, AcquireRequest, CHECKPOINT_VERSION, Call, Checkpoint, Journal, LeaseBook,
    LeaseConfig, Merged, NotServing, ProxyView, ReportResult, Route, Selector, Standing,
    UnknownLease, route,
};
use proxy_core::testing::proxy_view;

const MINUTE: i64 = 60;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

fn key(name: &str) -> ProxyKey {
    ProxyKey::new("default", name)
}

fn proxy(name: &str, max_leases: u32) -> ProxyView {
    ProxyView {
        max_leases,
        ..proxy_view(key(name))
    }
}

/// A book of the proxies `a` (2 places) and `b` (1 place).
fn fleet() -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig::default());
    book.upsert(proxy("a", 2));
    book.upsert(proxy("b", 1));
    book
}

fn acquire(book: &mut LeaseBook, id: &str, target: Option<&str>, now: i64) -> Option<String> {
    let request = AcquireRequest {
        id: id.into(),
        selector: Selector::all(),
        target: target.map(str::to_owned),
        ttl: Duration::from_secs(60),
        distinct_egress: false,
        holder: None,
    };
    book.acquire(request, at(now))
        .ok()
        .map(|lease| lease.proxy.to_string())
}

/// A book restored from another's checkpoint holds its leases (active and retained) and
/// cooldowns: capacity, reports and cooldowns answer as they did on the original.
#[test]
fn a_restored_book_holds_the_leases_and_cooldowns_of_the_checkpoint() {
    let mut original = fleet();
    assert_eq!(
        acquire(&mut original, "l1", None, 0).as_deref(),
        Some("default/a")
    );
    assert_eq!(
        acquire(&mut original, "l2", None, 0).as_deref(),
        Some("default/b")
    );
    assert_eq!(
        acquire(&mut original, "l3", Some("shop.example"), 0).as_deref(),
        Some("default/a")
    );
    assert!(original.release("l3", at(5)));
    original
        .report("l3", ReportResult::RateLimited, None, at(5))
        .unwrap();
    let checkpoint = original.checkpoint(at(6), usize::MAX);
    let json = serde_json::to_string(&checkpoint).unwrap();
    let checkpoint: Checkpoint = serde_json::from_str(&json).unwrap();

    let mut restored = fleet();
    let merged = restored.restore(&checkpoint, at(7)).unwrap();
    assert_eq!(
        merged,
        Merged {
            active_added: 2,
            retained_added: 1,
            ended: 0,
            cooldowns: 1,
            sites: 1,
        }
    );
    assert_eq!(restored.active_leases(&key("a"), at(7)), 1);
    assert_eq!(restored.active_leases(&key("b"), at(7)), 1);
    // The released lease is retained: a late report lands, a release changes nothing.
    assert!(matches!(
        restored.report("l3", ReportResult::Ok, None, at(8)),
        Ok(None)
    ));
    assert!(!restored.release("l3", at(8)));
    // The cooldown holds: `a` has a free place, but not for shop.example; `b` is full.
    let cooled = AcquireRequest {
        id: "l4".into(),
        selector: Selector::all(),
        target: Some("SHOP.example".into()),
        ttl: Duration::from_secs(60),
        distinct_egress: false,
        holder: None,
    };
    match restored.acquire(cooled, at(8)) {
        Err(AcquireError::NoMatch(stats)) => {
            assert_eq!((stats.in_cooldown, stats.at_capacity), (1, 1));
        }
        other => panic!("expected no match, got {other:?}"),
    }
    // The active leases answer too, and their expiry frees their places.
    assert!(restored.release("l1", at(9)));
    restored.expire(at(60));
    assert_eq!(restored.active_total(at(60)), 0);
}

/// A lease's holder outlives a restore: the restored book lists and releases it by holder.
#[test]
fn a_restored_book_knows_each_leases_holder() {
    let mut original = fleet();
    let request = AcquireRequest {
        id: "held".into(),
        selector: Selector::all(),
        target: None,
        ttl: Duration::from_secs(60),
        distinct_egress: false,
        holder: Some("scrapy/host-1/42".into()),
    };
    original.acquire(request, at(0)).unwrap();
    acquire(&mut original, "anonymous", None, 0).unwrap();
    let checkpoint = original.checkpoint(at(1), usize::MAX);
    let json = serde_json::to_string(&checkpoint).unwrap();
    assert_eq!(json.matches("\"holder\"").count(), 1, "{json}");
    let checkpoint: Checkpoint = serde_json::from_str(&json).unwrap();
    let mut restored = fleet();
    restored.restore(&checkpoint, at(2)).unwrap();
    let held: Vec<_> = restored.leases(Some("scrapy/host-1/42"), at(2));
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].id, "held");
    assert_eq!(restored.release_held_by("scrapy/host-1/42", at(3)), 1);
    assert_eq!(restored.active_total(at(3)), 1);
}

#[test]
fn a_merge_keeps_both_books_leases_and_an_end_wins_over_no_end() {
    let mut mine = fleet();
    acquire(&mut mine, "mine", None, 0).unwrap();
    acquire(&mut mine, "both", None, 0).unwrap();
    let mut theirs = mine.clone();
    acquire(&mut theirs, "theirs", None, 1).unwrap();
    assert!(theirs.release("both", at(2)));
    let merged = mine
        .restore(&theirs.checkpoint(at(3), usize::MAX), at(3))
        .unwrap();
    assert_eq!((merged.active_added, merged.ended), (1, 1));
    assert_eq!(
        mine.active_total(at(3)),
        2,
        "mine and theirs are active, both ended"
    );
    assert!(!mine.release("both", at(4)), "ended by the merge");
    // Restoring the same checkpoint again changes nothing.
    let before = mine.clone();
    assert_eq!(
        mine.restore(&theirs.checkpoint(at(3), usize::MAX), at(4))
            .unwrap(),
        Merged::default()
    );
    assert_eq!(
        mine.checkpoint(at(4), usize::MAX),
        before.checkpoint(at(4), usize::MAX)
    );
}

#[test]
fn a_merge_never_shortens_a_cooldown_nor_revokes_a_lease() {
    let mut mine = fleet();
    acquire(&mut mine, "m", Some("t.example"), 0).unwrap();
    mine.report("m", ReportResult::Blocked, None, at(0))
        .unwrap();
    let mut theirs = fleet();
    acquire(&mut theirs, "x", Some("t.example"), 0).unwrap();
    acquire(&mut theirs, "y", None, 0).unwrap();
    acquire(&mut theirs, "z", None, 0).unwrap();
    theirs
        .report("x", ReportResult::RateLimited, None, at(0))
        .unwrap();
    let merged = mine
        .restore(&theirs.checkpoint(at(1), usize::MAX), at(1))
        .unwrap();
    // theirs' 5-minute cooldown on a is shorter than mine's 30-minute one: not applied.
    assert_eq!(merged.cooldowns, 0);
    // Four leases on three places: nothing revoked, and nothing more is granted.
    assert_eq!(mine.active_total(at(1)), 4);
    assert_eq!(acquire(&mut mine, "n", None, 2), None);
    assert_eq!(
        acquire(&mut mine, "o", Some("t.example"), 10 * MINUTE).as_deref(),
        Some("default/b"),
        "every lease expired, and a still cools down for t.example after theirs' ended"
    );
}

#[test]
fn what_ended_or_ran_out_while_nobody_held_the_book_is_taken_as_ended() {
    let mut original = fleet();
    acquire(&mut original, "active", None, 0).unwrap();
    acquire(&mut original, "released", Some("t.example"), 0).unwrap();
    original.release("released", at(1));
    original
        .report("released", ReportResult::RateLimited, None, at(1))
        .unwrap();
    let checkpoint = original.checkpoint(at(1), usize::MAX);
    // Restored after the lease's expiry (60 s) but within the retention: retained.
    let mut later = fleet();
    let merged = later.restore(&checkpoint, at(2 * MINUTE)).unwrap();
    assert_eq!((merged.active_added, merged.retained_added), (0, 2));
    assert_eq!(later.active_total(at(2 * MINUTE)), 0);
    assert!(
        later
            .report("active", ReportResult::Ok, None, at(2 * MINUTE))
            .is_ok()
    );
    // Restored after every retention and cooldown ended: nothing is left.
    let mut much_later = fleet();
    let merged = much_later
        .restore(&checkpoint, at(31 * MINUTE + 1))
        .unwrap();
    // Only the site statistics of the report are left: they last a window (an hour).
    let only_sites = Merged {
        sites: 1,
        ..Merged::default()
    };
    assert_eq!(merged, only_sites);
    assert_eq!(
        much_later.report("released", ReportResult::Ok, None, at(31 * MINUTE + 1)),
        Err(UnknownLease)
    );
}

#[test]
fn a_bad_checkpoint_is_refused_whole_with_the_offending_entry() {
    let mut original = fleet();
    acquire(&mut original, "l1", None, 0).unwrap();
    original
        .report("l1", ReportResult::Blocked, None, at(0))
        .unwrap();
    let good = original.checkpoint(at(0), usize::MAX);
    let mut cases: Vec<(Checkpoint, &str)> = Vec::new();
    let mut c = good.clone();
    c.version = CHECKPOINT_VERSION + 1;
    cases.push((c, "version 2 is not 1"));
    let mut c = good.clone();
    c.leases[0].proxy = "no-slash".into();
    cases.push((c, "leases[0].proxy"));
    let mut c = good.clone();
    c.leases[0].id = String::new();
    cases.push((c, "leases[0].id is empty"));
    let mut c = good.clone();
    c.leases.push(c.leases[0].clone());
    cases.push((c, "leases[1].id \"l1\" appears twice"));
    let mut c = good.clone();
    c.cooldowns[0].proxy = "/x".into();
    cases.push((c, "cooldowns[0].proxy"));
    for (checkpoint, says) in cases {
        let mut book = fleet();
        let before = book.clone();
        let error = book.restore(&checkpoint, at(1)).unwrap_err();
        assert!(error.0.contains(says), "{error} should say {says}");
        assert_eq!(book, before, "nothing of a refused checkpoint is merged");
    }
    // Unknown fields are refused when reading the JSON.
    let json = serde_json::to_value(&good).unwrap();
    let mut extra = json.clone();
    extra["surprise"] = 1.into();
    assert!(serde_json::from_value::<Checkpoint>(extra).is_err());
}

#[test]
fn trimming_keeps_every_active_lease_and_the_retained_ones_that_ended_last() {
    let mut book = fleet();
    book.upsert(proxy("c", 10));
    for i in 0..6 {
        let id = format!("l{i}");
        acquire(&mut book, &id, None, i).unwrap();
        if i < 4 {
            book.release(&id, at(10 + i));
        }
    }
    let mut checkpoint = book.checkpoint(at(20), usize::MAX);
    assert_eq!(checkpoint.trim_retained(2), 2);
    let ids: Vec<&str> = checkpoint.leases.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["l2", "l3", "l4", "l5"]);
    assert_eq!(checkpoint.trim_retained(5), 0);
}

/// The journal: a change is unsaved until a checkpoint taken after it is saved; grants stop
/// once a change has been unsaved for the fence.
#[test]
fn the_journal_fences_grants_on_the_oldest_unsaved_change() {
    let fence = Duration::from_secs(3);
    let mut journal = Journal::new(fence);
    assert!(journal.may_grant(at(0)) && !journal.needs_checkpoint());
    journal.changed(at(0));
    assert_eq!(journal.unsaved_since(), Some(at(0)));
    let ticket = journal.started();
    assert!(!journal.needs_checkpoint(), "one write at a time");
    journal.changed(at(1));
    journal.changed(at(2));
    journal.saved(ticket);
    // What changed while the checkpoint was written is still unsaved, from its first change.
    assert_eq!(journal.unsaved_since(), Some(at(1)));
    assert!(journal.needs_checkpoint());
    let ticket = journal.started();
    journal.failed(ticket);
    assert_eq!(
        journal.unsaved_since(),
        Some(at(1)),
        "a failed write saves nothing"
    );
    assert!(journal.may_grant(at(3)));
    assert!(!journal.may_grant(at(4)), "unsaved for the fence: no grant");
    let ticket = journal.started();
    journal.saved(ticket);
    assert_eq!(journal.unsaved_since(), None);
    assert!(journal.may_grant(at(100)) && !journal.needs_checkpoint());
}

#[test]
fn requests_are_served_by_the_owner_and_forwarded_once_by_the_others() {
    let me = Some("http://me:8090");
    let owner = |url: &str| Standing::Follower {
        owner: Some(url.into()),
    };
    let fresh = Journal::new(Duration::from_secs(3));
    let mut stale = Journal::new(Duration::from_secs(3));
    stale.changed(at(0));
    let forward = Route::Forward("http://them:8090".into());
    let refuse = Route::Refuse;
    #[rustfmt::skip]
    let table: Vec<(Standing, Call, bool, &Journal, Route)> = vec![
        (Standing::Owner, Call::Acquire, false, &fresh, Route::Serve),
        (Standing::Owner, Call::Other, false, &fresh, Route::Serve),
        (Standing::Owner, Call::Acquire, true, &fresh, Route::Serve),
        (Standing::Owner, Call::Acquire, false, &stale, refuse(NotServing::Unsaved)),
        (Standing::Owner, Call::Other, false, &stale, Route::Serve),
        (Standing::Restoring, Call::Other, false, &fresh, refuse(NotServing::Restoring)),
        (Standing::Restoring, Call::Acquire, true, &fresh, refuse(NotServing::Restoring)),
        (owner("http://them:8090"), Call::Acquire, false, &fresh, forward.clone()),
        (owner("http://them:8090"), Call::Other, false, &stale, forward),
        (owner("http://them:8090"), Call::Acquire, true, &fresh, refuse(NotServing::Misrouted)),
        (owner("http://me:8090"), Call::Acquire, false, &fresh, refuse(NotServing::NoOwner)),
        (Standing::Follower { owner: None }, Call::Other, false, &fresh, refuse(NotServing::NoOwner)),
    ];
    for (standing, call, forwarded, journal, want) in table {
        assert_eq!(
            route(&standing, true, call, forwarded, me, journal, at(10)),
            want,
            "{standing:?} {call:?} forwarded={forwarded}"
        );
        // Whatever it was, a replica whose claim ran out serves nothing itself.
        let unled = route(&standing, false, call, forwarded, me, journal, at(10));
        assert_ne!(unled, Route::Serve, "{standing:?} {call:?} not leading");
        if matches!(standing, Standing::Owner | Standing::Restoring) {
            assert_eq!(
                unled,
                refuse(NotServing::NoOwner),
                "{standing:?} not leading"
            );
        }
    }
}

/// A step of the property below.
#[derive(Clone, Debug)]
enum Step {
    Acquire {
        target: Option<u8>,
        ttl: u8,
    },
    Release(usize),
    Report {
        lease: usize,
        blocked: bool,
    },
    Tick(u8),
    /// The book moves: it is checkpointed and restored into a fresh book of the same fleet.
    Move,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (prop::option::of(0..3u8), 1..120u8).prop_map(|(target, ttl)| Step::Acquire { target, ttl }),
        2 => (0..40usize).prop_map(Step::Release),
        2 => (0..40usize, any::<bool>()).prop_map(|(lease, blocked)| Step::Report { lease, blocked }),
        2 => (1..200u8).prop_map(Step::Tick),
        1 => Just(Step::Move),
    ]
}

proptest! {
    /// A book that moves (checkpoint, restore into a fresh book) at any point answers every
    /// later call exactly as the book that never moved: same grants, same releases, same
    /// reports, same counts. Restoring twice changes nothing.
    #[test]
    fn a_book_that_moves_answers_as_one_that_never_did(steps in vec(step(), 1..80)) {
        let config = LeaseConfig {
            rate_limited_cooldown: Duration::from_secs(40),
            blocked_cooldown: Duration::from_secs(90),
            error_cooldown: Duration::ZERO,
            ..LeaseConfig::default()
        };
        let fresh = || {
            let mut book = LeaseBook::new(config);
            for (name, max) in [("a", 2), ("b", 1), ("c", 3)] {
                book.upsert(proxy(name, max));
            }
            book
        };
        let (mut stays, mut moves) = (fresh(), fresh());
        let mut now = 0i64;
        let mut ids: Vec<String> = Vec::new();
        for step in steps {
            match step {
                Step::Acquire { target, ttl } => {
                    let id = format!("l{}", ids.len());
                    let request = AcquireRequest {
                        id: id.clone(),
                        selector: Selector::all(),
                        target: target.map(|t| format!("t{t}.example")),
                        ttl: Duration::from_secs(u64::from(ttl)),
                        distinct_egress: false,
                        holder: None,
                    };
                    let a = stays.acquire(request.clone(), at(now));
                    let b = moves.acquire(request, at(now));
                    prop_assert_eq!(&a, &b);
                    ids.push(id);
                }
                Step::Release(i) => {
                    let id = ids.get(i).map_or("none", String::as_str);
                    prop_assert_eq!(stays.release(id, at(now)), moves.release(id, at(now)));
                }
                Step::Report { lease, blocked } => {
                    let id = ids.get(lease).map_or("none", String::as_str);
                    let result = if blocked { ReportResult::Blocked } else { ReportResult::RateLimited };
                    prop_assert_eq!(
                        stays.report(id, result, None, at(now)),
                        moves.report(id, result, None, at(now))
                    );
                }
                Step::Tick(secs) => now += i64::from(secs),
                Step::Move => {
                    let checkpoint = moves.checkpoint(at(now), usize::MAX);
                    moves = fresh();
                    moves.restore(&checkpoint, at(now)).unwrap();
                    prop_assert_eq!(moves.restore(&checkpoint, at(now)).unwrap(), Merged::default());
                }
            }
            stays.expire(at(now));
            moves.expire(at(now));
            prop_assert_eq!(stays.active_total(at(now)), moves.active_total(at(now)));
            for name in ["a", "b", "c"] {
                prop_assert_eq!(stays.active_leases(&key(name), at(now)), moves.active_leases(&key(name), at(now)));
            }
        }
    }
}

/// A checkpoint saves every active lease and, of the retained ones, those that ended last,
/// as many as asked, ordered by ID; a book restoring more retained leases than its
/// `max_retained` keeps the ones that ended last.
#[test]
fn a_checkpoint_saves_the_active_leases_and_the_retained_that_ended_last() {
    let mut original = LeaseBook::new(LeaseConfig::default());
    original.upsert(proxy("a", 10));
    for (i, id) in ["l5", "l4", "l3", "l2", "l1"].into_iter().enumerate() {
        assert!(acquire(&mut original, id, None, i as i64).is_some());
    }
    // l4, l2 and l3 end, in that order; l5 and l1 stay active.
    for (id, now) in [("l4", 10), ("l2", 20), ("l3", 30)] {
        assert!(original.release(id, at(now)));
    }
    let saved = |checkpoint: &Checkpoint| -> Vec<(String, Option<Timestamp>)> {
        checkpoint
            .leases
            .iter()
            .map(|lease| (lease.id.clone(), lease.ended_at))
            .collect()
    };
    let two = original.checkpoint(at(30), 2);
    assert_eq!(
        saved(&two),
        [
            ("l1".to_owned(), None),
            ("l2".to_owned(), Some(at(20))),
            ("l3".to_owned(), Some(at(30))),
            ("l5".to_owned(), None),
        ]
    );
    assert_eq!(original.checkpoint(at(30), 0).leases.len(), 2);
    assert_eq!(original.checkpoint(at(30), usize::MAX).leases.len(), 5);

    let mut restored = LeaseBook::new(LeaseConfig {
        max_retained: 1,
        ..LeaseConfig::default()
    });
    restored.upsert(proxy("a", 10));
    restored
        .restore(&original.checkpoint(at(30), usize::MAX), at(30))
        .unwrap();
    assert!(restored.knows("l3", at(30)), "ended last");
    assert!(!restored.knows("l2", at(30)) && !restored.knows("l4", at(30)));
    assert_eq!(restored.active_leases(&key("a"), at(30)), 2, "l1 and l5");
}
