//! Per-proxy, per-site statistics: how each target treated each proxy lately, from the
//! crawlers' reports. They feed the API (`GET /v1/proxies/{namespace}/{name}`) and the
//! `Banned` condition ([`BlockedSites`](crate::BlockedSites)).
//!
//! Memory is bounded three ways: at most [`SITES_PER_PROXY`] targets per proxy (a report on
//! a new target past the cap drops the target whose last report is the oldest); a target is
//! forgotten one window after its last report; a proxy's statistics go with the proxy
//! ([`LeaseBook::remove`](super::LeaseBook::remove)). Reports without a target name no
//! site and are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::later;
use super::types::ReportResult;
use crate::key::ProxyKey;

/// The most targets whose statistics are kept per proxy.
pub const SITES_PER_PROXY: usize = 64;

/// How one target treated one proxy: counts of each result within the current window, and
/// the last report.
///
/// The window is tumbling: it starts with the first report after the previous one ended
/// and lasts [`LeaseConfig::site_window`](super::LeaseConfig::site_window); a report after
/// its end starts a new one with zero counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteStats {
    /// When the current window started.
    pub window_start: Timestamp,
    /// `ok` reports in the window.
    pub ok: u32,
    /// `rate_limited` reports in the window.
    pub rate_limited: u32,
    /// `blocked` reports in the window.
    pub blocked: u32,
    /// `error` reports in the window.
    pub error: u32,
    /// The last report's result.
    pub last: ReportResult,
    /// When the last report landed.
    pub last_at: Timestamp,
    /// When the last `blocked` report landed, if one did since the statistics started.
    pub last_blocked_at: Option<Timestamp>,
}

impl SiteStats {
    /// The statistics of a first report.
    fn first(result: ReportResult, now: Timestamp) -> Self {
        let mut stats = Self {
            window_start: now,
            ok: 0,
            rate_limited: 0,
            blocked: 0,
            error: 0,
            last: result,
            last_at: now,
            last_blocked_at: None,
        };
        stats.count(result, now);
        stats
    }

    /// Adds a report at `now`, starting a new window if the current one ended.
    fn add(&mut self, result: ReportResult, now: Timestamp, window: Duration) {
        if later(self.window_start, window) <= now {
            *self = Self {
                last_blocked_at: self.last_blocked_at,
                ..Self::first(result, now)
            };
            return;
        }
        self.count(result, now);
    }

    fn count(&mut self, result: ReportResult, now: Timestamp) {
        let counter = match result {
            ReportResult::Ok => &mut self.ok,
            ReportResult::RateLimited => &mut self.rate_limited,
            ReportResult::Blocked => &mut self.blocked,
            ReportResult::Error => &mut self.error,
            // Never recorded (`Sites::record`): nothing to count.
            ReportResult::Unreachable => return,
        };
        *counter = counter.saturating_add(1);
        self.last = result;
        self.last_at = self.last_at.max(now);
        if result == ReportResult::Blocked {
            self.last_blocked_at = Some(now);
        }
    }

    /// As of `now`: zero counts (and a window starting now) once the window ended with no
    /// report since.
    pub fn as_of(&self, now: Timestamp, window: Duration) -> Self {
        if later(self.window_start, window) <= now {
            Self {
                window_start: now,
                ok: 0,
                rate_limited: 0,
                blocked: 0,
                error: 0,
                ..*self
            }
        } else {
            *self
        }
    }
}

/// Statistics by proxy then target, and the time each target is forgotten.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Sites {
    by_proxy: BTreeMap<ProxyKey, BTreeMap<String, SiteStats>>,
    /// `(last_at, proxy, target)` of every entry: the oldest first, for forgetting and for
    /// the cap.
    ages: BTreeSet<(Timestamp, ProxyKey, String)>,
}

impl Sites {
    /// Counts a report of `result` for `target` through `proxy` at `now`. O(log) plus
    /// O([`SITES_PER_PROXY`]) when a new target meets the cap. An `unreachable` report is
    /// not counted: the site was never reached.
    pub(super) fn record(
        &mut self,
        proxy: &ProxyKey,
        target: &str,
        result: ReportResult,
        now: Timestamp,
        window: Duration,
    ) {
        if result == ReportResult::Unreachable {
            return;
        }
        let sites = self.by_proxy.entry(proxy.clone()).or_default();
        match sites.get_mut(target) {
            Some(stats) => {
                self.ages
                    .remove(&(stats.last_at, proxy.clone(), target.to_owned()));
                stats.add(result, now, window);
                self.ages
                    .insert((stats.last_at, proxy.clone(), target.to_owned()));
            }
            None => {
                let stats = SiteStats::first(result, now);
                self.insert(proxy.clone(), target.to_owned(), stats);
            }
        }
    }

    /// Inserts or replaces the statistics of (`proxy`, `target`), dropping the proxy's
    /// oldest target if that takes it past the cap.
    pub(super) fn insert(&mut self, proxy: ProxyKey, target: String, stats: SiteStats) {
        let sites = self.by_proxy.entry(proxy.clone()).or_default();
        if let Some(before) = sites.insert(target.clone(), stats) {
            self.ages
                .remove(&(before.last_at, proxy.clone(), target.clone()));
        }
        self.ages.insert((stats.last_at, proxy.clone(), target));
        if sites.len() > SITES_PER_PROXY {
            let oldest = sites
                .iter()
                .min_by_key(|(target, stats)| (stats.last_at, *target))
                .map(|(target, stats)| (target.clone(), stats.last_at));
            if let Some((target, last_at)) = oldest {
                sites.remove(&target);
                self.ages.remove(&(last_at, proxy, target));
            }
        }
    }

    /// The statistics of `proxy`, by target.
    pub(super) fn of(&self, proxy: &ProxyKey) -> Option<&BTreeMap<String, SiteStats>> {
        self.by_proxy.get(proxy)
    }

    /// The statistics of (`proxy`, `target`).
    pub(super) fn get(&self, proxy: &ProxyKey, target: &str) -> Option<&SiteStats> {
        self.by_proxy.get(proxy)?.get(target)
    }

    /// Every entry as `(proxy, target, stats)`, by proxy then target.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&ProxyKey, &String, &SiteStats)> {
        self.by_proxy.iter().flat_map(|(proxy, sites)| {
            sites
                .iter()
                .map(move |(target, stats)| (proxy, target, stats))
        })
    }

    /// Drops every statistic of `proxy`.
    pub(super) fn remove(&mut self, proxy: &ProxyKey) {
        if let Some(sites) = self.by_proxy.remove(proxy) {
            for (target, stats) in sites {
                self.ages.remove(&(stats.last_at, proxy.clone(), target));
            }
        }
    }

    /// Forgets every target whose last report is a `window` or more before `now`.
    pub(super) fn forget_ended(&mut self, now: Timestamp, window: Duration) {
        while let Some((last_at, _, _)) = self.ages.first()
            && later(*last_at, window) <= now
        {
            if let Some((_, proxy, target)) = self.ages.pop_first()
                && let Some(sites) = self.by_proxy.get_mut(&proxy)
            {
                sites.remove(&target);
                if sites.is_empty() {
                    self.by_proxy.remove(&proxy);
                }
            }
        }
    }

    /// How many distinct targets reported `proxy` blocked within the `window` before `now`.
    pub(super) fn blocked_within(&self, proxy: &ProxyKey, now: Timestamp, window: Duration) -> u32 {
        let count = self.by_proxy.get(proxy).map_or(0, |sites| {
            sites
                .values()
                .filter(|stats| {
                    stats
                        .last_blocked_at
                        .is_some_and(|at| later(at, window) > now)
                })
                .count()
        });
        u32::try_from(count).unwrap_or(u32::MAX)
    }
}
