//! How long to wait before retrying a reconcile that failed transiently.
//!
//! Exponential, so a provider outage is not hammered, and capped, so a proxy recovers within
//! minutes once the provider does. The shell counts consecutive failures per object and asks
//! here; a success resets the count.

use std::time::Duration;

/// The first retry's delay.
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest delay between two retries.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// The delay before retry number `attempt` (1 for the first retry): 0.5 s, doubling each
/// time, at most [`MAX_RETRY`].
pub fn retry_delay(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(20);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// The attempt number, for [`retry_delay`], of the restart of a background loop that
/// panicked after running for `ran_for`, when its previous restart was attempt `previous`
/// (0 before the first). A loop that keeps panicking at once backs off like a failing
/// reconcile; one that ran for longer than [`MAX_RETRY`] was working, so its backoff starts
/// over instead of carrying a panic from hours ago.
pub fn restart_attempt(previous: u32, ran_for: Duration) -> u32 {
    if ran_for > MAX_RETRY {
        1
    } else {
        previous.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_panics_at_once_backs_off_and_one_that_ran_long_starts_over() {
        let cases = [
            // (previous, ran for seconds, attempt)
            (0, 0, 1),
            (1, 0, 2),
            (5, 10, 6),
            (5, 300, 6),
            (5, 301, 1),
            (0, 3_600, 1),
            (u32::MAX, 0, u32::MAX),
        ];
        for (previous, seconds, attempt) in cases {
            assert_eq!(
                restart_attempt(previous, Duration::from_secs(seconds)),
                attempt,
                "previous {previous}, ran {seconds} s"
            );
        }
    }

    #[test]
    fn doubles_from_half_a_second_up_to_five_minutes() {
        let cases = [
            (0, 500),
            (1, 500),
            (2, 1_000),
            (3, 2_000),
            (10, 256_000),
            (11, 300_000),
            (u32::MAX, 300_000),
        ];
        for (attempt, millis) in cases {
            assert_eq!(
                retry_delay(attempt),
                Duration::from_millis(millis),
                "attempt {attempt}"
            );
        }
    }
}
