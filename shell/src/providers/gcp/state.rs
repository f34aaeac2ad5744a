//! What a VM's `status` means to the core, and a listed VM as GC reads it.
//!
//! A VM that is RUNNING but has no external IP yet is still provisioning: the core never
//! publishes an empty address. Stopped and suspended VMs (out of band, or a preempted spot
//! VM) are `Stopped`; the core deletes and recreates them (cattle, not pets), as it does
//! `Terminated` ones.

use google_cloud_compute_v1::model::Instance;
use google_cloud_compute_v1::model::instance::Status;
use proxy_core::InstanceState;
use proxy_core::gc::ListedInstance;

use super::id::{InstanceId, last_segment};
use super::labels;

/// The state a VM stands for.
pub fn state_of(instance: &Instance) -> InstanceState {
    match instance.status.as_ref() {
        Some(Status::Running) => match external_ip(instance) {
            Some(ip) => InstanceState::Running(ip.to_owned()),
            None => InstanceState::Provisioning,
        },
        Some(Status::Stopping | Status::Stopped | Status::Suspending | Status::Suspended)
        | Some(Status::PendingStop) => InstanceState::Stopped,
        Some(Status::Terminated | Status::Deprovisioning | Status::Repairing) => {
            InstanceState::Terminated
        }
        // PROVISIONING, STAGING, PENDING, no status yet, or one newer than this client.
        _ => InstanceState::Provisioning,
    }
}

/// The VM's external IP: the natIP of its first network interface's first access config.
fn external_ip(instance: &Instance) -> Option<&str> {
    instance
        .network_interfaces
        .first()?
        .access_configs
        .first()?
        .nat_ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
}

/// The provider ID of a listed VM, from its zone URL and name.
pub fn provider_id_of(instance: &Instance) -> String {
    InstanceId {
        zone: last_segment(instance.zone.as_deref().unwrap_or_default()).to_owned(),
        name: instance.name.clone().unwrap_or_default(),
    }
    .to_string()
}

/// A VM of an aggregated list, as GC reads it: its provider ID, its labels in the core's
/// keys, and its creation time (`None` when GCE did not say or it does not parse). Whether
/// a delete of it runs is the provider's to say (`deleting`, false here).
pub fn listed(instance: Instance) -> ListedInstance {
    ListedInstance {
        deleting: false,
        provider_id: provider_id_of(&instance),
        labels: labels::from_instance(&instance.labels),
        created_at: instance
            .creation_timestamp
            .as_deref()
            .and_then(|at| at.parse::<jiff::Timestamp>().ok()),
    }
}

#[cfg(test)]
mod tests {
    use google_cloud_compute_v1::model::{AccessConfig, NetworkInterface};

    use super::*;
    use crate::providers::labels as ours;

    fn vm(status: Option<Status>, nat_ip: Option<&str>) -> Instance {
        let mut access = AccessConfig::new();
        access.nat_ip = nat_ip.map(str::to_owned);
        let mut vm = Instance::new()
            .set_network_interfaces([NetworkInterface::new().set_access_configs([access])]);
        vm.status = status;
        vm
    }

    #[test]
    fn every_status_has_its_state() {
        let running = |ip: &str| InstanceState::Running(ip.into());
        let cases = [
            (
                Some(Status::Provisioning),
                None,
                InstanceState::Provisioning,
            ),
            (Some(Status::Staging), None, InstanceState::Provisioning),
            (Some(Status::Pending), None, InstanceState::Provisioning),
            (None, None, InstanceState::Provisioning),
            (Some(Status::Running), None, InstanceState::Provisioning),
            (Some(Status::Running), Some(""), InstanceState::Provisioning),
            (Some(Status::Running), Some("34.1.2.3"), running("34.1.2.3")),
            (
                Some(Status::Stopping),
                Some("34.1.2.3"),
                InstanceState::Stopped,
            ),
            (Some(Status::Stopped), None, InstanceState::Stopped),
            (Some(Status::Suspending), None, InstanceState::Stopped),
            (Some(Status::Suspended), None, InstanceState::Stopped),
            (Some(Status::PendingStop), None, InstanceState::Stopped),
            (Some(Status::Terminated), None, InstanceState::Terminated),
            (
                Some(Status::Deprovisioning),
                None,
                InstanceState::Terminated,
            ),
            (Some(Status::Repairing), None, InstanceState::Terminated),
        ];
        for (status, ip, want) in cases {
            assert_eq!(state_of(&vm(status.clone(), ip)), want, "{status:?} {ip:?}");
        }
        let no_interface = Instance::new().set_status(Status::Running);
        assert_eq!(state_of(&no_interface), InstanceState::Provisioning);
    }

    #[test]
    fn a_listed_vm_has_its_id_our_labels_and_its_creation_time() {
        let vm = Instance::new()
            .set_name("proxy-abc")
            .set_zone("https://www.googleapis.com/compute/v1/projects/p/zones/europe-west1-b")
            .set_creation_timestamp("2026-11-30T04:05:06.789-08:00")
            .set_labels([
                ("crawl-example-com_managed", "true"),
                ("crawl-example-com_proxy-uid", "uid-1"),
            ]);
        let listed = listed(vm);
        assert_eq!(
            listed.provider_id,
            "zones/europe-west1-b/instances/proxy-abc"
        );
        assert_eq!(listed.labels[ours::MANAGED], "true");
        assert_eq!(listed.labels[ours::PROXY_UID], "uid-1");
        assert_eq!(
            listed.created_at,
            Some("2026-11-30T12:05:06.789Z".parse().unwrap())
        );
        let unknown_age = super::listed(Instance::new().set_creation_timestamp("yesterday"));
        assert_eq!(unknown_age.created_at, None);
    }
}
