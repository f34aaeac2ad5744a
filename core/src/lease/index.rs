//! The eligible index: every proxy that can take a lease right now, in selection order,
//! once for the whole fleet and once per label term.
//!
//! A label term (`geo=eu`) gets a number, a [`Term`], the first time a proxy of the fleet
//! carries it, and keeps it while one does. A request's selector finds its terms by text,
//! once; a grant or an end of a lease moves its proxy through the sets of the terms the
//! proxy's slot lists, by number, without looking a label up or copying one.

use std::collections::{BTreeMap, BTreeSet};

use super::fleet::Slot;
use super::numbered::Numbered;
use super::types::{Labels, Selector};
use crate::key::ProxyKey;

/// A proxy's place in the selection order: fewest active leases, then lowest latency, then
/// key. The field order is the order (derived `Ord`); the slot never decides (one key, one
/// slot) and tells the book where the proxy is without a search.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    pub(super) active: u32,
    pub(super) latency_ms: u32,
    pub(super) key: ProxyKey,
    pub(super) slot: Slot,
}

/// A `label=value` term carried by at least one proxy of the fleet, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Term(usize);

/// The eligible proxies of one term, and how many proxies of the fleet carry it (eligible
/// or not): the term is let go when none does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TermSet {
    name: String,
    value: String,
    carriers: usize,
    ranks: BTreeSet<Rank>,
}

/// Eligible proxies by rank, in one set for the fleet and one per `label=value` term.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct EligibleIndex {
    all: BTreeSet<Rank>,
    /// The number of each term the fleet carries, by label then value.
    terms: BTreeMap<String, BTreeMap<String, Term>>,
    sets: Numbered<TermSet>,
}

impl EligibleIndex {
    /// The terms of `labels`, numbered, each counting one more carrier: call when a proxy
    /// takes these labels, and [`let_go`](Self::let_go) when it drops them. O(labels · log
    /// terms).
    pub(super) fn carry(&mut self, labels: &Labels) -> Box<[Term]> {
        labels
            .iter()
            .map(|(name, value)| {
                let term = self
                    .term(name, value)
                    .unwrap_or_else(|| self.new_term(name, value));
                self.sets[term.0].carriers += 1;
                term
            })
            .collect()
    }

    /// Counts one carrier fewer for each of `terms`, letting go of those no proxy carries.
    /// No proxy carrying them may be in the index.
    pub(super) fn let_go(&mut self, terms: &[Term]) {
        for term in terms {
            let set = &mut self.sets[term.0];
            set.carriers -= 1;
            if set.carriers > 0 {
                continue;
            }
            let TermSet { name, value, .. } = std::mem::take(set);
            if let Some(values) = self.terms.get_mut(&name) {
                values.remove(&value);
                if values.is_empty() {
                    self.terms.remove(&name);
                }
            }
            self.sets.let_go(term.0);
        }
    }

    /// Adds a proxy: O((terms + 1) · log n).
    pub(super) fn insert(&mut self, rank: Rank, terms: &[Term]) {
        for term in terms {
            self.sets[term.0].ranks.insert(rank.clone());
        }
        self.all.insert(rank);
    }

    /// Removes a proxy inserted with the same rank and terms: O((terms + 1) · log n).
    pub(super) fn remove(&mut self, rank: &Rank, terms: &[Term]) {
        for term in terms {
            self.sets[term.0].ranks.remove(rank);
        }
        self.all.remove(rank);
    }

    /// The smallest set holding every eligible proxy the selector matches, in rank order:
    /// the whole fleet for the empty selector, else the set of its rarest term. `None` when
    /// no proxy of the fleet carries some term, or the selector contradicts itself.
    /// O(terms · log n).
    pub(super) fn narrowest(&self, selector: &Selector) -> Option<&BTreeSet<Rank>> {
        if selector.is_contradictory() {
            return None;
        }
        selector
            .terms()
            .try_fold(&self.all, |narrowest, (name, value)| {
                let ranks = &self.sets[self.term(name, value)?.0].ranks;
                Some(if ranks.len() < narrowest.len() {
                    ranks
                } else {
                    narrowest
                })
            })
    }

    fn term(&self, name: &str, value: &str) -> Option<Term> {
        self.terms.get(name)?.get(value).copied()
    }

    fn new_term(&mut self, name: &str, value: &str) -> Term {
        let set = TermSet {
            name: name.to_owned(),
            value: value.to_owned(),
            ..TermSet::default()
        };
        let term = Term(self.sets.add(set));
        self.terms
            .entry(name.to_owned())
            .or_default()
            .insert(value.to_owned(), term);
        term
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(geo: &str) -> Labels {
        Labels::from([("geo".to_owned(), geo.to_owned())])
    }

    fn selector(geo: &str) -> Selector {
        [("geo", geo)].into_iter().collect()
    }

    #[test]
    fn a_term_no_proxy_carries_is_let_go_and_its_number_is_given_again() {
        let mut index = EligibleIndex::default();
        let eu = index.carry(&labels("eu"));
        let eu_again = index.carry(&labels("eu"));
        assert_eq!(eu, eu_again, "one term, one number");
        assert!(
            index
                .narrowest(&selector("eu"))
                .is_some_and(BTreeSet::is_empty)
        );

        index.let_go(&eu);
        assert!(
            index.narrowest(&selector("eu")).is_some(),
            "one carrier left"
        );
        index.let_go(&eu_again);
        assert_eq!(index.narrowest(&selector("eu")), None);
        assert!(
            index.terms.is_empty(),
            "no label is kept for a term nobody carries"
        );

        let us = index.carry(&labels("us"));
        assert_eq!(us, eu, "the number let go is given again");
        assert_eq!(index.narrowest(&selector("eu")), None);
        assert!(index.narrowest(&selector("us")).is_some());
    }

    #[test]
    fn a_selector_looks_only_at_the_proxies_of_its_rarest_term() {
        // Three proxies in eu, one of them gold: `geo=eu,tier=gold` walks one proxy, not
        // three, whichever order its terms come in (what keeps a grant cheap in a large
        // fleet; the result is the same either way, as the grant checks the whole selector).
        let mut fleet = super::super::fleet::Fleet::default();
        let mut index = EligibleIndex::default();
        for (i, tier) in ["silver", "gold", "silver"].into_iter().enumerate() {
            let key = ProxyKey::new("crawl", format!("p{i}"));
            let labels = Labels::from([
                ("geo".to_owned(), "eu".to_owned()),
                ("tier".to_owned(), tier.to_owned()),
            ]);
            let terms = index.carry(&labels);
            let rank = Rank {
                active: 0,
                latency_ms: 0,
                slot: fleet.slot_or_new(&key),
                key,
            };
            index.insert(rank, &terms);
        }
        let gold_in_eu: Selector = [("geo", "eu"), ("tier", "gold")].into_iter().collect();
        let narrowest = index.narrowest(&gold_in_eu).map(BTreeSet::len);
        assert_eq!(narrowest, Some(1), "the gold proxy alone");
        let eu = index.narrowest(&selector("eu")).map(BTreeSet::len);
        assert_eq!(eu, Some(3));
    }
}
