//! When the gateway sends a lease's release again: until the book answers it, within the
//! lease's TTL.
//!
//! A release that does not reach the book leaves the lease counting against its proxy's
//! `maxLeases` until its TTL (300 s for a gateway's lease): with `maxLeases: 1`, a proxy
//! nobody can use for five minutes. So a release is sent again while the book cannot answer
//! it: no answer at all (a connection refused or reset, the discovery API closing an idle
//! connection as the request went out, a timeout), or a 5xx (503 while leadership moves,
//! for up to about 15 s in a failover; 502 or 504 from whatever is in between). It waits
//! [`FIRST_WAIT`] before the first retry, twice as long before each next one, at most
//! [`LONGEST_WAIT`]; it stops once the lease's TTL is over, the book having ended the lease
//! by then anyway.
//!
//! Any other answer ends it: 2xx (released), 404 (the book no longer has the lease: it
//! expired, or a release sent twice), and any other 4xx, which no retry changes (a token the
//! API refuses: logged as a warning, for the operator to fix).

use std::time::Duration;

/// The wait before the first retry.
pub const FIRST_WAIT: Duration = Duration::from_millis(50);
/// The longest wait between two tries.
pub const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// How a release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The book released it, or no longer had it (404).
    Released,
    /// The book refused the release for good (a 4xx other than 404).
    Refused,
    /// The book did not answer before the lease's TTL was over: the lease expired there.
    Expired,
}

impl Released {
    /// Every ending, so that the metric has each series from the start.
    pub const ALL: [Self; 3] = [Self::Released, Self::Refused, Self::Expired];

    /// The ending as a word, the `result` label of the metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Refused => "refused",
            Self::Expired => "expired",
        }
    }
}

/// What to do after one try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Done.
    Done(Released),
    /// Send it again after this wait.
    RetryIn(Duration),
}

/// The tries of one release.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseTries {
    /// Retries so far.
    retries: u32,
}

impl ReleaseTries {
    /// The try was answered with `status` (`None`: no answer), and `left` remains of the
    /// lease's TTL: what to do next.
    pub fn after(&mut self, status: Option<u16>, left: Duration) -> Next {
        match status {
            Some(200..=299 | 404) => return Next::Done(Released::Released),
            Some(status) if status < 500 => return Next::Done(Released::Refused),
            _ => {}
        }
        let wait = FIRST_WAIT
            .saturating_mul(1 << self.retries.min(16))
            .min(LONGEST_WAIT);
        if wait >= left {
            return Next::Done(Released::Expired);
        }
        self.retries += 1;
        Next::RetryIn(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(300);

    #[test]
    fn the_books_answer_ends_it_and_no_answer_or_a_5xx_is_sent_again() {
        for (status, next) in [
            (Some(204), Next::Done(Released::Released)),
            (Some(200), Next::Done(Released::Released)),
            (Some(404), Next::Done(Released::Released)),
            (Some(401), Next::Done(Released::Refused)),
            (Some(400), Next::Done(Released::Refused)),
            (Some(503), Next::RetryIn(FIRST_WAIT)),
            (Some(502), Next::RetryIn(FIRST_WAIT)),
            (None, Next::RetryIn(FIRST_WAIT)),
        ] {
            assert_eq!(
                ReleaseTries::default().after(status, TTL),
                next,
                "{status:?}"
            );
        }
    }

    #[test]
    fn the_wait_doubles_up_to_its_longest_and_the_ttl_ends_the_tries() {
        let mut tries = ReleaseTries::default();
        let waits: Vec<Next> = (0..8).map(|_| tries.after(Some(503), TTL)).collect();
        let ms = |n| Next::RetryIn(Duration::from_millis(n));
        assert_eq!(
            waits,
            [
                ms(50),
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(2000),
                ms(2000)
            ]
        );
        // A 15 s failover is outlasted with a dozen tries.
        let mut tries = ReleaseTries::default();
        let mut waited = Duration::ZERO;
        let mut count = 0;
        while waited < Duration::from_secs(15) {
            let Next::RetryIn(wait) = tries.after(None, TTL - waited) else {
                panic!("gave up within the TTL");
            };
            waited += wait;
            count += 1;
        }
        assert!(count <= 14, "{count} tries");
        // The TTL over, the book has ended the lease itself.
        assert_eq!(
            ReleaseTries::default().after(None, Duration::from_millis(10)),
            Next::Done(Released::Expired)
        );
        assert_eq!(
            ReleaseTries::default().after(Some(204), Duration::ZERO),
            Next::Done(Released::Released)
        );
    }
}
