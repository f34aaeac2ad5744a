//! The leader gate through the real path: a reconcile whose provider call is still running
//! when another replica takes the claim writes nothing after it.
//!
//! To hold a provider call open for as long as the test needs, an admission webhook (a
//! small HTTPS server in this process, registered with the real API server for Pod creates in
//! this test's namespace only) keeps the operator's Pod create waiting. While it waits, the
//! test writes another holder into the leadership Lease; once the operator has logged the
//! loss, the webhook lets the create through. The reconcile then reaches the second
//! decision's metadata write (the spec-hash annotation of the new instance), which the
//! controller did not check leadership for before issue 12, then its status write and its
//! events, all without the claim: the gate must drop the first of them, count it, and end the
//! reconcile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, PostParams};
use proxy_tests::certs::Ca;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::leadership::{logged, take_claim, until_leading};
use crate::operated::{Bed, provisioned};

/// An admission webhook that holds every review until it is released, and counts them.
struct HoldingWebhook {
    url: String,
    ca_pem: String,
    held: watch::Receiver<usize>,
    release: Arc<Notify>,
}

impl HoldingWebhook {
    async fn start() -> Self {
        let ca = Ca::new("gate-webhook-ca");
        let leaf = ca.server(&["127.0.0.1"]);
        let certs = vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (count, held) = watch::channel(0usize);
        let count = Arc::new(count);
        let release = Arc::new(Notify::new());
        let released = release.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, count, released) =
                    (acceptor.clone(), count.clone(), released.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let Some(uid) = review_uid(&mut tls).await else {
                        return;
                    };
                    count.send_modify(|n| *n += 1);
                    released.notified().await;
                    let body = json!({
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": uid, "allowed": true}
                    })
                    .to_string();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(response.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self {
            url: format!("https://127.0.0.1:{port}/validate"),
            ca_pem: ca.cert_pem,
            held,
            release,
        }
    }

    /// Lets every held review through, and every later one at once.
    fn open(&self) {
        self.release.notify_waiters();
        // Reviews that arrive from now on find a stored permit each time: keep one there.
        self.release.notify_one();
    }
}

/// Reads one HTTP request and returns the AdmissionReview's `request.uid`.
async fn review_uid(
    stream: &mut tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
) -> Option<String> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())?;
        if data.len() >= end + 4 + length {
            let review: Value = serde_json::from_slice(&data[end + 4..end + 4 + length]).ok()?;
            return review["request"]["uid"].as_str().map(str::to_owned);
        }
    }
}

#[tokio::test]
async fn a_reconcile_that_lost_the_claim_during_its_provider_call_writes_nothing_after_it() {
    let mut bed = Bed::new("gate").await;
    let client = bed.proxies.clone().into_client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &bed.ns);
    until_leading(&leases, &bed.operator).await;

    let webhook = HoldingWebhook::start().await;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let name = format!("hold-pods-{}", bed.ns);
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "hold.gate.test",
            "clientConfig": {"url": webhook.url, "caBundle": ByteString(webhook.ca_pem.clone().into_bytes())},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": bed.ns}},
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 30
        }]
    }))
    .unwrap();
    configs
        .create(&PostParams::default(), &config)
        .await
        .unwrap();

    let drops = |kind: &'static str| {
        let operator = &bed.operator;
        async move {
            operator
                .metric_sum(
                    "proxy_operator_writes_dropped_total",
                    &format!(r#"kind="{kind}""#),
                )
                .await
        }
    };
    assert_eq!(drops("status").await, 0);
    bed.create("g1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    // The operator's Pod create is now held at the webhook.
    let mut held = webhook.held.clone();
    tokio::time::timeout(Duration::from_secs(30), held.wait_for(|n| *n >= 1))
        .await
        .expect("the operator's Pod create never reached the webhook")
        .unwrap();

    // Another replica takes the claim (for long enough that the operator cannot take it back
    // before the reconcile ends), and the operator notices.
    take_claim(&leases, "intruder", 8).await;
    logged(&bed.operator, &["lost leadership", "intruder"]).await;
    webhook.open();

    // The reconcile goes on without the claim: its next write, the status (the hash
    // annotation went out with the finalizer, before the call), is dropped and counted, the
    // reconcile stops there, and no status reaches the Proxy.
    let started = Instant::now();
    while drops("status").await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no status write was dropped; operator log:\n{}",
            bed.operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    logged(
        &bed.operator,
        &["reconcile stopped", "no longer the leader"],
    )
    .await;
    let proxy = bed.proxies.get("g1").await.unwrap();
    assert_eq!(
        proxy.status, None,
        "a status was written after the claim was lost"
    );
    for kind in ["metadata", "event"] {
        assert_eq!(
            drops(kind).await,
            0,
            "the reconcile went on past the refused status write to a {kind} write"
        );
    }

    // Once the intruder's claim runs out, the operator leads again, finds the Pod its
    // create made, and provisions the Proxy with it.
    bed.wait_for("g1", "Provisioned after regaining the claim", provisioned)
        .await;
    assert_eq!(bed.pod_count().await, 1, "one Pod");
    configs
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
