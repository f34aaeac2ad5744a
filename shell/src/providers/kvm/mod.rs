//! The `kvm` provider: one libvirt domain per Proxy, on the host `placement.host` names.
//!
//! A proxy VM is three libvirt objects, all named after the core's instance name: the domain,
//! its disk `<name>.qcow2` (a copy-on-write layer over the host's base image) and its NoCloud
//! seed `<name>-seed.iso` (the resolved cloud-init, or [`squid::cloud_config`] when the Proxy
//! has none), both in the host's storage pool. The domain's `<metadata>` carries the labels
//! and, for `static` and `hostPort` hosts, the address it was given ([`metadata`]): libvirt
//! itself is the record, so a restarted operator knows everything again. Provider IDs are
//! `<host>/<domain>`.
//!
//! The `virt` crate is blocking FFI: every libvirt call runs in `spawn_blocking`.

mod address;
mod domain;
mod hosts;
mod metadata;
mod seed;
mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use proxy_core::gc::ListedInstance;
use proxy_core::{CreateRequest, InstanceState, ProviderError};
use virt::connect::Connect;
use virt::domain::Domain;
use virt::error::ErrorNumber;
use virt::storage_pool::StoragePool;
use virt::storage_vol::StorageVol;

use self::domain::{DomainSpec, Nic};
use self::hosts::Host;
use self::metadata::Metadata;
use self::seed::Seed;
use self::state::Phase;
use super::{Checked, Provider, labels, squid};
use crate::providers::settings::{AddressSource, KvmSettings};

/// Writes bytes into a storage volume. The provider uploads through a libvirt stream
/// ([`StreamUpload`]); libvirt's test driver has no `virStorageVolUpload`, so the provider
/// tests put a writer of their own here.
pub trait VolumeWriter: Send + Sync + std::fmt::Debug {
    /// Writes `data` from offset 0 of `volume`.
    fn write(
        &self,
        connection: &Connect,
        volume: &StorageVol,
        data: &[u8],
    ) -> Result<(), virt::error::Error>;
}

/// `virStorageVolUpload` through a stream: works on local and remote hosts alike.
#[derive(Debug)]
pub struct StreamUpload;

impl VolumeWriter for StreamUpload {
    fn write(
        &self,
        connection: &Connect,
        volume: &StorageVol,
        data: &[u8],
    ) -> Result<(), virt::error::Error> {
        let stream = virt::stream::Stream::new(connection, 0)?;
        volume.upload(&stream, 0, data.len() as u64, 0)?;
        let mut sent = 0;
        while sent < data.len() {
            let n = match stream.send(&data[sent..]) {
                Ok(n) => usize::try_from(n).unwrap_or(0),
                Err(error) => {
                    let _ = stream.abort();
                    return Err(error);
                }
            };
            if n == 0 {
                // Nothing sent is a broken stream, not progress: counting it would leave a
                // hole in the seed ISO.
                let _ = stream.abort();
                return Err(virt::error::Error::last_error());
            }
            sent += n.min(data.len() - sent);
        }
        stream.finish()
    }
}

/// A machine type: its vCPUs and memory.
struct Flavour {
    vcpus: u32,
    memory_mib: u32,
}

/// The machine types `placement.machineType` may name (default `small`).
const FLAVOURS: [(&str, Flavour); 3] = [
    (
        "small",
        Flavour {
            vcpus: 1,
            memory_mib: 512,
        },
    ),
    (
        "medium",
        Flavour {
            vcpus: 2,
            memory_mib: 1024,
        },
    ),
    (
        "large",
        Flavour {
            vcpus: 4,
            memory_mib: 2048,
        },
    ),
];

/// Creates proxy VMs on libvirt hosts.
#[derive(Debug)]
pub struct KvmProvider {
    hosts: Vec<Arc<Host>>,
    allowed_source_cidrs: Vec<String>,
    installation: String,
    writer: Arc<dyn VolumeWriter>,
}

impl KvmProvider {
    /// A provider for these hosts, labelling its domains as made by `installation`. No host
    /// is dialled yet.
    pub fn new(settings: KvmSettings, installation: String) -> Self {
        Self::with_writer(settings, installation, Arc::new(StreamUpload))
    }

    /// A provider that writes its seed ISOs with `writer`.
    pub fn with_writer(
        settings: KvmSettings,
        installation: String,
        writer: Arc<dyn VolumeWriter>,
    ) -> Self {
        Self {
            hosts: settings
                .hosts
                .into_iter()
                .map(|h| Arc::new(Host::new(h)))
                .collect(),
            allowed_source_cidrs: settings.allowed_source_cidrs,
            installation,
            writer,
        }
    }

    /// The host a Proxy is placed on: `placement.host`, or the first.
    fn placed(&self, request: &CreateRequest) -> Result<&Arc<Host>, ProviderError> {
        match request.placement.as_ref().and_then(|p| p.host.as_deref()) {
            None => self
                .hosts
                .first()
                .ok_or_else(|| ProviderError::permanent("the kvm provider has no hosts")),
            Some(name) => self.host(name).ok_or_else(|| {
                ProviderError::permanent(format!(
                    "spec.placement.host: unknown host {name:?} (known: {})",
                    self.host_names()
                ))
            }),
        }
    }

    fn host(&self, name: &str) -> Option<&Arc<Host>> {
        self.hosts.iter().find(|h| h.settings.name == name)
    }

    fn host_names(&self) -> String {
        let names: Vec<&str> = self
            .hosts
            .iter()
            .map(|h| h.settings.name.as_str())
            .collect();
        names.join(", ")
    }

    /// The host and domain of a provider ID.
    fn locate<'a>(&self, provider_id: &'a str) -> Result<(&Arc<Host>, &'a str), ProviderError> {
        let (host, name) = provider_id.split_once('/').ok_or_else(|| {
            ProviderError::permanent(format!(
                "provider ID {provider_id:?} is not <host>/<domain>"
            ))
        })?;
        // The config no longer names the host: the operator is refused by its own config,
        // which only a change of it can fix (the provider goes unhealthy, saying so).
        let host = self.host(host).ok_or_else(|| {
            ProviderError::refused(format!(
                "provider ID {provider_id:?}: host {host:?} is not in the providers config (known: {})",
                self.host_names()
            ))
        })?;
        Ok((host, name))
    }

    /// The labels of a Proxy's domain.
    fn labels(&self, request: &CreateRequest) -> std::collections::BTreeMap<String, String> {
        [
            (labels::MANAGED, labels::MANAGED_VALUE),
            (labels::INSTALLATION, self.installation.as_str()),
            (labels::PROXY_UID, request.uid.as_str()),
            (labels::PROXY_NAME, request.name.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }
}

/// Runs `call` with `host`'s connection on the blocking pool.
async fn blocking<T: Send + 'static>(
    host: &Arc<Host>,
    call: impl FnOnce(&Host, &Connect) -> Result<T, ProviderError> + Send + 'static,
) -> Result<T, ProviderError> {
    let host = host.clone();
    tokio::task::spawn_blocking(move || host.with(|connection| call(&host, connection)))
        .await
        .map_err(|e| ProviderError::transient(format!("libvirt call did not finish: {e}")))?
}

fn is(error: &virt::error::Error, number: ErrorNumber) -> bool {
    error.code() == virt::enumutil::Enum::Known(number)
}

/// The domain named `name`, or `None` when there is none.
fn find_domain(
    host: &Host,
    connection: &Connect,
    name: &str,
) -> Result<Option<Domain>, ProviderError> {
    match connection.lookup_domain_by_name(name) {
        Ok(domain) => Ok(Some(domain)),
        Err(e) if is(&e, ErrorNumber::NoDomain) => Ok(None),
        Err(e) => Err(host.error("look up domain", &e)),
    }
}

/// Our metadata of `domain`, or `None` when it carries none (not ours).
fn metadata_of(host: &Host, domain: &Domain) -> Result<Option<Metadata>, ProviderError> {
    match domain.metadata(
        virt::sys::VIR_DOMAIN_METADATA_ELEMENT as i32,
        Some(metadata::NAMESPACE),
        0,
    ) {
        Ok(xml) => Ok(Metadata::from_xml(&xml)),
        Err(e) if is(&e, ErrorNumber::NoDomainMetadata) => Ok(None),
        Err(e) => Err(host.error("read domain metadata", &e)),
    }
}

fn pool_of(host: &Host, connection: &Connect) -> Result<StoragePool, ProviderError> {
    connection
        .lookup_storage_pool_by_name(&host.settings.storage_pool)
        .map_err(|e| {
            host.error(
                &format!("storage pool {:?}", host.settings.storage_pool),
                &e,
            )
        })
}

fn find_volume(
    host: &Host,
    pool: &StoragePool,
    name: &str,
) -> Result<Option<StorageVol>, ProviderError> {
    match pool.lookup_storage_vol_by_name(name) {
        Ok(volume) => Ok(Some(volume)),
        Err(e) if is(&e, ErrorNumber::NoStorageVolume) => Ok(None),
        Err(e) => Err(host.error(&format!("look up volume {name:?}"), &e)),
    }
}

fn disk_name(domain: &str) -> String {
    format!("{domain}.qcow2")
}

fn seed_name(domain: &str) -> String {
    format!("{domain}-seed.iso")
}

/// The format of a volume, from its XML (`<target><format type='qcow2'/>`); raw when the XML
/// names none.
fn volume_format(xml: &str) -> String {
    xml.split_once("<target>")
        .and_then(|(_, target)| target.split_once("<format type="))
        .and_then(|(_, rest)| rest.get(1..))
        .and_then(|rest| rest.split(['\'', '"']).next())
        .filter(|format| !format.is_empty())
        .unwrap_or("raw")
        .to_owned()
}

/// Every address held by a domain on this host, from their metadata.
fn used_addresses(host: &Host, connection: &Connect) -> Result<BTreeSet<String>, ProviderError> {
    let domains = connection
        .list_all_domains(0)
        .map_err(|e| host.error("list domains", &e))?;
    let mut used = BTreeSet::new();
    for domain in &domains {
        if let Some(address) = metadata_of(host, domain)?.and_then(|m| m.address) {
            used.insert(address);
        }
    }
    Ok(used)
}

/// What a create needs, resolved before any libvirt call.
struct Plan {
    name: String,
    port: i32,
    flavour: &'static Flavour,
    base_image: String,
    /// Whether `base_image` is the Proxy's `placement.image` (else the host's).
    image_from_placement: bool,
    user_data: String,
    labels: std::collections::BTreeMap<String, String>,
}

impl Plan {
    /// Creates the VM (or starts the one an earlier attempt left defined).
    fn create(
        self,
        host: &Host,
        connection: &Connect,
        writer: &dyn VolumeWriter,
    ) -> Result<(), ProviderError> {
        if let Some(domain) = find_domain(host, connection, &self.name)? {
            if !domain
                .is_active()
                .map_err(|e| host.error("domain state", &e))?
            {
                domain
                    .create()
                    .map_err(|e| host.error("start domain", &e))?;
            }
            return Ok(());
        }
        let _allocating = host
            .allocation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let settings = &host.settings;
        let address = match settings.address.pool() {
            None => None,
            Some(pool) => Some(
                address::allocate(pool, &used_addresses(host, connection)?).ok_or_else(|| {
                    ProviderError::quota(format!(
                        "host {}: every address of its {} pool is in use",
                        settings.name,
                        pool.len()
                    ))
                })?,
            ),
        };
        let mac = domain::mac_of(&self.name);
        let network_config = match (&settings.address, &address) {
            (AddressSource::Static(pool), Some(address)) => {
                Some(address::network_config(pool, address, &mac))
            }
            _ => None,
        };
        let pool = pool_of(host, connection)?;
        let disk = disk_name(&self.name);
        if find_volume(host, &pool, &disk)?.is_none() {
            let base = find_volume(host, &pool, &self.base_image)?.ok_or_else(|| {
                let missing = format!(
                    "host {}: base image {:?} is not a volume of storage pool {:?}",
                    settings.name, self.base_image, settings.storage_pool
                );
                // The Proxy's own image is the Proxy's to fix; the host's may yet be uploaded.
                if self.image_from_placement {
                    ProviderError::permanent(format!("spec.placement.image: {missing}"))
                } else {
                    ProviderError::transient(missing)
                }
            })?;
            let capacity = base
                .info()
                .map_err(|e| host.error("base image", &e))?
                .capacity;
            let backing = base.path().map_err(|e| host.error("base image", &e))?;
            let format =
                volume_format(&base.xml_desc(0).map_err(|e| host.error("base image", &e))?);
            StorageVol::create_xml(
                &pool,
                &domain::disk_volume_xml(&disk, capacity, &backing, &format),
                0,
            )
            .map_err(|e| host.error(&format!("create volume {disk:?}"), &e))?;
        }
        let seed = seed_name(&self.name);
        // A seed left by an earlier attempt may be partly written: write it again.
        if let Some(stale) = find_volume(host, &pool, &seed)? {
            stale
                .delete(0)
                .map_err(|e| host.error(&format!("delete volume {seed:?}"), &e))?;
        }
        let iso = Seed::new(&self.name, self.user_data, network_config).iso();
        let volume =
            StorageVol::create_xml(&pool, &domain::seed_volume_xml(&seed, iso.len() as u64), 0)
                .map_err(|e| host.error(&format!("create volume {seed:?}"), &e))?;
        writer
            .write(connection, &volume, &iso)
            .map_err(|e| host.error(&format!("upload the seed ISO {seed:?}"), &e))?;
        let metadata = Metadata {
            labels: self.labels,
            created_at: jiff::Timestamp::now().to_string(),
            address: address.clone(),
        };
        let nic = match (settings.network(), address) {
            (None, Some(address)) => Nic::HostForward {
                address,
                port: self.port,
            },
            (network, _) => Nic::Network {
                network: network.unwrap_or("default").to_owned(),
            },
        };
        let xml = DomainSpec {
            name: self.name.clone(),
            domain_type: domain::domain_type(&settings.uri, settings.accelerator),
            memory_mib: self.flavour.memory_mib,
            vcpus: self.flavour.vcpus,
            pool: settings.storage_pool.clone(),
            disk,
            seed,
            mac,
            nic,
            direct_boot: settings.direct_boot.clone(),
            metadata: metadata.to_xml(),
        }
        .xml();
        let domain = connection
            .define_domain_xml(&xml)
            .map_err(|e| host.error("define domain", &e))?;
        domain.create().map_err(|e| host.error("start domain", &e))
    }
}

/// The state of the domain `name`, with its address when it runs.
fn state_of(host: &Host, connection: &Connect, name: &str) -> Result<InstanceState, ProviderError> {
    let Some(domain) = find_domain(host, connection, name)? else {
        return Ok(InstanceState::NotFound);
    };
    let (state, _) = domain.state().map_err(|e| host.error("domain state", &e))?;
    match state::phase_of(state) {
        Phase::Provisioning => Ok(InstanceState::Provisioning),
        Phase::Stopped => Ok(InstanceState::Stopped),
        Phase::Terminated => Ok(InstanceState::Terminated),
        Phase::Running => {
            let address = match host.settings.address {
                AddressSource::Dhcp {} => dhcp_address(&domain, &domain::mac_of(name)),
                _ => metadata_of(host, &domain)?.and_then(|m| m.address),
            };
            Ok(address.map_or(InstanceState::Provisioning, InstanceState::Running))
        }
    }
}

/// The address of a running `dhcp` domain: the network's leases, then the host's ARP table.
/// Not known yet (no lease, or a source this host cannot ask) is not an error.
fn dhcp_address(domain: &Domain, mac: &str) -> Option<String> {
    [
        virt::sys::VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE,
        virt::sys::VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP,
    ]
    .into_iter()
    .find_map(|source| {
        let interfaces = domain.interface_addresses(source, 0).ok()?;
        address::ipv4_of(&interfaces, mac)
    })
}

/// Removes the domain `name` and its volumes; what is already gone is skipped.
fn remove(host: &Host, connection: &Connect, name: &str) -> Result<(), ProviderError> {
    if let Some(domain) = find_domain(host, connection, name)? {
        if domain
            .is_active()
            .map_err(|e| host.error("domain state", &e))?
        {
            match domain.destroy() {
                Ok(()) => {}
                // It stopped (or went away) between the two calls.
                Err(e)
                    if is(&e, ErrorNumber::OperationInvalid) || is(&e, ErrorNumber::NoDomain) => {}
                Err(e) => return Err(host.error("stop domain", &e)),
            }
        }
        match domain.undefine() {
            Ok(()) => {}
            Err(e) if is(&e, ErrorNumber::NoDomain) => {}
            Err(e) => return Err(host.error("undefine domain", &e)),
        }
    }
    let pool = pool_of(host, connection)?;
    for volume in [disk_name(name), seed_name(name)] {
        if let Some(found) = find_volume(host, &pool, &volume)? {
            match found.delete(0) {
                Ok(()) => {}
                Err(e) if is(&e, ErrorNumber::NoStorageVolume) => {}
                Err(e) => return Err(host.error(&format!("delete volume {volume:?}"), &e)),
            }
        }
    }
    Ok(())
}

/// Every domain of this host that carries our managed label.
fn listed(host: &Host, connection: &Connect) -> Result<Vec<ListedInstance>, ProviderError> {
    let domains = connection
        .list_all_domains(0)
        .map_err(|e| host.error("list domains", &e))?;
    let mut found = Vec::new();
    for domain in &domains {
        let Some(metadata) = metadata_of(host, domain)? else {
            continue;
        };
        if metadata.labels.get(labels::MANAGED).map(String::as_str) != Some(labels::MANAGED_VALUE) {
            continue;
        }
        let name = domain.name().map_err(|e| host.error("domain name", &e))?;
        found.push(ListedInstance {
            provider_id: format!("{}/{name}", host.settings.name),
            labels: metadata.labels,
            created_at: metadata.created_at.parse().ok(),
            // A domain's delete is done when the call returns.
            deleting: false,
        });
    }
    Ok(found)
}

#[async_trait]
impl Provider for KvmProvider {
    async fn create(
        &self,
        request: &CreateRequest,
        passwd: Option<&str>,
    ) -> Result<String, ProviderError> {
        let host = self.placed(request)?;
        let placement = request.placement.as_ref();
        let machine_type = placement
            .and_then(|p| p.machine_type.as_deref())
            .unwrap_or("small");
        let flavour = FLAVOURS
            .iter()
            .find(|(name, _)| *name == machine_type)
            .map(|(_, flavour)| flavour)
            .ok_or_else(|| {
                let known: Vec<&str> = FLAVOURS.iter().map(|(name, _)| *name).collect();
                ProviderError::permanent(format!(
                    "spec.placement.machineType: unknown kvm machine type {machine_type:?} (known: {})",
                    known.join(", ")
                ))
            })?;
        let plan = Plan {
            name: request.instance_name.clone(),
            port: request.port,
            flavour,
            base_image: placement
                .and_then(|p| p.image.clone())
                .unwrap_or_else(|| host.settings.base_image.clone()),
            image_from_placement: placement.is_some_and(|p| p.image.is_some()),
            user_data: request.cloud_init.clone().unwrap_or_else(|| {
                squid::cloud_config(request.port, &self.allowed_source_cidrs, passwd)
            }),
            labels: self.labels(request),
        };
        let writer = self.writer.clone();
        blocking(host, move |host, connection| {
            plan.create(host, connection, writer.as_ref())
        })
        .await?;
        Ok(format!("{}/{}", host.settings.name, request.instance_name))
    }

    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError> {
        let (host, name) = self.locate(provider_id)?;
        let name = name.to_owned();
        blocking(host, move |host, connection| {
            state_of(host, connection, &name)
        })
        .await
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let (host, name) = self.locate(provider_id)?;
        let name = name.to_owned();
        blocking(host, move |host, connection| {
            remove(host, connection, &name)
        })
        .await
    }

    /// The host in the ID (`<host>/<domain>`): a kvm provider's hosts are its zones.
    fn zone_of(&self, provider_id: &str) -> Option<String> {
        provider_id.split_once('/').map(|(host, _)| host.to_owned())
    }

    async fn list_by_tag(&self) -> Result<Vec<ListedInstance>, ProviderError> {
        let mut all = Vec::new();
        for host in &self.hosts {
            all.extend(blocking(host, listed).await?);
        }
        Ok(all)
    }

    /// Lists the domains of every host: each host answers (an error names the host).
    async fn check(&self) -> Checked {
        Checked::of_listing(self.list_by_tag().await, &self.installation)
    }
}
