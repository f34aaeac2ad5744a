//! The fleet as the book holds it: every proxy it tracks in a numbered slot, found by key
//! once per request, then followed by number.
//!
//! A lease's grant and end touch one proxy several times: its view (health, capacity,
//! labels), its active count, and its place in the eligible index, once per label term.
//! Kept in trees keyed by `namespace/name`, each of those was a search comparing keys
//! through pointers to their text, and under HTTP load, where requests evict the book from
//! the caches between two calls, those cold searches cost four times what the book costs
//! alone (docs/benchmarks.md, goal 3 of issue 20). So the book finds a proxy's [`Slot`]
//! by key where a call names a key (an upsert, a removal, a count), and everywhere else,
//! the eligible index's ranks and the ledger's active leases, it carries the slot: one
//! vector index to the proxy, its count and its interned terms.

use std::collections::BTreeMap;

use super::index::{Rank, Term};
use super::numbered::Numbered;
use super::types::ProxyView;
use crate::key::ProxyKey;

/// The most keys [`Fleet::active_in_order`] steps over to reach the next key before it
/// looks the key up instead: a lookup is about 14 comparisons at 10 000 proxies.
const WALK: usize = 16;

/// A proxy's number in the book, fixed while the book tracks the proxy: while it is in
/// the fleet, or removed but still holding leases. A slot let go is given to the next new
/// key, so nothing may keep one past that: the index holds slots of tracked proxies only,
/// and the ledger only those of active leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Slot(usize);

/// One tracked proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Member {
    pub(super) key: ProxyKey,
    /// As last upserted; `None` while not in the fleet: removed, or known only from a
    /// restored lease (it stays while it holds leases, so that they
    /// count against its capacity if the same key comes back).
    pub(super) view: Option<ProxyView>,
    /// Active leases on it.
    pub(super) active: u32,
    /// Its view's label terms as the eligible index numbers them.
    pub(super) terms: Box<[Term]>,
}

/// The proxies by slot, and the slot of each key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Fleet {
    slots: BTreeMap<ProxyKey, Slot>,
    members: Numbered<Member>,
    /// How many members have a view: the proxies in the fleet.
    listed: usize,
}

impl Fleet {
    /// The slot of the proxy with this key, if the book tracks it. O(log n).
    pub(super) fn slot(&self, key: &ProxyKey) -> Option<Slot> {
        self.slots.get(key).copied()
    }

    /// The slot of the proxy with this key, a new one (no view, no leases) if the book
    /// does not track it yet.
    pub(super) fn slot_or_new(&mut self, key: &ProxyKey) -> Slot {
        if let Some(slot) = self.slot(key) {
            return slot;
        }
        let member = Member {
            key: key.clone(),
            view: None,
            active: 0,
            terms: Box::default(),
        };
        let slot = Slot(self.members.add(member));
        self.slots.insert(key.clone(), slot);
        slot
    }

    /// The proxy in `slot`, which must be tracked.
    pub(super) fn member(&self, slot: Slot) -> &Member {
        &self.members[slot.0]
    }

    /// Sets the view of the proxy in `slot`, with its interned terms, and returns the terms
    /// of the view it replaces.
    pub(super) fn set_view(
        &mut self,
        slot: Slot,
        view: ProxyView,
        terms: Box<[Term]>,
    ) -> Box<[Term]> {
        let member = &mut self.members[slot.0];
        self.listed += usize::from(member.view.is_none());
        member.view = Some(view);
        std::mem::replace(&mut member.terms, terms)
    }

    /// Takes the proxy in `slot` out of the fleet; returns whether it was in it, and the
    /// terms of its view. The slot is let go unless the proxy holds leases.
    pub(super) fn clear_view(&mut self, slot: Slot) -> (bool, Box<[Term]>) {
        let member = &mut self.members[slot.0];
        let listed = member.view.take().is_some();
        self.listed -= usize::from(listed);
        let terms = std::mem::take(&mut member.terms);
        self.let_go_if_unused(slot);
        (listed, terms)
    }

    /// Counts one more active lease on the proxy in `slot`.
    pub(super) fn lease_started(&mut self, slot: Slot) {
        let member = &mut self.members[slot.0];
        member.active = member.active.saturating_add(1);
    }

    /// Counts one fewer active lease on the proxy in `slot`; the slot of a removed proxy
    /// is let go with its last lease.
    pub(super) fn lease_ended(&mut self, slot: Slot) {
        let member = &mut self.members[slot.0];
        member.active = member.active.saturating_sub(1);
        self.let_go_if_unused(slot);
    }

    fn let_go_if_unused(&mut self, slot: Slot) {
        let member = &self.members[slot.0];
        // Only a slot its key still maps to is let go: no path lets one go twice, and should
        // one ever try, two keys sharing a slot would be far worse than a lookup on this
        // rare path (removals and a removed proxy's last lease).
        if member.view.is_none() && member.active == 0 && self.slots.get(&member.key) == Some(&slot)
        {
            self.slots.remove(&member.key);
            self.members.let_go(slot.0);
        }
    }

    /// The proxy with this key, if it is in the fleet. O(log n).
    pub(super) fn view(&self, key: &ProxyKey) -> Option<&ProxyView> {
        self.slot(key)
            .and_then(|slot| self.member(slot).view.as_ref())
    }

    /// Active leases on the proxy with this key, removed or not; 0 for an unknown key.
    pub(super) fn active(&self, key: &ProxyKey) -> u32 {
        self.slot(key).map_or(0, |slot| self.member(slot).active)
    }

    /// Active leases on each of `keys`, walking the slots by key from one key to the next
    /// while they ascend and are near ([`WALK`] steps at most), and looking a key up
    /// otherwise (a step back, or a filtered page whose keys are far apart in the book).
    pub(super) fn active_in_order<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a ProxyKey>,
    ) -> Vec<u32> {
        let mut tracked = self.slots.range::<ProxyKey, _>(..).peekable();
        let mut previous: Option<&ProxyKey> = None;
        keys.into_iter()
            .map(|key| {
                let ascending = previous.is_some_and(|previous| previous <= key);
                if ascending {
                    for _ in 0..WALK {
                        if tracked.next_if(|(tracked, _)| *tracked < key).is_none() {
                            break;
                        }
                    }
                }
                let reached = tracked.peek().is_none_or(|(tracked, _)| *tracked >= key);
                if !(ascending && reached) {
                    tracked = self.slots.range(key..).peekable();
                }
                previous = Some(key);
                match tracked.peek() {
                    Some((tracked, slot)) if *tracked == key => self.member(**slot).active,
                    _ => 0,
                }
            })
            .collect()
    }

    /// The proxies in the fleet, by key, with their active leases.
    pub(super) fn views(&self) -> impl Iterator<Item = (&ProxyView, u32)> {
        self.slots.values().filter_map(|slot| {
            let member = self.member(*slot);
            Some((member.view.as_ref()?, member.active))
        })
    }

    /// How many proxies are in the fleet. O(1).
    pub(super) fn len(&self) -> usize {
        self.listed
    }

    /// The rank and terms of the proxy in `slot` if it is in the fleet and can take a lease.
    pub(super) fn rank(&self, slot: Slot) -> Option<(Rank, &[Term])> {
        let member = self.member(slot);
        let view = member.view.as_ref()?;
        super::unavailable(view, member.active).is_none().then(|| {
            let rank = Rank {
                active: member.active,
                latency_ms: view.latency_ms,
                key: member.key.clone(),
                slot,
            };
            (rank, &*member.terms)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Labels;

    fn view(name: &str) -> ProxyView {
        ProxyView {
            key: ProxyKey::new("ns", name),
            labels: Labels::new(),
            healthy: true,
            latency_ms: 0,
            max_leases: 1,
            host: "10.0.0.1".into(),
            port: 3128,
            shared_egress: false,
        }
    }

    #[test]
    fn a_removed_proxy_keeps_its_slot_until_its_last_lease_ends_then_a_new_key_takes_it() {
        let mut fleet = Fleet::default();
        let a = view("a");
        let slot = fleet.slot_or_new(&a.key);
        fleet.set_view(slot, a.clone(), Box::default());
        fleet.lease_started(slot);
        assert_eq!((fleet.len(), fleet.active(&a.key)), (1, 1));

        // Removed while leased: out of the fleet, still counting its lease.
        assert!(fleet.clear_view(slot).0);
        assert_eq!((fleet.len(), fleet.view(&a.key)), (0, None));
        assert_eq!(fleet.slot(&a.key), Some(slot));
        assert!(!fleet.clear_view(slot).0, "a second removal finds nothing");
        assert_eq!(fleet.slot(&a.key), Some(slot), "and keeps the leased slot");

        // Its last lease ends: the slot is let go once, and the next new key gets it.
        fleet.lease_ended(slot);
        assert_eq!(fleet.slot(&a.key), None);
        assert_eq!(fleet.active(&a.key), 0);
        let b = view("b");
        assert_eq!(fleet.slot_or_new(&b.key), slot);
        let again = fleet.slot_or_new(&a.key);
        assert_ne!(
            again, slot,
            "a slot let go twice would be given to two keys"
        );
        assert_eq!(fleet.member(again).active, 0);
        assert_eq!(fleet.member(slot).key, b.key);
    }
}
