//! What the rest of the operator reads from the book: the controller (sites that blocked a
//! proxy), the pools (a member's leases, the demand refused since their last look), and the
//! metrics. A [`Reader`] has no way to lease, release, report or take the book over, so
//! what a part can do to the book is written in its type.

use std::sync::Arc;

use proxy_core::lease::Labels;
use proxy_core::{BlockedSites, ProxyKey};

use super::Book;

/// A read-only handle on the book.
#[derive(Clone, Debug)]
pub struct Reader(Arc<Book>);

impl Reader {
    /// A handle on `book`.
    pub fn of(book: &Arc<Book>) -> Self {
        Self(book.clone())
    }

    /// Whether this replica owns the book now (what it counts is the fleet's).
    pub fn owns_book(&self) -> bool {
        self.0.owns_book()
    }

    /// The active leases of the proxy `key` while this replica owns the book.
    pub fn leases_of(&self, key: &ProxyKey) -> Option<u32> {
        self.0.leases_of(key)
    }

    /// The sites that blocked the proxy `key` within the site window, judged against
    /// `threshold`, while this replica owns the book.
    pub fn blocked_sites(&self, key: &ProxyKey, threshold: u32) -> Option<BlockedSites> {
        self.0.blocked_sites(key, threshold)
    }

    /// Lease requests refused for want of a proxy matching `labels` since `cursor`, and the
    /// cursor to ask from next time ([`super::refusals::Refusals::since`]).
    pub fn refusals_since(&self, cursor: u64, labels: &Labels) -> (u32, u64) {
        self.0.refusals.since(cursor, labels)
    }
}
