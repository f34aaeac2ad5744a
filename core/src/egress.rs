//! Egress verification: which address a site sees a proxy's traffic come from, whether that
//! is the address the proxy publishes (or one of the ranges its health check allows), and
//! which proxies share one egress address.
//!
//! A fleet exists so that a crawler's requests leave from many addresses; two proxies that
//! leave from the same one (two External proxies in front of the same gateway, VMs behind
//! one NAT) look like one proxy to a site, and a ban of one is a ban of both. The prober
//! learns each proxy's egress address (`healthCheck.egressURL`), the [`EgressBook`] keeps
//! the fleet's, and [`sharing`] says which proxies share one. The `EgressVerified` condition
//! ([`verify`]) says so in status, and the discovery API can leave shared proxies out
//! (`distinctEgress`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::key::ProxyKey;

/// The proxies that share their egress address with another, each with the others that
/// share it (in key order); a proxy alone on its address is not in the map.
pub fn sharing(fleet: &BTreeMap<ProxyKey, IpAddr>) -> BTreeMap<ProxyKey, Vec<ProxyKey>> {
    let mut by_address: BTreeMap<IpAddr, Vec<&ProxyKey>> = BTreeMap::new();
    for (key, address) in fleet {
        by_address.entry(*address).or_default().push(key);
    }
    let mut shared = BTreeMap::new();
    for keys in by_address.values().filter(|keys| keys.len() > 1) {
        for key in keys {
            let others = keys.iter().filter(|k| *k != key).map(|k| (*k).clone());
            shared.insert((*key).clone(), others.collect());
        }
    }
    shared
}

/// The egress address of every proxy whose address is known, and who shares it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressBook {
    fleet: BTreeMap<ProxyKey, IpAddr>,
    shared: BTreeMap<ProxyKey, Vec<ProxyKey>>,
}

impl EgressBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key` leaves from `address` (`None`: unknown, for example its machine
    /// was replaced) and returns the proxies whose sharing changed, `key` included when its
    /// own did: their status must be written again.
    #[must_use = "reconcile the proxies whose sharing changed"]
    pub fn record(&mut self, key: &ProxyKey, address: Option<IpAddr>) -> Vec<ProxyKey> {
        if self.fleet.get(key).copied() == address {
            return Vec::new();
        }
        match address {
            Some(address) => self.fleet.insert(key.clone(), address),
            None => self.fleet.remove(key),
        };
        let shared = sharing(&self.fleet);
        let mut changed: Vec<ProxyKey> = self
            .shared
            .keys()
            .chain(shared.keys())
            .filter(|k| self.shared.get(*k) != shared.get(*k))
            .cloned()
            .collect();
        changed.sort();
        changed.dedup();
        self.shared = shared;
        changed
    }

    /// Forgets `key` (the Proxy is gone); returns the proxies whose sharing changed.
    #[must_use = "reconcile the proxies whose sharing changed"]
    pub fn forget(&mut self, key: &ProxyKey) -> Vec<ProxyKey> {
        let mut changed = self.record(key, None);
        changed.retain(|k| k != key);
        changed
    }

    /// The other proxies that leave from the address `key` leaves from, in key order.
    pub fn shared_with(&self, key: &ProxyKey) -> Vec<ProxyKey> {
        self.shared.get(key).cloned().unwrap_or_default()
    }

    /// The address `key` leaves from, if it is known.
    pub fn address(&self, key: &ProxyKey) -> Option<IpAddr> {
        self.fleet.get(key).copied()
    }
}

/// What the egress check concluded: the reason of the `EgressVerified` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EgressReason {
    /// The site sees the proxy's published address, or one in `healthCheck.egressCIDRs`.
    Matches,
    /// The site sees another address.
    Differs,
    /// Another proxy of the fleet leaves from the same address.
    Shared,
    /// Not known yet (no successful egress probe of this machine).
    Unknown,
}

impl EgressReason {
    /// The condition's reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Matches => "Matches",
            Self::Differs => "Differs",
            Self::Shared => "Shared",
            Self::Unknown => "Unknown",
        }
    }

    /// The condition's status: `True` only for [`EgressReason::Matches`].
    pub fn status(self) -> &'static str {
        match self {
            Self::Matches => crate::conditions::TRUE,
            Self::Differs | Self::Shared => crate::conditions::FALSE,
            Self::Unknown => crate::conditions::UNKNOWN,
        }
    }
}

/// The verdict of the egress check, with its message: `egress` (what the site saw, if known)
/// against `published` (the proxy's `status.ip`), the ranges `cidrs` (each `address/bits`;
/// one that does not parse matches nothing) and the proxies `shared_with` that leave from
/// the same address. Sharing wins over a match: two proxies on one address defeat the fleet
/// even when each is where it says it is.
pub fn verify(
    egress: Option<&str>,
    published: Option<&str>,
    cidrs: &[String],
    shared_with: &[ProxyKey],
) -> (EgressReason, String) {
    let Some(egress) = egress else {
        return (
            EgressReason::Unknown,
            "the egress address is not known yet: it is learned by the next good probe".to_owned(),
        );
    };
    if !shared_with.is_empty() {
        let others: Vec<&str> = shared_with.iter().map(ProxyKey::as_str).collect();
        return (
            EgressReason::Shared,
            format!(
                "sites see {egress}, as they do for {}: to a site these are one proxy",
                others.join(", ")
            ),
        );
    }
    let address = egress.parse::<IpAddr>().ok();
    let published_matches = published
        .and_then(|p| p.parse::<IpAddr>().ok())
        .is_some_and(|p| Some(p) == address);
    if published_matches {
        return (
            EgressReason::Matches,
            format!("sites see {egress}, the proxy's published address"),
        );
    }
    if let Some(cidr) = cidrs
        .iter()
        .find(|cidr| address.is_some_and(|a| in_cidr(a, cidr)))
    {
        return (
            EgressReason::Matches,
            format!("sites see {egress}, in {cidr} (healthCheck.egressCIDRs)"),
        );
    }
    let published = published.unwrap_or("(none)");
    let ranges = if cidrs.is_empty() {
        String::new()
    } else {
        format!(" nor in healthCheck.egressCIDRs ({})", cidrs.join(", "))
    };
    (
        EgressReason::Differs,
        format!("sites see {egress}, not the proxy's published address {published}{ranges}"),
    )
}

/// Whether `address` is in `cidr` (`address/bits`, IPv4 or IPv6); `false` for a range that
/// does not parse or is of the other family.
pub fn in_cidr(address: IpAddr, cidr: &str) -> bool {
    let Some((network, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(network), Ok(bits)) = (network.parse::<IpAddr>(), bits.parse::<u32>()) else {
        return false;
    };
    match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
