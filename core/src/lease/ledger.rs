//! The ledger: every lease the book knows, active or retained, with its timelines.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::fleet::Slot;
use super::later;
use super::lease_key::LeaseKey;
use super::types::Lease;

/// Whether a lease still holds its proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Counts against the capacity of the proxy in `slot` until it expires or is released.
    Active { slot: Slot },
    /// Expired or released at `ended_at`: no longer counts, kept until it is forgotten so
    /// that a late report lands.
    Retained { ended_at: Timestamp },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    lease: Lease,
    state: State,
}

/// How long, and how many, ended leases are kept for late reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Retention {
    /// Kept this long after they end ([`LeaseConfig::retention`](super::LeaseConfig::retention)).
    pub period: Duration,
    /// At most this many at once, the ones that ended last
    /// ([`LeaseConfig::max_retained`](super::LeaseConfig::max_retained)).
    pub most: usize,
}

/// Leases by ID, active leases by expiry and by holder, retained leases by the time they are
/// forgotten (so also by the time they ended: the period is the same for all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Ledger {
    /// Boxed: an entry is about 180 bytes, and lease IDs are random, so every grant and
    /// every forgotten lease would shift half a tree node of entries (about 1 KiB) where
    /// it now shifts pointers.
    entries: BTreeMap<LeaseKey, Box<Entry>>,
    expiries: BTreeSet<(Timestamp, LeaseKey)>,
    forgets: BTreeSet<(Timestamp, LeaseKey)>,
    /// The active leases of each holder that named itself; a holder with none is not a key.
    holders: BTreeMap<String, BTreeSet<LeaseKey>>,
}

impl Ledger {
    /// Whether a lease with this ID is active or retained.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.entries.contains_key(&LeaseKey::of(id))
    }

    /// The lease with this ID, active or retained.
    pub(super) fn get(&self, id: &str) -> Option<&Lease> {
        self.entries
            .get(&LeaseKey::of(id))
            .map(|entry| &entry.lease)
    }

    /// How many leases are active.
    pub(super) fn active(&self) -> usize {
        self.expiries.len()
    }

    /// How many ended leases are retained.
    pub(super) fn retained(&self) -> usize {
        self.forgets.len()
    }

    /// Records a new active lease on the proxy in `slot`. Its ID must be new
    /// ([`contains`](Self::contains)).
    pub(super) fn grant(&mut self, lease: Lease, slot: Slot) {
        let key = LeaseKey::of(&lease.id);
        self.expiries.insert((lease.expires_at, key.clone()));
        if let Some(holder) = &lease.holder {
            self.holders
                .entry(holder.clone())
                .or_default()
                .insert(key.clone());
        }
        let entry = Entry {
            lease,
            state: State::Active { slot },
        };
        self.entries.insert(key, Box::new(entry));
    }

    /// Ends the first active lease that expired at or before `now` and returns its proxy's
    /// slot and its key; `None` when no lease is due. It is retained for `retention` after
    /// its expiry.
    pub(super) fn expire_next(
        &mut self,
        now: Timestamp,
        retention: Retention,
    ) -> Option<(Slot, LeaseKey)> {
        if self.expiries.first()?.0 > now {
            return None;
        }
        let (expires_at, id) = self.expiries.pop_first()?;
        let slot = self.retain(id.clone(), expires_at, retention)?;
        Some((slot, id))
    }

    /// Ends the lease if it is active and returns its proxy's slot; `None` when it is
    /// unknown or already ended. It is retained for `retention` after `now`.
    pub(super) fn release(
        &mut self,
        id: &str,
        now: Timestamp,
        retention: Retention,
    ) -> Option<Slot> {
        let id = LeaseKey::of(id);
        let entry = self.entries.get(&id)?;
        match entry.state {
            State::Retained { .. } => None,
            State::Active { .. } => {
                let due = (entry.lease.expires_at, id);
                self.expiries.remove(&due);
                self.retain(due.1, now, retention)
            }
        }
    }

    /// Records a lease that already ended at `ended_at` (from a checkpoint): retained until
    /// `ended_at + retention`, unless more than `retention.most` ended later. Its ID must be
    /// new ([`contains`](Self::contains)).
    pub(super) fn record_ended(&mut self, lease: Lease, ended_at: Timestamp, retention: Retention) {
        let id = LeaseKey::of(&lease.id);
        self.forgets
            .insert((later(ended_at, retention.period), id.clone()));
        let state = State::Retained { ended_at };
        self.entries.insert(id, Box::new(Entry { lease, state }));
        self.forget_beyond(retention.most);
    }

    /// Whether the lease with this ID is active.
    pub(super) fn is_active(&self, id: &str) -> bool {
        self.entries
            .get(&LeaseKey::of(id))
            .is_some_and(|entry| matches!(entry.state, State::Active { .. }))
    }

    /// The active leases of `holder`, by ID; of every holder (and none) when `None`.
    /// O(k · log L) for k leases returned, or O(a · log a) for every active lease.
    pub(super) fn active_of(&self, holder: Option<&str>) -> Vec<&Lease> {
        let keys: Vec<&LeaseKey> = match holder {
            Some(holder) => self.holders.get(holder).into_iter().flatten().collect(),
            None => {
                let mut keys: Vec<&LeaseKey> = self.expiries.iter().map(|(_, key)| key).collect();
                keys.sort_unstable();
                keys
            }
        };
        keys.into_iter()
            .filter_map(|key| self.entries.get(key))
            .map(|entry| &entry.lease)
            .collect()
    }

    /// Every active lease, and the `retained` retained leases that ended last, each with
    /// the time it ended (`None`: active). O(a + r) for a active leases and r retained ones
    /// returned, however many the ledger retains.
    pub(super) fn recent(
        &self,
        retained: usize,
    ) -> impl Iterator<Item = (&Lease, Option<Timestamp>)> {
        let active = self.expiries.iter();
        let retained = self.forgets.iter().rev().take(retained);
        active.chain(retained).filter_map(|(_, key)| {
            let entry = self.entries.get(key)?;
            let ended_at = match entry.state {
                State::Active { .. } => None,
                State::Retained { ended_at } => Some(ended_at),
            };
            Some((&entry.lease, ended_at))
        })
    }

    /// Forgets every retained lease whose retention ended at or before `now`.
    pub(super) fn forget_ended(&mut self, now: Timestamp) {
        self.forget_first_while(|forgets| forgets.first().is_some_and(|(at, _)| *at <= now));
    }

    fn retain(&mut self, id: LeaseKey, ended_at: Timestamp, retention: Retention) -> Option<Slot> {
        let entry = self.entries.get_mut(&id)?;
        let State::Active { slot } = entry.state else {
            return None;
        };
        entry.state = State::Retained { ended_at };
        if let Some(holder) = &entry.lease.holder
            && let Some(held) = self.holders.get_mut(holder)
        {
            held.remove(&id);
            if held.is_empty() {
                self.holders.remove(holder);
            }
        }
        self.forgets.insert((later(ended_at, retention.period), id));
        self.forget_beyond(retention.most);
        Some(slot)
    }

    /// Forgets the retained leases that ended first until at most `most` are left.
    fn forget_beyond(&mut self, most: usize) {
        self.forget_first_while(|forgets| forgets.len() > most);
    }

    /// Forgets the retained lease due to be forgotten first, for as long as `more` says so
    /// of what is left.
    fn forget_first_while(&mut self, more: impl Fn(&BTreeSet<(Timestamp, LeaseKey)>) -> bool) {
        while more(&self.forgets)
            && let Some((_, id)) = self.forgets.pop_first()
        {
            self.entries.remove(&id);
        }
    }
}
