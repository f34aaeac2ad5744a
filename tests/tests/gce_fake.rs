//! The local Compute Engine API (`proxy_tests::gce`) driven by the client the gcp provider
//! uses, `google-cloud-compute-v1` 4.1.0 with anonymous credentials, so that every answer is
//! checked the way the provider will read it: lifecycles, natIP and a real squid behind it,
//! GCE's errors and each injected fault.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use google_cloud_compute_v1::Error;
use google_cloud_compute_v1::client::{Instances, ZoneOperations};
use google_cloud_compute_v1::model::{
    AccessConfig, AttachedDisk, AttachedDiskInitializeParams, Instance, Metadata, NetworkInterface,
    Tags, access_config, instance, metadata, operation,
};
use google_cloud_gax::error::rpc::{Code, StatusDetails};
use google_cloud_gax::paginator::ItemPaginator as _;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt as _};
use google_cloud_lro::Poller as _;
use proxy_operator::providers::squid::cloud_config;
use proxy_tests::gce::{
    AddInstance, Durations, FakeGce, FakeOptions, InsertFault, Method, Observed,
};
use proxy_tests::probe_origin::ProbeOrigin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ZONE: &str = "europe-west1-b";
const OTHER_ZONE: &str = "europe-west1-c";

async fn client(fake: &FakeGce) -> Instances {
    Instances::builder()
        .with_endpoint(fake.endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap()
}

/// An insert body like the provider's.
fn body(name: &str, user_data: &str) -> Instance {
    let nat = AccessConfig::new()
        .set_type(access_config::Type::OneToOneNat)
        .set_name("External NAT");
    Instance::new()
        .set_name(name)
        .set_machine_type(format!("zones/{ZONE}/machineTypes/e2-small"))
        .set_disks([AttachedDisk::new().set_boot(true).set_initialize_params(
            AttachedDiskInitializeParams::new()
                .set_source_image("projects/debian-cloud/global/images/family/debian-12"),
        )])
        .set_network_interfaces([NetworkInterface::new()
            .set_network("global/networks/default")
            .set_access_configs([nat])])
        .set_metadata(
            Metadata::new().set_items([metadata::Items::new()
                .set_key("user-data")
                .set_value(user_data)]),
        )
        .set_tags(Tags::new().set_items(["proxy-operator"]))
        .set_labels([("crawl-example-com_managed", "true")])
}

async fn fake_with_origin() -> (FakeGce, ProbeOrigin) {
    let origin = ProbeOrigin::start().await.unwrap();
    let fake = FakeGce::start(FakeOptions::with_squid(origin.hosts_file.clone()))
        .await
        .unwrap();
    (fake, origin)
}

/// Waits (bounded) until the fake holds the instance in a state `done` accepts.
async fn until(
    fake: &FakeGce,
    name: &str,
    what: &str,
    done: impl Fn(&Observed) -> bool,
) -> Observed {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = fake.instance(ZONE, name).filter(&done) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not {what} within 30 s: {:?}",
            fake.instance(ZONE, name)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Gets the instance through the client until it is RUNNING with a natIP, as the provider
/// polls, and returns it with that natIP.
async fn running_with_nat_ip(gce: &Instances, fake: &FakeGce, name: &str) -> (Instance, Ipv4Addr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = gce
            .get()
            .set_project(fake.project())
            .set_zone(ZONE)
            .set_instance(name)
            .send()
            .await
            .unwrap();
        let nat_ip = got.network_interfaces[0].access_configs[0].nat_ip.clone();
        if let (Some(instance::Status::Running), Some(ip)) = (&got.status, nat_ip) {
            return (got, ip.parse().unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "{name} not RUNNING with a natIP within 30 s: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The GCE reason of an error, as the client hands it over (an `ErrorInfo` detail).
fn reason(e: &Error) -> String {
    let details = e.status().map(|s| s.details.clone()).unwrap_or_default();
    details
        .into_iter()
        .find_map(|d| match d {
            StatusDetails::ErrorInfo(info) => Some(info.reason),
            _ => None,
        })
        .unwrap_or_default()
}

/// squid's status line for a CONNECT to `target`.
async fn connect_status(proxy: (Ipv4Addr, u16), target: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn refuses(addr: (Ipv4Addr, u16)) -> bool {
    std::net::TcpStream::connect(addr).is_err()
}

#[tokio::test]
async fn an_insert_becomes_a_running_vm_whose_squid_serves_through_its_nat_ip() {
    let (fake, origin) = fake_with_origin().await;
    let gce = client(&fake).await;
    let user_data = cloud_config(3130, &["127.0.0.0/8".to_owned()]);
    let op = gce
        .insert()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_request_id("7d0c1d8e-0000-4000-8000-000000000001")
        .set_body(body("px-serve", &user_data))
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(op.status, Some(operation::Status::Done));
    assert_eq!(op.progress, Some(100));
    assert!(op.end_time.is_some() && op.id.is_some());
    assert!(op.target_link.unwrap().ends_with(&format!(
        "/projects/proxy-tests/zones/{ZONE}/instances/px-serve"
    )));

    let (got, nat_ip) = running_with_nat_ip(&gce, &fake, "px-serve").await;
    // What the insert sent is kept; the server's fields are added.
    assert!(
        got.machine_type
            .unwrap()
            .ends_with(&format!("/zones/{ZONE}/machineTypes/e2-small"))
    );
    assert_eq!(
        got.labels
            .get("crawl-example-com_managed")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        got.metadata.unwrap().items[0].value.as_deref(),
        Some(user_data.as_str())
    );
    assert_eq!(got.tags.unwrap().items, ["proxy-operator"]);
    let disk = got.disks[0].initialize_params.clone().unwrap();
    assert_eq!(
        disk.source_image.as_deref(),
        Some("projects/debian-cloud/global/images/family/debian-12")
    );
    assert!(got.id.is_some() && got.label_fingerprint.is_some());
    let created: jiff::Timestamp = got.creation_timestamp.unwrap().parse().unwrap();
    assert!(created <= jiff::Timestamp::now());

    // A real request through the VM's squid, on the port its cloud-config set.
    let http = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{nat_ip}:3130")).unwrap())
        .tls_certs_only([reqwest::Certificate::from_pem(origin.ca_pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let status = http
        .get(origin.url("/generate_204?via=px-serve"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
    assert!(
        origin
            .requests()
            .iter()
            .any(|r| r.path == "/generate_204?via=px-serve")
    );

    let seen = fake.instance(ZONE, "px-serve").unwrap();
    assert!(seen.inserted_at.unwrap() <= seen.running_at.unwrap());
    assert_eq!(fake.calls(Method::Insert), 1);
    assert!(fake.calls(Method::OperationsGet) >= 1 && fake.calls(Method::Get) >= 1);
}

#[tokio::test]
async fn the_vms_squid_enforces_the_acl_and_port_of_its_cloud_config() {
    let (fake, origin) = fake_with_origin().await;
    let gce = client(&fake).await;
    let user_data = cloud_config(3131, &["192.0.2.0/24".to_owned()]);
    let insert = gce.insert().set_project(fake.project()).set_zone(ZONE);
    insert
        .set_body(body("px-acl", &user_data))
        .send()
        .await
        .unwrap();
    let (_, nat_ip) = running_with_nat_ip(&gce, &fake, "px-acl").await;
    let target = format!("probe.test:{}", origin.port);
    assert_eq!(
        connect_status((nat_ip, 3131), &target).await,
        "HTTP/1.1 403 Forbidden"
    );
    assert!(
        refuses((nat_ip, 3128)),
        "squid listens on the cloud-config's port only"
    );
    assert!(origin.requests().is_empty());
}

#[tokio::test]
async fn a_taken_name_is_409_and_a_repeated_request_id_answers_the_same_operation() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    let gce = client(&fake).await;
    let insert = |request_id: &str| {
        gce.insert()
            .set_project(fake.project())
            .set_zone(ZONE)
            .set_request_id(request_id)
            .set_body(body("px-dup", "#!/bin/sh\n"))
    };
    let first = insert("req-1").send().await.unwrap();
    let again = insert("req-1").send().await.unwrap();
    assert_eq!(again.name, first.name);
    assert_eq!(again.id, first.id);
    let e = insert("req-2").send().await.unwrap_err();
    assert_eq!(e.http_status_code(), Some(409));
    assert_eq!(reason(&e), "alreadyExists");
    // GCE's bodies have no `status`: the code is Unknown, the HTTP status is what counts.
    assert_eq!(e.status().unwrap().code, Code::Unknown);
    assert_eq!(fake.instances().len(), 1);
}

#[tokio::test]
async fn missing_instances_projects_and_zones_are_404() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    let gce = client(&fake).await;
    let get = |project: &str, zone: &str| {
        gce.get()
            .set_project(project)
            .set_zone(zone)
            .set_instance("px-none")
            .send()
    };
    let e = get("proxy-tests", ZONE).await.unwrap_err();
    assert_eq!(e.http_status_code(), Some(404));
    assert_eq!(reason(&e), "notFound");
    assert_eq!(
        e.status().unwrap().message,
        format!("The resource 'projects/proxy-tests/zones/{ZONE}/instances/px-none' was not found")
    );
    for (project, zone) in [("other-project", ZONE), ("proxy-tests", "mars-north1-a")] {
        assert_eq!(
            get(project, zone).await.unwrap_err().http_status_code(),
            Some(404),
            "{project} {zone}"
        );
    }
    let delete = gce
        .delete()
        .set_project("proxy-tests")
        .set_zone(ZONE)
        .set_instance("px-none");
    assert_eq!(
        delete.send().await.unwrap_err().http_status_code(),
        Some(404)
    );
}

#[tokio::test]
async fn invalid_inserts_are_400_naming_the_field_as_gce_does() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    let gce = client(&fake).await;
    let bogus_type = format!("zones/{ZONE}/machineTypes/bogus");
    let cases = [
        (
            body("px-1", "").set_machine_type(&bogus_type),
            format!(
                "Invalid value for field 'resource.machineType': '{bogus_type}'. Machine type with \
                 name 'bogus' does not exist in zone '{ZONE}'."
            ),
        ),
        (
            body("Px_1", ""),
            "Invalid value for field 'resource.name': 'Px_1'. Must be a match of regex".to_owned(),
        ),
        (
            body("px-1", "").set_labels([("crawl.example.com/managed", "true")]),
            "Label key 'crawl.example.com/managed' violates format constraints.".to_owned(),
        ),
        (
            body("px-1", "").set_labels([("managed", "True")]),
            "Label value 'True' violates format constraints.".to_owned(),
        ),
    ];
    for (instance, message) in cases {
        let insert = gce
            .insert()
            .set_project(fake.project())
            .set_zone(ZONE)
            .set_body(instance);
        let e = insert.send().await.unwrap_err();
        assert_eq!(e.http_status_code(), Some(400), "{message}");
        assert_eq!(reason(&e), "invalid");
        let got = e.status().unwrap().message.clone();
        assert!(
            got.contains(&message),
            "{got:?} does not contain {message:?}"
        );
    }
    assert!(fake.instances().is_empty());
}

/// Instances of two installations in two zones, added directly (with creation times, as GC
/// tests need them).
async fn two_installations(fake: &FakeGce) {
    let created: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
    for (zone, name, installation) in [
        (ZONE, "px-a1", "ours"),
        (ZONE, "px-a2", "ours"),
        (ZONE, "px-b1", "theirs"),
        (OTHER_ZONE, "px-a3", "ours"),
        (OTHER_ZONE, "px-a4", "ours"),
    ] {
        let labels = BTreeMap::from([
            ("managed".to_owned(), "true".to_owned()),
            ("installation".to_owned(), installation.to_owned()),
        ]);
        let spec = AddInstance {
            zone: zone.into(),
            name: name.into(),
            labels,
            created: Some(created),
            ..AddInstance::default()
        };
        fake.add_instance(spec).await.unwrap();
    }
}

#[tokio::test]
async fn list_and_aggregated_list_filter_by_label_and_page() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    two_installations(&fake).await;
    let gce = client(&fake).await;
    let ours = "(labels.managed = true) (labels.installation = ours)";

    let mut pages = gce
        .list()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_filter(ours)
        .set_max_results(1u32)
        .by_item();
    let mut names = Vec::new();
    while let Some(found) = pages.next().await {
        let found = found.unwrap();
        assert_eq!(found.status, Some(instance::Status::Running));
        assert_eq!(
            found.creation_timestamp.as_deref(),
            Some("2026-01-02T03:04:05.000Z")
        );
        names.push(found.name.unwrap());
    }
    assert_eq!(names, ["px-a1", "px-a2"]);
    assert_eq!(fake.calls(Method::List), 2, "one page per instance");

    let mut scopes = gce
        .aggregated_list()
        .set_project(fake.project())
        .set_filter(ours)
        .set_max_results(3u32)
        .by_item();
    let mut names = Vec::new();
    while let Some(scope) = scopes.next().await {
        let (_, scoped) = scope.unwrap();
        names.extend(scoped.instances.into_iter().filter_map(|i| i.name));
    }
    names.sort();
    assert_eq!(names, ["px-a1", "px-a2", "px-a3", "px-a4"]);
    assert_eq!(fake.calls(Method::AggregatedList), 2);

    // Nothing matches: no `items` at all, as GCE answers.
    let none = gce
        .list()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_filter("labels.owner:*")
        .send()
        .await
        .unwrap();
    assert!(none.items.is_empty() && none.next_page_token.is_none());
    let bad = gce
        .list()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_filter("labels.a == b")
        .send()
        .await;
    let e = bad.unwrap_err();
    assert_eq!(
        (e.http_status_code(), reason(&e)),
        (Some(400), "invalid".to_owned())
    );
}

#[tokio::test]
async fn an_unreachable_zone_fails_the_aggregated_list_unless_partial_success_is_asked_for() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    two_installations(&fake).await;
    fake.set_zone_unreachable(OTHER_ZONE, true);
    // The 4.1.0 client cannot ask for partial success: it sees a 503 (and retries it).
    let gce = Instances::builder()
        .with_endpoint(fake.endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .with_retry_policy(Aip194Strict.with_attempt_limit(2))
        .build()
        .await
        .unwrap();
    let e = gce
        .aggregated_list()
        .set_project(fake.project())
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.http_status_code(), Some(503));
    assert_eq!(
        fake.calls(Method::AggregatedList),
        2,
        "the client retries a 503 GET"
    );

    let url = format!(
        "{}/compute/v1/projects/proxy-tests/aggregated/instances?returnPartialSuccess=true&$alt=json",
        fake.endpoint()
    );
    let partial: serde_json::Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    assert_eq!(
        partial["unreachables"],
        serde_json::json!([format!("zones/{OTHER_ZONE}")])
    );
    assert_eq!(
        partial["items"][format!("zones/{OTHER_ZONE}")]["warning"]["code"],
        "UNREACHABLE"
    );
    assert_eq!(
        partial["items"][format!("zones/{ZONE}")]["instances"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        partial["items"]["zones/us-central1-a"]["warning"]["code"],
        "NO_RESULTS_ON_PAGE"
    );

    fake.set_zone_unreachable(OTHER_ZONE, false);
    let all = gce
        .aggregated_list()
        .set_project(fake.project())
        .send()
        .await
        .unwrap();
    assert_eq!(all.items[&format!("zones/{OTHER_ZONE}")].instances.len(), 2);
    assert!(all.unreachables.is_empty());
}

#[tokio::test]
async fn injected_insert_faults_reach_the_client_as_gce_sends_them() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    let gce = client(&fake).await;
    let insert = |name: &str, request_id: &str| {
        gce.insert()
            .set_project(fake.project())
            .set_zone(ZONE)
            .set_request_id(request_id)
            .set_body(body(name, ""))
    };
    let quota = "Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1.";

    fake.fail_next_inserts(1, InsertFault::Quota);
    fake.fail_next_inserts(1, InsertFault::RateLimited);
    let e = insert("px-q", "r-q").send().await.unwrap_err();
    assert_eq!(
        (e.http_status_code(), reason(&e)),
        (Some(403), "quotaExceeded".to_owned())
    );
    assert_eq!(e.status().unwrap().message, quota);
    let e = insert("px-q", "r-q").send().await.unwrap_err();
    assert_eq!(
        (e.http_status_code(), reason(&e)),
        (Some(429), "rateLimitExceeded".to_owned())
    );

    fake.fail_next_inserts(1, InsertFault::OperationQuota);
    fake.fail_next_inserts(1, InsertFault::ZoneExhausted);
    // The poller ends Ok with a failed operation: the error is in the operation's fields.
    let failed = insert("px-q", "r-op-1")
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(failed.status, Some(operation::Status::Done));
    assert_eq!(failed.http_error_status_code, Some(403));
    let error = failed.error.unwrap().errors[0].clone();
    assert_eq!(
        (error.code.as_deref(), error.message.as_deref()),
        (Some("QUOTA_EXCEEDED"), Some(quota))
    );
    let failed = insert("px-q", "r-op-2")
        .poller()
        .until_done()
        .await
        .unwrap();
    assert_eq!(failed.http_error_status_code, Some(503));
    let message = failed.error.unwrap().errors[0].message.clone().unwrap();
    assert!(
        message.contains("does not have enough resources available"),
        "{message}"
    );
    // The failed operation is what its requestId answers from then on; nothing was created.
    let again = insert("px-q", "r-op-2").send().await.unwrap();
    assert_eq!(again.status, Some(operation::Status::Done));
    assert_eq!(again.http_error_status_code, Some(503));
    assert_eq!(
        again.error.unwrap().errors[0].code.as_deref(),
        Some("ZONE_RESOURCE_POOL_EXHAUSTED")
    );
    assert!(fake.instances().is_empty());

    // The faults are used up: the next insert succeeds.
    insert("px-q", "r-ok").poller().until_done().await.unwrap();
    assert_eq!(
        fake.instance(ZONE, "px-q").map(|i| i.status),
        Some("RUNNING")
    );
}

#[tokio::test]
async fn injected_server_errors_reach_the_client_and_its_retries_are_counted() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    two_installations(&fake).await;
    let gce = client(&fake).await;
    let get = || {
        gce.get()
            .set_project(fake.project())
            .set_zone(ZONE)
            .set_instance("px-a1")
            .send()
    };

    fake.fail_next_requests(1, 500, Some(Method::Get));
    let e = get().await.unwrap_err();
    assert_eq!(
        (e.http_status_code(), reason(&e)),
        (Some(500), "backendError".to_owned())
    );
    assert_eq!(fake.calls(Method::Get), 1);
    // A 503 on a GET is retried by the client: the provider sees success, the fake two calls.
    fake.fail_next_requests(1, 503, Some(Method::Get));
    assert_eq!(get().await.unwrap().name.as_deref(), Some("px-a1"));
    assert_eq!(fake.calls(Method::Get), 3);
    // A fault of another method leaves gets alone; a POST is not retried.
    fake.fail_next_requests(1, 503, Some(Method::Insert));
    get().await.unwrap();
    let insert = gce
        .insert()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_body(body("px-5xx", ""));
    assert_eq!(
        insert.send().await.unwrap_err().http_status_code(),
        Some(503)
    );
}

#[tokio::test]
async fn slow_operations_follow_the_durations_set_at_run_time_and_wait_long_polls() {
    let fake = FakeGce::start(FakeOptions::address_only()).await.unwrap();
    let slow = Duration::from_millis(400);
    fake.set_durations(Durations {
        operation_start: Duration::ZERO,
        provisioning: slow,
        staging: slow,
        ..Durations::default()
    });
    let gce = client(&fake).await;
    let op = gce
        .insert()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_body(body("px-slow", ""))
        .send()
        .await
        .unwrap();
    assert_eq!(op.status, Some(operation::Status::Pending));
    assert_eq!(
        fake.instance(ZONE, "px-slow").unwrap().status,
        "PROVISIONING"
    );

    let operations = ZoneOperations::builder()
        .with_endpoint(fake.endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap();
    let done = operations
        .wait()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_operation(op.name.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        (done.status, done.progress),
        (Some(operation::Status::Done), Some(100))
    );
    assert_eq!(fake.calls(Method::OperationsWait), 1);
    let seen = until(&fake, "px-slow", "RUNNING with a natIP", |i| {
        i.nat_ip.is_some()
    })
    .await;
    assert!(seen.running_at.unwrap() - seen.inserted_at.unwrap() >= slow * 2);
}

#[tokio::test]
async fn a_vm_stopped_out_of_band_loses_its_nat_ip_and_its_squid() {
    let (fake, _origin) = fake_with_origin().await;
    let gce = client(&fake).await;
    let insert = gce
        .insert()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_body(body("px-stop", ""));
    insert.send().await.unwrap();
    let (_, nat_ip) = running_with_nat_ip(&gce, &fake, "px-stop").await;
    assert!(
        !refuses((nat_ip, 3128)),
        "without a squid cloud-config the VM runs the bed's squid on 3128"
    );

    fake.stop_out_of_band(ZONE, "px-stop").await.unwrap();
    let got = gce
        .get()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_instance("px-stop")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status, Some(instance::Status::Stopping));
    assert_eq!(got.network_interfaces[0].access_configs[0].nat_ip, None);
    assert!(refuses((nat_ip, 3128)));
    until(&fake, "px-stop", "STOPPED", |i| i.status == "STOPPED").await;
}

#[tokio::test]
async fn a_vm_can_run_without_a_nat_ip_until_it_is_shown() {
    let (fake, _origin) = fake_with_origin().await;
    fake.withhold_nat_ip_of_next(1);
    let gce = client(&fake).await;
    let insert = gce
        .insert()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_body(body("px-nonat", ""));
    insert.poller().until_done().await.unwrap();
    until(&fake, "px-nonat", "booted", |i| i.booted).await;
    let got = gce
        .get()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_instance("px-nonat")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status, Some(instance::Status::Running));
    assert_eq!(got.network_interfaces[0].access_configs[0].nat_ip, None);

    fake.set_nat_ip_withheld(ZONE, "px-nonat", false).unwrap();
    let (_, nat_ip) = running_with_nat_ip(&gce, &fake, "px-nonat").await;
    assert!(!refuses((nat_ip, 3128)));
}

#[tokio::test]
async fn a_deleted_vm_is_404_once_its_operation_is_done_and_its_squid_is_gone() {
    let (fake, _origin) = fake_with_origin().await;
    let gce = client(&fake).await;
    let insert = gce
        .insert()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_body(body("px-del", ""));
    insert.send().await.unwrap();
    let (_, nat_ip) = running_with_nat_ip(&gce, &fake, "px-del").await;

    let delete = gce
        .delete()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_instance("px-del")
        .set_request_id("del-1");
    let op = delete.send().await.unwrap();
    assert_eq!(op.operation_type.as_deref(), Some("delete"));
    let got = gce
        .get()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_instance("px-del")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status, Some(instance::Status::Stopping));
    let delete = gce
        .delete()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_instance("px-del")
        .set_request_id("del-1");
    let done = delete.poller().until_done().await.unwrap();
    assert_eq!(
        done.name, op.name,
        "the same requestId polls the same operation"
    );
    let e = gce
        .get()
        .set_project(fake.project())
        .set_zone(ZONE)
        .set_instance("px-del")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.http_status_code(), Some(404));
    assert!(refuses((nat_ip, 3128)));
    assert_eq!(fake.calls(Method::Delete), 2);
}

#[tokio::test]
async fn added_instances_run_with_or_without_a_squid() {
    let (fake, _origin) = fake_with_origin().await;
    for (name, squid) in [("px-orphan", true), ("px-dark", false)] {
        let spec = AddInstance {
            zone: ZONE.into(),
            name: name.into(),
            squid,
            ..AddInstance::default()
        };
        fake.add_instance(spec).await.unwrap();
        let seen = fake.instance(ZONE, name).unwrap();
        assert_eq!(seen.status, "RUNNING");
        assert_eq!(refuses((seen.nat_ip.unwrap(), 3128)), !squid, "{name}");
    }
    let bad = AddInstance {
        zone: ZONE.into(),
        name: "px-bad".into(),
        labels: BTreeMap::from([("a.b".into(), "c".into())]),
        ..AddInstance::default()
    };
    assert!(fake.add_instance(bad).await.is_err());
}
