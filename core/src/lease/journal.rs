//! The journal: which of the book's changes a checkpoint has made durable, and whether the
//! owner may still grant.
//!
//! The owner checkpoints its book to the API server in the background ([`super::Checkpoint`]);
//! a grant is answered before it is saved, so a crash of the owner loses the changes made
//! since its last saved checkpoint. The journal bounds that loss with a *fence*: once the
//! oldest unsaved change is older than the fence (the API server is unreachable, or too slow
//! to keep up), the owner stops granting until a checkpoint is saved again. So whatever goes
//! wrong, a crash loses at most the grants of the last fence's worth of time. Releases and
//! reports are not fenced: losing a release only keeps a place taken until the lease
//! expires, and refusing them would not make the crawler's site any kinder.
//!
//! Driving contract: under the same lock as the book, call [`changed`](Journal::changed)
//! after every grant, successful release and report that started a cooldown; when
//! [`needs_checkpoint`](Journal::needs_checkpoint), take the book's checkpoint and a
//! [`Ticket`] with [`started`](Journal::started) in the same critical section; after the
//! write, hand the ticket back with [`saved`](Journal::saved) or
//! [`failed`](Journal::failed). Ask [`may_grant`](Journal::may_grant) before a grant.

use std::time::Duration;

use jiff::Timestamp;

use super::later;

/// Unsaved changes of a book, and the fence on grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Journal {
    fence: Duration,
    /// When the oldest change not in a saved checkpoint was made.
    unsaved_since: Option<Timestamp>,
    /// The checkpoint being written, if one is.
    in_flight: Option<InFlight>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InFlight {
    /// When the first change after it was taken was made: what stays unsaved once it is saved.
    first_change_after: Option<Timestamp>,
}

/// A checkpoint being written: hand it back to [`Journal::saved`] or [`Journal::failed`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "hand the ticket back with saved or failed"]
pub struct Ticket(());

impl Journal {
    /// A journal whose owner stops granting when a change has been unsaved for `fence`.
    pub fn new(fence: Duration) -> Self {
        Self {
            fence,
            unsaved_since: None,
            in_flight: None,
        }
    }

    /// A change of the book was made at `now`.
    pub fn changed(&mut self, now: Timestamp) {
        self.unsaved_since.get_or_insert(now);
        if let Some(in_flight) = &mut self.in_flight {
            in_flight.first_change_after.get_or_insert(now);
        }
    }

    /// Whether a checkpoint should be taken now: something is unsaved and no write is under
    /// way (one write at a time, so that checkpoints land in the order they were taken).
    pub fn needs_checkpoint(&self) -> bool {
        self.unsaved_since.is_some() && self.in_flight.is_none()
    }

    /// A checkpoint of the book is taken now; it holds every change so far.
    pub fn started(&mut self) -> Ticket {
        self.in_flight = Some(InFlight {
            first_change_after: None,
        });
        Ticket(())
    }

    /// The checkpoint of `ticket` is saved: the changes it holds are durable.
    pub fn saved(&mut self, _ticket: Ticket) {
        if let Some(in_flight) = self.in_flight.take() {
            self.unsaved_since = in_flight.first_change_after;
        }
    }

    /// The checkpoint of `ticket` could not be saved: its changes are still unsaved.
    pub fn failed(&mut self, _ticket: Ticket) {
        self.in_flight = None;
    }

    /// The write under way, if any, was abandoned without an answer (its task ended): its
    /// changes are still unsaved, and the next checkpoint may be taken.
    pub fn abandoned(&mut self) {
        self.in_flight = None;
    }

    /// When the oldest unsaved change was made, if one is unsaved.
    pub fn unsaved_since(&self) -> Option<Timestamp> {
        self.unsaved_since
    }

    /// Whether a grant may be made at `now`: no change has been unsaved for the fence.
    pub fn may_grant(&self, now: Timestamp) -> bool {
        self.unsaved_since
            .is_none_or(|since| now < later(since, self.fence))
    }
}
