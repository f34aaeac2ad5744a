//! Passive health: a proxy that crawlers could not reach is out of selection, fleet-wide,
//! before the health engine's thresholds notice.
//!
//! The health engine probes each proxy every `intervalSeconds` and marks it unhealthy after
//! `failureThreshold` failed probes in a row: 90 s at the defaults, during which a dead
//! upstream kept being handed out. The clients see the failure first: the gateway, or a
//! shim, fails to open a connection to the proxy and reports
//! [`Unreachable`](super::ReportResult::Unreachable). One breaker per proxy:
//!
//! | state | on `unreachable` | on another result | leases |
//! |---|---|---|---|
//! | closed (`failures` in a row) | one more failure; at [`CircuitConfig::failures`] it opens | the count starts again | as usual |
//! | open until `until` (its `trips`th time) | nothing (the breaker already knows) | nothing | none before `until`; then one, the trial |
//! | trial granted at `since` | reopens for twice as long (at most [`CircuitConfig::max_backoff`]) | closes | none while the trial runs (at most [`CircuitConfig::backoff`]); then another trial |
//!
//! Only a report on a lease granted since the breaker opened (or since its trial) moves an
//! open breaker: a late report on a lease granted before says nothing about the proxy now.
//! `ok`, `rate_limited` and `blocked` are successes (the proxy reached the site); `error` is
//! neither (the proxy or the site, not told apart). The proxy's `Ready` condition turning
//! from `False` to `True` (the health engine saw it pass again) closes the breaker too.
//!
//! What counts as unreachable is the client's to say, and only failures to reach the proxy
//! itself do (a refused or reset TCP connection to it, none within the connect timeout, a
//! close before it answered, its 407): a site the proxy cannot reach is the proxy's 502/503
//! answer, an `error` at most, so no client can take a healthy proxy away by asking for dead
//! sites.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::later;
use crate::event::{Event, EventType};
use crate::key::ProxyKey;

/// When a proxy's breaker opens, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitConfig {
    /// `unreachable` reports in a row that open the breaker (at least 1). Default 3: one
    /// lost connection is not a dead proxy.
    pub failures: u32,
    /// How long the breaker stays open the first time, and how long a trial may run
    /// before another is granted. Default 5 s.
    pub backoff: Duration,
    /// The longest it stays open: each failed trial doubles the time up to this. Default
    /// 5 minutes, by when the health engine has long marked a dead proxy unhealthy.
    pub max_backoff: Duration,
}

impl Default for CircuitConfig {
    fn default() -> Self {
        Self {
            failures: 3,
            backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(5 * 60),
        }
    }
}

impl CircuitConfig {
    /// How long the breaker stays open on its `trips`th opening in a row (from 1):
    /// [`backoff`](Self::backoff) doubled each time, at most [`max_backoff`](Self::max_backoff)
    /// (and never less than `backoff`).
    pub fn open_for(&self, trips: u32) -> Duration {
        let doublings = trips.saturating_sub(1).min(31);
        self.backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff.max(self.backoff))
    }
}

/// One proxy's breaker, as [`LeaseBook::circuit`](super::LeaseBook::circuit) shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Circuit {
    /// Leased as usual; `failures` unreachable reports in a row so far.
    Closed {
        /// Unreachable reports in a row.
        failures: u32,
    },
    /// Not leased before `until`; then one trial lease.
    Open {
        /// When it opened.
        since: Timestamp,
        /// When the trial may be granted.
        until: Timestamp,
        /// How many times in a row it opened (its backoff doubles each time).
        trips: u32,
    },
    /// A trial lease was granted at `since`: its report closes or reopens the breaker; no
    /// other lease before `since` plus the backoff.
    Trial {
        /// When the trial was granted.
        since: Timestamp,
        /// The openings in a row before it.
        trips: u32,
    },
}

impl Circuit {
    /// The state as a word, for answers and metrics: `closed`, `open`, `trial`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed { .. } => "closed",
            Self::Open { .. } => "open",
            Self::Trial { .. } => "trial",
        }
    }
}

/// What a report did to a breaker, for the shell to tell (an Event, a metric, a probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The breaker opened, or reopened after a failed trial: not leased before `until`.
    Opened {
        /// When the trial may be granted.
        until: Timestamp,
        /// How many times in a row it opened.
        trips: u32,
        /// The unreachable reports in a row that opened it (1 for a failed trial).
        failures: u32,
    },
    /// The breaker closed: the proxy was reached again.
    Closed,
}

impl Turn {
    /// The Event the shell records on the proxy for this turn.
    pub fn event(self) -> Event {
        match self {
            Self::Opened {
                until,
                trips,
                failures,
            } => Event {
                type_: EventType::Warning,
                reason: "Unreachable".into(),
                message: format!(
                    "crawlers could not reach the proxy ({failures} unreachable report(s) in a \
                     row): not leased until {until}, then one trial lease (opened {trips} \
                     time(s) in a row)"
                ),
            },
            Self::Closed => Event {
                type_: EventType::Normal,
                reason: "Reachable".into(),
                message: "a crawler reached the proxy again: leased as before".into(),
            },
        }
    }
}

/// A [`Turn`] of one proxy's breaker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turned {
    /// The proxy.
    pub proxy: ProxyKey,
    /// What its breaker did.
    pub turn: Turn,
}

/// Whether a breaker lets a lease be granted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// Yes (as the trial, when the breaker is open and its time is up).
    Pass,
    /// Not before this.
    Shut(Timestamp),
}

/// Every proxy's breaker that is not closed with no failures (that one is the default and
/// takes no room).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Circuits {
    by_proxy: BTreeMap<ProxyKey, Circuit>,
}

impl Circuits {
    /// The breaker of `proxy`.
    pub(super) fn of(&self, proxy: &ProxyKey) -> Circuit {
        self.by_proxy
            .get(proxy)
            .copied()
            .unwrap_or(Circuit::Closed { failures: 0 })
    }

    /// Whether a lease on `proxy` may be granted at `now`.
    pub(super) fn gate(&self, proxy: &ProxyKey, now: Timestamp, config: &CircuitConfig) -> Gate {
        match self.of(proxy) {
            Circuit::Closed { .. } => Gate::Pass,
            Circuit::Open { until, .. } if until > now => Gate::Shut(until),
            Circuit::Open { .. } => Gate::Pass,
            Circuit::Trial { since, .. } => {
                let next = later(since, config.backoff);
                if next > now {
                    Gate::Shut(next)
                } else {
                    Gate::Pass
                }
            }
        }
    }

    /// Whether a session may go on with its lease on `proxy`: not while the breaker is open
    /// and its time is not up (a session on a trial proxy may be the trial).
    pub(super) fn keeps_session(&self, proxy: &ProxyKey, now: Timestamp) -> bool {
        !matches!(self.of(proxy), Circuit::Open { until, .. } if until > now)
    }

    /// A lease on `proxy` was granted at `now`: if the breaker let it through as a trial,
    /// the trial starts.
    pub(super) fn granted(&mut self, proxy: &ProxyKey, now: Timestamp) {
        if let Some(circuit) = self.by_proxy.get_mut(proxy) {
            match *circuit {
                Circuit::Closed { .. } => {}
                Circuit::Open { trips, .. } | Circuit::Trial { trips, .. } => {
                    *circuit = Circuit::Trial { since: now, trips };
                }
            }
        }
    }

    /// A client could not reach `proxy` on a lease granted at `granted_at`; `now` is when it
    /// said so.
    pub(super) fn unreachable(
        &mut self,
        proxy: &ProxyKey,
        granted_at: Timestamp,
        now: Timestamp,
        config: &CircuitConfig,
    ) -> Option<Turn> {
        let reopen = |trips: u32, failures: u32| {
            let until = later(now, config.open_for(trips));
            let turn = Turn::Opened {
                until,
                trips,
                failures,
            };
            (
                Circuit::Open {
                    since: now,
                    until,
                    trips,
                },
                turn,
            )
        };
        let (next, turn) = match self.of(proxy) {
            Circuit::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= config.failures.max(1) {
                    let (open, turn) = reopen(1, failures);
                    (open, Some(turn))
                } else {
                    (Circuit::Closed { failures }, None)
                }
            }
            Circuit::Trial { since, trips } if granted_at >= since => {
                let (open, turn) = reopen(trips.saturating_add(1), 1);
                (open, Some(turn))
            }
            stale => (stale, None),
        };
        self.by_proxy.insert(proxy.clone(), next);
        turn
    }

    /// A client reached `proxy` (it carried a request to a site) on a lease granted at
    /// `granted_at`.
    pub(super) fn reached(&mut self, proxy: &ProxyKey, granted_at: Timestamp) -> Option<Turn> {
        match self.of(proxy) {
            Circuit::Closed { failures: 0 } => None,
            Circuit::Closed { .. } => {
                self.by_proxy.remove(proxy);
                None
            }
            Circuit::Open { since, .. } | Circuit::Trial { since, .. } if granted_at >= since => {
                self.by_proxy.remove(proxy);
                Some(Turn::Closed)
            }
            Circuit::Open { .. } | Circuit::Trial { .. } => None,
        }
    }

    /// The health engine saw `proxy` pass again: its breaker closes.
    pub(super) fn recovered(&mut self, proxy: &ProxyKey) -> Option<Turn> {
        match self.by_proxy.remove(proxy)? {
            Circuit::Closed { .. } => None,
            Circuit::Open { .. } | Circuit::Trial { .. } => Some(Turn::Closed),
        }
    }

    /// Forgets `proxy`'s breaker (it left the book).
    pub(super) fn forget(&mut self, proxy: &ProxyKey) {
        self.by_proxy.remove(proxy);
    }

    /// How many breakers are open or running a trial.
    pub(super) fn open(&self) -> usize {
        self.by_proxy
            .values()
            .filter(|circuit| !matches!(circuit, Circuit::Closed { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn the_backoff_doubles_from_the_first_and_stops_at_the_longest() {
        let config = CircuitConfig::default();
        let backoffs: Vec<u64> = (1..=9).map(|t| config.open_for(t).as_secs()).collect();
        assert_eq!(backoffs, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(config.open_for(0).as_secs(), 5);
        assert_eq!(config.open_for(u32::MAX).as_secs(), 300);
        let odd = CircuitConfig {
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(1),
            ..config
        };
        assert_eq!(
            odd.open_for(3).as_secs(),
            10,
            "never shorter than the first"
        );
    }

    #[test]
    fn the_third_unreachable_in_a_row_opens_and_a_success_between_starts_the_count_again() {
        let config = CircuitConfig::default();
        let (mut circuits, proxy) = (Circuits::default(), ProxyKey::new("crawl", "a"));
        assert_eq!(circuits.unreachable(&proxy, at(0), at(1), &config), None);
        assert_eq!(circuits.unreachable(&proxy, at(0), at(1), &config), None);
        assert_eq!(circuits.reached(&proxy, at(0)), None);
        assert_eq!(circuits.of(&proxy), Circuit::Closed { failures: 0 });
        assert_eq!(circuits.unreachable(&proxy, at(0), at(2), &config), None);
        assert_eq!(circuits.unreachable(&proxy, at(0), at(2), &config), None);
        assert_eq!(
            circuits.unreachable(&proxy, at(0), at(2), &config),
            Some(Turn::Opened {
                until: at(7),
                trips: 1,
                failures: 3
            })
        );
        assert_eq!(circuits.gate(&proxy, at(6), &config), Gate::Shut(at(7)));
        assert_eq!(circuits.open(), 1);
    }

    #[test]
    fn one_trial_after_the_backoff_a_failed_trial_doubles_it_a_good_one_closes() {
        let config = CircuitConfig {
            failures: 1,
            ..CircuitConfig::default()
        };
        let (mut circuits, proxy) = (Circuits::default(), ProxyKey::new("crawl", "a"));
        circuits.unreachable(&proxy, at(0), at(0), &config);
        assert_eq!(circuits.gate(&proxy, at(5), &config), Gate::Pass);
        circuits.granted(&proxy, at(5));
        assert_eq!(
            circuits.gate(&proxy, at(6), &config),
            Gate::Shut(at(10)),
            "one trial at a time"
        );
        assert_eq!(
            circuits.unreachable(&proxy, at(5), at(6), &config),
            Some(Turn::Opened {
                until: at(16),
                trips: 2,
                failures: 1
            })
        );
        circuits.granted(&proxy, at(16));
        assert_eq!(circuits.reached(&proxy, at(16)), Some(Turn::Closed));
        assert_eq!(circuits.of(&proxy), Circuit::Closed { failures: 0 });
        assert_eq!(circuits.open(), 0);
    }

    #[test]
    fn a_trial_no_one_reports_on_gives_way_to_another_after_the_backoff() {
        let config = CircuitConfig {
            failures: 1,
            ..CircuitConfig::default()
        };
        let (mut circuits, proxy) = (Circuits::default(), ProxyKey::new("crawl", "a"));
        circuits.unreachable(&proxy, at(0), at(0), &config);
        circuits.granted(&proxy, at(5));
        assert_eq!(circuits.gate(&proxy, at(10), &config), Gate::Pass);
        circuits.granted(&proxy, at(10));
        assert_eq!(
            circuits.of(&proxy),
            Circuit::Trial {
                since: at(10),
                trips: 1
            }
        );
    }

    #[test]
    fn reports_on_leases_granted_before_the_breaker_opened_move_nothing() {
        let config = CircuitConfig {
            failures: 1,
            ..CircuitConfig::default()
        };
        let (mut circuits, proxy) = (Circuits::default(), ProxyKey::new("crawl", "a"));
        circuits.unreachable(&proxy, at(0), at(3), &config);
        let open = circuits.of(&proxy);
        assert_eq!(circuits.reached(&proxy, at(2)), None, "an old lease's ok");
        assert_eq!(circuits.unreachable(&proxy, at(2), at(4), &config), None);
        assert_eq!(circuits.of(&proxy), open, "unchanged, its backoff too");
        circuits.granted(&proxy, at(8));
        assert_eq!(circuits.unreachable(&proxy, at(3), at(9), &config), None);
        assert_eq!(circuits.reached(&proxy, at(3)), None);
        assert!(matches!(circuits.of(&proxy), Circuit::Trial { .. }));
        assert_eq!(circuits.recovered(&proxy), Some(Turn::Closed));
        assert_eq!(circuits.recovered(&proxy), None);
    }

    #[test]
    fn a_session_stays_on_a_trial_proxy_but_not_on_an_open_one() {
        let config = CircuitConfig {
            failures: 1,
            ..CircuitConfig::default()
        };
        let (mut circuits, proxy) = (Circuits::default(), ProxyKey::new("crawl", "a"));
        assert!(circuits.keeps_session(&proxy, at(0)));
        circuits.unreachable(&proxy, at(0), at(0), &config);
        assert!(!circuits.keeps_session(&proxy, at(4)));
        assert!(circuits.keeps_session(&proxy, at(5)));
        circuits.granted(&proxy, at(5));
        assert!(circuits.keeps_session(&proxy, at(6)));
        circuits.forget(&proxy);
        assert_eq!(circuits.of(&proxy), Circuit::Closed { failures: 0 });
    }
}
