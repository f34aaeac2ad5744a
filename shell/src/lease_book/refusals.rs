//! The lease requests the book lately refused for want of a proxy (`409 no_match`), for the
//! pools that grow on demand: a pool at full capacity, or at zero, has no active lease to
//! show how much more it is asked for, only the crawlers it turned away.
//!
//! Each refusal keeps its selector and a number that only grows; a pool reads the refusals
//! its Proxies' labels would have satisfied since the number it read last time.

use std::collections::VecDeque;
use std::sync::Mutex;

use proxy_core::lease::{Labels, Selector};

/// The most refusals kept: the latest ones, enough for the seconds between two decisions of
/// a pool under any load this process can serve.
const KEPT: usize = 4096;

/// The latest refusals.
#[derive(Debug, Default)]
pub struct Refusals(Mutex<Ring>);

#[derive(Debug, Default)]
struct Ring {
    /// `(number, selector)`, oldest first.
    kept: VecDeque<(u64, Selector)>,
    next: u64,
}

impl Refusals {
    /// Notes a request for `selector` that no proxy could serve.
    pub fn note(&self, selector: &Selector) {
        let mut ring = crate::locks::lock(&self.0);
        let number = ring.next;
        ring.next += 1;
        if ring.kept.len() == KEPT {
            ring.kept.pop_front();
        }
        ring.kept.push_back((number, selector.clone()));
    }

    /// How many refusals since `cursor` (0 at first) Proxies labelled `labels` would have
    /// served, and the cursor to read from next time.
    pub fn since(&self, cursor: u64, labels: &Labels) -> (u32, u64) {
        let ring = crate::locks::lock(&self.0);
        let count = ring
            .kept
            .iter()
            .filter(|(number, selector)| *number >= cursor && selector.matches(labels))
            .count();
        (u32::try_from(count).unwrap_or(u32::MAX), ring.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(geo: &str) -> Selector {
        Selector::checked(Labels::from([("geo".to_owned(), geo.to_owned())])).unwrap()
    }

    #[test]
    fn a_pool_reads_the_refusals_its_labels_match_once_each() {
        let refusals = Refusals::default();
        let eu = Labels::from([
            ("geo".to_owned(), "eu".to_owned()),
            ("tier".to_owned(), "a".to_owned()),
        ]);
        refusals.note(&selector("eu"));
        refusals.note(&selector("us"));
        refusals.note(&Selector::all());
        let (count, cursor) = refusals.since(0, &eu);
        assert_eq!(count, 2, "geo=eu and the empty selector");
        assert_eq!(refusals.since(cursor, &eu).0, 0, "read once");
        refusals.note(&selector("eu"));
        assert_eq!(refusals.since(cursor, &eu), (1, 4));
    }
}
