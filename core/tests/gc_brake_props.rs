//! Properties of the brake and of the sweep's gate, on generated selections, fractions and
//! watch histories, against reference models written from the issue text: "one sweep never
//! deletes more than a configurable share of a provider's listed instances"; "GC must run
//! only from a store that completed its initial list since the last (re)connect".
//!
//! Failing cases are saved under `core/proptest-regressions/gc_brake_props.txt`: commit
//! that file. `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use jiff::Timestamp;
use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::gc::{
    CacheSync, DeleteFraction, Gate, KeepReason, Kept, Orphan, Selection, WatchSignal, gate, plan,
};

fn orphan() -> impl Strategy<Value = Orphan> {
    ("[a-e]{1,2}", "u[0-3]", 0i64..50).prop_map(|(provider_id, uid, age)| Orphan {
        provider_id,
        uid,
        created_at: Timestamp::from_second(1_780_000_000 - age).unwrap(),
    })
}

fn kept() -> impl Strategy<Value = Kept> {
    ("[a-e]{1,2}", prop::sample::select(&KeepReason::ALL[..])).prop_map(|(provider_id, reason)| {
        Kept {
            provider_id,
            reason,
            uid: None,
        }
    })
}

fn selection() -> impl Strategy<Value = Selection> {
    (vec(orphan(), 0..30), vec(kept(), 0..30)).prop_map(|(mut orphans, mut kept)| {
        orphans.sort();
        kept.sort();
        Selection { orphans, kept }
    })
}

fn fraction() -> impl Strategy<Value = DeleteFraction> {
    prop_oneof![
        Just(DeleteFraction::DEFAULT),
        Just(DeleteFraction::ALL),
        Just(DeleteFraction::new(0.0).unwrap()),
        (0.0f64..=1.0).prop_map(|share| DeleteFraction::new(share).unwrap()),
    ]
}

fn signal() -> impl Strategy<Value = WatchSignal> {
    prop_oneof![
        Just(WatchSignal::ListStarted),
        Just(WatchSignal::ListCompleted),
        "[a-z ]{0,8}".prop_map(WatchSignal::Failed),
    ]
}

proptest! {
    #![proptest_config(regressions::config("gc_brake_props", None))]

    /// The share holds exactly (`deleted × 10⁶ ≤ ours × ppm`), and no more is held back
    /// than needed: the brake deletes `min(orphans, allowance)`.
    #[test]
    fn a_sweep_never_deletes_more_than_the_share(selection in selection(), fraction in fraction()) {
        let plan = plan(&selection, fraction);
        let ours = selection.orphans.len()
            + selection.kept.iter().filter(|k| k.reason.is_ours()).count();
        prop_assert_eq!(plan.ours, ours);
        prop_assert!(
            plan.delete.len() as u128 * 1_000_000
                <= ours as u128 * u128::from(fraction.parts_per_million())
        );
        prop_assert_eq!(plan.delete.len(), selection.orphans.len().min(plan.allowance));
        prop_assert!(plan.allowance <= ours);
    }

    /// Every orphan is either deleted or held back, once; nothing else is.
    #[test]
    fn every_orphan_is_deleted_or_held_back(selection in selection(), fraction in fraction()) {
        let plan = plan(&selection, fraction);
        let mut out: Vec<Orphan> = plan.delete.iter().chain(&plan.held_back).cloned().collect();
        out.sort();
        prop_assert_eq!(out, selection.orphans);
    }

    /// Below a fraction of 1, a sweep never deletes every instance of ours.
    #[test]
    fn below_one_a_sweep_never_empties_the_fleet(selection in selection(), fraction in fraction()) {
        let plan = plan(&selection, fraction);
        if fraction < DeleteFraction::ALL && plan.ours > 0 {
            prop_assert!(plan.delete.len() < plan.ours);
        }
        if fraction == DeleteFraction::ALL {
            prop_assert!(plan.held_back.is_empty());
        }
    }

    /// No held-back orphan is older than a deleted one.
    #[test]
    fn the_oldest_go_first(selection in selection(), fraction in fraction()) {
        let plan = plan(&selection, fraction);
        if let (Some(youngest_deleted), Some(oldest_held)) = (
            plan.delete.iter().map(|o| o.created_at).max(),
            plan.held_back.iter().map(|o| o.created_at).min(),
        ) {
            prop_assert!(youngest_deleted <= oldest_held);
        }
    }

    /// The same selection, listed in any order, gives the same plan.
    #[test]
    fn the_plan_does_not_depend_on_the_listing_order(selection in selection(), fraction in fraction()) {
        let mut reversed = selection.clone();
        reversed.orphans.reverse();
        reversed.kept.reverse();
        prop_assert_eq!(plan(&selection, fraction), plan(&reversed, fraction));
    }

    /// GC sweeps exactly when it leads and the last list that started has completed,
    /// whatever failures came in between.
    #[test]
    fn the_gate_opens_only_after_the_last_list_completed(
        signals in vec(signal(), 0..20),
        leader in any::<bool>(),
    ) {
        let mut cache = CacheSync::new();
        for signal in &signals {
            cache.observe(signal.clone());
        }
        let last_list_event = signals
            .iter()
            .rev()
            .find(|s| !matches!(s, WatchSignal::Failed(_)));
        let synced = last_list_event == Some(&WatchSignal::ListCompleted);
        let decided = gate(leader, &cache);
        prop_assert_eq!(decided == Gate::Sweep, leader && synced);
        prop_assert_eq!(cache.is_synced(), synced);
        let completed = signals.iter().filter(|s| **s == WatchSignal::ListCompleted).count();
        prop_assert_eq!(cache.lists_completed(), completed as u64);
        if leader && !synced {
            let ever = completed > 0;
            let relisting = matches!(decided, Gate::Relisting { .. });
            prop_assert_eq!(relisting, ever);
        }
    }
}
