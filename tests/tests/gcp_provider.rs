//! The gcp provider (`proxy_operator::providers::gcp`) against the local Compute Engine API
//! (`proxy_tests::gce`; no usable GCE emulator exists), call by call: what the operator's
//! reconciles rely on, with the fake's call counts showing what each answer cost. The
//! operator end to end is in `e2e/gcp.rs`.

use std::sync::Arc;
use std::time::Duration;

use proxy_core::pacing::{Budgets, Refill};
use proxy_core::{CreateRequest, InstanceState};
use proxy_operator::providers::Provider;
use proxy_operator::providers::gcp::GcpProvider;
use proxy_operator::providers::metrics::ProviderMetrics;
use proxy_operator::providers::pace::Pace;
use proxy_operator::providers::settings::{GcpBudget, GcpCredentials, GcpSettings};
use proxy_operator::runtime::metrics::Registry;
use proxy_tests::gce::{FakeGce, FakeOptions, InsertFault, Method, Quotas};

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
        budget: GcpBudget::default(),
    }
}

async fn provider(gce: &FakeGce) -> GcpProvider {
    let budget = GcpBudget::default();
    let budgets = Budgets {
        read: Some(budget.reads_per_minute),
        write: Some(budget.writes_per_minute),
    };
    let pace = Arc::new(Pace::new(
        "gcp-eu",
        budgets,
        Refill::EachMinute,
        ProviderMetrics::register(&mut Registry::default()),
    ));
    GcpProvider::start(settings(gce), "install-1".into(), pace)
        .await
        .unwrap()
}

/// Creates `n` VMs at once, of Proxies whose UIDs start with `prefix`, and waits until
/// each runs; their provider IDs. A create the provider's pacing holds back (the first
/// call of a quiet scope is a trial, the others wait for its answer) is made again after
/// the wait it names, as the controller requeues it.
async fn running_fleet(provider: &GcpProvider, prefix: &str, n: usize) -> Vec<String> {
    let creates = (0..n).map(|i| {
        let request = request(&format!("{prefix}-{i}"));
        async move {
            loop {
                match provider.create(&request, None).await {
                    Err(error) if error.is_rate_limit() => {
                        let wait = error.retry_after().unwrap_or(Duration::from_millis(500));
                        tokio::time::sleep(wait).await;
                    }
                    created => return created,
                }
            }
        }
    });
    let ids = futures::future::try_join_all(creates).await.unwrap();
    for id in &ids {
        until(provider, id, running).await;
    }
    ids
}

/// Every call the fake answered so far.
fn all_calls(gce: &FakeGce) -> u64 {
    Method::ALL.iter().map(|m| gce.calls(*m)).sum()
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
    let ids = running_fleet(&provider, "uid-fleet", 10).await;
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

#[tokio::test]
async fn the_polls_after_an_insert_make_no_get_of_the_vm() {
    // Issue 50: each create cost an `instances.get` that answered 404 a moment after the
    // insert, which changes no decision. The list, asked after the insert, shows the VM;
    // until it does, the insert's operation says where it stands.
    let gce = fake().await;
    let provider = provider(&gce).await;
    let id = provider.create(&request("uid-8"), None).await.unwrap();
    assert_eq!(
        provider.get(&id).await.unwrap(),
        InstanceState::Provisioning
    );
    until(&provider, &id, running).await;
    assert_eq!(
        gce.calls(Method::Get),
        0,
        "no get of a VM this process inserted"
    );
}

/// How far past the start of a minute of the wall clock a wait of `wait` from now ends, in
/// ms (0 to 59 999).
fn into_minute_after(wait: Duration) -> u128 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (wall + wait).as_millis() % 60_000
}

/// Whether a pause ends the margin (2 s) after a minute of the wall clock starts, give or
/// take the moments between the pacing's reading of the clock and the test's.
fn ends_after_a_minute_starts(wait: Duration) -> bool {
    (1_700..=2_300).contains(&into_minute_after(wait))
}

#[tokio::test]
async fn a_rate_limit_pauses_every_call_of_the_provider_until_the_next_minute_not_each_poll_on_its_own()
 {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let ids = running_fleet(&provider, "uid-rl", 5).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    gce.set_rate_limited(true);
    let before = all_calls(&gce);
    // Five polls at once, three times: the first list meets the limit, and every call
    // after it waits for the pause instead of being sent (before: a get each, each with
    // its own backoff). GCE refills a rate quota as the next minute of the clock starts:
    // the pause ends just after it, not a second later.
    let mut wait = Duration::ZERO;
    for _ in 0..3 {
        let states = futures::future::join_all(ids.iter().map(|id| provider.get(id))).await;
        for state in &states {
            let error = state.as_ref().expect_err("rate-limited");
            assert!(error.is_rate_limit(), "{error:?}");
            wait = error.retry_after().expect("the pause is said");
            assert!(
                ends_after_a_minute_starts(wait),
                "a pause of {wait:?} ends {} ms into a minute",
                into_minute_after(wait)
            );
        }
        let created = provider.create(&request("uid-rl-new"), None).await;
        assert!(created.is_err_and(|e| e.is_rate_limit()));
    }
    let sent = all_calls(&gce) - before;
    assert_eq!(
        sent, 2,
        "one read and one write met the limit, nothing else was sent"
    );
    // The pause over, the next poll lists again, and the limit lifted: one list for all.
    gce.set_rate_limited(false);
    tokio::time::sleep(wait + Duration::from_millis(100)).await;
    let lists = gce.calls(Method::AggregatedList);
    let states = futures::future::join_all(ids.iter().map(|id| provider.get(id))).await;
    assert!(
        states
            .iter()
            .all(|s| matches!(s, Ok(InstanceState::Running(_)))),
        "{states:?}"
    );
    assert_eq!(gce.calls(Method::AggregatedList) - lists, 1);
    assert_eq!(gce.calls(Method::Get), 0);
}

/// The project's own per-minute quota spent (the fake's, in windows that start with the
/// minutes of the wall clock, as GCE's do): the insert that meets it is the only one sent
/// until the next minute starts, and the first one after it passes.
#[tokio::test]
async fn a_spent_write_quota_is_tried_again_once_as_the_next_minute_starts() {
    let gce = FakeGce::start(FakeOptions {
        quotas: Quotas {
            writes: Some(2),
            ..Quotas::default()
        },
        ..FakeOptions::address_only()
    })
    .await
    .unwrap();
    let provider = provider(&gce).await;
    // Not in a minute's last seconds: the two inserts the quota allows share its window.
    if gce.next_window_in() < Duration::from_secs(5) {
        tokio::time::sleep(gce.next_window_in() + Duration::from_millis(200)).await;
    }
    for n in 0..2 {
        provider
            .create(&request(&format!("uid-q-{n}")), None)
            .await
            .expect("within the quota");
    }
    let over = request("uid-q-2");
    let error = provider
        .create(&over, None)
        .await
        .expect_err("over the quota");
    let found = tokio::time::Instant::now();
    assert!(error.is_rate_limit(), "{error:?}");
    let wait = error.retry_after().expect("the pause is said");
    assert!(
        ends_after_a_minute_starts(wait),
        "a pause of {wait:?} ends {} ms into a minute",
        into_minute_after(wait)
    );
    assert_eq!(gce.rate_limited(Method::Insert), 1);
    // Asked again and again before the minute turns: nothing is sent.
    let inserts = gce.calls(Method::Insert);
    for n in 3..6 {
        let held = provider.create(&request(&format!("uid-q-{n}")), None).await;
        assert!(held.is_err_and(|e| e.is_rate_limit()));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(gce.calls(Method::Insert), inserts, "held, not sent");
    tokio::time::sleep_until(found + wait + Duration::from_millis(100)).await;
    provider
        .create(&over, None)
        .await
        .expect("the quota refilled as the minute started");
    assert_eq!(
        gce.rate_limited(Method::Insert),
        1,
        "one insert met the spent quota, the one that found it"
    );
}

#[tokio::test]
async fn with_a_zone_down_the_polls_share_the_lists_of_the_zones_that_answer() {
    let gce = fake().await;
    let provider = provider(&gce).await;
    let id = provider.create(&request("uid-9"), None).await.unwrap();
    until(&provider, &id, running).await;
    gce.set_zone_unreachable("us-central1-a", true);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let lists = gce.calls(Method::List);
    let states = futures::future::join_all((0..5).map(|_| provider.get(&id))).await;
    assert!(
        states
            .iter()
            .all(|s| matches!(s, Ok(InstanceState::Running(_)))),
        "{states:?}"
    );
    assert_eq!(
        gce.calls(Method::List) - lists,
        2,
        "one list of each configured zone, for all five polls"
    );
    assert_eq!(gce.calls(Method::Get), 0);
}
