//! Delete: a drained Proxy goes once the lease book says it has no active lease (and at
//! least [`MIN_DRAIN`] after its drain began, so the book has heard of the drain), or once
//! its `drainGraceSeconds` are over. Its finalizer then deletes the machine.

use super::{BUSY_POLL, Draft, MIN_DRAIN, Pool, PoolAction};

/// Deletes the drained Proxies whose leases are over or whose grace is; notes when the
/// others are due.
pub(super) fn step(pool: &Pool<'_>, draft: &mut Draft) {
    let now = pool.now;
    for s in pool
        .seen
        .iter()
        .filter(|s| !s.member.deleting && !s.member.do_not_disrupt)
    {
        let Some(since) = s.draining else { continue };
        let ends = since
            .saturating_add(pool.settings.drain_grace)
            .unwrap_or(since);
        let settled = since.saturating_add(MIN_DRAIN).unwrap_or(since);
        let leases_done = s.member.active_leases == Some(0) && now >= settled;
        if leases_done || now >= ends {
            draft.actions.push(PoolAction::Delete {
                name: s.member.name.clone(),
            });
            let why = if leases_done {
                "its leases are over"
            } else {
                "its drain grace is over"
            };
            draft.on_proxy(
                &s.member.name,
                "DeletingProxy",
                format!("pool {} deletes proxy {}: {why}", pool.name, s.member.name),
            );
        } else {
            draft.deadline.at(ends);
            draft.deadline.at(settled);
            draft.deadline.within(BUSY_POLL);
        }
    }
}
