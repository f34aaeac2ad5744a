//! The pod runner and the probe origin: a Pod becomes a real squid, and an HTTPS request
//! through that squid reaches the origin.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::probe_origin::ProbeOrigin;
use serde_json::json;

fn squid_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "squid", "image": "ubuntu/squid:6.6-24.04_beta",
                                  "ports": [{"containerPort": 3128}]}]}
    }))
    .unwrap()
}

/// The status of `/generate_204` fetched through the client's proxy.
async fn probe(
    http: &reqwest::Client,
    origin: &ProbeOrigin,
) -> reqwest::Result<reqwest::StatusCode> {
    Ok(http.get(origin.url("/generate_204")).send().await?.status())
}

fn client_through(proxy: &str, origin: &ProbeOrigin) -> reqwest::Client {
    client_with_timeout(proxy, origin, Duration::from_secs(5))
}

fn client_with_timeout(proxy: &str, origin: &ProbeOrigin, timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy).unwrap())
        .tls_certs_only([reqwest::Certificate::from_pem(origin.ca_pem.as_bytes()).unwrap()])
        .timeout(timeout)
        .build()
        .unwrap()
}

async fn running_pod_ip(pods: &Api<Pod>, name: &str) -> String {
    let running = await_condition(pods.clone(), name, conditions::is_pod_running());
    let pod = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the pod runner makes the Pod Running within 30 s")
        .unwrap()
        .unwrap();
    pod.status
        .unwrap()
        .pod_ip
        .expect("a Running Pod has a podIP")
}

/// One test's bed: a namespace with a pod runner, a probe origin, and one squid Pod running.
struct Running {
    runner: PodRunner,
    origin: ProbeOrigin,
    pods: Api<Pod>,
    ip: String,
}

async fn one_running_pod(prefix: &str, name: &str) -> Running {
    let crate::operated::Ground {
        client,
        ns,
        origin,
        runner,
    } = crate::operated::ground(ControlPlane::shared(), prefix).await;
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    pods.create(&PostParams::default(), &squid_pod(name))
        .await
        .unwrap();
    let ip = running_pod_ip(&pods, name).await;
    Running {
        runner,
        origin,
        pods,
        ip,
    }
}

#[tokio::test]
async fn a_pod_becomes_a_real_squid_that_proxies_https_to_the_origin() {
    let Running {
        runner,
        origin,
        pods,
        ip,
    } = one_running_pod("pods-squid", "squid-1").await;
    assert!(
        ip.starts_with("127."),
        "podIP {ip} is a loopback address of its own"
    );
    let pod = pods.get("squid-1").await.unwrap();
    let ready = pod
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");

    let http = client_through(&format!("http://{ip}:3128"), &origin);
    let response = http.get(origin.url("/generate_204")).send().await.unwrap();
    assert_eq!(response.status(), 204);
    // The origin saw the request come from squid, not from the test directly.
    let body = http
        .get(origin.url("/client-address"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        body, ip,
        "squid connects out from its own address, as a Pod would"
    );
    assert!(
        runner
            .with_squid("squid-1", |s| s.access_log())
            .unwrap()
            .contains("CONNECT probe.test")
    );

    // Deleting the Pod stops its squid and removes the Pod.
    pods.delete("squid-1", &DeleteParams::default())
        .await
        .unwrap();
    let gone = await_condition(pods.clone(), "squid-1", conditions::is_deleted(""));
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .expect("the Pod is removed")
        .unwrap();
    assert!(runner.running().is_empty());
    // squid takes a second or two to shut down after SIGTERM.
    let fresh = client_through(&format!("http://{ip}:3128"), &origin);
    let mut refused = false;
    for _ in 0..50 {
        if fresh.get(origin.url("/generate_204")).send().await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        refused,
        "squid still answers 10 s after its Pod was removed"
    );
}

#[tokio::test]
async fn a_hung_squid_times_out_and_answers_again_when_resumed_and_a_killed_one_refuses() {
    let Running {
        runner, origin, ip, ..
    } = one_running_pod("pods-faults", "squid-f").await;
    let http = client_with_timeout(
        &format!("http://{ip}:3128"),
        &origin,
        Duration::from_millis(1500),
    );
    assert_eq!(probe(&http, &origin).await.unwrap(), 204);

    runner.with_squid("squid-f", |s| s.hang()).unwrap();
    let hung = probe(&http, &origin).await.unwrap_err();
    assert!(hung.is_timeout(), "a hung squid times out: {hung}");

    runner.with_squid("squid-f", |s| s.resume()).unwrap();
    assert_eq!(probe(&http, &origin).await.unwrap(), 204);

    runner.with_squid("squid-f", |s| s.kill()).unwrap();
    let refused = probe(&http, &origin).await.unwrap_err();
    assert!(
        refused.is_connect(),
        "a killed squid refuses connections: {refused}"
    );
}

#[tokio::test]
async fn the_origin_answers_the_status_it_is_asked_for() {
    // The runner must live to the end of the test: dropping it stops its squids.
    let Running {
        origin,
        ip,
        runner: _runner,
        ..
    } = one_running_pod("pods-origin", "squid-s").await;
    let http = client_through(&format!("http://{ip}:3128"), &origin);
    assert_eq!(
        http.get(origin.url("/status/500"))
            .send()
            .await
            .unwrap()
            .status(),
        500
    );
    assert_eq!(
        http.get(origin.url("/nope")).send().await.unwrap().status(),
        404
    );
    assert_eq!(origin.requests().len(), 2);
}
