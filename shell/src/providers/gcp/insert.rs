//! The body of `instances.insert` for one Proxy: a pure function of the create request, the
//! provider's settings and the installation, so every field it sets is table-tested here.
//!
//! What a VM gets: the machine type and boot image from `placement` (else the settings), one
//! boot disk that is deleted with the VM, one network interface with one `ONE_TO_ONE_NAT`
//! access config (its own external IP: the point of a fleet), the network tags the firewall
//! rule targets, our GC labels, and `metadata.user-data` = the Proxy's resolved cloud-init,
//! or squid's generated one when it has none. Placement errors name the Proxy's field.

use google_cloud_compute_v1::model::{
    AccessConfig, AttachedDisk, AttachedDiskInitializeParams, Instance, Metadata, NetworkInterface,
    Scheduling, Tags, access_config, metadata, scheduling,
};
use proxy_core::{CreateRequest, ProviderError};

use super::id::InstanceId;
use super::labels;
use crate::providers::settings::{GCP_PARAMETERS, GcpSettings, unknown_parameter};
use crate::providers::squid;

/// The zone of a Proxy without `placement.zone`: the first of `zones` that had no stockout
/// lately (`avoid`, oldest first), or, when all had one, the one that ran out longest ago.
/// Karpenter's offering fallback is the model: a zone out of capacity is skipped, not waited
/// for.
pub fn unpinned_zone(zones: &[String], avoid: &[String]) -> Option<String> {
    zones
        .iter()
        .find(|zone| !avoid.contains(zone))
        .or_else(|| avoid.iter().find(|zone| zones.contains(zone)))
        .or_else(|| zones.first())
        .cloned()
}

/// Where the VM goes and what to insert there; `passwd` is the proxy's credentials for the
/// generated cloud-init (see [`squid::cloud_config`]).
pub fn body(
    request: &CreateRequest,
    passwd: Option<&str>,
    settings: &GcpSettings,
    installation: &str,
) -> Result<(InstanceId, Instance), ProviderError> {
    let placement = request.placement.clone().unwrap_or_default();
    if let Some(unknown) = unknown_parameter("gcp", &GCP_PARAMETERS, Some(&placement)) {
        return Err(ProviderError::permanent(unknown));
    }
    let zone = match placement.zone {
        Some(zone) if settings.zones.contains(&zone) => zone,
        Some(zone) => {
            return Err(ProviderError::permanent(format!(
                "spec.placement.zone: {zone:?} is not one of provider {:?}'s zones ({})",
                request.provider,
                settings.zones.join(", ")
            )));
        }
        None => unpinned_zone(&settings.zones, &request.avoid_zones).ok_or_else(|| {
            ProviderError::permanent(format!("provider {:?} has no zones", request.provider))
        })?,
    };
    let machine_type = placement
        .machine_type
        .unwrap_or_else(|| settings.machine_type.clone());
    let machine_type = if machine_type.contains('/') {
        machine_type
    } else {
        format!("zones/{zone}/machineTypes/{machine_type}")
    };
    let mut disk = AttachedDiskInitializeParams::new()
        .set_source_image(placement.image.unwrap_or_else(|| settings.image.clone()));
    if let Some(size) = placement.parameters.get("diskSizeGb") {
        let size: i64 = size.parse().ok().filter(|gb| *gb > 0).ok_or_else(|| {
            ProviderError::permanent(format!(
                "spec.placement.parameters.diskSizeGb: {size:?} is not a positive number of GB"
            ))
        })?;
        disk = disk.set_disk_size_gb(size);
    }
    let user_data = request.cloud_init.clone().unwrap_or_else(|| {
        squid::cloud_config(request.port, &settings.allowed_source_cidrs, passwd)
    });
    let mut interface = NetworkInterface::new()
        .set_network(resource_url(
            &settings.project,
            "global/networks",
            &settings.network,
        ))
        .set_access_configs([AccessConfig::new()
            .set_name("External NAT")
            .set_type(access_config::Type::OneToOneNat)]);
    if let Some(subnetwork) = &settings.subnetwork {
        let region = region_of(&zone);
        interface = interface.set_subnetwork(resource_url(
            &settings.project,
            &format!("regions/{region}/subnetworks"),
            subnetwork,
        ));
    }
    let mut instance = Instance::new()
        .set_name(request.instance_name.clone())
        .set_machine_type(machine_type)
        .set_disks([AttachedDisk::new()
            .set_boot(true)
            .set_auto_delete(true)
            .set_initialize_params(disk)])
        .set_network_interfaces([interface])
        .set_metadata(
            Metadata::new().set_items([metadata::Items::new()
                .set_key("user-data")
                .set_value(user_data)]),
        )
        .set_tags(Tags::new().set_items(settings.network_tags.clone()))
        .set_labels(labels::for_instance(
            &request.uid,
            installation,
            &request.name,
        ));
    if let Some(model) = placement.parameters.get("provisioningModel") {
        let model = match model.as_str() {
            "STANDARD" => scheduling::ProvisioningModel::Standard,
            "SPOT" => scheduling::ProvisioningModel::Spot,
            other => {
                return Err(ProviderError::permanent(format!(
                    "spec.placement.parameters.provisioningModel: {other:?} is not STANDARD or SPOT"
                )));
            }
        };
        instance = instance.set_scheduling(Scheduling::new().set_provisioning_model(model));
    }
    let id = InstanceId {
        zone,
        name: request.instance_name.clone(),
    };
    Ok((id, instance))
}

/// `name` as a project-relative resource URL under `collection`, unless it is a URL already.
fn resource_url(project: &str, collection: &str, name: &str) -> String {
    if name.contains('/') {
        name.to_owned()
    } else {
        format!("projects/{project}/{collection}/{name}")
    }
}

/// The region of a zone: `europe-west1-b` → `europe-west1`.
fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proxy_crd::Placement;

    use super::*;
    use crate::providers::settings::{GcpBudget, GcpCredentials};

    fn settings() -> GcpSettings {
        GcpSettings {
            project: "crawl-1".into(),
            zones: vec!["europe-west1-b".into(), "europe-west1-c".into()],
            machine_type: "e2-small".into(),
            image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
            network: "default".into(),
            subnetwork: None,
            network_tags: vec!["crawl-proxy".into()],
            allowed_source_cidrs: vec!["203.0.113.0/24".into()],
            endpoint: None,
            credentials: GcpCredentials::Adc,
            request_timeout_seconds: 30,
            budget: GcpBudget::default(),
        }
    }

    fn request(placement: Option<Placement>, cloud_init: Option<&str>) -> CreateRequest {
        CreateRequest {
            provider: "gcp-eu".into(),
            instance_name: "proxy-abcdefghijklmnop".into(),
            namespace: "crawl".into(),
            name: "shop.proxy-1".into(),
            uid: "0b6c3f1e-4d2a-4c1b-9e8f-7a6b5c4d3e2f".into(),
            placement,
            cloud_init: cloud_init.map(str::to_owned),
            port: 3128,
            credentials_secret: None,
            avoid_zones: Vec::new(),
        }
    }

    fn user_data(instance: &Instance) -> &str {
        let items = &instance.metadata.as_ref().unwrap().items;
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].key.as_deref(), Some("user-data"));
        items[0].value.as_deref().unwrap()
    }

    #[test]
    fn defaults_make_a_vm_with_its_own_external_ip() {
        let (id, vm) = body(&request(None, None), None, &settings(), "inst-1").unwrap();
        assert_eq!(
            id.to_string(),
            "zones/europe-west1-b/instances/proxy-abcdefghijklmnop"
        );
        assert_eq!(vm.name.as_deref(), Some("proxy-abcdefghijklmnop"));
        assert_eq!(
            vm.machine_type.as_deref(),
            Some("zones/europe-west1-b/machineTypes/e2-small")
        );
        assert_eq!(vm.disks.len(), 1);
        let disk = &vm.disks[0];
        assert_eq!((disk.boot, disk.auto_delete), (Some(true), Some(true)));
        assert_eq!(
            disk.initialize_params
                .as_ref()
                .unwrap()
                .source_image
                .as_deref(),
            Some(settings().image.as_str())
        );
        assert_eq!(vm.network_interfaces.len(), 1);
        let nic = &vm.network_interfaces[0];
        assert_eq!(
            nic.network.as_deref(),
            Some("projects/crawl-1/global/networks/default")
        );
        assert_eq!(nic.subnetwork, None);
        assert_eq!(nic.access_configs.len(), 1);
        assert_eq!(
            nic.access_configs[0].r#type,
            Some(access_config::Type::OneToOneNat)
        );
        assert_eq!(nic.access_configs[0].name.as_deref(), Some("External NAT"));
        assert_eq!(vm.tags.as_ref().unwrap().items, ["crawl-proxy"]);
        assert_eq!(vm.labels["crawl-example-com_managed"], "true");
        assert_eq!(vm.labels["crawl-example-com_installation"], "inst-1");
        assert_eq!(
            vm.labels["crawl-example-com_proxy-uid"],
            "0b6c3f1e-4d2a-4c1b-9e8f-7a6b5c4d3e2f"
        );
        assert_eq!(vm.labels["crawl-example-com_proxy-name"], "shop-proxy-1");
        assert_eq!(
            user_data(&vm),
            squid::cloud_config(3128, &["203.0.113.0/24".into()], None)
        );
        assert_eq!(vm.scheduling, None);
    }

    #[test]
    fn a_proxy_without_a_zone_skips_the_zones_that_ran_out() {
        let zones = ["europe-west1-b", "europe-west1-c", "europe-west1-d"].map(String::from);
        let out = |avoid: &[&str]| avoid.iter().map(|z| (*z).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            unpinned_zone(&zones, &[]).as_deref(),
            Some("europe-west1-b")
        );
        assert_eq!(
            unpinned_zone(&zones, &out(&["europe-west1-b"])).as_deref(),
            Some("europe-west1-c")
        );
        assert_eq!(
            unpinned_zone(&zones, &out(&["europe-west1-c", "europe-west1-b"])).as_deref(),
            Some("europe-west1-d")
        );
        // All out: the one that ran out longest ago.
        assert_eq!(
            unpinned_zone(
                &zones,
                &out(&["europe-west1-d", "europe-west1-b", "europe-west1-c"])
            )
            .as_deref(),
            Some("europe-west1-d")
        );
        // A zone no longer configured is no answer.
        assert_eq!(
            unpinned_zone(&zones[..1], &out(&["us-east1-b", "europe-west1-b"])).as_deref(),
            Some("europe-west1-b")
        );
        let mut stocked = request(None, None);
        stocked.avoid_zones = out(&["europe-west1-b"]);
        let (id, _) = body(&stocked, None, &settings(), "inst").unwrap();
        assert_eq!(id.zone, "europe-west1-c");
    }

    #[test]
    fn placement_and_cloud_init_override_the_defaults() {
        let placement = Placement {
            zone: Some("europe-west1-c".into()),
            machine_type: Some("n2-standard-2".into()),
            image: Some("projects/debian-cloud/global/images/debian-12-bookworm-v20261110".into()),
            host: None,
            parameters: BTreeMap::from([
                ("diskSizeGb".into(), "20".into()),
                ("provisioningModel".into(), "SPOT".into()),
            ]),
        };
        let mut settings = settings();
        settings.subnetwork = Some("proxies".into());
        let (id, vm) = body(
            &request(Some(placement), Some("#cloud-config\nruncmd: [true]\n")),
            Some("ignored:$6$x$y\n"),
            &settings,
            "inst-1",
        )
        .unwrap();
        assert_eq!(id.zone, "europe-west1-c");
        assert_eq!(
            vm.machine_type.as_deref(),
            Some("zones/europe-west1-c/machineTypes/n2-standard-2")
        );
        let disk = vm.disks[0].initialize_params.as_ref().unwrap();
        assert_eq!(
            disk.source_image.as_deref(),
            Some("projects/debian-cloud/global/images/debian-12-bookworm-v20261110")
        );
        assert_eq!(disk.disk_size_gb, Some(20));
        assert_eq!(
            vm.network_interfaces[0].subnetwork.as_deref(),
            Some("projects/crawl-1/regions/europe-west1/subnetworks/proxies")
        );
        assert_eq!(user_data(&vm), "#cloud-config\nruncmd: [true]\n");
        assert_eq!(
            vm.scheduling.as_ref().unwrap().provisioning_model,
            Some(scheduling::ProvisioningModel::Spot)
        );
    }

    #[test]
    fn urls_are_taken_as_they_are() {
        let mut settings = settings();
        settings.network = "projects/shared-vpc/global/networks/crawl".into();
        let placement = Placement {
            machine_type: Some("zones/europe-west1-b/machineTypes/custom-1-2048".into()),
            ..Placement::default()
        };
        let (_, vm) = body(&request(Some(placement), None), None, &settings, "i").unwrap();
        assert_eq!(
            vm.machine_type.as_deref(),
            Some("zones/europe-west1-b/machineTypes/custom-1-2048")
        );
        assert_eq!(
            vm.network_interfaces[0].network.as_deref(),
            Some("projects/shared-vpc/global/networks/crawl")
        );
    }

    #[test]
    fn bad_placements_name_the_field() {
        let cases = [
            (
                Placement {
                    zone: Some("us-east1-b".into()),
                    ..Placement::default()
                },
                "spec.placement.zone: \"us-east1-b\" is not one of provider \"gcp-eu\"'s zones (europe-west1-b, europe-west1-c)",
            ),
            (
                Placement {
                    parameters: BTreeMap::from([("gpu".into(), "yes".into())]),
                    ..Placement::default()
                },
                "spec.placement.parameters.gpu: not a gcp parameter",
            ),
            (
                Placement {
                    parameters: BTreeMap::from([("diskSizeGb".into(), "-3".into())]),
                    ..Placement::default()
                },
                "spec.placement.parameters.diskSizeGb: \"-3\" is not a positive number",
            ),
            (
                Placement {
                    parameters: BTreeMap::from([("provisioningModel".into(), "cheap".into())]),
                    ..Placement::default()
                },
                "spec.placement.parameters.provisioningModel: \"cheap\" is not STANDARD or SPOT",
            ),
        ];
        for (placement, want) in cases {
            let error = body(&request(Some(placement), None), None, &settings(), "i").unwrap_err();
            assert_eq!(error.class, proxy_core::ErrorClass::Permanent);
            assert!(error.message.starts_with(want), "{error:?}");
        }
    }
}
