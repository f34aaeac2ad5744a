//! The provider against libvirt's test driver (`test:///default`): define, metadata, list,
//! undefine and volumes, through the real libvirt library. The test driver has no
//! `virStorageVolUpload`, so seeds go to a [`Recorder`] instead of a stream. Its domains are
//! in-memory records: the addresses it makes up for them are never probed or connected to.

use std::collections::BTreeMap;
use std::sync::Mutex;

use proxy_crd::Placement;

use super::*;
use crate::providers::settings::{HostPortPool, KvmHost, StaticPool};

const URI: &str = "test:///default";
/// The storage pool every test-driver connection has.
const POOL: &str = "default-pool";

/// Records what would have been uploaded, by volume name.
#[derive(Debug, Default)]
struct Recorder(Mutex<BTreeMap<String, Vec<u8>>>);

impl VolumeWriter for Recorder {
    fn write(
        &self,
        _: &Connect,
        volume: &StorageVol,
        data: &[u8],
    ) -> Result<(), virt::error::Error> {
        let name = volume.name()?;
        self.0.lock().unwrap().insert(name, data.to_vec());
        Ok(())
    }
}

fn host(name: &str, address: AddressSource) -> KvmHost {
    KvmHost {
        name: name.into(),
        uri: URI.into(),
        storage_pool: POOL.into(),
        network: None,
        base_image: format!("{name}-base.qcow2"),
        accelerator: crate::providers::settings::Accelerator::Kvm,
        direct_boot: None,
        address,
    }
}

/// A provider on one host of the test driver, whose base image volume exists, with the
/// recorder of its seeds and a connection of its own for looking at what it did.
fn provider(host: KvmHost) -> (KvmProvider, Arc<Recorder>, Connect) {
    let connection = Connect::open(Some(URI)).unwrap();
    let pool = connection.lookup_storage_pool_by_name(POOL).unwrap();
    if pool.lookup_storage_vol_by_name(&host.base_image).is_err() {
        StorageVol::create_xml(
            &pool,
            &format!(
                "<volume><name>{}</name><capacity>1073741824</capacity><target><format type='qcow2'/></target></volume>",
                host.base_image
            ),
            0,
        )
        .unwrap();
    }
    let recorder = Arc::new(Recorder::default());
    let settings = KvmSettings {
        hosts: vec![host],
        allowed_source_cidrs: vec!["10.0.0.0/8".into()],
    };
    let provider = KvmProvider::with_writer(settings, "install-1".into(), recorder.clone());
    (provider, recorder, connection)
}

fn request(instance: &str) -> CreateRequest {
    CreateRequest {
        provider: "lab".into(),
        instance_name: instance.into(),
        namespace: "crawl".into(),
        name: "p1".into(),
        uid: format!("uid-of-{instance}"),
        placement: None,
        cloud_init: None,
        port: 3128,
        credentials_secret: None,
        avoid_zones: Vec::new(),
    }
}

fn volumes(connection: &Connect) -> Vec<String> {
    let pool = connection.lookup_storage_pool_by_name(POOL).unwrap();
    pool.refresh(0).ok();
    pool.list_volumes().unwrap()
}

#[tokio::test]
async fn create_defines_and_starts_a_domain_with_our_metadata_its_disk_and_its_seed() {
    let (provider, recorder, connection) = provider(host("td-create", AddressSource::Dhcp {}));
    let id = provider
        .create(&request("proxy-td-create"), None)
        .await
        .unwrap();
    assert_eq!(id, "td-create/proxy-td-create");

    let domain = connection.lookup_domain_by_name("proxy-td-create").unwrap();
    assert!(domain.is_active().unwrap());
    let xml = domain.xml_desc(0).unwrap();
    assert!(xml.contains("volume='proxy-td-create.qcow2'"), "{xml}");
    assert!(xml.contains("volume='proxy-td-create-seed.iso'"), "{xml}");
    let metadata = metadata_of(&provider.hosts[0], &domain).unwrap().unwrap();
    assert_eq!(metadata.labels[labels::PROXY_UID], "uid-of-proxy-td-create");
    assert_eq!(metadata.labels[labels::INSTALLATION], "install-1");
    assert_eq!(metadata.labels[labels::MANAGED], "true");
    assert_eq!(metadata.address, None);

    let pool = connection.lookup_storage_pool_by_name(POOL).unwrap();
    let disk = pool
        .lookup_storage_vol_by_name("proxy-td-create.qcow2")
        .unwrap();
    let disk_xml = disk.xml_desc(0).unwrap();
    let base = pool
        .lookup_storage_vol_by_name("td-create-base.qcow2")
        .unwrap();
    assert!(
        disk_xml.contains(&format!("<path>{}</path>", base.path().unwrap())),
        "{disk_xml}"
    );
    assert!(volumes(&connection).contains(&"proxy-td-create-seed.iso".to_owned()));

    // The seed holds the squid cloud-config, since the Proxy brought no cloud-init.
    let iso = recorder.0.lock().unwrap()["proxy-td-create-seed.iso"].clone();
    assert_eq!(&iso[16 * 2048 + 40..16 * 2048 + 46], b"cidata");
    let user_data = squid::cloud_config(3128, &["10.0.0.0/8".into()], None);
    assert!(
        iso.windows(user_data.len())
            .any(|w| w == user_data.as_bytes())
    );

    // A retried create finds the domain: still one, same ID.
    assert_eq!(
        provider
            .create(&request("proxy-td-create"), None)
            .await
            .unwrap(),
        id
    );
    let ours = provider.list_by_tag().await.unwrap();
    assert_eq!(ours.iter().filter(|l| l.provider_id == id).count(), 1);
}

#[tokio::test]
async fn host_port_hosts_hand_out_one_address_each_and_report_it() {
    let pool = HostPortPool {
        addresses: vec!["127.0.77.2".into(), "127.0.77.3".into()],
    };
    let (provider, _, _connection) = provider(host("td-ports", AddressSource::HostPort(pool)));
    let a = provider
        .create(&request("proxy-td-ports-a"), None)
        .await
        .unwrap();
    let b = provider
        .create(&request("proxy-td-ports-b"), None)
        .await
        .unwrap();
    assert_eq!(
        provider.get(&a).await.unwrap(),
        InstanceState::Running("127.0.77.2".into())
    );
    assert_eq!(
        provider.get(&b).await.unwrap(),
        InstanceState::Running("127.0.77.3".into())
    );
    let full = provider
        .create(&request("proxy-td-ports-c"), None)
        .await
        .unwrap_err();
    assert_eq!(full.class, ErrorClass::Quota, "{full:?}");
    // A deleted VM's address is free again.
    provider.delete(&a).await.unwrap();
    let c = provider
        .create(&request("proxy-td-ports-c"), None)
        .await
        .unwrap();
    assert_eq!(
        provider.get(&c).await.unwrap(),
        InstanceState::Running("127.0.77.2".into())
    );
}

#[tokio::test]
async fn static_hosts_put_the_address_into_the_seeds_network_config() {
    let pool = StaticPool {
        addresses: vec!["192.0.2.10".into()],
        prefix_length: 24,
        gateway: "192.0.2.1".into(),
        nameservers: vec![],
    };
    let (provider, recorder, _connection) =
        provider(host("td-static", AddressSource::Static(pool)));
    let id = provider
        .create(&request("proxy-td-static"), None)
        .await
        .unwrap();
    assert_eq!(
        provider.get(&id).await.unwrap(),
        InstanceState::Running("192.0.2.10".into())
    );
    let iso = recorder.0.lock().unwrap()["proxy-td-static-seed.iso"].clone();
    let wanted = b"addresses: [\"192.0.2.10/24\"]";
    assert!(iso.windows(wanted.len()).any(|w| w == wanted));
}

#[tokio::test]
async fn get_maps_a_missing_and_a_stopped_domain() {
    let (provider, _, connection) = provider(host("td-state", AddressSource::Dhcp {}));
    assert_eq!(
        provider.get("td-state/proxy-td-none").await.unwrap(),
        InstanceState::NotFound
    );
    let id = provider
        .create(&request("proxy-td-state"), None)
        .await
        .unwrap();
    // The test driver makes up an address for a running domain: only its shape is checked.
    let InstanceState::Running(_) = provider.get(&id).await.unwrap() else {
        panic!("a running dhcp domain with a reported address is running");
    };
    connection
        .lookup_domain_by_name("proxy-td-state")
        .unwrap()
        .destroy()
        .unwrap();
    assert_eq!(provider.get(&id).await.unwrap(), InstanceState::Stopped);
}

#[tokio::test]
async fn delete_removes_the_domain_and_its_volumes_even_when_the_domain_is_gone() {
    let (provider, _, connection) = provider(host("td-delete", AddressSource::Dhcp {}));
    let id = provider
        .create(&request("proxy-td-delete"), None)
        .await
        .unwrap();
    provider.delete(&id).await.unwrap();
    assert_eq!(provider.get(&id).await.unwrap(), InstanceState::NotFound);
    let left: Vec<String> = volumes(&connection)
        .into_iter()
        .filter(|v| v.starts_with("proxy-td-delete"))
        .collect();
    assert_eq!(left, Vec::<String>::new());

    // Volumes without their domain (a create that failed half-way) go too.
    let pool = connection.lookup_storage_pool_by_name(POOL).unwrap();
    StorageVol::create_xml(
        &pool,
        &domain::seed_volume_xml("proxy-td-delete-seed.iso", 2048),
        0,
    )
    .unwrap();
    provider.delete(&id).await.unwrap();
    assert!(!volumes(&connection).contains(&"proxy-td-delete-seed.iso".to_owned()));
    // Deleting what is gone succeeds.
    provider.delete(&id).await.unwrap();
}

#[tokio::test]
async fn list_by_tag_reads_our_labels_back_and_skips_foreign_domains() {
    let (provider, _, connection) = provider(host("td-list", AddressSource::Dhcp {}));
    let id = provider
        .create(&request("proxy-td-list"), None)
        .await
        .unwrap();
    connection
        .define_domain_xml(
            "<domain type='test'><name>td-list-foreign</name><memory>1024</memory>\
             <os><type>hvm</type></os></domain>",
        )
        .unwrap();
    let listed = provider.list_by_tag().await.unwrap();
    let ours = listed.iter().find(|l| l.provider_id == id).unwrap();
    assert_eq!(ours.labels[labels::PROXY_UID], "uid-of-proxy-td-list");
    assert_eq!(ours.labels[labels::PROXY_NAME], "p1");
    let created = ours.created_at.unwrap();
    assert!(created > jiff::Timestamp::UNIX_EPOCH && created <= jiff::Timestamp::now());
    assert!(
        !listed
            .iter()
            .any(|l| l.provider_id.ends_with("/td-list-foreign"))
    );
}

#[tokio::test]
async fn placement_errors_name_the_field() {
    let (provider, _, _connection) = provider(host("td-place", AddressSource::Dhcp {}));
    let mut elsewhere = request("proxy-td-place");
    elsewhere.placement = Some(Placement {
        host: Some("nas1".into()),
        ..Placement::default()
    });
    let error = provider.create(&elsewhere, None).await.unwrap_err();
    assert_eq!(error.class, ErrorClass::Permanent);
    assert_eq!(
        error.message,
        "spec.placement.host: unknown host \"nas1\" (known: td-place)"
    );
    let mut huge = request("proxy-td-place");
    huge.placement = Some(Placement {
        machine_type: Some("huge".into()),
        ..Placement::default()
    });
    let error = provider.create(&huge, None).await.unwrap_err();
    assert_eq!(error.class, ErrorClass::Permanent);
    assert!(
        error
            .message
            .starts_with("spec.placement.machineType: unknown kvm machine type \"huge\"")
    );
    let mut no_image = request("proxy-td-place");
    no_image.placement = Some(Placement {
        image: Some("no-such-volume.qcow2".into()),
        ..Placement::default()
    });
    let error = provider.create(&no_image, None).await.unwrap_err();
    assert_eq!(error.class, ErrorClass::Permanent);
    assert!(
        error.message.starts_with("spec.placement.image: host td-place: base image \"no-such-volume.qcow2\" is not a volume"),
        "{error:?}"
    );
    // A host the providers config no longer names: the config refuses the operator, as a
    // host that lacks a pool or network does (core/src/classify/libvirt.rs).
    let error = provider.get("elsewhere/proxy-x").await.unwrap_err();
    assert_eq!(error.class, ErrorClass::Refused, "{error:?}");
    assert!(
        error
            .message
            .contains("host \"elsewhere\" is not in the providers config"),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_unreachable_host_is_a_transient_error_and_is_dialled_again() {
    let mut unreachable = host("td-down", AddressSource::Dhcp {});
    unreachable.uri = "qemu+unix:///session?socket=/nonexistent/libvirt-sock".into();
    let provider = KvmProvider::new(
        KvmSettings {
            hosts: vec![unreachable],
            allowed_source_cidrs: vec![],
        },
        "install-1".into(),
    );
    for _ in 0..2 {
        let error = provider.get("td-down/proxy-x").await.unwrap_err();
        assert_eq!(error.class, ErrorClass::Transient);
        assert!(
            error.message.starts_with("host td-down: cannot connect to"),
            "{error:?}"
        );
    }
}

#[test]
fn volume_format_is_read_from_the_target() {
    let xml = "<volume><target><path>/p</path><format type='qcow2'/></target>\
               <backingStore><format type='raw'/></backingStore></volume>";
    assert_eq!(volume_format(xml), "qcow2");
    assert_eq!(
        volume_format("<volume><target><path>/p</path></target></volume>"),
        "raw"
    );
    assert_eq!(
        volume_format("<volume><target><format type=\"raw\"/></target></volume>"),
        "raw"
    );
}

use super::super::ErrorClass;
