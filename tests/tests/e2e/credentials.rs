//! Credentials per proxy, end to end: the operator issues a Secret per Managed proxy, the
//! Pod's real squid enforces it (407 without it), the probe authenticates (the proxy turns
//! Ready), the lease answer carries it and works, a replacement gets new credentials and the
//! old ones stop working, and the password shows up nowhere the operator writes: its whole
//! output, the Events, `/debug/recording`, `/metrics`, the Proxy object.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use proxy_core::naming::credentials_secret_name;
use proxy_crd::{CREDENTIALS_SECRET_LABEL, Phase, Proxy};
use proxy_tests::operator::DISCOVERY_TOKEN;
use proxy_tests::probe_origin::HOST;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::operated::Bed;

/// `POST /v1/leases` for proxies labelled `app=creds`: status and body.
async fn lease(bed: &Bed) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/leases", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN)
        .json(&json!({"selector": {"app": "creds"}, "target": HOST, "ttlSeconds": 60}))
        .send()
        .await
        .expect("the discovery API answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Leases until the answer names the proxy at `host` (the discovery cache follows the
/// controller's within a moment), releasing the leases of any other address.
async fn lease_at(bed: &Bed, host: &str) -> Value {
    for _ in 0..100 {
        let (status, body) = lease(bed).await;
        if status == 201 && body["proxy"]["host"] == host {
            return body;
        }
        if let Some(id) = body["leaseID"].as_str() {
            reqwest::Client::new()
                .delete(format!("{}/v1/leases/{id}", bed.operator.discovery))
                .bearer_auth(DISCOVERY_TOKEN)
                .send()
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no lease of the proxy at {host}");
}

/// The status code squid answers a CONNECT to the origin with, sent by hand on a fresh
/// connection to `proxy` (`host:port`), with `Proxy-Authorization: Basic <basic>` if given.
async fn connect_status(proxy: &str, port: u16, basic: Option<(&str, &str)>) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let auth = basic.map_or(String::new(), |(user, password)| {
        let token = data_encoding::BASE64.encode(format!("{user}:{password}").as_bytes());
        format!("Proxy-Authorization: Basic {token}\r\n")
    });
    let request = format!("CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{auth}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 512];
    let n = stream.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {head:?}"))
}

/// Fetches the origin's `/client-address` through the proxy `url`: the status and body.
async fn through(bed: &Bed, url: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(url).unwrap())
        .tls_certs_only([reqwest::Certificate::from_pem(bed.origin.ca_pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let answer = client
        .get(bed.origin.url("/client-address"))
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// Waits until the Proxy is Ready at an address other than `not`, and returns the address.
async fn ready_at(bed: &mut Bed, not: Option<&str>) -> (Proxy, String) {
    let proxy = bed
        .wait_for("c1", "Ready at a new address", |p| {
            let status = p.status.clone().unwrap_or_default();
            status.phase == Some(Phase::Ready) && status.ip.is_some() && status.ip.as_deref() != not
        })
        .await;
    let ip = proxy.status.clone().unwrap().ip.unwrap();
    (proxy, ip)
}

#[tokio::test]
async fn each_proxy_gets_credentials_its_squid_enforces_and_that_leak_nowhere() {
    let mut bed = Bed::new("creds").await;
    let origin_port = bed.origin.port;
    let proxy: Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "c1", "labels": {"app": "creds"}},
        "spec": {"mode": "Managed", "provider": "pods", "healthCheck": {
            "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}}
    }))
    .unwrap();
    bed.proxies
        .create(&Default::default(), &proxy)
        .await
        .unwrap();
    // Ready: the probes authenticate, since squid answers 407 to anyone who does not.
    let (ready, ip) = ready_at(&mut bed, None).await;
    let uid = ready.metadata.uid.clone().unwrap();

    // The Secret: named after the Proxy, labelled, owned by it.
    let secrets: Api<Secret> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let secret = secrets.get(&credentials_secret_name(&uid)).await.unwrap();
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels[CREDENTIALS_SECRET_LABEL], "true");
    let owner = &secret.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Proxy", uid.as_str())
    );

    // From an allowed source without credentials: 407. With wrong ones: 407 too.
    let proxy_addr = format!("{ip}:3128");
    assert_eq!(connect_status(&proxy_addr, origin_port, None).await, 407);
    assert_eq!(
        connect_status(&proxy_addr, origin_port, Some(("c1", "wrong"))).await,
        407
    );

    // The lease answer: the URL with the credentials, and the parts; the URL works.
    let first = lease_at(&bed, &ip).await;
    let leased = &first["proxy"];
    let (user, password) = (
        leased["username"].as_str().unwrap().to_owned(),
        leased["password"].as_str().unwrap().to_owned(),
    );
    assert_eq!(user, "c1");
    assert_eq!(password.len(), 32, "{first}");
    assert_eq!(leased["url"], format!("http://{user}:{password}@{ip}:3128"));
    assert_eq!(
        (leased["host"].as_str(), leased["port"].as_u64()),
        (Some(ip.as_str()), Some(3128))
    );
    let (status, egress) = through(&bed, leased["url"].as_str().unwrap()).await;
    assert_eq!((status, egress.as_str()), (200, ip.as_str()));
    assert_eq!(
        connect_status(&proxy_addr, origin_port, Some((&user, &password))).await,
        200
    );

    // The listing never shows a password.
    let listing = reqwest::Client::new()
        .get(format!("{}/v1/proxies", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        listing.contains(&ip) && !listing.contains(&password),
        "{listing}"
    );

    // A replacement (a new port) gets new credentials; the old ones stop working.
    bed.proxies
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"port": 3129}})),
        )
        .await
        .unwrap();
    let (_, new_ip) = ready_at(&mut bed, Some(&ip)).await;
    let second = lease_at(&bed, &new_ip).await;
    let new_password = second["proxy"]["password"].as_str().unwrap().to_owned();
    assert_ne!(new_password, password, "a replacement gets new credentials");
    let new_addr = format!("{new_ip}:3129");
    assert_eq!(
        connect_status(&new_addr, origin_port, Some((&user, &password))).await,
        407,
        "the old password no longer works"
    );
    assert_eq!(
        connect_status(&new_addr, origin_port, Some((&user, &new_password))).await,
        200
    );
    let (status, _) = through(&bed, second["proxy"]["url"].as_str().unwrap()).await;
    assert_eq!(status, 200);

    // Neither password anywhere the operator writes.
    let recording = bed.operator.recording(None).await;
    assert!(
        recording.contains("IssueCredentials"),
        "the recording names the Secret"
    );
    let metrics = reqwest::get(&bed.operator.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let events = serde_json::to_string(&events.list(&Default::default()).await.unwrap()).unwrap();
    let object = serde_json::to_string(&bed.proxies.get("c1").await.unwrap()).unwrap();
    let log = bed.operator.log();
    for secret in [&password, &new_password] {
        for (place, text) in [
            ("the operator's output", &log),
            ("the Events", &events),
            ("/debug/recording", &recording),
            ("/metrics", &metrics),
            ("the Proxy object", &object),
        ] {
            assert!(
                !text.contains(secret.as_str()),
                "the password is in {place}"
            );
        }
    }

    // Deleted with the Proxy, through the finalizer path.
    bed.proxies
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..300 {
        if secrets
            .get_opt(&credentials_secret_name(&uid))
            .await
            .unwrap()
            .is_none()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the credentials Secret outlived its Proxy");
}

#[tokio::test]
async fn an_external_proxy_authenticates_with_the_secret_it_names() {
    let mut bed = Bed::new("creds-ext").await;
    let health = json!({"probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1});
    // A squid that wants credentials: a Managed proxy's, with its issued Secret.
    let managed: Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "c1"},
        "spec": {"mode": "Managed", "provider": "pods", "healthCheck": health}
    }))
    .unwrap();
    bed.proxies
        .create(&Default::default(), &managed)
        .await
        .unwrap();
    let (ready, ip) = ready_at(&mut bed, None).await;
    let secret = credentials_secret_name(ready.metadata.uid.as_deref().unwrap());
    let external = |name: &str, reference: Option<&str>| -> Proxy {
        let mut spec = json!({"mode": "External", "endpoint": {"host": ip, "port": 3128},
                              "healthCheck": health});
        if let Some(reference) = reference {
            spec["credentialsSecretRef"] = json!({"name": reference});
        }
        serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "labels": {"app": "creds"}}, "spec": spec
        }))
        .unwrap()
    };
    for proxy in [external("with", Some(&secret)), external("without", None)] {
        bed.proxies
            .create(&Default::default(), &proxy)
            .await
            .unwrap();
    }
    // Named: the probe authenticates, the proxy is Ready, its lease carries the credentials.
    bed.wait_for("with", "Ready", |p| {
        p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
    })
    .await;
    // Not named: squid answers the probe with 407, and the condition says so.
    let refused = bed
        .wait_for("without", "Unhealthy", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Unhealthy)
        })
        .await;
    let healthy = refused
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Healthy")
        .unwrap();
    assert!(
        healthy.message.contains("requires credentials (407)"),
        "{}",
        healthy.message
    );
    let lease = lease_at(&bed, &ip).await;
    assert_eq!(lease["proxy"]["name"], "with", "{lease}");
    let (status, egress) = through(&bed, lease["proxy"]["url"].as_str().unwrap()).await;
    assert_eq!((status, egress.as_str()), (200, ip.as_str()));
}
