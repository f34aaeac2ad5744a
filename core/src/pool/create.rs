//! Create: each spread entry gets Proxies until its non-retiring ones reach its share, and
//! all the pool's Proxies (draining and deleting ones too: they still run a machine) stay
//! within `desired + maxSurge`. Names are `<pool>-<ordinal>`, with an ordinal that only
//! grows.

use proxy_crd::pool as api;
use proxy_crd::{ProxyPoolSpec, ProxyPoolStatus};

use super::spread::{self, Slot};
use super::{Draft, Member, Pool, PoolAction};

/// Creates what each slot lacks, within the surge; returns the next ordinal.
pub(super) fn step(pool: &Pool<'_>, status: &ProxyPoolStatus, draft: &mut Draft) -> u64 {
    let total = u32::try_from(pool.members.len()).unwrap_or(u32::MAX);
    let mut room = (pool.desired + pool.settings.max_surge).saturating_sub(total);
    let mut ordinal = next_ordinal(pool.name, status, pool.members);
    for (index, slot) in pool.slots.iter().enumerate() {
        let good = pool
            .seen
            .iter()
            .filter(|s| s.slot == Some(index) && s.live() && s.retire.is_none())
            .count();
        let need = slot
            .desired
            .saturating_sub(u32::try_from(good).unwrap_or(u32::MAX));
        let count = need.min(room);
        room -= count;
        for _ in 0..count {
            if !pool.valid_name {
                break;
            }
            let proxy = format!("{}-{ordinal}", pool.name);
            ordinal += 1;
            draft.on_pool("CreatingProxy", format!("creating proxy {proxy}"));
            draft
                .actions
                .push(create(pool.spec, pool.name, slot, proxy));
        }
    }
    ordinal
}

/// The Create action of a new Proxy `proxy` in `slot`.
fn create(spec: &ProxyPoolSpec, pool: &str, slot: &Slot, proxy: String) -> PoolAction {
    let mut annotations = spec
        .template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(api::TEMPLATE_HASH_ANNOTATION.to_owned(), slot.hash.clone());
    PoolAction::Create {
        name: proxy,
        labels: spread::member_labels(spec, pool),
        annotations,
        spec: Box::new(slot.spec.clone()),
    }
}

/// The ordinal of the next new Proxy: the status's, and never one in use.
fn next_ordinal(pool: &str, status: &ProxyPoolStatus, members: &[Member]) -> u64 {
    let prefix = format!("{pool}-");
    let in_use = members
        .iter()
        .filter_map(|m| m.name.strip_prefix(&prefix)?.parse::<u64>().ok())
        .max()
        .map_or(0, |n| n + 1);
    u64::try_from(status.next_ordinal).unwrap_or(0).max(in_use)
}
