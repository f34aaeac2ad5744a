//! When a pool decides again at the latest ([`Deadline`]): the earliest of the deadlines its
//! steps noted (an expiry, the end of a drain grace, a poll while something is under way),
//! capped by the idle poll, since the lease book and the bans are not watched.

use std::time::Duration;

use jiff::Timestamp;

use super::IDLE_POLL;

/// The earliest of the deadlines noted, as a delay from `now`.
pub(super) struct Deadline {
    now: Timestamp,
    delay: Duration,
}

impl Deadline {
    /// No deadline yet: the idle poll.
    pub(super) fn new(now: Timestamp) -> Self {
        Self {
            now,
            delay: IDLE_POLL,
        }
    }

    /// Decide again within `delay`.
    pub(super) fn within(&mut self, delay: Duration) {
        self.delay = self.delay.min(delay);
    }

    /// Decide again once `when` has passed.
    pub(super) fn at(&mut self, when: Timestamp) {
        let left = self.now.duration_until(when);
        let left = if left.is_positive() {
            left.unsigned_abs()
        } else {
            Duration::ZERO
        };
        // A second past the deadline, so the decision then finds it passed.
        self.within(left + Duration::from_secs(1));
    }

    /// The delay until the earliest deadline noted.
    pub(super) fn delay(&self) -> Duration {
        self.delay
    }
}
