//! Egress verification, end to end: every squid of the bed sends its traffic from its own
//! loopback address, the probe origin answers the address it sees (`/client-address`), and
//! the operator shows each proxy's `egressIP` and `EgressVerified` condition. Two External
//! proxies in front of one squid are flagged `Shared` and left out by `distinctEgress`.

use std::collections::BTreeSet;
use std::time::Duration;

use proxy_crd::{Phase, Proxy};
use proxy_tests::operator::DISCOVERY_TOKEN;
use proxy_tests::squid::Squid;
use serde_json::{Value, json};

use crate::operated::{Bed, condition};

/// The EgressVerified condition's (status, reason) of `proxy`, if it has one.
fn egress_verified(proxy: &Proxy) -> Option<(String, String)> {
    condition(proxy, "EgressVerified")
}

/// The EgressVerified condition's message.
fn egress_message(proxy: &Proxy) -> String {
    let status = proxy.status.clone().unwrap_or_default();
    status
        .conditions
        .into_iter()
        .find(|c| c.type_ == "EgressVerified")
        .map(|c| c.message)
        .unwrap_or_default()
}

async fn discovery(
    bed: &Bed,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the discovery API answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The names `GET /v1/proxies?<query>` lists, once it lists `count` of them.
async fn listed(bed: &Bed, query: &str, count: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for _ in 0..100 {
        let (_, body) = discovery(
            bed,
            reqwest::Method::GET,
            &format!("/v1/proxies?{query}"),
            None,
        )
        .await;
        names = body["proxies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        if names.len() == count {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{query}: listed {names:?}, not {count} proxies");
}

#[tokio::test]
async fn each_proxy_leaves_from_its_own_address_and_shared_ones_are_flagged_and_left_out() {
    let mut bed = Bed::new("egress").await;
    let health = json!({
        "probeURL": bed.origin.url("/generate_204"),
        "egressURL": bed.origin.url("/client-address"),
        "intervalSeconds": 2, "timeoutSeconds": 1,
    });
    let proxy = |name: &str, spec: Value| -> Proxy {
        serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "labels": {"app": "egress"}}, "spec": spec
        }))
        .unwrap()
    };
    for name in ["m1", "m2"] {
        let spec =
            json!({"mode": "Managed", "provider": "pods", "maxLeases": 1, "healthCheck": health});
        bed.proxies
            .create(&Default::default(), &proxy(name, spec))
            .await
            .unwrap();
    }
    // Two External proxies in front of one squid of the test's own (the bed's policy: any
    // loopback client, no credentials), leaving from its address.
    let shared = Squid::start_own("egress-shared", &bed.origin.hosts_file)
        .await
        .unwrap();
    let addr = shared.addr;
    for name in ["e1", "e2"] {
        let spec = json!({"mode": "External", "endpoint": {"host": addr.to_string(), "port": 3128},
                          "healthCheck": health});
        bed.proxies
            .create(&Default::default(), &proxy(name, spec))
            .await
            .unwrap();
    }

    // Each Managed proxy leaves from its own address: the one its squid was given, which is
    // the address it publishes.
    let mut egress = BTreeSet::new();
    for name in ["m1", "m2"] {
        let ready = bed
            .wait_for(name, "Ready with a verified egress", |p| {
                let status = p.status.clone().unwrap_or_default();
                status.phase == Some(Phase::Ready)
                    && egress_verified(p) == Some(("True".into(), "Matches".into()))
            })
            .await;
        let status = ready.status.clone().unwrap();
        let egress_ip = status.egress_ip.clone().unwrap();
        let pod = proxy_core::naming::instance_name(ready.metadata.uid.as_deref().unwrap());
        let given = bed.runner.with_squid(&pod, |s| s.addr.to_string()).unwrap();
        assert_eq!(egress_ip, given, "{name}: the address its squid was given");
        assert_eq!(
            Some(&egress_ip),
            status.ip.as_ref(),
            "{name}: its published address"
        );
        println!(
            "egress check: {name} published {} egress {egress_ip} EgressVerified=True/Matches",
            status.ip.unwrap()
        );
        egress.insert(egress_ip);
    }
    assert_eq!(
        egress.len(),
        2,
        "two proxies, two egress addresses: {egress:?}"
    );

    // The two in front of one squid: flagged, each naming the other.
    for (name, other) in [("e1", "e2"), ("e2", "e1")] {
        let flagged = bed
            .wait_for(name, "flagged Shared", |p| {
                egress_verified(p) == Some(("False".into(), "Shared".into()))
            })
            .await;
        let status = flagged.status.clone().unwrap();
        assert_eq!(status.egress_ip.as_deref(), Some(addr.to_string().as_str()));
        let message = egress_message(&flagged);
        assert!(
            message.contains(&format!("{}/{other}", bed.ns)),
            "{message}"
        );
        println!(
            "egress check: {name} egress {} EgressVerified=False/Shared: {message}",
            addr
        );
        let notes = bed.event_notes(name, "EgressShared", "one proxy").await;
        assert!(
            notes.iter().any(|n| n.contains("one proxy")),
            "{name}: {notes:?}"
        );
    }

    // distinctEgress leaves them out of listings and leases.
    assert_eq!(
        listed(&bed, "selector=app=egress&healthy=true", 4)
            .await
            .len(),
        4
    );
    let distinct = listed(&bed, "selector=app=egress&distinctEgress=true", 2).await;
    assert_eq!(distinct, BTreeSet::from(["m1".to_owned(), "m2".to_owned()]));
    let body = json!({"selector": {"app": "egress"}, "distinctEgress": true, "ttlSeconds": 60});
    let mut leased = BTreeSet::new();
    for _ in 0..2 {
        let (status, lease) = discovery(
            &bed,
            reqwest::Method::POST,
            "/v1/leases",
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, 201, "{lease}");
        leased.insert(lease["proxy"]["name"].as_str().unwrap().to_owned());
    }
    assert_eq!(leased, distinct, "each Managed proxy once (maxLeases 1)");
    let (status, full) = discovery(&bed, reqwest::Method::POST, "/v1/leases", Some(body)).await;
    assert_eq!(
        (status, full["considered"].as_u64()),
        (409, Some(2)),
        "the shared proxies are not candidates: {full}"
    );
    shared.stop();
}
