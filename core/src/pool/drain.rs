//! Drain: a retiring Proxy, or one above its entry's share, gets no new lease (`maxLeases`
//! 0 and the draining annotation). The ones not available go first (they cost no
//! capacity), then scale-downs, then retiring ones by reason; never below `desired -
//! maxUnavailable` available Proxies (so with the default 0 a successor is Ready first), and
//! retiring ones only while fewer than the disruption budget drain.

use std::collections::BTreeSet;

use super::members::Seen;
use super::spread::Slot;
use super::{BUSY_POLL, Draft, Pool, PoolAction, Why};
use crate::conditions::format_time;

/// Drains what must and may drain now; returns the names of the Proxies drained.
pub(super) fn step<'a>(pool: &Pool<'a>, draft: &mut Draft) -> BTreeSet<&'a str> {
    let (seen, settings) = (&pool.seen, &pool.settings);
    let draining = seen
        .iter()
        .filter(|s| s.draining.is_some() && !s.member.do_not_disrupt)
        .count();
    let mut budget_left = settings
        .budget
        .saturating_sub(u32::try_from(draining).unwrap_or(u32::MAX));
    let mut available = seen.iter().filter(|s| s.available).count();
    let min_available =
        usize::try_from(pool.desired.saturating_sub(settings.max_unavailable)).unwrap_or(0);
    let mut drained = BTreeSet::new();
    for (index, why) in candidates(seen, &pool.slots) {
        let s = &seen[index];
        let costs = usize::from(s.available);
        if available.saturating_sub(costs) < min_available && costs == 1 {
            continue;
        }
        if why != Why::ScaleDown {
            if budget_left == 0 {
                continue;
            }
            budget_left -= 1;
        }
        available -= costs;
        drained.insert(s.member.name.as_str());
        draft.actions.push(PoolAction::Drain {
            name: s.member.name.clone(),
            since: format_time(pool.now),
            why,
        });
        draft.on_proxy(
            &s.member.name,
            "DrainingProxy",
            format!(
                "pool {} drains proxy {}: {}; it gets no new lease",
                pool.name,
                s.member.name,
                why.describe()
            ),
        );
        draft.deadline.within(BUSY_POLL);
    }
    drained
}

/// The members that may be drained, in the order they are considered, with why: per slot,
/// the live non-retiring ones above the slot's share (scale-down), and every retiring one.
fn candidates(seen: &[Seen<'_>], slots: &[Slot]) -> Vec<(usize, Why)> {
    let mut candidates = Vec::new();
    for (index, slot) in slots.iter().enumerate() {
        let mut keepers: Vec<usize> = (0..seen.len())
            .filter(|&i| {
                let s = &seen[i];
                s.slot == Some(index) && s.live() && s.retire.is_none()
            })
            .collect();
        // Victims first: not available, fewest leases, oldest, by name.
        keepers.sort_by(|&a, &b| {
            let (a, b) = (&seen[a], &seen[b]);
            a.available
                .cmp(&b.available)
                .then(a.member.active_leases.cmp(&b.member.active_leases))
                .then(a.member.created.cmp(&b.member.created))
                .then(a.member.name.cmp(&b.member.name))
        });
        let surplus = keepers
            .len()
            .saturating_sub(usize::try_from(slot.desired).unwrap_or(usize::MAX));
        candidates.extend(
            keepers
                .into_iter()
                .filter(|&i| !seen[i].member.do_not_disrupt)
                .take(surplus)
                .map(|i| (i, Why::ScaleDown)),
        );
    }
    candidates.extend(
        seen.iter()
            .enumerate()
            .filter_map(|(i, s)| s.retire.map(|why| (i, why))),
    );
    candidates.sort_by(|&(a, why_a), &(b, why_b)| {
        let (a_seen, b_seen) = (&seen[a], &seen[b]);
        a_seen
            .available
            .cmp(&b_seen.available)
            .then((why_a != Why::ScaleDown).cmp(&(why_b != Why::ScaleDown)))
            .then(why_a.cmp(&why_b))
            .then(a_seen.member.created.cmp(&b_seen.member.created))
            .then(a_seen.member.name.cmp(&b_seen.member.name))
    });
    candidates
}
