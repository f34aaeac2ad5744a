//! The `Banned` condition: a proxy that many distinct sites blocked lately says so in its
//! status, as input for recycling it.
//!
//! The count comes from the lease book, which lives in the discovery side of the leader
//! (the crawlers' `blocked` reports, [`LeaseBook::blocked_sites`](crate::lease::LeaseBook::blocked_sites));
//! the shell hands it to [`decide`](fn@crate::decide) as an observation ([`BlockedSites`]),
//! and the condition is decided here.
//!
//! The condition is written only when it flips, never because the count moved: its message
//! keeps the count it had when it flipped. So a proxy blocked on a fourth and a fifth site
//! costs no status write, and a fleet of healthy, unbanned proxies carries no `Banned`
//! condition at all (absent means not banned; a proxy that was banned and no longer is says
//! `False`).

use proxy_crd::{Condition, ProxyStatus};
use serde::{Deserialize, Serialize};

use crate::conditions::{self, FALSE, TRUE};

/// Type of the condition saying that many distinct sites blocked the proxy lately.
pub const BANNED: &str = "Banned";

/// Reason of `Banned=True`.
pub const BLOCKED_ON_MANY_SITES: &str = "BlockedOnManySites";
/// Reason of `Banned=False` after a `True`.
pub const FEW_SITES_BLOCK: &str = "FewSitesBlock";

/// How many distinct sites blocked the proxy within the window, as the lease book of the
/// replica that owns it counts them, and the policy the count is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedSites {
    /// Distinct targets with a `blocked` report on this proxy within the window.
    pub sites: u32,
    /// The proxy is banned from this many sites on (`--banned-sites`, at least 1).
    pub threshold: u32,
    /// The window, in seconds (`--site-window-seconds`), for the message.
    pub window_seconds: u64,
}

impl BlockedSites {
    /// Whether the count reaches the threshold. A threshold of 0 is taken as 1: a proxy
    /// nobody blocked is never banned.
    pub fn banned(&self) -> bool {
        self.sites >= self.threshold.max(1)
    }
}

/// The `Banned` condition the status should carry, given the `previous` status and what the
/// lease book counted (`None`: this replica does not own the book, or has not merged it yet,
/// so it knows nothing and the previous condition stays as it is).
///
/// | previous | observed | result |
/// |---|---|---|
/// | any | none | previous (absent stays absent) |
/// | absent | below threshold | absent |
/// | absent or `False` | at or above | `True`, `BlockedOnManySites`, with the count |
/// | `True` | at or above | previous, unchanged (no write for a changed count) |
/// | `True` | below | `False`, `FewSitesBlock`, with the count |
/// | `False` | below | previous, unchanged |
pub fn banned_condition(
    previous: &ProxyStatus,
    observed: Option<&BlockedSites>,
    generation: i64,
    now: jiff::Timestamp,
) -> Option<Condition> {
    let before = conditions::find(previous, BANNED);
    let Some(observed) = observed else {
        return before.cloned();
    };
    let was_banned = before.is_some_and(|c| c.status == TRUE);
    match (before, was_banned, observed.banned()) {
        (None, _, false) => None,
        (Some(before), true, true) | (Some(before), false, false) => Some(before.clone()),
        (_, _, banned) => {
            let (status, reason) = if banned {
                (TRUE, BLOCKED_ON_MANY_SITES)
            } else {
                (FALSE, FEW_SITES_BLOCK)
            };
            let plural = if observed.sites == 1 { "" } else { "s" };
            let message = format!(
                "blocked on {} distinct site{plural} within the last {} s (banned from {})",
                observed.sites,
                observed.window_seconds,
                observed.threshold.max(1)
            );
            Some(conditions::condition(
                previous, BANNED, status, reason, message, generation, now,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_780_000_000 + secs).unwrap()
    }

    fn with(condition: Option<(&str, &str)>) -> ProxyStatus {
        ProxyStatus {
            conditions: condition
                .map(|(status, message)| Condition {
                    type_: BANNED.to_owned(),
                    status: status.to_owned(),
                    reason: "R".to_owned(),
                    message: message.to_owned(),
                    observed_generation: Some(1),
                    last_transition_time: "2026-01-01T00:00:00Z".to_owned(),
                })
                .into_iter()
                .collect(),
            ..ProxyStatus::default()
        }
    }

    fn seen(sites: u32) -> BlockedSites {
        BlockedSites {
            sites,
            threshold: 3,
            window_seconds: 3600,
        }
    }

    /// A `(status, message)` or `(status, reason)` pair.
    type Pair = Option<(&'static str, &'static str)>;

    /// (previous condition, observed count, expected (status, reason), or `true`: the
    /// previous condition, unchanged).
    type Case = (Pair, Option<u32>, Pair, bool);

    #[test]
    fn the_condition_flips_at_the_threshold_and_is_written_only_when_it_flips() {
        let kept = |previous: &ProxyStatus| conditions::find(previous, BANNED).cloned();
        let cases: [Case; 10] = [
            (None, None, None, false),
            (Some((TRUE, "old")), None, None, true),
            (None, Some(0), None, false),
            (None, Some(2), None, false),
            (None, Some(3), Some((TRUE, BLOCKED_ON_MANY_SITES)), false),
            (
                Some((FALSE, "old")),
                Some(4),
                Some((TRUE, BLOCKED_ON_MANY_SITES)),
                false,
            ),
            (Some((TRUE, "old")), Some(5), None, true),
            (Some((TRUE, "old")), Some(3), None, true),
            (
                Some((TRUE, "old")),
                Some(2),
                Some((FALSE, FEW_SITES_BLOCK)),
                false,
            ),
            (Some((FALSE, "old")), Some(0), None, true),
        ];
        for (previous, count, expected, unchanged) in cases {
            let previous = with(previous);
            let observed = count.map(seen);
            let got = banned_condition(&previous, observed.as_ref(), 2, at(0));
            if unchanged {
                assert_eq!(got, kept(&previous), "{previous:?} {count:?}");
                continue;
            }
            let got = got.map(|c| (c.status, c.reason));
            let expected = expected.map(|(s, r)| (s.to_owned(), r.to_owned()));
            assert_eq!(got, expected, "{previous:?} {count:?}");
        }
    }

    #[test]
    fn a_flip_names_the_count_and_the_policy_and_keeps_the_transition_time_of_the_status() {
        let banned = banned_condition(&with(None), Some(&seen(3)), 2, at(0)).unwrap();
        assert_eq!(
            banned.message,
            "blocked on 3 distinct sites within the last 3600 s (banned from 3)"
        );
        assert_eq!(banned.last_transition_time, conditions::format_time(at(0)));
        assert_eq!(banned.observed_generation, Some(2));
        let zero = BlockedSites {
            sites: 0,
            threshold: 0,
            window_seconds: 60,
        };
        assert!(!zero.banned(), "a threshold of 0 means 1");
    }
}
