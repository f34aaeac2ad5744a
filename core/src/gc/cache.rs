//! Whether GC may sweep now: only as the leader, and only from a Proxy cache that holds a
//! complete list.
//!
//! GC tells orphans from owned instances by the UIDs in the Proxy cache. A cache that has
//! not finished listing is missing objects, and to [`select`](super::select) a missing
//! object is a deleted one: every instance of ours older than the minimum age would look
//! orphaned. That happens when the watch never fills (RBAC forbids listing Proxies, the CRD
//! is not installed, a slow API server) and again after every re-list.
//!
//! # What the cache goes through
//!
//! The shell feeds [`CacheSync::observe`] from the very watch stream that fills the cache,
//! after the cache has applied each event ([`WatchSignal`] names them after kube-runtime's
//! watcher events):
//!
//! - a list starts ([`WatchSignal::ListStarted`], the watcher's `Init`): at the start, and
//!   each time the watch lost its place (an HTTP 410 after a desync, a failed list that is
//!   retried). Until that list completes the cache is not trusted: it still holds the
//!   previous list (kube-runtime swaps the new one in atomically at the end) or nothing.
//! - the list completes ([`WatchSignal::ListCompleted`], `InitDone`): the cache now holds
//!   every object as of that list, and the watch goes on from its resource version.
//! - the watch fails ([`WatchSignal::Failed`]): a list or watch request failed and will be
//!   retried. That alone does not distrust a listed cache: a watch that reconnects from its
//!   resource version misses no event (one that cannot gets a 410 and re-lists, which is a
//!   `ListStarted`), and during the outage the cache only lags, in the safe direction (a
//!   Proxy deleted meanwhile is still there; none can be created while the API is down).
//!   The error is kept for the report, so that "GC waits" names the reason.
//!
//! So: GC may sweep when the last list that started has completed.

/// One event of the watch that fills the Proxy cache, as far as its completeness goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchSignal {
    /// A (re-)list started: the watcher's `Init`.
    ListStarted,
    /// The list completed and is in the cache: the watcher's `InitDone`.
    ListCompleted,
    /// A list or watch request failed, with this message; it will be retried.
    Failed(String),
}

/// Where the Proxy cache stands, fed with every [`WatchSignal`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheSync {
    state: ListState,
    lists_completed: u64,
    last_error: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ListState {
    #[default]
    NeverListed,
    Relisting,
    Listed,
}

impl CacheSync {
    /// A cache that has never listed: not synced.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in one event of the watch, after the cache applied it.
    pub fn observe(&mut self, signal: WatchSignal) {
        match signal {
            WatchSignal::ListStarted => {
                if self.state == ListState::Listed {
                    self.state = ListState::Relisting;
                }
            }
            WatchSignal::ListCompleted => {
                self.state = ListState::Listed;
                self.lists_completed = self.lists_completed.saturating_add(1);
                self.last_error = None;
            }
            WatchSignal::Failed(message) => self.last_error = Some(message),
        }
    }

    /// Whether the cache holds a complete list: the last list that started has completed.
    pub fn is_synced(&self) -> bool {
        self.state == ListState::Listed
    }

    /// How many lists have completed since the start.
    pub fn lists_completed(&self) -> u64 {
        self.lists_completed
    }

    /// The last failure of the watch since the last completed list, if any.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

/// Whether a sweep may run now, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a sweep runs only on Gate::Sweep"]
pub enum Gate {
    /// Sweep.
    Sweep,
    /// This replica does not lead: the leader sweeps.
    NotLeader,
    /// The cache has never completed a list (RBAC, a missing CRD, a slow API server): every
    /// instance would look orphaned. `last_error` is the watch's last failure.
    NeverListed {
        /// The watch's last failure, if it failed.
        last_error: Option<String>,
    },
    /// The cache is re-listing (after a desync): it may miss objects until the list
    /// completes.
    Relisting {
        /// The watch's last failure since the re-list started, if any.
        last_error: Option<String>,
    },
}

/// Decides whether GC may sweep now. Check it before listing a provider *and* again right
/// before taking the live UIDs from the cache, since a re-list can start in between.
pub fn gate(leader: bool, cache: &CacheSync) -> Gate {
    if !leader {
        return Gate::NotLeader;
    }
    let last_error = cache.last_error.clone();
    match cache.state {
        ListState::Listed => Gate::Sweep,
        ListState::NeverListed => Gate::NeverListed { last_error },
        ListState::Relisting => Gate::Relisting { last_error },
    }
}
