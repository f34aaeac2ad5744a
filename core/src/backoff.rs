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

#[cfg(test)]
mod tests {
    use super::*;

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
