//! Table tests of orphan selection: one row per rule, kept versus reaped, then the order of
//! the rules, the order of the output and the report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use proxy_core::gc::{
    KeepReason, Kept, ListedInstance, Orphan, Selection, Sweep, is_old, known_creation, labels,
    select,
};

const OURS: &str = "cluster-a";
const THEIRS: &str = "cluster-b";
const LIVE_UID: &str = "uid-live";
const GONE_UID: &str = "uid-gone";
const MIN_AGE: Duration = Duration::from_secs(600);

/// `secs` seconds after a fixed time, the sweep's `now` being [`NOW`] seconds after it.
fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

const NOW: i64 = 10_000;

fn sweep() -> Sweep {
    Sweep {
        live: BTreeSet::from([LIVE_UID.to_owned()]),
        installation: OURS.to_owned(),
        min_age: MIN_AGE,
        now: at(NOW),
    }
}

/// An instance meeting every rule: ours, of a gone Proxy, an hour old.
fn orphan(provider_id: &str) -> ListedInstance {
    ListedInstance {
        provider_id: provider_id.to_owned(),
        labels: BTreeMap::from([
            (labels::MANAGED.to_owned(), "true".to_owned()),
            (labels::INSTALLATION.to_owned(), OURS.to_owned()),
            (labels::PROXY_UID.to_owned(), GONE_UID.to_owned()),
            ("crawl.example.com/proxy-name".to_owned(), "px-1".to_owned()),
        ]),
        created_at: Some(at(NOW - 3600)),
        deleting: false,
    }
}

fn being_deleted(mut instance: ListedInstance) -> ListedInstance {
    instance.deleting = true;
    instance
}

fn with_label(mut instance: ListedInstance, key: &str, value: &str) -> ListedInstance {
    instance.labels.insert(key.to_owned(), value.to_owned());
    instance
}

fn without_label(mut instance: ListedInstance, key: &str) -> ListedInstance {
    instance.labels.remove(key);
    instance
}

fn created(mut instance: ListedInstance, created_at: Option<Timestamp>) -> ListedInstance {
    instance.created_at = created_at;
    instance
}

/// What `select` makes of `instance` alone: `Ok(())` when reaped, the reason when kept.
fn verdict(instance: ListedInstance, sweep: &Sweep) -> Result<(), KeepReason> {
    let selection = select(std::slice::from_ref(&instance), sweep);
    match (selection.orphans.as_slice(), selection.kept.as_slice()) {
        ([orphan], []) => {
            assert_eq!(orphan.provider_id, instance.provider_id);
            Ok(())
        }
        ([], [kept]) => {
            assert_eq!(kept.provider_id, instance.provider_id);
            Err(kept.reason)
        }
        _ => panic!("one instance in, one out: {selection:?}"),
    }
}

#[test]
fn each_rule_keeps_or_reaps() {
    let year_one: Timestamp = "0001-01-01T00:00:00Z".parse().unwrap();
    let rows: Vec<(&str, ListedInstance, Result<(), KeepReason>)> = vec![
        ("meets every rule", orphan("i"), Ok(())),
        // Rule 1: managed = "true", exactly.
        (
            "no managed label",
            without_label(orphan("i"), labels::MANAGED),
            Err(KeepReason::NotManaged),
        ),
        (
            "managed = false",
            with_label(orphan("i"), labels::MANAGED, "false"),
            Err(KeepReason::NotManaged),
        ),
        (
            "managed = True",
            with_label(orphan("i"), labels::MANAGED, "True"),
            Err(KeepReason::NotManaged),
        ),
        (
            "managed = yes",
            with_label(orphan("i"), labels::MANAGED, "yes"),
            Err(KeepReason::NotManaged),
        ),
        // Rule 2: the installation is ours.
        (
            "no installation label (an older version made it)",
            without_label(orphan("i"), labels::INSTALLATION),
            Err(KeepReason::NoInstallation),
        ),
        (
            "another installation",
            with_label(orphan("i"), labels::INSTALLATION, THEIRS),
            Err(KeepReason::OtherInstallation),
        ),
        (
            "an empty installation label",
            with_label(orphan("i"), labels::INSTALLATION, ""),
            Err(KeepReason::OtherInstallation),
        ),
        (
            "installation differs only in case",
            with_label(orphan("i"), labels::INSTALLATION, "Cluster-A"),
            Err(KeepReason::OtherInstallation),
        ),
        // Rule 3: its delete is not under way already.
        (
            "a delete of it still runs (a VM stopping after GC's delete)",
            being_deleted(orphan("i")),
            Err(KeepReason::Deleting),
        ),
        (
            "another installation's, being deleted",
            being_deleted(with_label(orphan("i"), labels::INSTALLATION, THEIRS)),
            Err(KeepReason::OtherInstallation),
        ),
        // Rule 4: a non-empty Proxy UID.
        (
            "no proxy-uid label",
            without_label(orphan("i"), labels::PROXY_UID),
            Err(KeepReason::NoUid),
        ),
        (
            "an empty proxy-uid label",
            with_label(orphan("i"), labels::PROXY_UID, ""),
            Err(KeepReason::NoUid),
        ),
        // Rule 5: no Proxy object has the UID (the live set holds deleting objects too).
        (
            "its Proxy exists (or is being deleted)",
            with_label(orphan("i"), labels::PROXY_UID, LIVE_UID),
            Err(KeepReason::Live),
        ),
        // Rule 6: a known creation time.
        (
            "unknown creation time",
            created(orphan("i"), None),
            Err(KeepReason::UnknownAge),
        ),
        (
            "zero creation time (the UNIX epoch)",
            created(orphan("i"), Some(Timestamp::UNIX_EPOCH)),
            Err(KeepReason::UnknownAge),
        ),
        (
            "Go's zero time (year 1)",
            created(orphan("i"), Some(year_one)),
            Err(KeepReason::UnknownAge),
        ),
        (
            "one second after the epoch is a real (old) time",
            created(orphan("i"), Some(Timestamp::from_second(1).unwrap())),
            Ok(()),
        ),
        // Rule 7: at least the minimum age.
        (
            "one second younger than the minimum age",
            created(orphan("i"), Some(at(NOW - 599))),
            Err(KeepReason::TooYoung),
        ),
        (
            "exactly the minimum age",
            created(orphan("i"), Some(at(NOW - 600))),
            Ok(()),
        ),
        (
            "created just now",
            created(orphan("i"), Some(at(NOW))),
            Err(KeepReason::TooYoung),
        ),
        (
            "created in the future (clock skew)",
            created(orphan("i"), Some(at(NOW + 3600))),
            Err(KeepReason::TooYoung),
        ),
    ];
    for (name, instance, expected) in rows {
        assert_eq!(verdict(instance, &sweep()), expected, "{name}");
    }
}

#[test]
fn an_empty_installation_of_ours_reaps_nothing() {
    let sweep = Sweep {
        installation: String::new(),
        ..sweep()
    };
    assert_eq!(
        verdict(orphan("i"), &sweep),
        Err(KeepReason::OtherInstallation)
    );
    assert_eq!(
        verdict(with_label(orphan("i"), labels::INSTALLATION, ""), &sweep),
        Err(KeepReason::OtherInstallation)
    );
}

#[test]
fn a_zero_min_age_reaps_an_instance_created_now() {
    let sweep = Sweep {
        min_age: Duration::ZERO,
        ..sweep()
    };
    assert_eq!(verdict(created(orphan("i"), Some(at(NOW))), &sweep), Ok(()));
    assert_eq!(
        verdict(created(orphan("i"), Some(at(NOW + 1))), &sweep),
        Err(KeepReason::TooYoung)
    );
}

#[test]
fn a_min_age_past_the_end_of_time_reaps_nothing() {
    let sweep = Sweep {
        min_age: Duration::MAX,
        ..sweep()
    };
    assert_eq!(verdict(orphan("i"), &sweep), Err(KeepReason::TooYoung));
}

#[test]
fn the_first_failing_rule_is_the_reason() {
    let everything_wrong = ListedInstance {
        provider_id: "i".to_owned(),
        labels: BTreeMap::new(),
        created_at: None,
        deleting: true,
    };
    assert_eq!(
        verdict(everything_wrong, &sweep()),
        Err(KeepReason::NotManaged)
    );
    let foreign_and_young = created(
        with_label(orphan("i"), labels::INSTALLATION, THEIRS),
        Some(at(NOW)),
    );
    assert_eq!(
        verdict(foreign_and_young, &sweep()),
        Err(KeepReason::OtherInstallation)
    );
    let live_and_young = created(
        with_label(orphan("i"), labels::PROXY_UID, LIVE_UID),
        Some(at(NOW)),
    );
    assert_eq!(verdict(live_and_young, &sweep()), Err(KeepReason::Live));
    let live_and_ageless = created(with_label(orphan("i"), labels::PROXY_UID, LIVE_UID), None);
    assert_eq!(verdict(live_and_ageless, &sweep()), Err(KeepReason::Live));
    let ageless_uidless = created(without_label(orphan("i"), labels::PROXY_UID), None);
    assert_eq!(verdict(ageless_uidless, &sweep()), Err(KeepReason::NoUid));
}

#[test]
fn the_whole_selection_is_sorted_and_carries_what_to_log() {
    let listing = vec![
        orphan("vm-c"),
        with_label(orphan("vm-b"), labels::PROXY_UID, LIVE_UID),
        with_label(orphan("vm-a"), labels::PROXY_UID, "uid-other-gone"),
        created(orphan("vm-d"), Some(at(NOW - 1))),
        without_label(orphan("vm-0"), labels::INSTALLATION),
        with_label(orphan("vm-e"), labels::PROXY_UID, ""),
    ];
    let selection = select(&listing, &sweep());
    assert_eq!(
        selection,
        Selection {
            orphans: vec![
                Orphan {
                    provider_id: "vm-a".to_owned(),
                    uid: "uid-other-gone".to_owned(),
                    created_at: at(NOW - 3600),
                },
                Orphan {
                    provider_id: "vm-c".to_owned(),
                    uid: GONE_UID.to_owned(),
                    created_at: at(NOW - 3600),
                },
            ],
            kept: vec![
                Kept {
                    provider_id: "vm-0".to_owned(),
                    reason: KeepReason::NoInstallation,
                    uid: Some(GONE_UID.to_owned()),
                },
                Kept {
                    provider_id: "vm-b".to_owned(),
                    reason: KeepReason::Live,
                    uid: Some(LIVE_UID.to_owned()),
                },
                Kept {
                    provider_id: "vm-d".to_owned(),
                    reason: KeepReason::TooYoung,
                    uid: Some(GONE_UID.to_owned()),
                },
                Kept {
                    provider_id: "vm-e".to_owned(),
                    reason: KeepReason::NoUid,
                    uid: None,
                },
            ],
        }
    );
    let mut reversed = listing.clone();
    reversed.reverse();
    assert_eq!(select(&reversed, &sweep()), selection);
}

#[test]
fn kept_by_reason_counts_every_reason() {
    let listing = vec![
        with_label(orphan("a"), labels::PROXY_UID, LIVE_UID),
        with_label(orphan("b"), labels::PROXY_UID, LIVE_UID),
        created(orphan("c"), None),
        orphan("d"),
    ];
    let counts = select(&listing, &sweep()).kept_by_reason();
    assert_eq!(
        counts,
        BTreeMap::from([
            (KeepReason::NotManaged, 0),
            (KeepReason::NoInstallation, 0),
            (KeepReason::OtherInstallation, 0),
            (KeepReason::Deleting, 0),
            (KeepReason::NoUid, 0),
            (KeepReason::Live, 2),
            (KeepReason::UnknownAge, 1),
            (KeepReason::TooYoung, 0),
        ])
    );
    assert_eq!(
        Selection::default()
            .kept_by_reason()
            .values()
            .sum::<usize>(),
        0
    );
    assert_eq!(
        Selection::default().kept_by_reason().len(),
        KeepReason::ALL.len()
    );
}

#[test]
fn a_vm_still_stopping_after_the_last_sweeps_delete_is_counted_once() {
    // Sweep 1 deleted vm-a and vm-b; GCE still lists them, stopping, at sweep 2. They are
    // neither deleted again nor ours: the brake's base is what stays.
    let listing = vec![
        being_deleted(orphan("vm-a")),
        being_deleted(orphan("vm-b")),
        orphan("vm-c"),
        orphan("vm-d"),
    ];
    let selection = select(&listing, &sweep());
    let orphans: Vec<&str> = selection
        .orphans
        .iter()
        .map(|o| o.provider_id.as_str())
        .collect();
    assert_eq!(orphans, ["vm-c", "vm-d"]);
    assert_eq!(selection.kept_by_reason()[&KeepReason::Deleting], 2);
    let plan = proxy_core::gc::plan(&selection, proxy_core::gc::DeleteFraction::DEFAULT);
    assert_eq!(plan.ours, 2, "the leaving VMs do not widen the allowance");
    assert_eq!(plan.delete.len(), 1);
}

#[test]
fn an_empty_listing_selects_nothing() {
    assert_eq!(select(&[], &sweep()), Selection::default());
    let nothing_live = Sweep {
        live: BTreeSet::new(),
        ..sweep()
    };
    assert_eq!(select(&[], &nothing_live), Selection::default());
}

/// Metric labels and the label keys are an interface: changing one breaks dashboards, or
/// makes the GC blind to every instance made before the change.
#[test]
fn names_are_pinned() {
    assert_eq!(labels::MANAGED, "crawl.example.com/managed");
    assert_eq!(labels::MANAGED_VALUE, "true");
    assert_eq!(labels::PROXY_UID, "crawl.example.com/proxy-uid");
    assert_eq!(labels::INSTALLATION, "crawl.example.com/installation");
    let names: Vec<&str> = KeepReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "not_managed",
            "no_installation",
            "other_installation",
            "deleting",
            "no_uid",
            "live",
            "unknown_age",
            "too_young"
        ]
    );
    assert_eq!(KeepReason::TooYoung.to_string(), "too_young");
    let mut sorted = KeepReason::ALL;
    sorted.sort();
    assert_eq!(sorted, KeepReason::ALL, "ALL is in rule order");
}

#[test]
fn known_creation_and_is_old() {
    assert_eq!(known_creation(None), None);
    assert_eq!(known_creation(Some(Timestamp::UNIX_EPOCH)), None);
    assert_eq!(known_creation(Some(Timestamp::MIN)), None);
    assert_eq!(known_creation(Some(at(0))), Some(at(0)));
    assert!(is_old(at(0), MIN_AGE, at(600)));
    assert!(!is_old(at(0), MIN_AGE, at(599)));
    assert!(!is_old(at(1), Duration::ZERO, at(0)));
    assert!(!is_old(
        Timestamp::MAX,
        Duration::from_secs(1),
        Timestamp::MAX
    ));
}
