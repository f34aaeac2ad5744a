//! Update: a live Proxy whose labels, `maxLeases` or health check differ from its entry's
//! is patched in place, which makes no new machine (one drained in this decision is left
//! alone: its `maxLeases` stays 0).

use std::collections::BTreeSet;

use super::spread;
use super::{Draft, Pool, PoolAction};

/// Patches each live Proxy that differs from its slot, except those in `drained`.
pub(super) fn step(pool: &Pool<'_>, drained: &BTreeSet<&str>, draft: &mut Draft) {
    let labels = spread::member_labels(pool.spec, pool.name);
    for s in pool
        .seen
        .iter()
        .filter(|s| s.live() && !drained.contains(s.member.name.as_str()))
    {
        let Some(slot) = s.slot.map(|i| &pool.slots[i]) else {
            continue;
        };
        let labels_differ = labels
            .iter()
            .any(|(k, v)| s.member.labels.get(k) != Some(v));
        if labels_differ
            || s.member.max_leases != slot.spec.max_leases
            || s.member.health_check != slot.spec.health_check
        {
            draft.actions.push(PoolAction::Update {
                name: s.member.name.clone(),
                labels: labels.clone(),
                max_leases: slot.spec.max_leases,
                health_check: slot.spec.health_check.clone(),
            });
        }
    }
}
