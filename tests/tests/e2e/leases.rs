//! Leases end to end: a crawler leases a Ready proxy through the operator's discovery API,
//! sends a real HTTPS request through it, reports a rate limit, and releases it.

use std::time::Duration;

use proxy_crd::Phase;
use proxy_tests::operator::DISCOVERY_TOKEN;
use serde_json::{Value, json};

use crate::operated::Bed;

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the discovery API answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap()
            },
        )
    }

    async fn lease(&self, target: &str) -> (u16, Value) {
        let body = json!({"selector": {"geo": "eu"}, "target": target, "ttlSeconds": 120});
        self.call(
            reqwest::Method::POST,
            "/v1/leases",
            Some(body),
            Some(DISCOVERY_TOKEN),
        )
        .await
    }
}

#[tokio::test]
async fn a_crawler_leases_a_ready_proxy_uses_it_reports_a_rate_limit_and_releases_it() {
    let mut bed = Bed::new("leases").await;
    let spec = json!({"mode": "Managed", "provider": "pods", "maxLeases": 1, "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    let proxy: proxy_crd::Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "eu-1", "labels": {"geo": "eu"}}, "spec": spec
    }))
    .unwrap();
    bed.proxies
        .create(&Default::default(), &proxy)
        .await
        .unwrap();
    let ready = bed
        .wait_for("eu-1", "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    let ip = ready.status.unwrap().ip.unwrap();
    let api = Api {
        base: bed.operator.discovery.clone(),
        http: reqwest::Client::new(),
    };

    // Without the token: 401, with the machine code.
    let (status, body) = api
        .call(reqwest::Method::GET, "/v1/proxies", None, None)
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    // The discovery cache follows the controller's within a moment.
    let mut listed = Value::Null;
    for _ in 0..50 {
        let (_, body) = api
            .call(
                reqwest::Method::GET,
                "/v1/proxies?healthy=true&selector=geo=eu",
                None,
                Some(DISCOVERY_TOKEN),
            )
            .await;
        if body["count"] == 1 {
            listed = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed["proxies"][0]["host"], ip.as_str(), "{listed}");

    // Lease it and send a real HTTPS request through it.
    let (status, lease) = api.lease("probe.test").await;
    assert_eq!(status, 201, "{lease}");
    // With the proxy's own credentials (the e2e `credentials` tests go into them).
    let url = lease["proxy"]["url"].as_str().unwrap();
    assert!(
        url.starts_with("http://eu-1:") && url.ends_with(&format!("@{ip}:3128")),
        "{url}"
    );
    let through = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(lease["proxy"]["url"].as_str().unwrap()).unwrap())
        .tls_certs_only([reqwest::Certificate::from_pem(bed.origin.ca_pem.as_bytes()).unwrap()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let answer = through
        .get(bed.origin.url("/client-address"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.text().await.unwrap(),
        ip,
        "the origin saw the proxy's own egress address"
    );
    assert!(
        bed.runner
            .with_squid(
                &proxy_core::naming::instance_name(ready.metadata.uid.as_deref().unwrap()),
                |s| s.access_log()
            )
            .unwrap()
            .contains("CONNECT probe.test")
    );

    // At capacity (maxLeases 1): no second lease, and the 409 says why.
    let (status, full) = api.lease("other.example").await;
    assert_eq!(
        (status, full["error"].as_str(), full["atCapacity"].as_u64()),
        (409, Some("no_match"), Some(1)),
        "{full}"
    );

    // The site rate-limited us: report it, release the lease.
    let id = lease["leaseID"].as_str().unwrap();
    let (status, _) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/leases/{id}/report"),
            Some(json!({"result": "rate_limited"})),
            Some(DISCOVERY_TOKEN),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = api
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/leases/{id}"),
            None,
            Some(DISCOVERY_TOKEN),
        )
        .await;
    assert_eq!(status, 204);

    // The released capacity is free, but not for the site that rate-limited this proxy.
    let (status, cooled) = api.lease("probe.test").await;
    assert_eq!(
        (status, cooled["inCooldown"].as_u64()),
        (409, Some(1)),
        "{cooled}"
    );
    let (status, other) = api.lease("other.example").await;
    assert_eq!(status, 201, "{other}");
    assert_eq!(other["proxy"]["name"], "eu-1");
}
