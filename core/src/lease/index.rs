//! The eligible index: every proxy that can take a lease right now, in selection order,
//! once for the whole fleet and once per label term.

use std::collections::{BTreeMap, BTreeSet};

use super::types::{Labels, Selector};
use crate::key::ProxyKey;

/// A proxy's place in the selection order: fewest active leases, then lowest latency, then
/// key. The field order is the order (derived `Ord`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    pub(super) active: u32,
    pub(super) latency_ms: u32,
    pub(super) key: ProxyKey,
}

/// Eligible proxies by rank, in one set for the fleet and one per `label=value` term.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct EligibleIndex {
    all: BTreeSet<Rank>,
    by_term: BTreeMap<String, BTreeMap<String, BTreeSet<Rank>>>,
}

impl EligibleIndex {
    /// Adds a proxy: O((labels + 1) · log n).
    pub(super) fn insert(&mut self, rank: Rank, labels: &Labels) {
        for (name, value) in labels {
            self.by_term
                .entry(name.clone())
                .or_default()
                .entry(value.clone())
                .or_default()
                .insert(rank.clone());
        }
        self.all.insert(rank);
    }

    /// Removes a proxy inserted with the same rank and labels: O((labels + 1) · log n).
    pub(super) fn remove(&mut self, rank: &Rank, labels: &Labels) {
        for (name, value) in labels {
            let Some(values) = self.by_term.get_mut(name) else {
                continue;
            };
            if let Some(ranks) = values.get_mut(value) {
                ranks.remove(rank);
                if ranks.is_empty() {
                    values.remove(value);
                }
            }
            if values.is_empty() {
                self.by_term.remove(name);
            }
        }
        self.all.remove(rank);
    }

    /// The smallest set holding every eligible proxy the selector matches, in rank order:
    /// the whole fleet for the empty selector, else the set of its rarest term. `None` when
    /// some term matches no eligible proxy, or the selector contradicts itself. O(terms ·
    /// log n).
    pub(super) fn narrowest(&self, selector: &Selector) -> Option<&BTreeSet<Rank>> {
        if selector.is_contradictory() {
            return None;
        }
        selector
            .terms()
            .try_fold(&self.all, |narrowest, (name, value)| {
                let ranks = self.by_term.get(name)?.get(value)?;
                Some(if ranks.len() < narrowest.len() {
                    ranks
                } else {
                    narrowest
                })
            })
    }
}
