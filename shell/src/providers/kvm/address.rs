//! Where a VM's address comes from: the host's configured address source.
//!
//! `dhcp` asks libvirt (the network's leases, then the host's ARP table); `static` and
//! `hostPort` hand out one address of a pool per VM, record it in the domain's metadata, and
//! report it from there.

use std::collections::BTreeSet;

use virt::domain::Interface;

use crate::providers::settings::StaticPool;

/// The first address of `pool` that no domain holds (`used`), if any is left.
pub fn allocate(pool: &[String], used: &BTreeSet<String>) -> Option<String> {
    pool.iter().find(|a| !used.contains(*a)).cloned()
}

/// The first IPv4 address libvirt reports for the NIC with MAC `mac`, or for any NIC when
/// none has that MAC.
pub fn ipv4_of(interfaces: &[Interface], mac: &str) -> Option<String> {
    let ipv4 = |interface: &Interface| {
        interface
            .addrs
            .iter()
            .find(|a| a.typed == i64::from(virt::sys::VIR_IP_ADDR_TYPE_IPV4))
            .map(|a| a.addr.clone())
    };
    let ours = interfaces.iter().filter(|i| {
        i.hwaddr
            .as_deref()
            .is_some_and(|h| h.eq_ignore_ascii_case(mac))
    });
    ours.chain(interfaces.iter()).find_map(ipv4)
}

/// The cloud-init network-config (version 2) giving the NIC with MAC `mac` the static
/// `address` of `pool`.
pub fn network_config(pool: &StaticPool, address: &str, mac: &str) -> String {
    let nameservers = if pool.nameservers.is_empty() {
        std::slice::from_ref(&pool.gateway)
    } else {
        &pool.nameservers[..]
    };
    format!(
        "version: 2\nethernets:\n  eth0:\n    match:\n      macaddress: \"{mac}\"\n    \
         set-name: eth0\n    addresses: [\"{address}/{}\"]\n    routes:\n      \
         - to: default\n        via: \"{}\"\n    nameservers:\n      addresses: [{}]\n",
        pool.prefix_length,
        pool.gateway,
        nameservers
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use virt::domain::IPAddress;

    use super::*;

    #[test]
    fn allocation_takes_the_first_free_address() {
        let pool = ["10.0.0.5".to_owned(), "10.0.0.6".to_owned()];
        let used = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(allocate(&pool, &used(&[])).as_deref(), Some("10.0.0.5"));
        assert_eq!(
            allocate(&pool, &used(&["10.0.0.5", "10.9.9.9"])).as_deref(),
            Some("10.0.0.6")
        );
        assert_eq!(allocate(&pool, &used(&["10.0.0.6", "10.0.0.5"])), None);
    }

    fn nic(mac: &str, addrs: &[(u32, &str)]) -> Interface {
        Interface {
            name: "vnet0".into(),
            hwaddr: Some(mac.into()),
            naddrs: addrs.len() as u64,
            addrs: addrs
                .iter()
                .map(|(typed, addr)| IPAddress {
                    typed: i64::from(*typed),
                    addr: (*addr).into(),
                    prefix: 24,
                })
                .collect(),
        }
    }

    #[test]
    fn the_ipv4_of_our_nic_wins() {
        let v4 = virt::sys::VIR_IP_ADDR_TYPE_IPV4;
        let v6 = virt::sys::VIR_IP_ADDR_TYPE_IPV6;
        let other = nic("52:54:00:00:00:01", &[(v4, "192.168.122.9")]);
        let ours = nic(
            "52:54:00:AB:CD:EF",
            &[(v6, "fe80::1"), (v4, "192.168.122.50")],
        );
        let mac = "52:54:00:ab:cd:ef";
        assert_eq!(
            ipv4_of(&[other.clone(), ours.clone()], mac).as_deref(),
            Some("192.168.122.50")
        );
        assert_eq!(ipv4_of(&[other], mac).as_deref(), Some("192.168.122.9"));
        assert_eq!(ipv4_of(&[nic(mac, &[(v6, "fe80::1")])], mac), None);
        assert_eq!(ipv4_of(&[], mac), None);
    }

    #[test]
    fn static_network_config_is_cloud_init_v2() {
        let pool = StaticPool {
            addresses: vec!["192.168.1.50".into()],
            prefix_length: 24,
            gateway: "192.168.1.1".into(),
            nameservers: vec![],
        };
        let config = network_config(&pool, "192.168.1.50", "52:54:00:01:02:03");
        let doc: serde_json::Value = serde_saphyr::from_str(&config).unwrap();
        let eth0 = &doc["ethernets"]["eth0"];
        assert_eq!(doc["version"], 2);
        assert_eq!(eth0["match"]["macaddress"], "52:54:00:01:02:03");
        assert_eq!(eth0["addresses"], serde_json::json!(["192.168.1.50/24"]));
        assert_eq!(eth0["routes"][0]["via"], "192.168.1.1");
        assert_eq!(
            eth0["nameservers"]["addresses"],
            serde_json::json!(["192.168.1.1"])
        );
    }
}
