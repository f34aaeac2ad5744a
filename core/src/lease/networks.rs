//! Bans counted by network: when a site bans proxies of one egress network (the /24 or /64
//! of [`NETWORK_LABEL`](crate::topology::NETWORK_LABEL)), the rest of that network cools
//! down for the site too.
//!
//! Sites ban whole ranges: a /24 after abuse from a few of its addresses, an IPv6 /64 or /48,
//! whole cloud blocks. Counted per proxy only, a network a site has banned hands the site
//! each of its proxies in turn, each a ban (a wasted request, a captcha, a burnt session)
//! before it cools down. Here, once [`NetworkConfig::bans`] distinct proxies of one network
//! were penalised by one site within [`NetworkConfig::window`], every proxy of that network
//! in the fleet cools down for the site as the last penalty's proxy did. Other sites, and
//! other networks, are untouched. A network is whatever the label says: proxies without
//! the label are counted per proxy only.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::key::ProxyKey;

/// When penalties by one site within one network cool the whole network for the site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetworkConfig {
    /// Distinct proxies of one network penalised (`rate_limited` or `blocked`) by one site
    /// within [`window`](Self::window) that cool every proxy of the network for the site.
    /// Zero turns it off. Default 2.
    pub bans: u32,
    /// How long a penalty counts toward [`bans`](Self::bans). Default 10 minutes.
    pub window: Duration,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            bans: 2,
            window: Duration::from_secs(10 * 60),
        }
    }
}

/// The penalties of the last window, by site and network: which proxy, when last.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct NetworkBans {
    recent: BTreeMap<(String, String), BTreeMap<ProxyKey, Timestamp>>,
    /// `(when, site, network, proxy)`, so that penalties out of the window go without a scan.
    ends: BTreeSet<(Timestamp, String, String, ProxyKey)>,
}

impl NetworkBans {
    /// Counts a penalty of `proxy`, in `network`, by `site` at `now`, and says whether the
    /// network's distinct penalised proxies for the site within the window reached the
    /// threshold (at this penalty or before): then the whole network cools for the site.
    /// O(log p) for p penalties in the window.
    pub(super) fn penalised(
        &mut self,
        site: &str,
        network: &str,
        proxy: &ProxyKey,
        now: Timestamp,
        config: &NetworkConfig,
    ) -> bool {
        if config.bans == 0 {
            return false;
        }
        self.forget_before(now, config.window);
        let key = (site.to_owned(), network.to_owned());
        let proxies = self.recent.entry(key).or_default();
        if let Some(before) = proxies.insert(proxy.clone(), now) {
            self.ends
                .remove(&(before, site.to_owned(), network.to_owned(), proxy.clone()));
        }
        let reached = proxies.len() >= usize::try_from(config.bans).unwrap_or(usize::MAX);
        self.ends
            .insert((now, site.to_owned(), network.to_owned(), proxy.clone()));
        reached
    }

    /// Drops the penalties older than `window` at `now`.
    fn forget_before(&mut self, now: Timestamp, window: Duration) {
        // Only calendar units make `saturating_sub` fail, and a `Duration` has none.
        let start = now.saturating_sub(window).unwrap_or(Timestamp::MIN);
        while self.ends.first().is_some_and(|(at, ..)| *at <= start) {
            let Some((at, site, network, proxy)) = self.ends.pop_first() else {
                break;
            };
            let key = (site, network);
            if let Some(proxies) = self.recent.get_mut(&key) {
                if proxies.get(&proxy) == Some(&at) {
                    proxies.remove(&proxy);
                }
                if proxies.is_empty() {
                    self.recent.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a time")
    }

    fn proxy(name: &str) -> ProxyKey {
        ProxyKey::new("crawl", name)
    }

    #[test]
    fn distinct_proxies_of_one_network_reach_the_threshold_repeats_do_not() {
        let config = NetworkConfig::default();
        let mut bans = NetworkBans::default();
        let net = "10.0.0.0_24";
        assert!(!bans.penalised("shop.test", net, &proxy("a"), at(0), &config));
        assert!(
            !bans.penalised("shop.test", net, &proxy("a"), at(1), &config),
            "one proxy twice is one"
        );
        assert!(
            !bans.penalised("shop.test", "10.0.1.0_24", &proxy("c"), at(2), &config),
            "another network"
        );
        assert!(
            !bans.penalised("blog.test", net, &proxy("b"), at(3), &config),
            "another site"
        );
        assert!(bans.penalised("shop.test", net, &proxy("b"), at(4), &config));
    }

    #[test]
    fn penalties_older_than_the_window_no_longer_count() {
        let config = NetworkConfig {
            bans: 2,
            window: Duration::from_secs(60),
        };
        let mut bans = NetworkBans::default();
        let net = "2001.db8.0.1_64";
        assert!(!bans.penalised("shop.test", net, &proxy("a"), at(0), &config));
        assert!(!bans.penalised("shop.test", net, &proxy("b"), at(60), &config));
        assert_eq!(bans.recent.values().map(BTreeMap::len).sum::<usize>(), 1);
        // A proxy penalised again within the window counts from its last penalty.
        assert!(bans.penalised("shop.test", net, &proxy("c"), at(61), &config));
        assert!(!bans.penalised("shop.test", net, &proxy("d"), at(200), &config));
        assert_eq!(bans.ends.len(), 1, "{:?}", bans.ends);
    }

    #[test]
    fn zero_bans_turns_it_off() {
        let config = NetworkConfig {
            bans: 0,
            ..NetworkConfig::default()
        };
        let mut bans = NetworkBans::default();
        for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
            let now = at(i64::try_from(n).expect("small"));
            assert!(!bans.penalised("s", "n", &proxy(name), now, &config));
        }
        assert!(bans.recent.is_empty());
    }
}
