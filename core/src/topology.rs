//! Where a proxy stands, as labels the operator writes on its `Proxy`: its provider's type,
//! its region and zone, and its egress network.
//!
//! Sites judge a request by where it comes from: they ban cloud ranges, a /24, an IPv6 /64,
//! and crawlers pick proxies by region. Every commercial gateway offers that choice; here it
//! is a label, so that one selector language serves everything that picks proxies (the lease
//! API's `selector`, the gateway's username, `kubectl get proxies -l`, a pool's members).
//!
//! | label | value | from |
//! |---|---|---|
//! | [`PROVIDER_LABEL`] | `gcp`, `kvm`, `kubernetes` or `external` | the type of `spec.provider` (`external` for an External proxy) |
//! | [`REGION_LABEL`] | `europe_west1` | a gcp zone's region |
//! | [`ZONE_LABEL`] | `europe_west1_b`, a kvm host | `status.zone` |
//! | [`NETWORK_LABEL`] | `203.0.113.0_24`, `2001.db8.0.1_64` | the /24 or /64 of `status.egressIP`; without one, of a gcp VM's `status.ip` |
//!
//! The network is where sites see requests come from. That is `status.egressIP` when the
//! health check has an `egressURL`; without one, only a gcp VM's address (its one-to-one
//! NAT IP) is known to be its egress. A Pod leaves through its node's address, a kvm guest
//! on a NAT network through its host's, an External proxy through whatever is behind its
//! endpoint: their own addresses would put proxies that sites tell apart in one network,
//! or ones sites see as one in several, and the lease book counts bans by this label.
//!
//! Values are label values the gateway's username grammar can carry: no `-` (the
//! username's separator, so `europe-west1-b` is written `europe_west1_b`), no `:` or `/`.
//!
//! The operator owns these keys: a value it knows replaces whatever the object carries.
//! It never removes one: a proxy between two machines (no address, no zone for a moment)
//! keeps where it was last, rather than dropping out of every selector that names it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use proxy_crd::ProxyStatus;
use serde::{Deserialize, Serialize};

/// The label of the provider's type: `gcp`, `kvm`, `kubernetes` or `external`.
pub const PROVIDER_LABEL: &str = "crawl.example.com/provider";
/// The label of the region (gcp: the zone's region, `europe_west1`).
pub const REGION_LABEL: &str = "crawl.example.com/region";
/// The label of the zone the machine runs in (`status.zone`: a gcp zone, a kvm host).
pub const ZONE_LABEL: &str = "crawl.example.com/zone";
/// The label of the egress network: the /24 (IPv4) or /64 (IPv6) sites see requests from.
pub const NETWORK_LABEL: &str = "crawl.example.com/network";

/// The labels the operator writes, and owns.
pub const LABELS: [&str; 4] = [PROVIDER_LABEL, REGION_LABEL, ZONE_LABEL, NETWORK_LABEL];

/// The username keys every gateway takes for these labels (`user-acme-zone-europe_west1_b`),
/// beside the ones its `--username-label` adds (which may map the same keys elsewhere).
pub const USERNAME_KEYS: [(&str, &str); 4] = [
    ("provider", PROVIDER_LABEL),
    ("region", REGION_LABEL),
    ("zone", ZONE_LABEL),
    ("network", NETWORK_LABEL),
];

/// The longest label value Kubernetes takes.
const MAX_VALUE_LEN: usize = 63;

/// What kind of machine is behind a proxy: its provider's type, or none for an External one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderType {
    /// A Pod running squid.
    Kubernetes,
    /// A Compute Engine VM.
    Gcp,
    /// A libvirt guest.
    Kvm,
    /// A proxy someone else runs (`mode: External`).
    External,
}

impl ProviderType {
    /// The value of [`PROVIDER_LABEL`].
    pub fn label(self) -> &'static str {
        match self {
            Self::Kubernetes => "kubernetes",
            Self::Gcp => "gcp",
            Self::Kvm => "kvm",
            Self::External => "external",
        }
    }

    /// Whether the address crawlers connect to is the one sites see: a gcp VM's external
    /// (one-to-one NAT) IP is; a Pod's, a kvm guest's and an External endpoint's may not be.
    fn address_is_egress(self) -> bool {
        matches!(self, Self::Gcp)
    }

    /// The region of `zone`, when this provider's zones name one: a Compute Engine zone is
    /// its region and a letter (`europe-west1-b` is in `europe-west1`). A kvm zone is a host,
    /// which says no region.
    fn region_of(self, zone: &str) -> Option<&str> {
        match self {
            Self::Gcp => zone.rsplit_once('-').map(|(region, _)| region),
            Self::Kubernetes | Self::Kvm | Self::External => None,
        }
    }
}

/// The labels `status` says of a proxy of `provider`: [`PROVIDER_LABEL`] always, the others
/// when the status knows them.
pub fn labels(provider: ProviderType, status: &ProxyStatus) -> BTreeMap<&'static str, String> {
    let mut labels = BTreeMap::from([(PROVIDER_LABEL, provider.label().to_owned())]);
    if let Some(zone) = status.zone.as_deref() {
        labels.extend(label_value(zone).map(|value| (ZONE_LABEL, value)));
        let region = provider.region_of(zone).and_then(label_value);
        labels.extend(region.map(|value| (REGION_LABEL, value)));
    }
    let address = status.egress_ip.as_deref().or(status
        .ip
        .as_deref()
        .filter(|_| provider.address_is_egress()));
    let network = address
        .and_then(|a| a.parse::<IpAddr>().ok())
        .map(network_of);
    labels.extend(network.map(|value| (NETWORK_LABEL, value)));
    labels
}

/// A Proxy's labels, name to value: `metadata.labels`.
pub type Labels = BTreeMap<String, String>;

/// The writes that make `current` carry `wanted`: each key whose value differs. None removes
/// a key (see the module's doc).
pub fn label_writes(current: &Labels, wanted: &BTreeMap<&'static str, String>) -> Labels {
    wanted
        .iter()
        .filter(|(key, value)| current.get(**key) != Some(*value))
        .map(|(key, value)| ((*key).to_owned(), value.clone()))
        .collect()
}

/// The egress network of `ip` as a label value: its /24 (`203.0.113.0_24`) or its /64, its
/// first four groups in hex joined by `.` (`2001.db8.0.1_64`). An IPv4 address mapped into
/// IPv6 is the IPv4 address it maps.
pub fn network_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0_24")
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => network_of(IpAddr::V4(v4)),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                format!("{a:x}.{b:x}.{c:x}.{d:x}_64")
            }
        },
    }
}

/// `raw` as a label value the username grammar can carry: every character but ASCII
/// letters, digits, `_` and `.` becomes `_`, at most 63 of them, starting and ending with a
/// letter or a digit; `None` when nothing is left.
pub fn label_value(raw: &str) -> Option<String> {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_VALUE_LEN)
        .collect();
    let value = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!value.is_empty()).then(|| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(zone: Option<&str>, ip: Option<&str>, egress: Option<&str>) -> ProxyStatus {
        ProxyStatus {
            zone: zone.map(str::to_owned),
            ip: ip.map(str::to_owned),
            egress_ip: egress.map(str::to_owned),
            ..ProxyStatus::default()
        }
    }

    #[test]
    fn a_gcp_proxy_is_labelled_with_its_provider_region_zone_and_network() {
        let labels = labels(
            ProviderType::Gcp,
            &status(Some("europe-west1-b"), Some("34.76.10.7"), None),
        );
        assert_eq!(
            labels,
            BTreeMap::from([
                (PROVIDER_LABEL, "gcp".to_owned()),
                (REGION_LABEL, "europe_west1".to_owned()),
                (ZONE_LABEL, "europe_west1_b".to_owned()),
                (NETWORK_LABEL, "34.76.10.0_24".to_owned()),
            ])
        );
    }

    #[test]
    fn without_an_egress_check_only_a_gcp_address_says_a_network() {
        for provider in [
            ProviderType::Kubernetes,
            ProviderType::Kvm,
            ProviderType::External,
        ] {
            let labels = labels(provider, &status(None, Some("10.244.1.9"), None));
            assert!(
                !labels.contains_key(NETWORK_LABEL),
                "{provider:?}: {labels:?}"
            );
        }
        let labels = labels(ProviderType::Gcp, &status(None, Some("34.76.10.7"), None));
        assert_eq!(labels[NETWORK_LABEL], "34.76.10.0_24");
    }

    #[test]
    fn the_network_is_the_egress_one_when_the_health_check_saw_it() {
        let labels = labels(
            ProviderType::Kubernetes,
            &status(None, Some("10.244.1.9"), Some("2001:db8:0:1:2::7")),
        );
        assert_eq!(labels[NETWORK_LABEL], "2001.db8.0.1_64");
        assert_eq!(labels[PROVIDER_LABEL], "kubernetes");
        assert!(!labels.contains_key(ZONE_LABEL) && !labels.contains_key(REGION_LABEL));
    }

    #[test]
    fn a_kvm_host_is_a_zone_without_a_region() {
        let labels = labels(ProviderType::Kvm, &status(Some("kvm-host-1"), None, None));
        assert_eq!(labels[ZONE_LABEL], "kvm_host_1");
        assert!(!labels.contains_key(REGION_LABEL) && !labels.contains_key(NETWORK_LABEL));
    }

    #[test]
    fn an_address_that_is_not_an_ip_says_no_network() {
        let labels = labels(
            ProviderType::Gcp,
            &status(None, Some("proxy.example.net"), None),
        );
        assert_eq!(labels, BTreeMap::from([(PROVIDER_LABEL, "gcp".to_owned())]));
    }

    #[test]
    fn networks_are_the_24_or_the_64_of_the_address() {
        for (ip, network) in [
            ("127.235.0.117", "127.235.0.0_24"),
            ("::ffff:198.51.100.9", "198.51.100.0_24"),
            ("2001:db8::1", "2001.db8.0.0_64"),
            ("fe80:1:2:3:4:5:6:7", "fe80.1.2.3_64"),
        ] {
            let ip: IpAddr = ip.parse().expect("an address");
            assert_eq!(network_of(ip), network, "{ip}");
        }
    }

    #[test]
    fn values_keep_what_a_username_and_a_label_can_carry() {
        for (raw, value) in [
            ("europe-west1-b", Some("europe_west1_b")),
            ("us-central1", Some("us_central1")),
            ("host.lab", Some("host.lab")),
            ("-edge-", Some("edge")),
            ("---", None),
            ("", None),
        ] {
            assert_eq!(label_value(raw).as_deref(), value, "{raw:?}");
        }
        let long = label_value(&"a-".repeat(40)).expect("a value");
        assert!(long.len() <= MAX_VALUE_LEN && long.ends_with('a'), "{long}");
    }

    #[test]
    fn only_differing_values_are_written_and_nothing_is_removed() {
        let current = Labels::from([
            (ZONE_LABEL.to_owned(), "europe_west1_b".to_owned()),
            (NETWORK_LABEL.to_owned(), "10.0.0.0_24".to_owned()),
            ("geo".to_owned(), "eu".to_owned()),
        ]);
        let wanted = BTreeMap::from([
            (ZONE_LABEL, "europe_west1_b".to_owned()),
            (PROVIDER_LABEL, "gcp".to_owned()),
        ]);
        assert_eq!(
            label_writes(&current, &wanted),
            Labels::from([(PROVIDER_LABEL.to_owned(), "gcp".to_owned())])
        );
        assert!(label_writes(&current, &BTreeMap::new()).is_empty());
    }
}
