//! Routing: which replica answers a discovery request.
//!
//! One replica at a time owns the lease book: the leader, once it has merged the last
//! checkpoint into its book. Every other replica forwards the lease requests it gets to the
//! owner, so a crawler may send each request to any replica (a Service picks one) and sees
//! one book. A forwarded request is never forwarded again: a replica that gets one while it
//! does not own the book (ownership is moving, and the sender's idea of the owner is stale)
//! refuses it, so requests cannot circle between replicas. Every refusal is temporary: the
//! API answers 503 with `Retry-After`, and the crawler retries.

use jiff::Timestamp;

use super::journal::Journal;

/// Where a replica stands toward the book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It owns the book and serves every request itself.
    Owner,
    /// It leads, and merges the last checkpoint into its book before serving.
    Restoring,
    /// Another replica leads: the owner's discovery URL, when its leadership claim names one.
    Follower {
        /// The owner's base URL (`http://10.0.0.7:8090`).
        owner: Option<String>,
    },
}

/// What a request does to the book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `POST /v1/leases`: a grant, fenced by the [`Journal`].
    Acquire,
    /// A release, a report or a listing: not fenced.
    Other,
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This replica answers it from its book.
    Serve,
    /// This replica sends it on to the owner at this base URL and relays the answer.
    Forward(String),
    /// Nobody can answer it now (503, retry).
    Refuse(NotServing),
}

/// Why a request cannot be answered now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotServing {
    /// No replica owns the book as far as this one knows: a failover is under way.
    NoOwner,
    /// This replica is taking the book over and has not merged the last checkpoint yet.
    Restoring,
    /// This replica owns the book, but its changes have not been saved for longer than the
    /// fence: it grants nothing until a checkpoint is saved.
    Unsaved,
    /// Another replica forwarded the request here, but this replica does not own the book.
    Misrouted,
}

/// Where the request `call` goes on a replica standing at `standing`, whose own URL is
/// `own_url`; `forwarded` says it came from another replica, `leading` that its leadership
/// claim holds at `now` (an owner whose claim ran out stops serving at once, before its
/// standing is updated: by then another replica may own the book).
///
/// | standing | request | route |
/// |---|---|---|
/// | owner or restoring, not leading | any | refuse: no owner |
/// | owner | acquire, journal fence passed | refuse: unsaved |
/// | owner | anything else | serve |
/// | restoring | any | refuse: restoring |
/// | follower, owner known (not us) | from a crawler | forward to the owner |
/// | follower, owner known (not us) | forwarded | refuse: misrouted |
/// | follower, owner unknown or us | any | refuse: no owner |
pub fn route(
    standing: &Standing,
    leading: bool,
    call: Call,
    forwarded: bool,
    own_url: Option<&str>,
    journal: &Journal,
    now: Timestamp,
) -> Route {
    match standing {
        Standing::Owner | Standing::Restoring if !leading => Route::Refuse(NotServing::NoOwner),
        Standing::Owner if call == Call::Acquire && !journal.may_grant(now) => {
            Route::Refuse(NotServing::Unsaved)
        }
        Standing::Owner => Route::Serve,
        Standing::Restoring => Route::Refuse(NotServing::Restoring),
        Standing::Follower { owner: Some(owner) } if Some(owner.as_str()) != own_url => {
            if forwarded {
                Route::Refuse(NotServing::Misrouted)
            } else {
                Route::Forward(owner.clone())
            }
        }
        Standing::Follower { .. } => Route::Refuse(NotServing::NoOwner),
    }
}
