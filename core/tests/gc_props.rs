//! Properties of orphan selection: one per rule, checked on generated listings where every
//! label and time is drawn from a small pool of good, bad and borderline values, against a
//! reference model written from the issue text.
//!
//! Failing cases are saved under `core/proptest-regressions/gc_props.txt`: commit that
//! file. `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use proxy_core::gc::{ListedInstance, Sweep, labels, select};

const OURS: &str = "cluster-a";
const UIDS: [&str; 6] = ["u0", "u1", "u2", "u3", "u4", "u5"];
/// The sweep's time, in seconds since the epoch.
const NOW: i64 = 1_780_000_000;

fn label_value(pool: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        4 => prop::sample::select(pool).prop_map(|v| Some(v.to_owned())),
    ]
}

fn managed() -> impl Strategy<Value = Option<String>> {
    label_value(&["true", "true", "false", "True", ""])
}

fn installation() -> impl Strategy<Value = Option<String>> {
    label_value(&[OURS, OURS, "cluster-b", ""])
}

fn uid() -> impl Strategy<Value = Option<String>> {
    label_value(&["u0", "u1", "u2", "u3", "u4", "u5", ""])
}

fn min_age() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_secs(600)),
        (0u64..=7200).prop_map(Duration::from_secs),
    ]
}

/// A creation time: unknown, a zero sentinel, or within two hours either side of [`NOW`].
fn created_at() -> impl Strategy<Value = Option<Timestamp>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Timestamp::UNIX_EPOCH)),
        1 => Just(Some("0001-01-01T00:00:00Z".parse().unwrap())),
        6 => (-7200i64..=7200).prop_map(|offset| Some(Timestamp::from_second(NOW + offset).unwrap())),
    ]
}

fn instance() -> impl Strategy<Value = ListedInstance> {
    (
        "[a-z]{1,3}",
        managed(),
        installation(),
        uid(),
        created_at(),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(provider_id, managed, installation, uid, created_at, noise, deleting)| {
                let mut labels = BTreeMap::new();
                for (key, value) in [
                    (labels::MANAGED, managed),
                    (labels::INSTALLATION, installation),
                    (labels::PROXY_UID, uid),
                ] {
                    if let Some(value) = value {
                        labels.insert(key.to_owned(), value);
                    }
                }
                if noise {
                    labels.insert("team".to_owned(), "crawl".to_owned());
                }
                ListedInstance {
                    provider_id,
                    labels,
                    created_at,
                    deleting,
                }
            },
        )
}

fn sweep() -> impl Strategy<Value = Sweep> {
    (
        btree_set(prop::sample::select(&UIDS[..]), 0..=UIDS.len()),
        prop_oneof![4 => Just(OURS), 1 => Just("")],
        min_age(),
    )
        .prop_map(|(live, installation, min_age)| Sweep {
            live: live.into_iter().map(str::to_owned).collect(),
            installation: installation.to_owned(),
            min_age,
            now: Timestamp::from_second(NOW).unwrap(),
        })
}

/// The reference model: the rules, written independently of the implementation.
fn is_orphan(instance: &ListedInstance, sweep: &Sweep) -> bool {
    let get = |key: &str| instance.labels.get(key).cloned();
    let managed = get(labels::MANAGED).as_deref() == Some("true");
    let ours = !sweep.installation.is_empty()
        && get(labels::INSTALLATION).as_deref() == Some(sweep.installation.as_str());
    let uid = get(labels::PROXY_UID).filter(|uid| !uid.is_empty());
    let gone = uid.is_some_and(|uid| !sweep.live.contains(&uid));
    let old = instance.created_at.is_some_and(|created| {
        created.as_second() > 0
            && (sweep.now.as_second() - created.as_second()) as u64 >= sweep.min_age.as_secs()
            && created <= sweep.now
    });
    managed && ours && !instance.deleting && gone && old
}

fn label(instance: &ListedInstance, key: &str) -> Option<String> {
    instance.labels.get(key).cloned()
}

proptest! {
    #![proptest_config(regressions::config("gc_props", None))]

    /// Every listed instance comes out exactly once, and the orphans are exactly those the
    /// reference model names.
    #[test]
    fn selection_matches_the_reference_model(
        listing in vec(instance(), 0..20),
        sweep in sweep(),
    ) {
        let selection = select(&listing, &sweep);
        prop_assert_eq!(selection.orphans.len() + selection.kept.len(), listing.len());
        let mut expected: Vec<(String, String)> = listing
            .iter()
            .filter(|i| is_orphan(i, &sweep))
            .map(|i| (i.provider_id.clone(), label(i, labels::PROXY_UID).unwrap()))
            .collect();
        expected.sort();
        let actual: Vec<(String, String)> = selection
            .orphans
            .iter()
            .map(|o| (o.provider_id.clone(), o.uid.clone()))
            .collect();
        prop_assert_eq!(actual, expected);
        let counted: usize = selection.kept_by_reason().values().sum();
        prop_assert_eq!(counted, selection.kept.len());
    }

    /// An instance whose UID belongs to a Proxy object, deleting or not, is never selected.
    #[test]
    fn a_live_uid_is_never_selected(
        listing in vec(instance(), 0..20),
        sweep in sweep(),
    ) {
        for orphan in select(&listing, &sweep).orphans {
            prop_assert!(!sweep.live.contains(&orphan.uid), "{orphan:?} is live");
        }
        // And making every listed UID live leaves nothing to reap.
        let all_live = Sweep {
            live: listing
                .iter()
                .filter_map(|i| label(i, labels::PROXY_UID))
                .collect(),
            ..sweep.clone()
        };
        prop_assert!(select(&listing, &all_live).orphans.is_empty());
    }

    /// An instance labelled with another installation, or with none, is never selected; nor
    /// is anything when our installation identity is empty.
    #[test]
    fn another_installation_is_never_selected(
        listing in vec(instance(), 0..20),
        sweep in sweep(),
        theirs in prop_oneof![Just(None), Just(Some("cluster-b")), Just(Some(""))],
    ) {
        let foreign: Vec<ListedInstance> = listing
            .into_iter()
            .map(|mut i| {
                match theirs {
                    Some(theirs) => i.labels.insert(labels::INSTALLATION.to_owned(), theirs.to_owned()),
                    None => i.labels.remove(labels::INSTALLATION),
                };
                i
            })
            .collect();
        prop_assert!(select(&foreign, &sweep).orphans.is_empty());
    }

    /// An instance younger than the minimum age, created in the future, or of unknown or zero
    /// creation time is never selected.
    #[test]
    fn young_or_ageless_is_never_selected(
        listing in vec(instance(), 0..20),
        sweep in sweep(),
    ) {
        let selection = select(&listing, &sweep);
        for orphan in &selection.orphans {
            prop_assert!(orphan.created_at > Timestamp::UNIX_EPOCH);
            prop_assert!(orphan.created_at <= sweep.now);
            let age = sweep.now.duration_since(orphan.created_at);
            prop_assert!(age.as_secs() as u64 >= sweep.min_age.as_secs(), "{orphan:?}");
        }
        // Unknown, zero, just under the minimum age, or in the future: nothing is reaped.
        let young = sweep.min_age.checked_sub(Duration::from_secs(1)).map(|age| {
            sweep.now.checked_sub(age).unwrap()
        });
        let future = sweep.now.checked_add(Duration::from_secs(1)).unwrap();
        let not_old: Vec<ListedInstance> = listing
            .iter()
            .cloned()
            .enumerate()
            .map(|(n, mut i)| {
                i.created_at = match n % 4 {
                    0 => None,
                    1 => Some(Timestamp::UNIX_EPOCH),
                    2 => young.or(Some(future)),
                    _ => Some(future),
                };
                i
            })
            .collect();
        prop_assert!(select(&not_old, &sweep).orphans.is_empty());
    }

    /// An instance meeting every rule is always selected, whatever else is listed with it.
    #[test]
    fn meeting_every_rule_is_always_selected(
        listing in vec(instance(), 0..10),
        sweep in sweep(),
        extra_age_secs in 0u64..=86_400,
        noise in any::<bool>(),
    ) {
        prop_assume!(!sweep.installation.is_empty());
        let mut labels = BTreeMap::from([
            (labels::MANAGED.to_owned(), "true".to_owned()),
            (labels::INSTALLATION.to_owned(), sweep.installation.clone()),
            (labels::PROXY_UID.to_owned(), "u-gone".to_owned()),
        ]);
        if noise {
            labels.insert("team".to_owned(), "crawl".to_owned());
        }
        let age = sweep.min_age + Duration::from_secs(extra_age_secs);
        let doomed = ListedInstance {
            provider_id: "doomed".to_owned(),
            labels,
            created_at: Some(sweep.now.checked_sub(age).unwrap()),
            deleting: false,
        };
        let mut listing = listing;
        listing.push(doomed);
        let selection = select(&listing, &sweep);
        prop_assert!(selection
            .orphans
            .iter()
            .any(|o| o.provider_id == "doomed" && o.uid == "u-gone"));
    }

    /// The selection is sorted, and does not depend on the order of the listing.
    #[test]
    fn output_is_deterministic(
        (listing, shuffled) in vec(instance(), 0..20)
            .prop_flat_map(|l| (Just(l.clone()), Just(l).prop_shuffle())),
        sweep in sweep(),
    ) {
        let selection = select(&listing, &sweep);
        prop_assert!(selection.orphans.is_sorted());
        prop_assert!(selection.kept.is_sorted());
        prop_assert_eq!(&select(&shuffled, &sweep), &selection);
        prop_assert_eq!(&select(&listing, &sweep), &selection);
    }

    /// More live UIDs never make more orphans: the cache seeing an object can only save its
    /// instance.
    #[test]
    fn more_live_uids_never_add_orphans(
        listing in vec(instance(), 0..20),
        sweep in sweep(),
        more in btree_set(prop::sample::select(&UIDS[..]), 0..=UIDS.len()),
    ) {
        let before: BTreeSet<_> = select(&listing, &sweep).orphans.into_iter().collect();
        let mut wider = sweep.clone();
        wider.live.extend(more.into_iter().map(str::to_owned));
        let after: BTreeSet<_> = select(&listing, &wider).orphans.into_iter().collect();
        prop_assert!(after.is_subset(&before));
    }
}
