//! The kvm provider with real VMs: a Proxy becomes a libvirt domain (session-mode libvirtd,
//! qemu with TCG) booting the Debian guest of `tests/bed/guest-image.sh`; the guest's
//! cloud-init reads the provider's NoCloud seed ISO, writes squid's config and starts squid;
//! the operator probes it through qemu's port forward on a loopback address (the `hostPort`
//! address source), makes it Ready and leases it, and traffic goes through the guest to the
//! probe origin. A spec edit replaces the VM; deleting the Proxy removes domain and volumes.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use proxy_crd::{Phase, Proxy};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::libvirt::{self, Libvirt};
use proxy_tests::operator::{DISCOVERY_TOKEN, Operator, Polls, binary};
use proxy_tests::ports::Port;
use proxy_tests::probe_origin::{HOST, ProbeOrigin};
use serde_json::{Value, json};

/// The host address the VMs' proxy port is forwarded from.
const ADDRESS: &str = "127.0.99.1";
/// How long a VM may take from apply to Ready: under TCG on a loaded 2-core machine, the
/// guest's systemd, cloud-init and squid take about 45 s; the bound leaves room for a busy
/// machine.
const READY_WITHIN: Duration = Duration::from_secs(480);

/// The Proxy's cloud-init: the operator's own squid config, plus the name of the probe
/// origin, which the guest reaches on the host's loopback through qemu's gateway 10.0.2.2.
/// `marker` tells two versions apart.
fn cloud_init(port: u16, marker: &str) -> String {
    let mut config =
        proxy_operator::providers::squid::config(i32::from(port), &["10.0.0.0/8".into()], None);
    config.push_str("hosts_file /etc/squid/bed-hosts\n");
    let indented: String = config.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "#cloud-config\n# {marker}\nwrite_files:\n  - path: /etc/squid/bed-hosts\n    content: \"10.0.2.2 {HOST}\\n\"\n  \
         - path: /etc/squid/squid.conf\n    content: |\n{indented}runcmd:\n  - [systemctl, restart, squid]\n"
    )
}

/// The kvm provider entry (after the bed's `pods`) of the bed's one libvirt host.
pub(crate) fn kvm_provider(libvirt: &Libvirt) -> String {
    format!(
        "  - name: lab\n    type: kvm\n    kvm:\n      hosts:\n        - name: bed\n          \
         uri: \"{uri}\"\n          storagePool: {pool}\n          baseImage: {base}\n          \
         accelerator: tcg\n          directBoot:\n            kernel: {kernel}\n            \
         initrd: {initrd}\n            cmdline: \"{cmdline}\"\n          address:\n            \
         hostPort:\n              addresses: [\"{ADDRESS}\"]\n",
        uri = libvirt.uri,
        pool = libvirt::POOL,
        base = libvirt::BASE_IMAGE,
        kernel = libvirt.kernel.display(),
        initrd = libvirt.initrd.display(),
        cmdline = libvirt::CMDLINE,
    )
}

/// Waits until the Proxy is Ready; its status, or a failure with the operator's log.
async fn ready(proxies: &Api<Proxy>, name: &str, operator: &Operator, since: Instant) -> Proxy {
    while since.elapsed() < READY_WITHIN {
        if let Some(proxy) = proxies.get_opt(name).await.unwrap()
            && proxy.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        {
            return proxy;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "{name}: not Ready within {READY_WITHIN:?}; operator log:\n{}",
        operator.log()
    );
}

/// The UUID of the domain `name`.
fn uuid_of(libvirt: &Libvirt, name: &str) -> String {
    libvirt.virsh(&["domuuid", name]).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_proxy_becomes_a_real_vm_serving_squid_is_leased_replaced_and_removed() {
    let libvirt = tokio::task::spawn_blocking(Libvirt::shared).await.unwrap();
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "kvm").await;
    let origin = ProbeOrigin::start().await.unwrap();
    let operator = Operator::start_with_providers(
        plane,
        &ns,
        binary(),
        Polls::FAST,
        Some(&origin.ca_pem),
        &kvm_provider(libvirt),
        &[],
    );
    let proxies: Api<Proxy> = Api::namespaced(client, &ns);
    let port = Port::reserve();
    let spec = |marker: &str| {
        json!({"mode": "Managed", "provider": "lab", "port": port.number(), "maxLeases": 1,
               "placement": {"host": "bed"},
               "cloudInit": {"inline": cloud_init(port.number(), marker)},
               "healthCheck": {"probeURL": origin.url("/generate_204"),
                               "intervalSeconds": 3, "timeoutSeconds": 2}})
    };
    let proxy: Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "vm-1", "labels": {"geo": "kvm"}}, "spec": spec("first")
    }))
    .unwrap();
    let applied = Instant::now();
    proxies.create(&Default::default(), &proxy).await.unwrap();
    let first = ready(&proxies, "vm-1", &operator, applied).await;
    println!(
        "kvm e2e: apply to Ready in {:.1} s",
        applied.elapsed().as_secs_f64()
    );

    let instance = proxy_core::naming::instance_name(first.metadata.uid.as_deref().unwrap());
    let status = first.status.clone().unwrap();
    assert_eq!(status.ip.as_deref(), Some(ADDRESS));
    assert_eq!(
        status.provider_id.as_deref(),
        Some(format!("bed/{instance}").as_str())
    );
    assert!(libvirt.domains().unwrap().contains(&instance));
    let volumes = libvirt.volumes().unwrap();
    for volume in [format!("{instance}.qcow2"), format!("{instance}-seed.iso")] {
        assert!(volumes.contains(&volume), "{volume} not in {volumes:?}");
    }

    // A lease through the discovery API (whose cache follows the controller's within a
    // moment), and a real request through the guest's squid.
    let http = reqwest::Client::new();
    let mut lease = Value::Null;
    for _ in 0..100 {
        let response = http
            .post(format!("{}/v1/leases", operator.discovery))
            .bearer_auth(DISCOVERY_TOKEN)
            .json(&json!({"selector": {"geo": "kvm"}, "target": HOST, "ttlSeconds": 120}))
            .send()
            .await
            .unwrap();
        let created = response.status() == 201;
        lease = response.json().await.unwrap();
        if created {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let url = lease["proxy"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        url,
        format!("http://{ADDRESS}:{}", port.number()),
        "{lease}"
    );
    let through = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&url).unwrap())
        .tls_certs_only([reqwest::Certificate::from_pem(origin.ca_pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let answer = through
        .get(origin.url("/client-address"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // qemu's user-mode network connects out from the host's loopback.
    assert_eq!(answer.text().await.unwrap(), "127.0.0.1");

    // A spec edit replaces the VM. The new domain has the same name: had the old one not been
    // gone before the create, the provider would have returned the old domain as it is.
    let old_uuid = uuid_of(libvirt, &instance);
    let edited = Instant::now();
    proxies
        .patch(
            "vm-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec("second")})),
        )
        .await
        .unwrap();
    // Replaced: a new domain, Ready for the edited spec, and its squid serves. (The new VM
    // gets the address the old one had; the status may say Ready before the new guest
    // serves, so serving is checked, not assumed.)
    let mut ready_before_serving = false;
    let mut served = false;
    while edited.elapsed() < READY_WITHIN && !served {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let proxy = proxies.get("vm-1").await.unwrap();
        let ready_now = proxy.status.as_ref().is_some_and(|s| {
            s.phase == Some(Phase::Ready)
                && s.conditions.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "True"
                        && c.observed_generation == proxy.metadata.generation
                })
        });
        let new_domain = libvirt
            .virsh(&["domuuid", &instance])
            .is_ok_and(|u| u.trim() != old_uuid);
        if !(ready_now && new_domain) {
            continue;
        }
        served = through
            .get(origin.url("/generate_204"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .is_ok_and(|r| r.status() == 204);
        ready_before_serving |= !served;
    }
    assert!(
        served,
        "vm-1 was not replaced by a serving VM within {READY_WITHIN:?}; operator log:\n{}",
        operator.log()
    );
    println!(
        "kvm e2e: edit to a replaced VM serving in {:.1} s (Ready was reported before it served: {ready_before_serving})",
        edited.elapsed().as_secs_f64()
    );

    // Deleting the Proxy removes the domain and both volumes.
    proxies
        .delete("vm-1", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    while proxies.get_opt("vm-1").await.unwrap().is_some() {
        assert!(
            deleted.elapsed() < Duration::from_secs(120),
            "vm-1 not deleted within 120 s; operator log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!libvirt.domains().unwrap().contains(&instance));
    let left: Vec<String> = libvirt
        .volumes()
        .unwrap()
        .into_iter()
        .filter(|v| v.starts_with(&instance))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}
