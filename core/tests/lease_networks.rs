//! Bans counted by network in the lease book: once `bans` distinct proxies of one egress
//! network (`crawl.example.com/network`) were penalised by one site within the window, every
//! proxy of that network cools down for that site, and for nothing else; and the properties:
//! no proxy outside the network, and no other site, is ever cooled by it.

#[path = "support/fleet.rs"]
mod fleet;

use std::collections::BTreeSet;
use std::time::Duration;

use fleet::{at, proxy};
use jiff::Timestamp;
use proptest::prelude::*;
use proxy_core::lease::{
    AcquireError, AcquireRequest, LeaseBook, LeaseConfig, NetworkConfig, NoMatch, ProxyView,
    ReportResult,
};
use proxy_core::topology::NETWORK_LABEL;

/// `name` in `network` (no label when `None`), 10 places.
fn in_network(name: &str, network: Option<&str>) -> ProxyView {
    let mut view = proxy(name, 10, 10);
    if let Some(network) = network {
        view.labels
            .insert(NETWORK_LABEL.to_owned(), network.to_owned());
    }
    view
}

/// Three proxies in 10.0.1.0/24, two in 10.0.2.0/24, one without the label.
fn fleet(networks: NetworkConfig) -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig {
        networks,
        ..LeaseConfig::default()
    });
    for (name, network) in [
        ("a1", Some("10.0.1.0_24")),
        ("a2", Some("10.0.1.0_24")),
        ("a3", Some("10.0.1.0_24")),
        ("b1", Some("10.0.2.0_24")),
        ("b2", Some("10.0.2.0_24")),
        ("c1", None),
    ] {
        book.upsert(in_network(name, network));
    }
    book
}

fn request(id: &str, target: &str) -> AcquireRequest {
    AcquireRequest {
        id: id.to_owned(),
        selector: Default::default(),
        target: Some(target.to_owned()),
        ttl: Duration::from_secs(60),
        distinct_egress: false,
        holder: None,
    }
}

/// Leases `proxy` for `site` (the only one the book may give, all others being cooled or
/// taken is not needed: the lease is found by asking until it comes) and reports `result`.
fn penalise(book: &mut LeaseBook, proxy: &str, site: &str, result: ReportResult, now: Timestamp) {
    for n in 0..64 {
        let id = format!("{proxy}-{site}-{}-{n}", now.as_second());
        let lease = book
            .acquire(request(&id, site), now)
            .unwrap_or_else(|e| panic!("no lease for {site} to penalise {proxy}: {e:?}"));
        if lease.proxy.name() == proxy {
            book.report(&lease.id, result, None, now)
                .expect("a known lease");
            return;
        }
    }
    panic!("{proxy} was never leased for {site}");
}

/// Every proxy a lease for `site` can get at `now` (leasing each until none is left).
fn leasable(book: &LeaseBook, site: &str, now: Timestamp) -> BTreeSet<String> {
    let mut book = book.clone();
    let mut names = BTreeSet::new();
    for n in 0..100 {
        match book.acquire(request(&format!("probe-{n}"), site), now) {
            Ok(lease) => {
                names.insert(lease.proxy.name().to_owned());
            }
            Err(AcquireError::NoMatch(NoMatch { .. })) => break,
            Err(AcquireError::IdInUse) => unreachable!("unique IDs"),
        }
    }
    names
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn two_bans_in_a_network_cool_the_whole_network_for_that_site_only() {
    let mut book = fleet(NetworkConfig::default());
    penalise(&mut book, "a1", "shop.test", ReportResult::Blocked, at(0));
    assert_eq!(
        leasable(&book, "shop.test", at(1)),
        names(&["a2", "a3", "b1", "b2", "c1"]),
        "one ban cools its proxy only"
    );
    penalise(&mut book, "a2", "shop.test", ReportResult::Blocked, at(2));
    assert_eq!(
        leasable(&book, "shop.test", at(3)),
        names(&["b1", "b2", "c1"]),
        "the second ban in 10.0.1.0/24 cools a3 too"
    );
    assert_eq!(
        leasable(&book, "blog.test", at(3)),
        names(&["a1", "a2", "a3", "b1", "b2", "c1"]),
        "another site is untouched"
    );
    // a3 cools as long as the ban that cooled the network: the blocked cooldown (30 min).
    assert!(!leasable(&book, "shop.test", at(2 + 30 * 60 - 1)).contains("a3"));
    assert_eq!(
        leasable(&book, "shop.test", at(2 + 30 * 60)),
        names(&["a1", "a2", "a3", "b1", "b2", "c1"])
    );
}

#[test]
fn a_rate_limit_counts_as_a_penalty_and_cools_the_network_as_long_as_it_does() {
    let mut book = fleet(NetworkConfig::default());
    penalise(
        &mut book,
        "b1",
        "shop.test",
        ReportResult::RateLimited,
        at(0),
    );
    penalise(&mut book, "b2", "shop.test", ReportResult::Blocked, at(1));
    assert_eq!(
        leasable(&book, "shop.test", at(2)),
        names(&["a1", "a2", "a3", "c1"])
    );
    penalise(
        &mut book,
        "a1",
        "news.test",
        ReportResult::RateLimited,
        at(2),
    );
    penalise(
        &mut book,
        "a2",
        "news.test",
        ReportResult::RateLimited,
        at(3),
    );
    // The rate-limited cooldown, 5 minutes from the penalty that cooled the network.
    assert!(!leasable(&book, "news.test", at(3 + 5 * 60 - 1)).contains("a3"));
    assert!(leasable(&book, "news.test", at(3 + 5 * 60)).contains("a3"));
}

#[test]
fn bans_out_of_the_window_the_same_proxy_twice_errors_and_no_label_cool_no_network() {
    let mut book = fleet(NetworkConfig::default());
    penalise(&mut book, "a1", "shop.test", ReportResult::Blocked, at(0));
    penalise(&mut book, "a2", "shop.test", ReportResult::Blocked, at(601));
    assert!(
        leasable(&book, "shop.test", at(602)).contains("a3"),
        "out of the window"
    );
    let mut book = fleet(NetworkConfig::default());
    penalise(&mut book, "a1", "shop.test", ReportResult::Blocked, at(0));
    penalise(&mut book, "a2", "shop.test", ReportResult::Error, at(1));
    assert!(
        leasable(&book, "shop.test", at(2)).contains("a3"),
        "an error is no penalty"
    );
    let mut book = fleet(NetworkConfig {
        bans: 0,
        ..NetworkConfig::default()
    });
    penalise(&mut book, "a1", "shop.test", ReportResult::Blocked, at(0));
    penalise(&mut book, "a2", "shop.test", ReportResult::Blocked, at(1));
    assert!(
        leasable(&book, "shop.test", at(2)).contains("a3"),
        "turned off"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Whatever penalties come, a proxy is kept from a site only by its own penalty or by
    /// `bans` distinct proxies of its own network penalised by that site within the window.
    #[test]
    fn a_proxy_is_cooled_only_by_its_own_penalty_or_its_own_networks(
        reports in prop::collection::vec((0usize..6, 0usize..2, any::<bool>(), 0i64..900), 1..20),
    ) {
        let all = ["a1", "a2", "a3", "b1", "b2", "c1"];
        let network = |name: &str| match name.as_bytes()[0] {
            b'a' => Some("a"),
            b'b' => Some("b"),
            _ => None,
        };
        let sites = ["shop.test", "blog.test"];
        let mut book = fleet(NetworkConfig::default());
        let mut reports = reports;
        reports.sort_by_key(|r| r.3);
        let mut done: Vec<(&str, &str, i64)> = Vec::new();
        for (proxy, site, blocked, second) in reports {
            let result = if blocked { ReportResult::Blocked } else { ReportResult::RateLimited };
            let (proxy, site) = (all[proxy], sites[site]);
            if !leasable(&book, site, at(second)).contains(proxy) {
                continue; // cooled already: no crawler gets it to be penalised
            }
            penalise(&mut book, proxy, site, result, at(second));
            done.push((proxy, site, second));
        }
        let now = done.last().map_or(0, |d| d.2);
        for site in sites {
            let open = leasable(&book, site, at(now));
            for proxy in all {
                if open.contains(proxy) {
                    continue;
                }
                let own = done.iter().any(|d| d.0 == proxy && d.1 == site);
                let by_network = network(proxy).is_some_and(|net| {
                    done.iter().any(|&(other, s, second)| {
                        s == site && network(other) == Some(net) && {
                            let distinct: BTreeSet<&str> = done
                                .iter()
                                .filter(|d| d.1 == site && network(d.0) == Some(net)
                                    && d.2 <= second && second - d.2 < 600)
                                .map(|d| d.0)
                                .collect();
                            distinct.len() >= 2
                        }
                    })
                });
                prop_assert!(own || by_network, "{} kept from {}: {:?}", proxy, site, done);
            }
        }
    }
}
