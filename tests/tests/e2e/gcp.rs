//! The gcp provider end to end: the operator binary against a local Compute Engine API
//! (`proxy_tests::gce`, which stands in for GCE because no usable emulator exists), whose
//! VMs are real squids configured from the cloud-init the operator sends. Probes, leases and
//! traffic go through those squids for real.

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use proxy_crd::{Phase, Proxy};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::gce::{
    AddInstance, Durations, FakeGce, FakeOptions, InsertFault, Method, Observed,
};
use proxy_tests::operator::{Operator, Polls, binary};
use proxy_tests::otlp;
use serde_json::{Value, json};

use crate::operated::{Bed, GCP, provisioned};

/// The zone a Proxy without `placement.zone` lands in: the provider's first.
const ZONE: &str = "europe-west1-b";

pub(crate) fn ready(proxy: &Proxy) -> bool {
    proxy.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
}

pub(crate) fn phase(proxy: &Proxy) -> Option<Phase> {
    proxy.status.as_ref().and_then(|s| s.phase)
}

pub(crate) fn provider_id(proxy: &Proxy) -> Option<String> {
    proxy.status.as_ref().and_then(|s| s.provider_id.clone())
}

pub(crate) fn ip(proxy: &Proxy) -> Option<String> {
    proxy.status.as_ref().and_then(|s| s.ip.clone())
}

/// A Managed gcp spec probed through the bed's origin, every two seconds.
pub(crate) fn gcp_spec(bed: &Bed, extra: Value) -> Value {
    let mut spec = json!({"mode": "Managed", "provider": GCP, "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    spec
}

/// The VM the fake holds for `proxy`, by its provider ID.
pub(crate) fn vm_of(bed: &Bed, proxy: &Proxy) -> Option<Observed> {
    let id = provider_id(proxy)?;
    let (zone, name) = id.strip_prefix("zones/")?.split_once("/instances/")?;
    bed.gce().instance(zone, name)
}

/// A client that sends everything through `proxy_url` and trusts the bed's origin.
fn through(bed: &Bed, proxy_url: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy_url).unwrap())
        .tls_certs_only([reqwest::Certificate::from_pem(bed.origin.ca_pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Waits until `check` holds for what the fake holds; fails with the operator's log.
pub(crate) async fn until_gce(bed: &Bed, what: &str, check: impl Fn(&[Observed]) -> bool) {
    for _ in 0..300 {
        if check(&bed.gce().instances()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "not {what} within 30 s: {:#?}; operator log:\n{}",
        bed.gce().instances(),
        bed.operator.log()
    );
}

#[tokio::test]
async fn the_example_gcp_proxy_becomes_a_vm_whose_nat_ip_is_leased_and_carries_https() {
    let mut bed = Bed::with_gce("gcp-example", &[]).await;
    // examples/proxy-gcp.yaml as a user would apply it, with the bed's origin as the probe
    // URL and loopback as the crawlers' range in its squid ACL.
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/proxy-gcp.yaml"
    ))
    .unwrap()
    .replace("203.0.113.0/24", "127.0.0.0/8");
    let mut proxy: Proxy = serde_saphyr::from_str(&example).unwrap();
    proxy.spec.health_check = serde_json::from_value(
        json!({"probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}),
    )
    .unwrap();
    let created = bed
        .proxies
        .create(&Default::default(), &proxy)
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let name = proxy_core::naming::instance_name(&uid);

    let ready = bed.wait_for("gcp-proxy-1", "Ready", ready).await;
    assert_eq!(
        provider_id(&ready),
        Some(format!("zones/{ZONE}/instances/{name}"))
    );
    let vm = bed
        .gce()
        .instance(ZONE, &name)
        .expect("the fake holds the VM");
    let nat_ip = vm.nat_ip.expect("a Ready VM has a natIP").to_string();
    assert_eq!(
        ip(&ready),
        Some(nat_ip.clone()),
        "status.ip is the VM's natIP"
    );
    // What the operator asked GCE for.
    let body = &vm.body;
    assert!(
        body["machineType"]
            .as_str()
            .unwrap()
            .ends_with(&format!("zones/{ZONE}/machineTypes/e2-small")),
        "{body}"
    );
    assert_eq!(
        body["networkInterfaces"][0]["accessConfigs"][0]["type"], "ONE_TO_ONE_NAT",
        "{body}"
    );
    assert_eq!(body["labels"]["crawl-example-com_managed"], "true");
    assert_eq!(body["labels"]["crawl-example-com_proxy-uid"], uid.as_str());
    assert_eq!(
        body["labels"]["crawl-example-com_installation"],
        bed.ns.as_str()
    );
    assert_eq!(
        body["metadata"]["items"][0]["value"].as_str(),
        proxy
            .spec
            .cloud_init
            .as_ref()
            .and_then(|c| c.inline.as_deref()),
        "user-data is the Proxy's cloud-init"
    );

    // A crawler leases it and sends HTTPS through the VM's squid.
    let lease = bed
        .lease(json!({"selector": {"geo": "eu"}, "target": "probe.test", "ttlSeconds": 60}))
        .await;
    assert_eq!(
        lease["proxy"]["url"],
        format!("http://{nat_ip}:3128"),
        "{lease}"
    );
    let answer = through(&bed, lease["proxy"]["url"].as_str().unwrap())
        .get(bed.origin.url("/client-address"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);

    // Deleting the Proxy deletes the VM first.
    bed.proxies
        .delete("gcp-proxy-1", &DeleteParams::default())
        .await
        .unwrap();
    let gone = await_condition(
        bed.proxies.clone(),
        "gcp-proxy-1",
        conditions::is_deleted(&uid),
    );
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .unwrap_or_else(|_| panic!("the Proxy stayed; operator log:\n{}", bed.operator.log()))
        .unwrap();
    assert!(
        bed.gce().instance(ZONE, &name).is_none(),
        "the finalizer deleted the VM: {:?}",
        bed.gce().instances()
    );
}

#[tokio::test]
async fn a_zone_change_replaces_the_vm_and_the_new_one_comes_only_after_the_old_is_gone() {
    let mut bed = Bed::with_gce("gcp-drift", &[]).await;
    // Slow deletes, so a replacement that does not wait for the old VM shows two at once.
    bed.gce().set_durations(Durations {
        deleting: Duration::from_secs(2),
        ..Durations::default()
    });
    bed.create("d1", gcp_spec(&bed, json!({"placement": {"zone": ZONE}})))
        .await;
    let before = bed.wait_for("d1", "Ready", ready).await;
    let old_ip = ip(&before).unwrap();

    bed.proxies
        .patch(
            "d1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"placement": {"zone": "europe-west1-c"}}})),
        )
        .await
        .unwrap();
    let mut most_at_once = 0;
    let mut after = None;
    for _ in 0..600 {
        most_at_once = most_at_once.max(bed.gce().instances().len());
        let proxy = bed.proxies.get("d1").await.unwrap();
        if ready(&proxy) && provider_id(&proxy).is_some_and(|id| id.contains("europe-west1-c")) {
            after = Some(proxy);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = after.unwrap_or_else(|| {
        panic!(
            "not replaced in europe-west1-c within 30 s; operator log:\n{}",
            bed.operator.log()
        )
    });
    assert_eq!(
        most_at_once, 1,
        "the new VM was inserted while the old one still existed"
    );
    let vms = bed.gce().instances();
    assert_eq!(vms.len(), 1, "{vms:#?}");
    assert_eq!(vms[0].zone, "europe-west1-c");
    assert_ne!(ip(&after).unwrap(), old_ip, "a replacement has a new IP");
}

/// Quota refused as `fault`: the Proxy says `QuotaExceeded` with GCE's words (its status
/// for as long as the quota retry lasts, and a Warning event, which also shows a wait the
/// next attempt cut short), then recovers without anyone touching it.
async fn quota_then_recovery(prefix: &str, fault: InsertFault, says: &str) {
    let mut bed = Bed::with_gce(prefix, &["--quota-retry-seconds", "1"]).await;
    bed.gce().fail_next_inserts(2, fault);
    bed.create("q", gcp_spec(&bed, json!({}))).await;
    let notes = bed.event_notes("q", "QuotaExceeded", says).await;
    assert!(
        notes
            .iter()
            .any(|note| note.contains("the provider's quota is used up") && note.contains(says)),
        "no QuotaExceeded event saying {says:?}: {notes:?}; operator log:\n{}",
        bed.operator.log()
    );
    bed.wait_for("q", "Ready after the quota freed up", ready)
        .await;
    assert_eq!(bed.gce().instances().len(), 1);
    assert_eq!(
        bed.gce().calls(Method::Insert),
        3,
        "two refused inserts, then the VM"
    );
}

#[tokio::test]
async fn quota_refused_at_once_shows_quota_exceeded_then_the_proxy_recovers() {
    quota_then_recovery("gcp-quota", InsertFault::Quota, "Quota 'CPUS' exceeded").await;
}

#[tokio::test]
async fn quota_that_fails_an_accepted_insert_shows_quota_exceeded_then_the_proxy_recovers() {
    // GCE accepts the insert; its operation ends DONE with QUOTA_EXCEEDED and no VM appears.
    quota_then_recovery("gcp-opquota", InsertFault::OperationQuota, "QUOTA_EXCEEDED").await;
}

#[tokio::test]
async fn a_bad_machine_type_fails_the_proxy_with_a_message_naming_the_field() {
    let mut bed = Bed::with_gce("gcp-badtype", &[]).await;
    bed.create(
        "b1",
        gcp_spec(&bed, json!({"placement": {"machineType": "e2-bogus"}})),
    )
    .await;
    let failed = bed
        .wait_for("b1", "Failed", |p| phase(p) == Some(Phase::Failed))
        .await;
    let provisioned = failed
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Provisioned")
        .cloned()
        .unwrap();
    assert_eq!(provisioned.reason, "PermanentError");
    assert!(
        provisioned.message.contains("spec.placement.machineType:")
            && provisioned.message.contains("e2-bogus"),
        "{provisioned:?}"
    );
    assert!(bed.gce().instances().is_empty());
}

#[tokio::test]
async fn a_vm_stopped_out_of_band_is_deleted_and_made_again() {
    let mut bed = Bed::with_gce("gcp-stopped", &[]).await;
    bed.create("s1", gcp_spec(&bed, json!({}))).await;
    let before = bed.wait_for("s1", "Ready", ready).await;
    let old = vm_of(&bed, &before).unwrap();
    bed.gce()
        .stop_out_of_band(&old.zone, &old.name)
        .await
        .unwrap();
    until_gce(&bed, "made again", |vms| {
        vms.iter()
            .any(|vm| vm.name == old.name && vm.id != old.id && vm.status == "RUNNING")
    })
    .await;
    let after = bed
        .wait_for("s1", "Ready on the new VM", |p| {
            ready(p) && ip(p) != ip(&before)
        })
        .await;
    assert_eq!(
        ip(&after),
        vm_of(&bed, &after).unwrap().nat_ip.map(|ip| ip.to_string())
    );
}

#[tokio::test]
async fn a_running_vm_without_an_external_ip_publishes_nothing_until_it_has_one() {
    let mut bed = Bed::with_gce("gcp-nonat", &[]).await;
    bed.gce().withhold_nat_ip_of_next(1);
    bed.create("n1", gcp_spec(&bed, json!({}))).await;
    until_gce(&bed, "a VM that runs", |vms| {
        vms.iter().any(|vm| vm.status == "RUNNING")
    })
    .await;
    // A few of the operator's polls (0.3 s apart) see RUNNING without a natIP.
    for _ in 0..10 {
        let proxy = bed.proxies.get("n1").await.unwrap();
        assert_eq!(ip(&proxy), None, "an IP was published: {:?}", proxy.status);
        assert_eq!(phase(&proxy), Some(Phase::Provisioning));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let vm = bed.gce().instances().pop().unwrap();
    bed.gce()
        .set_nat_ip_withheld(&vm.zone, &vm.name, false)
        .unwrap();
    let proxy = bed.wait_for("n1", "Ready", ready).await;
    assert!(provisioned(&proxy));
    assert_eq!(
        ip(&proxy),
        bed.gce().instances()[0].nat_ip.map(|ip| ip.to_string())
    );
}

#[tokio::test]
async fn gc_reaps_an_orphan_vm_and_leaves_live_and_foreign_vms_alone() {
    let mut bed = Bed::with_gce(
        "gcp-gc",
        &["--gc-interval-seconds", "1", "--gc-min-age-seconds", "60"],
    )
    .await;
    bed.create("live", gcp_spec(&bed, json!({}))).await;
    let live = bed.wait_for("live", "Ready", ready).await;
    // A deleted VM stops for 3 s before it is gone, through three sweeps: each lists it,
    // and none may delete it again (issue 50: GC counted one delete twice).
    bed.gce().set_durations(Durations {
        deleting: Duration::from_secs(3),
        ..Durations::default()
    });
    let (deletes_before, not_ready_before) = (
        bed.gce().calls(Method::Delete),
        bed.gce().not_ready_answers(),
    );
    let old = Some(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1));
    let labelled = |installation: &str, uid: &str| {
        [
            ("crawl-example-com_managed", "true"),
            ("crawl-example-com_installation", installation),
            ("crawl-example-com_proxy-uid", uid),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into()
    };
    for (zone, name, installation) in [
        ("europe-west1-c", "orphan-of-ours", bed.ns.clone()),
        (
            "us-central1-a",
            "another-installations",
            "someone-else".to_owned(),
        ),
    ] {
        bed.gce()
            .add_instance(AddInstance {
                zone: zone.into(),
                name: name.into(),
                labels: labelled(&installation, "uid-of-a-proxy-long-gone"),
                created: old,
                ..AddInstance::default()
            })
            .await
            .unwrap();
    }
    until_gce(&bed, "the orphan reaped", |vms| {
        !vms.iter().any(|vm| vm.name == "orphan-of-ours")
    })
    .await;
    let names: Vec<String> = bed
        .gce()
        .instances()
        .into_iter()
        .map(|vm| vm.name)
        .collect();
    assert!(
        names.contains(&"another-installations".to_owned()),
        "{names:?}"
    );
    let live_vm = vm_of(&bed, &live);
    assert!(live_vm.is_some(), "the live Proxy's VM stays: {names:?}");
    // GC deleted it once, by its own count (its log) and by the API's, while three sweeps
    // listed it stopping.
    let log = bed.operator.log();
    let counted = log
        .lines()
        .filter(|line| line.contains("GC: deleted orphan") && line.contains("orphan-of-ours"))
        .count();
    assert_eq!(
        (
            counted,
            bed.gce().calls(Method::Delete) - deletes_before,
            bed.gce().not_ready_answers() - not_ready_before
        ),
        (1, 1, 0),
        "one delete of the orphan, none again while it stopped (GC's count, the API's \
         deletes, deletes refused as not ready); operator log:\n{log}"
    );
    assert!(ready(&bed.proxies.get("live").await.unwrap()));
}

/// The `Healthy` condition's status of `proxy` for the machine at `ip`, when the status
/// publishes that address.
fn healthy_at(proxy: &Proxy, ip: &str) -> Option<String> {
    let status = proxy.status.as_ref()?;
    (status.ip.as_deref() == Some(ip)).then_some(())?;
    let condition = status.conditions.iter().find(|c| c.type_ == "Healthy")?;
    Some(format!("{}/{}", condition.status, condition.reason))
}

/// Samples `name` every 100 ms until it is Ready at an address other than `old_ip`; every
/// `Healthy` the status showed for the machine at its new address, in order.
async fn healthy_of_the_new_machine(bed: &Bed, name: &str, old_ip: Option<&str>) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..300 {
        let proxy = bed.proxies.get(name).await.unwrap();
        if let Some(at) = ip(&proxy).filter(|at| Some(at.as_str()) != old_ip)
            && let Some(healthy) = healthy_at(&proxy, &at)
        {
            if seen.last() != Some(&healthy) {
                seen.push(healthy);
            }
            if ready(&proxy) {
                return seen;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{name}: not Ready at a new address within 30 s (seen: {seen:?}); operator log:\n{}",
        bed.operator.log()
    );
}

#[tokio::test]
async fn a_new_vm_and_its_replacement_await_their_first_probe_while_squid_starts() {
    // As on GCE, a VM's natIP shows once it runs, and its squid starts 3 s later (cloud-init
    // installs it). Until a probe reaches it, the Proxy has no verdict ("awaiting probe"):
    // before issue 50 the first probe, refused, made a replacement Unhealthy for a probe.
    let bed = Bed::with_gce("gcp-boot", &[]).await;
    bed.gce().set_durations(Durations {
        boot: Duration::from_secs(3),
        ..Durations::default()
    });
    // A probe bound of 3 s: a squid that answers slowly on a loaded machine is not what is
    // judged here (its first probe timed out after 1 s in a run beside the crawler tests),
    // a squid that is not listening yet is.
    let health = json!({"healthCheck": {"probeURL": bed.origin.url("/generate_204"),
        "intervalSeconds": 4, "timeoutSeconds": 3}});
    bed.create("b1", gcp_spec(&bed, health)).await;
    let first = healthy_of_the_new_machine(&bed, "b1", None).await;
    assert!(
        !first.iter().any(|h| h.starts_with("False")),
        "the new VM was Unhealthy while its squid started: {first:?}; operator log:\n{}",
        bed.operator.log()
    );
    let before = bed.proxies.get("b1").await.unwrap();
    let old = vm_of(&bed, &before).unwrap();
    bed.gce()
        .stop_out_of_band(&old.zone, &old.name)
        .await
        .unwrap();
    let replaced = healthy_of_the_new_machine(&bed, "b1", ip(&before).as_deref()).await;
    assert!(
        !replaced.iter().any(|h| h.starts_with("False")),
        "the replacement was Unhealthy while its squid started: {replaced:?}; operator \
         log:\n{}",
        bed.operator.log()
    );
}

#[tokio::test]
async fn each_compute_call_is_a_child_span_of_its_provider_call_under_the_reconcile() {
    // The OTLP export, as a collector sees it: the reconcile's span, the provider call's
    // span under it, and a span per Compute API call under that one (issue 50).
    let ground = crate::operated::ground(ControlPlane::shared(), "gcp-otlp").await;
    let gce = FakeGce::start(FakeOptions::with_squid(ground.origin.hosts_file.clone()))
        .await
        .unwrap();
    let (collector, received) = otlp::serve().await.unwrap();
    let endpoint = format!("http://{collector}");
    let operator = Operator::start_with_kubeconfig(
        &ControlPlane::shared().kubeconfig,
        &ground.ns,
        binary(),
        Polls::FAST,
        Some(&ground.origin.ca_pem),
        &gce.provider_entry(GCP),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
    );
    let proxies: kube::Api<Proxy> = kube::Api::namespaced(ground.client.clone(), &ground.ns);
    let spec = json!({"mode": "Managed", "provider": GCP, "healthCheck": {
        "probeURL": ground.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    let proxy: Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "traced"}, "spec": spec
    }))
    .unwrap();
    proxies.create(&Default::default(), &proxy).await.unwrap();
    let key = format!("{}/traced", ground.ns);
    let mut last = Vec::new();
    for _ in 0..150 {
        let spans = otlp::exported_spans(&received.lock().unwrap().clone());
        let by_id = |id: &str| spans.iter().find(|s| s.span_id == id);
        let insert = spans
            .iter()
            .find(|s| s.name == "instances.insert" && s.text("method") == Some("instances.insert"));
        let chain = insert.and_then(|insert| {
            let provider = by_id(&insert.parent_span_id)?;
            let reconcile = by_id(&provider.parent_span_id)?;
            Some((insert, provider, reconcile))
        });
        if let Some((insert, provider, reconcile)) = chain {
            assert_eq!(provider.name, "provider", "{provider:?}");
            assert_eq!(provider.text("op"), Some("create"), "{provider:?}");
            assert_eq!(reconcile.name, "reconcile", "{reconcile:?}");
            assert_eq!(reconcile.text("proxy"), Some(key.as_str()), "{reconcile:?}");
            assert_eq!(insert.trace_id, reconcile.trace_id, "one trace");
            return;
        }
        last = spans;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "no instances.insert span under a provider span under the reconcile within 30 s: \
         {last:#?}; operator log:\n{}",
        operator.log()
    );
}
