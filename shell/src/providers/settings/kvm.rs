//! The settings of the `kvm` provider: libvirt hosts, each with its storage pool, network,
//! base image and the way a VM's address is found.
//!
//! ```yaml
//! kvm:
//!   allowedSourceCIDRs: [10.0.0.0/8]    # who may use the proxies (squid's http_access)
//!   hosts:
//!     - name: beelink                   # placement.host picks a host; default: the first
//!       uri: qemu+ssh://root@beelink.lan/system
//!       storagePool: default            # where the VM's disk and seed ISO go
//!       network: default                # dhcp and static only
//!       baseImage: debian-12-genericcloud-amd64.qcow2   # a volume in storagePool
//!       address: {dhcp: {}}             # dhcp | static | hostPort
//! ```

use std::net::IpAddr;

use serde::Deserialize;

use super::{cidr_problems, default_allowed_source_cidrs, is_dns1123_label};

/// Settings of the `kvm` provider.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KvmSettings {
    /// The libvirt hosts, in order: the first is the default placement. Required.
    #[serde(default)]
    pub hosts: Vec<KvmHost>,
    /// Source ranges squid accepts clients from, in the cloud-init the provider writes when a
    /// Proxy brings none (default: the private and loopback ranges).
    #[serde(
        default = "default_allowed_source_cidrs",
        rename = "allowedSourceCIDRs"
    )]
    pub allowed_source_cidrs: Vec<String>,
}

/// One libvirt host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KvmHost {
    /// The name `placement.host` and provider IDs (`<host>/<domain>`) use. Required.
    #[serde(default)]
    pub name: String,
    /// The libvirt connection URI, e.g. `qemu+ssh://root@host/system`. Required.
    #[serde(default)]
    pub uri: String,
    /// The storage pool the VM's disk and seed ISO are created in (default `default`).
    #[serde(default = "default_pool")]
    pub storage_pool: String,
    /// The libvirt network a `dhcp` or `static` VM attaches to (default `default`). A
    /// `hostPort` VM uses qemu's user-mode networking instead, so it must not be set then.
    #[serde(default)]
    pub network: Option<String>,
    /// The volume in `storagePool` every VM's disk is a copy-on-write layer over; a Proxy's
    /// `placement.image` names another. Required.
    #[serde(default)]
    pub base_image: String,
    /// How the VMs run: `kvm` (hardware virtualisation, the default) or `tcg` (qemu's
    /// emulator, for hosts without it, e.g. nested in a VM that exposes no vmx/svm).
    #[serde(default)]
    pub accelerator: Accelerator,
    /// Boot a kernel file on the host instead of the base image's bootloader (for base images
    /// that are a bare root filesystem).
    #[serde(default)]
    pub direct_boot: Option<DirectBoot>,
    /// Where a VM's address comes from (default `dhcp: {}`).
    #[serde(default)]
    pub address: AddressSource,
}

fn default_pool() -> String {
    "default".to_owned()
}

/// The accelerator of a host's VMs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accelerator {
    /// Hardware virtualisation (`<domain type='kvm'>`).
    #[default]
    Kvm,
    /// qemu's emulator (`<domain type='qemu'>`): slow, but needs nothing from the CPU.
    Tcg,
}

/// A kernel, initramfs and command line on the libvirt host, booted directly.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DirectBoot {
    /// Path of the kernel on the host.
    pub kernel: String,
    /// Path of the initramfs on the host.
    #[serde(default)]
    pub initrd: Option<String>,
    /// The kernel command line, e.g. `root=/dev/vda console=ttyS0`.
    #[serde(default)]
    pub cmdline: String,
}

/// Where the address of a host's VMs comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum AddressSource {
    /// The libvirt network's DHCP leases, then the host's ARP table: for a libvirt NAT or
    /// bridged network with DHCP that the operator can reach.
    Dhcp {},
    /// An address from this pool, handed to the guest in the cloud-init network-config: for
    /// a bridged network without DHCP, or when proxies need stable addresses.
    Static(StaticPool),
    /// An address of the host itself, forwarded by qemu's user-mode networking to the
    /// guest's proxy port: for hosts whose VMs cannot be reached from outside (NAT).
    HostPort(HostPortPool),
}

impl Default for AddressSource {
    fn default() -> Self {
        Self::Dhcp {}
    }
}

/// The static addresses of a host's VMs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticPool {
    /// The addresses to hand out, one per VM. Required.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The prefix length of the network (default 24).
    #[serde(default = "default_prefix_length")]
    pub prefix_length: u8,
    /// The default gateway. Required.
    #[serde(default)]
    pub gateway: String,
    /// DNS servers (default: the gateway).
    #[serde(default)]
    pub nameservers: Vec<String>,
}

fn default_prefix_length() -> u8 {
    24
}

/// The host addresses forwarded to a host's VMs.
///
/// Each VM gets one address of the host, and the host's port of the Proxy (`spec.port`) on
/// that address is forwarded to the same port in the guest: the operator probes and leases
/// a proxy at `status.ip` on `spec.port`, so a VM cannot have a port of its own. On Linux,
/// all of 127.0.0.0/8 is loopback, which gives a single machine as many addresses as it needs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostPortPool {
    /// The host addresses to hand out, one per VM. Required.
    #[serde(default)]
    pub addresses: Vec<String>,
}

impl AddressSource {
    /// The pool of addresses handed out one per VM, if this source has one.
    pub fn pool(&self) -> Option<&[String]> {
        match self {
            Self::Dhcp {} => None,
            Self::Static(pool) => Some(&pool.addresses),
            Self::HostPort(pool) => Some(&pool.addresses),
        }
    }
}

impl KvmHost {
    /// The libvirt network of this host's VMs, if they attach to one.
    pub fn network(&self) -> Option<&str> {
        match self.address {
            AddressSource::HostPort(_) => None,
            _ => Some(self.network.as_deref().unwrap_or("default")),
        }
    }
}

/// Every problem of a `kvm` block at `at` (e.g. `providers[2].kvm`).
pub(crate) fn validate(kvm: &KvmSettings, at: &str, problem: &mut impl FnMut(String, String)) {
    if kvm.hosts.is_empty() {
        problem(
            format!("{at}.hosts"),
            "required: at least one libvirt host (name, uri, baseImage)".into(),
        );
    }
    for (path, message) in cidr_problems(&kvm.allowed_source_cidrs) {
        problem(format!("{at}.{path}"), message);
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, host) in kvm.hosts.iter().enumerate() {
        let at = format!("{at}.hosts[{i}]");
        if !is_dns1123_label(&host.name) {
            problem(
                format!("{at}.name"),
                format!("{:?} is not a DNS-1123 label", host.name),
            );
        } else if !names.insert(host.name.as_str()) {
            problem(
                format!("{at}.name"),
                format!("duplicate host name {:?}", host.name),
            );
        }
        if host.uri.is_empty() {
            problem(
                format!("{at}.uri"),
                "required: the libvirt connection URI, e.g. qemu+ssh://root@host/system".into(),
            );
        } else if !host.uri.contains(":/") {
            problem(
                format!("{at}.uri"),
                format!(
                    "{:?} is not a libvirt URI (driver[+transport]://...)",
                    host.uri
                ),
            );
        }
        if host.base_image.is_empty() {
            problem(
                format!("{at}.baseImage"),
                "required: the volume in the storage pool the VMs' disks are based on".into(),
            );
        }
        if host.storage_pool.is_empty() {
            problem(format!("{at}.storagePool"), "must not be empty".into());
        }
        if host.network.as_deref().is_some_and(str::is_empty) {
            problem(
                format!("{at}.network"),
                "must not be empty: leave it out for the default".into(),
            );
        }
        if let Some(boot) = &host.direct_boot
            && boot.kernel.is_empty()
        {
            problem(
                format!("{at}.directBoot.kernel"),
                "required: the kernel's path on the host".into(),
            );
        }
        validate_address(host, &at, problem);
    }
}

fn validate_address(host: &KvmHost, at: &str, problem: &mut impl FnMut(String, String)) {
    let (mode, pool) = match &host.address {
        AddressSource::Dhcp {} => return,
        AddressSource::Static(pool) => {
            if pool.gateway.parse::<IpAddr>().is_err() {
                problem(
                    format!("{at}.address.static.gateway"),
                    format!("{:?} is not an IP address", pool.gateway),
                );
            }
            for (k, server) in pool.nameservers.iter().enumerate() {
                if server.parse::<IpAddr>().is_err() {
                    problem(
                        format!("{at}.address.static.nameservers[{k}]"),
                        format!("{server:?} is not an IP address"),
                    );
                }
            }
            if !(1..=32).contains(&pool.prefix_length) {
                problem(
                    format!("{at}.address.static.prefixLength"),
                    format!("{} is not an IPv4 prefix length (1-32)", pool.prefix_length),
                );
            }
            ("static", &pool.addresses)
        }
        AddressSource::HostPort(pool) => {
            if host.network.is_some() {
                problem(
                    format!("{at}.network"),
                    "a hostPort host's VMs use qemu's user-mode networking, not a libvirt \
                     network: remove network"
                        .into(),
                );
            }
            ("hostPort", &pool.addresses)
        }
    };
    if pool.is_empty() {
        problem(
            format!("{at}.address.{mode}.addresses"),
            "required: at least one address to hand out".into(),
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for (k, address) in pool.iter().enumerate() {
        if address.parse::<std::net::Ipv4Addr>().is_err() {
            problem(
                format!("{at}.address.{mode}.addresses[{k}]"),
                format!("{address:?} is not an IPv4 address"),
            );
        } else if !seen.insert(address) {
            problem(
                format!("{at}.address.{mode}.addresses[{k}]"),
                format!("duplicate address {address:?}"),
            );
        }
    }
}
