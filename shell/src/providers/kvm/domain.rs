//! The libvirt domain XML of one proxy VM, built from plain values (no libvirt here).

use crate::providers::settings::{Accelerator, DirectBoot};

/// The namespace of `<qemu:commandline>`.
const QEMU_NAMESPACE: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// How a VM is networked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nic {
    /// Attached to a libvirt network.
    Network {
        /// The network's name.
        network: String,
    },
    /// qemu's user-mode networking, with `address:port` on the host forwarded to `port` in
    /// the guest. libvirt 9's own `<portForward>` needs the passt backend, which Debian 12's
    /// libvirt refuses, so the NIC comes in through `<qemu:commandline>`.
    HostForward {
        /// The host address forwarded.
        address: String,
        /// The port, on the host and in the guest.
        port: i32,
    },
}

/// Everything a domain XML says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSpec {
    /// The domain's name (the core's instance name).
    pub name: String,
    /// `<domain type=...>`: `kvm`, `qemu`, or `test` for libvirt's test driver.
    pub domain_type: &'static str,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// The storage pool of both disks.
    pub pool: String,
    /// The root disk volume (qcow2).
    pub disk: String,
    /// The NoCloud seed volume (raw ISO 9660).
    pub seed: String,
    /// The NIC's MAC address.
    pub mac: String,
    /// The NIC.
    pub nic: Nic,
    /// A kernel to boot directly, if any.
    pub direct_boot: Option<DirectBoot>,
    /// Our `<metadata>` element ([`super::metadata::Metadata::to_xml`]).
    pub metadata: String,
}

/// The `<domain type=...>` of an accelerator; libvirt's test driver knows only `test`.
pub fn domain_type(uri: &str, accelerator: Accelerator) -> &'static str {
    if uri.starts_with("test:") || uri.starts_with("test+") {
        return "test";
    }
    match accelerator {
        Accelerator::Kvm => "kvm",
        Accelerator::Tcg => "qemu",
    }
}

/// A locally administered MAC address derived from the domain name, so that a static
/// network-config can match the NIC it configures.
pub fn mac_of(name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    format!(
        "52:54:00:{:02x}:{:02x}:{:02x}",
        digest[0], digest[1], digest[2]
    )
}

/// Escapes text for an XML attribute or element.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

impl DomainSpec {
    /// The domain XML.
    pub fn xml(&self) -> String {
        let e = escape;
        let mut xml = format!(
            "<domain type='{}' xmlns:qemu='{QEMU_NAMESPACE}'>\n  <name>{}</name>\n  \
             <metadata>{}</metadata>\n  <memory unit='MiB'>{}</memory>\n  <vcpu>{}</vcpu>\n  \
             <os>\n    <type arch='x86_64'>hvm</type>\n",
            self.domain_type,
            e(&self.name),
            self.metadata,
            self.memory_mib,
            self.vcpus
        );
        match &self.direct_boot {
            Some(boot) => {
                xml.push_str(&format!("    <kernel>{}</kernel>\n", e(&boot.kernel)));
                if let Some(initrd) = &boot.initrd {
                    xml.push_str(&format!("    <initrd>{}</initrd>\n", e(initrd)));
                }
                xml.push_str(&format!("    <cmdline>{}</cmdline>\n", e(&boot.cmdline)));
            }
            None => xml.push_str("    <boot dev='hd'/>\n"),
        }
        xml.push_str("  </os>\n  <on_crash>destroy</on_crash>\n  <devices>\n");
        for (volume, format, target, readonly) in [
            (&self.disk, "qcow2", "vda", ""),
            (&self.seed, "raw", "vdb", "<readonly/>"),
        ] {
            xml.push_str(&format!(
                "    <disk type='volume' device='disk'><driver name='qemu' type='{format}'/>\
                 <source pool='{}' volume='{}'/><target dev='{target}' bus='virtio'/>{readonly}</disk>\n",
                e(&self.pool),
                e(volume)
            ));
        }
        if let Nic::Network { network } = &self.nic {
            xml.push_str(&format!(
                "    <interface type='network'><source network='{}'/><mac address='{}'/>\
                 <model type='virtio'/></interface>\n",
                e(network),
                self.mac
            ));
        }
        xml.push_str("    <serial type='pty'/>\n    <console type='pty'/>\n  </devices>\n");
        if let Nic::HostForward { address, port } = &self.nic {
            // An explicit PCI slot: without one, qemu's first free slot can clash with the
            // devices libvirt places.
            let args = [
                "-netdev".to_owned(),
                format!("user,id=proxynet,hostfwd=tcp:{address}:{port}-:{port}"),
                "-device".to_owned(),
                format!(
                    "virtio-net-pci,netdev=proxynet,mac={},bus=pci.0,addr=0x10",
                    self.mac
                ),
            ];
            xml.push_str("  <qemu:commandline>\n");
            for arg in args {
                xml.push_str(&format!("    <qemu:arg value='{}'/>\n", e(&arg)));
            }
            xml.push_str("  </qemu:commandline>\n");
        }
        xml.push_str("</domain>\n");
        xml
    }
}

/// The volume XML of a VM's root disk: a qcow2 layer over the base image at `backing`.
pub fn disk_volume_xml(name: &str, capacity: u64, backing: &str, backing_format: &str) -> String {
    format!(
        "<volume><name>{}</name><capacity unit='bytes'>{capacity}</capacity>\
         <target><format type='qcow2'/></target><backingStore><path>{}</path>\
         <format type='{}'/></backingStore></volume>",
        escape(name),
        escape(backing),
        escape(backing_format)
    )
}

/// The volume XML of a VM's seed ISO, `capacity` bytes of raw data.
pub fn seed_volume_xml(name: &str, capacity: u64) -> String {
    format!(
        "<volume><name>{}</name><capacity unit='bytes'>{capacity}</capacity>\
         <target><format type='raw'/></target></volume>",
        escape(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nic: Nic, direct_boot: Option<DirectBoot>) -> DomainSpec {
        DomainSpec {
            name: "proxy-abc".into(),
            domain_type: "qemu",
            memory_mib: 512,
            vcpus: 1,
            pool: "pool".into(),
            disk: "proxy-abc.qcow2".into(),
            seed: "proxy-abc-seed.iso".into(),
            mac: "52:54:00:01:02:03".into(),
            nic,
            direct_boot,
            metadata: "<po:instance xmlns:po='urn:x'>{}</po:instance>".into(),
        }
    }

    #[test]
    fn domain_xml_table() {
        let network = Nic::Network {
            network: "default".into(),
        };
        let forward = Nic::HostForward {
            address: "127.0.77.2".into(),
            port: 3128,
        };
        let boot = DirectBoot {
            kernel: "/k/vmlinuz".into(),
            initrd: Some("/k/initrd.img".into()),
            cmdline: "root=/dev/vda console=ttyS0".into(),
        };
        // (spec, fragments the XML must contain, fragments it must not)
        let cases: [(DomainSpec, &[&str], &[&str]); 3] = [
            (
                spec(network.clone(), None),
                &[
                    "<domain type='qemu'",
                    "<name>proxy-abc</name>",
                    "<metadata><po:instance xmlns:po='urn:x'>{}</po:instance></metadata>",
                    "<memory unit='MiB'>512</memory>",
                    "<boot dev='hd'/>",
                    "<source pool='pool' volume='proxy-abc.qcow2'/><target dev='vda' bus='virtio'/></disk>",
                    "<driver name='qemu' type='raw'/><source pool='pool' volume='proxy-abc-seed.iso'/><target dev='vdb' bus='virtio'/><readonly/>",
                    "<interface type='network'><source network='default'/><mac address='52:54:00:01:02:03'/>",
                ],
                &["qemu:commandline>", "<kernel>"],
            ),
            (
                spec(forward.clone(), None),
                &[
                    "<qemu:arg value='user,id=proxynet,hostfwd=tcp:127.0.77.2:3128-:3128'/>",
                    "<qemu:arg value='virtio-net-pci,netdev=proxynet,mac=52:54:00:01:02:03,bus=pci.0,addr=0x10'/>",
                ],
                &["<interface"],
            ),
            (
                spec(forward, Some(boot)),
                &[
                    "<kernel>/k/vmlinuz</kernel>",
                    "<initrd>/k/initrd.img</initrd>",
                    "<cmdline>root=/dev/vda console=ttyS0</cmdline>",
                ],
                &["<boot dev="],
            ),
        ];
        for (spec, present, absent) in cases {
            let xml = spec.xml();
            for fragment in present {
                assert!(xml.contains(fragment), "{fragment:?} missing from\n{xml}");
            }
            for fragment in absent {
                assert!(!xml.contains(fragment), "{fragment:?} in\n{xml}");
            }
        }
    }

    #[test]
    fn names_and_paths_are_escaped() {
        let mut odd = spec(
            Nic::Network {
                network: "n'<&".into(),
            },
            None,
        );
        odd.pool = "p'o".into();
        let xml = odd.xml();
        assert!(
            xml.contains("<source network='n&apos;&lt;&amp;'/>"),
            "{xml}"
        );
        assert!(xml.contains("pool='p&apos;o'"), "{xml}");
        assert!(disk_volume_xml("d", 1, "/b/a'se", "raw").contains("<path>/b/a&apos;se</path>"));
    }

    #[test]
    fn domain_type_and_mac() {
        assert_eq!(domain_type("test:///default", Accelerator::Kvm), "test");
        assert_eq!(domain_type("qemu:///system", Accelerator::Kvm), "kvm");
        assert_eq!(
            domain_type("qemu+unix:///session?socket=/s", Accelerator::Tcg),
            "qemu"
        );
        let mac = mac_of("proxy-abc");
        assert!(mac.starts_with("52:54:00:") && mac.len() == 17, "{mac}");
        assert_eq!(mac, mac_of("proxy-abc"));
        assert_ne!(mac, mac_of("proxy-abd"));
    }
}
