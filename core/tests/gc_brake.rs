//! Table tests of the sweep's gate (leader, synced cache) and of the brake (at most a share
//! of our instances per sweep, rounded down, oldest first).

use jiff::Timestamp;
use proxy_core::gc::{
    CacheSync, DeleteFraction, Gate, KeepReason, Kept, Orphan, Selection, WatchSignal, gate, plan,
};

fn synced_after(signals: &[WatchSignal]) -> CacheSync {
    let mut cache = CacheSync::new();
    for signal in signals {
        cache.observe(signal.clone());
    }
    cache
}

#[test]
fn the_gate_opens_only_for_a_leader_whose_last_list_completed() {
    use WatchSignal::{Failed, ListCompleted as Done, ListStarted as Start};
    let forbidden = || Failed("proxies is forbidden".to_owned());
    let rows: Vec<(&str, Vec<WatchSignal>, bool, Gate)> = vec![
        (
            "nothing yet",
            vec![],
            true,
            Gate::NeverListed { last_error: None },
        ),
        (
            "the first list is running",
            vec![Start],
            true,
            Gate::NeverListed { last_error: None },
        ),
        (
            "RBAC forbids the list, retried forever",
            vec![Start, forbidden(), Start, forbidden(), Start],
            true,
            Gate::NeverListed {
                last_error: Some("proxies is forbidden".to_owned()),
            },
        ),
        (
            "the first list completed",
            vec![Start, Done],
            true,
            Gate::Sweep,
        ),
        (
            "forbidden, then granted",
            vec![Start, forbidden(), Start, Done],
            true,
            Gate::Sweep,
        ),
        (
            "a re-list after a desync is running",
            vec![Start, Done, Start],
            true,
            Gate::Relisting { last_error: None },
        ),
        (
            "the re-list fails",
            vec![Start, Done, Start, forbidden()],
            true,
            Gate::Relisting {
                last_error: Some("proxies is forbidden".to_owned()),
            },
        ),
        (
            "the re-list completed",
            vec![Start, Done, Start, Done],
            true,
            Gate::Sweep,
        ),
        (
            // A watch that reconnects from its resource version misses nothing; one that
            // cannot re-lists, which is a ListStarted.
            "a listed cache whose watch failed and reconnects",
            vec![Start, Done, Failed("connection reset".to_owned())],
            true,
            Gate::Sweep,
        ),
        (
            "synced, but a follower",
            vec![Start, Done],
            false,
            Gate::NotLeader,
        ),
        ("unsynced follower", vec![], false, Gate::NotLeader),
    ];
    for (name, signals, leader, expected) in rows {
        let cache = synced_after(&signals);
        assert_eq!(gate(leader, &cache), expected, "{name}");
        assert_eq!(
            cache.is_synced(),
            matches!(gate(true, &cache), Gate::Sweep),
            "{name}"
        );
    }
}

#[test]
fn a_completed_list_clears_the_last_error_and_is_counted() {
    let cache = synced_after(&[
        WatchSignal::ListStarted,
        WatchSignal::Failed("forbidden".to_owned()),
        WatchSignal::ListStarted,
        WatchSignal::ListCompleted,
        WatchSignal::ListStarted,
        WatchSignal::ListCompleted,
    ]);
    assert_eq!(cache.last_error(), None);
    assert_eq!(cache.lists_completed(), 2);
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

fn orphan(id: &str, age_rank: i64) -> Orphan {
    Orphan {
        provider_id: id.to_owned(),
        uid: format!("uid-{id}"),
        created_at: at(-age_rank),
    }
}

fn kept(id: &str, reason: KeepReason) -> Kept {
    Kept {
        provider_id: id.to_owned(),
        reason,
        uid: None,
    }
}

/// A selection of `orphans` orphans (`o0` the oldest) and `live` live instances of ours,
/// plus `theirs` instances of another installation.
fn selection(orphans: usize, live: usize, theirs: usize) -> Selection {
    let mut selection = Selection {
        orphans: (0..orphans)
            .map(|i| orphan(&format!("o{i}"), 1000 - i as i64))
            .collect(),
        kept: Vec::new(),
    };
    selection
        .kept
        .extend((0..live).map(|i| kept(&format!("l{i}"), KeepReason::Live)));
    selection
        .kept
        .extend((0..theirs).map(|i| kept(&format!("t{i}"), KeepReason::OtherInstallation)));
    selection.orphans.sort();
    selection
}

fn fraction(share: f64) -> DeleteFraction {
    DeleteFraction::new(share).unwrap()
}

#[test]
fn the_brake_deletes_at_most_the_share_rounded_down() {
    // (name, orphans, live, theirs, fraction, deleted, held back)
    let rows: Vec<(&str, usize, usize, usize, f64, usize, usize)> = vec![
        ("a mass sweep: 4 of 4 at 0.5", 4, 0, 0, 0.5, 2, 2),
        ("its second sweep: 2 of 2 at 0.5", 2, 0, 0, 0.5, 1, 1),
        ("the tiny fleet: 1 orphan of 1 is held", 1, 0, 0, 0.5, 0, 1),
        ("1 orphan of 2 at 0.5 goes", 1, 1, 0, 0.5, 1, 0),
        ("2 of 3 at 0.5: floor(1.5) = 1", 2, 1, 0, 0.5, 1, 1),
        ("one orphan among many live ones", 1, 99, 0, 0.5, 1, 0),
        ("under the allowance, all go", 3, 7, 0, 0.5, 3, 0),
        ("the brake off: 4 of 4 at 1", 4, 0, 0, 1.0, 4, 0),
        ("the brake off: 1 of 1 at 1", 1, 0, 0, 1.0, 1, 0),
        ("fraction 0: report only", 5, 5, 0, 0.0, 0, 5),
        // Other installations' instances do not widen the allowance.
        ("4 of ours among 100 of theirs", 4, 0, 100, 0.5, 2, 2),
        ("0.29 of 100 is 29, exactly", 100, 0, 0, 0.29, 29, 71),
        ("nothing listed", 0, 0, 0, 0.5, 0, 0),
    ];
    for (name, orphans, live, theirs, share, deleted, held) in rows {
        let plan = plan(&selection(orphans, live, theirs), fraction(share));
        assert_eq!(plan.delete.len(), deleted, "{name}: deleted");
        assert_eq!(plan.held_back.len(), held, "{name}: held back");
        assert_eq!(plan.ours, orphans + live, "{name}: ours");
    }
}

#[test]
fn the_oldest_orphans_go_first() {
    let selection = Selection {
        orphans: vec![
            orphan("a", 10),
            orphan("b", 30),
            orphan("c", 20),
            orphan("d", 30),
        ],
        kept: Vec::new(),
    };
    let plan = plan(&selection, fraction(0.5));
    let ids = |orphans: &[Orphan]| {
        orphans
            .iter()
            .map(|o| o.provider_id.clone())
            .collect::<Vec<_>>()
    };
    // b and d are the oldest (same age: by provider ID), then c, then a.
    assert_eq!(ids(&plan.delete), ["b", "d"]);
    assert_eq!(ids(&plan.held_back), ["c", "a"]);
}

#[test]
fn only_instances_of_ours_count_towards_the_allowance() {
    for reason in KeepReason::ALL {
        let selection = Selection {
            orphans: vec![orphan("o", 1)],
            kept: vec![kept("k", reason)],
        };
        let plan = plan(&selection, fraction(0.5));
        let expected_ours = if reason.is_ours() { 2 } else { 1 };
        assert_eq!(plan.ours, expected_ours, "{reason}");
        assert_eq!(plan.delete.len(), expected_ours - 1, "{reason}");
    }
}

#[test]
fn reasons_for_a_human_are_the_ones_gc_never_resolves() {
    let for_a_human: Vec<KeepReason> = KeepReason::ALL
        .into_iter()
        .filter(|r| r.needs_human())
        .collect();
    assert_eq!(
        for_a_human,
        [
            KeepReason::NoInstallation,
            KeepReason::NoUid,
            KeepReason::UnknownAge
        ]
    );
}

#[test]
fn a_fraction_is_a_share_from_0_to_1() {
    for (text, ppm) in [
        ("0.5", 500_000),
        ("0", 0),
        ("1", 1_000_000),
        ("1.0", 1_000_000),
        (" 0.25 ", 250_000),
        ("0.0000004", 0),
        ("0.0000006", 1),
    ] {
        let parsed: DeleteFraction = text.parse().unwrap();
        assert_eq!(parsed.parts_per_million(), ppm, "{text:?}");
    }
    for bad in ["1.5", "-0.1", "NaN", "inf", "-inf", "half", "", "50%"] {
        let error = bad.parse::<DeleteFraction>().unwrap_err().to_string();
        assert!(
            error.starts_with("must be a number from 0 to 1"),
            "{bad:?}: {error}"
        );
    }
    assert_eq!(DeleteFraction::default(), fraction(0.5));
    assert_eq!(DeleteFraction::DEFAULT.to_string(), "0.5");
    assert_eq!(DeleteFraction::ALL, fraction(1.0));
}
