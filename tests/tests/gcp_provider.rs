//! The gcp provider (`proxy_operator::providers::gcp`) against the local Compute Engine API
//! (`proxy_tests::gce`; no usable GCE emulator exists), call by call: what the operator's
//! reconciles rely on, with the fake's call counts showing what each answer cost. The
//! operator end to end is in `e2e/gcp.rs`.

use std::time::Duration;

use proxy_core::{CreateRequest, InstanceState};
use proxy_operator::providers::Provider;
use proxy_operator::providers::gcp::GcpProvider;
use proxy_operator::providers::settings::{GcpCredentials, GcpSettings};
use proxy_tests::gce::{FakeGce, FakeOptions, InsertFault, Method};

const ZONE: &str = "europe-west1-b";

async fn fake() -> FakeGce {
    FakeGce::start(FakeOptions::address_only()).await.unwrap()
}

fn settings(gce: &FakeGce) -> GcpSettings {
    GcpSettings {
        project: gce.project().to_owned(),
        zones: vec![ZONE.into(), "europe-west1-c".into()],
        machine_type: "e2-small".into(),
        image: "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64".into(),
        network: "default".into(),
        subnetwork: None,
        network_tags: vec![],
        allowed_source_cidrs: vec!["127.0.0.0/8".into()],
        endpoint: Some(gce.endpoint()),
        credentials: GcpCredentials::None,
        request_timeout_seconds: 5,
    }
}

async fn provider(gce: &FakeGce) -> GcpProvider {
    GcpProvider::start(settings(gce), "install-1".into())
        .await
        .unwrap()
}

fn request(uid: &str) -> CreateRequest {
    CreateRequest {
        provider: "gcp-eu".into(),
        instance_name: proxy_core::naming::instance_name(uid),
        namespace: "crawl".into(),
        name: "p1".into(),
        uid: uid.into(),
        placement: None,
        cloud_init: None,
        port: 3128,
        credentials_secret: None,
        avoid_zones: Vec::new(),
    }
}

/// Polls `get` until it answers something `done` accepts; returns that answer.
async fn until(
    provider: &GcpProvider,
    id: &str,
    done: impl Fn(&InstanceState) -> bool,
) -> InstanceState {
    let mut last = None;
    for _ in 0..100 {
        let state = provider.get(id).await.unwrap();
        if done(&state) {
            return state;
        }
        last = Some(state);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id}: still {last:?} after 5 s");
}

fn running(state: &InstanceState) -> bool {
    matches!(state, InstanceState::Running(_))
}

#[tokio::test]
async fn a_vm_is_created_runs_and_is_deleted() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let id = provider.create(&request("uid-1"), None).await.unwrap();
    assert_eq!(
        id,
        format!("zones/{ZONE}/instances/{}", request("uid-1").instance_name)
    );
    let state = until(&provider, &id, running).await;
    let vm = &gce.instances()[0];
    assert_eq!(
        state,
        InstanceState::Running(vm.nat_ip.unwrap().to_string())
    );
    provider.delete(&id).await.unwrap();
    until(&provider, &id, |s| *s == InstanceState::NotFound).await;
    assert!(gce.instances().is_empty());
    // Deleting what is gone succeeds.
    provider.delete(&id).await.unwrap();
}

#[tokio::test]
async fn an_accepted_insert_that_fails_is_reported_once_then_the_vm_is_not_found() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    gce.fail_next_inserts(1, InsertFault::OperationQuota);
    let id = provider.create(&request("uid-2"), None).await.unwrap();
    let failed = until(&provider, &id, |s| *s != InstanceState::Provisioning).await;
    let InstanceState::CreateFailed(error) = failed else {
        panic!("not CreateFailed: {failed:?}")
    };
    assert_eq!(error.class, proxy_core::ErrorClass::Quota, "{error:?}");
    assert!(error.message.contains("QUOTA_EXCEEDED"), "{error:?}");
    assert_eq!(provider.get(&id).await.unwrap(), InstanceState::NotFound);
    // The next create is a new request: it makes a VM.
    provider.create(&request("uid-2"), None).await.unwrap();
    until(&provider, &id, running).await;
    assert_eq!(gce.calls(Method::Insert), 2);
}

#[tokio::test]
async fn a_vm_made_again_after_its_deletion_is_a_new_request() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let id = provider.create(&request("uid-3"), None).await.unwrap();
    until(&provider, &id, running).await;
    let first = gce.instances()[0].id;
    provider.delete(&id).await.unwrap();
    until(&provider, &id, |s| *s == InstanceState::NotFound).await;
    provider.create(&request("uid-3"), None).await.unwrap();
    until(&provider, &id, running).await;
    assert_ne!(gce.instances()[0].id, first, "a new VM");
}

#[tokio::test]
async fn an_operator_restarted_after_a_deletion_still_makes_a_new_vm() {
    let gce = fake().await;
    let id = {
        let before = provider(&gce).await;
        let id = before.create(&request("uid-4"), None).await.unwrap();
        until(&before, &id, running).await;
        before.delete(&id).await.unwrap();
        until(&before, &id, |s| *s == InstanceState::NotFound).await;
        id
    };
    // A new process knows nothing: its first insert reuses the spent request ID, which GCE
    // answers with the old, finished operation; the provider must not take that for a VM.
    let after = provider(&gce).await;
    after.create(&request("uid-4"), None).await.unwrap();
    until(&after, &id, running).await;
    assert_eq!(
        gce.calls(Method::Insert),
        3,
        "one replayed insert, then a new one"
    );
}

#[tokio::test]
async fn a_create_repeated_after_a_crash_finds_the_vm_the_first_made() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let first = provider.create(&request("uid-5"), None).await.unwrap();
    let again = provider.create(&request("uid-5"), None).await.unwrap();
    assert_eq!(first, again);
    until(&provider, &first, running).await;
    assert_eq!(gce.instances().len(), 1);
}

#[tokio::test]
async fn a_delete_in_progress_is_checked_not_sent_again() {
    let gce = fake().await;
    gce.set_durations(proxy_tests::gce::Durations {
        deleting: Duration::from_secs(2),
        ..Default::default()
    });
    let provider = provider(&gce).await;
    let id = provider.create(&request("uid-6"), None).await.unwrap();
    until(&provider, &id, running).await;
    // (The polls above checked the insert's operation while the VM was not shown yet.)
    let checked = gce.calls(Method::OperationsGet);
    for _ in 0..3 {
        provider.delete(&id).await.unwrap();
    }
    assert_eq!(gce.calls(Method::Delete), 1);
    assert_eq!(gce.calls(Method::OperationsGet) - checked, 2);
}

#[tokio::test]
async fn gc_lists_our_vms_with_the_cores_label_keys_even_with_a_zone_down() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let id = provider.create(&request("uid-7"), None).await.unwrap();
    until(&provider, &id, running).await;
    let listed = provider.list_by_tag().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].provider_id, id);
    assert_eq!(listed[0].labels["crawl.example.com/proxy-uid"], "uid-7");
    assert_eq!(
        listed[0].labels["crawl.example.com/installation"],
        "install-1"
    );
    assert!(listed[0].created_at.is_some());
    // One zone down fails the aggregated list; the configured zones are listed one by one.
    gce.set_zone_unreachable("us-central1-a", true);
    let listed = provider.list_by_tag().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(gce.calls(Method::List) >= 2);
}

#[tokio::test]
async fn the_gets_of_a_fleet_share_one_list() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let ids: Vec<String> = futures::future::try_join_all((0..10).map(|i| {
        let provider = &provider;
        async move {
            provider
                .create(&request(&format!("uid-fleet-{i}")), None)
                .await
        }
    }))
    .await
    .unwrap();
    for id in &ids {
        until(&provider, id, running).await;
    }
    // A second later every earlier list is too old: ten gets at once make one list, no get.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (lists, gets) = (gce.calls(Method::AggregatedList), gce.calls(Method::Get));
    let states = futures::future::join_all(ids.iter().map(|id| provider.get(id))).await;
    assert!(
        states
            .iter()
            .all(|s| matches!(s, Ok(InstanceState::Running(_)))),
        "{states:?}"
    );
    assert_eq!(gce.calls(Method::AggregatedList) - lists, 1);
    assert_eq!(gce.calls(Method::Get) - gets, 0);
    // A VM the list does not show is asked for alone, and its absence is the get's answer.
    provider.delete(&ids[0]).await.unwrap();
    until(&provider, &ids[0], |s| *s == InstanceState::NotFound).await;
    assert!(gce.calls(Method::Get) > gets);
}
