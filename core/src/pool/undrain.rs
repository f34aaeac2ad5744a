//! Undrain: a draining Proxy the user has since marked do-not-disrupt is kept. It takes
//! leases again (its `maxLeases` back from its slot), and no longer counts as draining.

use super::{Draft, Pool, PoolAction};

/// Takes back every draining Proxy marked do-not-disrupt.
pub(super) fn step(pool: &Pool<'_>, draft: &mut Draft) {
    for s in pool
        .seen
        .iter()
        .filter(|s| s.draining.is_some() && s.member.do_not_disrupt && !s.member.deleting)
    {
        let max_leases = s.slot.map_or(pool.spec.template.spec.max_leases, |i| {
            pool.slots[i].spec.max_leases
        });
        draft.actions.push(PoolAction::Undrain {
            name: s.member.name.clone(),
            max_leases,
        });
        draft.on_proxy(
            &s.member.name,
            "UndrainingProxy",
            format!(
                "pool {} keeps proxy {}: it is marked do-not-disrupt; it takes leases again",
                pool.name, s.member.name
            ),
        );
    }
}
