//! The operator's prober against a real squid and the HTTPS probe origin, with no operator
//! around it: what each probe costs the origin's side to see.

use std::time::Duration;

use proxy_core::probe_schedule::ProbeSpec;
use proxy_operator::health::probe::Prober;
use proxy_tests::probe_origin::ProbeOrigin;
use proxy_tests::squid::Squid;

/// More probes at once than rustls's own session cache keeps tickets for one host (8), and
/// than the prober's own store kept before it was sized by the probe concurrency (64).
const AT_ONCE: usize = 96;

/// Every probe makes a new CONNECT and a new TLS handshake through the tunnel, and the
/// handshakes after the first round resume a session with the origin instead of
/// verifying its certificate chain again: all of them, with as many probes at once as the
/// prober was built for.
#[tokio::test]
async fn probes_through_a_real_squid_resume_their_tls_sessions() {
    let origin = ProbeOrigin::start().await.unwrap();
    let squid = Squid::start_own("prober", &origin.hosts_file)
        .await
        .unwrap();
    let addr = squid.addr;
    let prober = Prober::new(Some(origin.ca_pem.as_bytes()), AT_ONCE).unwrap();
    let round = |round: &'static str| {
        let prober = prober.clone();
        let url = origin.url(&format!("/generate_204?round={round}"));
        async move {
            let probes = (0..AT_ONCE).map(|_| {
                let spec = ProbeSpec {
                    proxy: format!("{addr}:3128"),
                    url: url.clone(),
                    timeout: Duration::from_secs(10),
                    expected_status_codes: vec![204],
                    egress_url: None,
                };
                let prober = prober.clone();
                async move { prober.probe(&spec, None).await }
            });
            for result in futures::future::join_all(probes).await {
                assert!(result.ok, "{result:?}");
            }
        }
    };
    round("first").await;
    round("second").await;

    let seen = |round: &str| {
        let tag = format!("round={round}");
        let requests: Vec<_> = origin
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with(&tag))
            .collect();
        (
            requests.len(),
            requests.iter().filter(|r| r.resumed).count(),
        )
    };
    // Each probe reached the origin on its own connection through the tunnel. The cache
    // starts empty, so the first round's handshakes are full ones, except for a probe whose
    // CONNECT was slow enough that an earlier probe had already stored a ticket (seen in CI:
    // 2 of 32 at once).
    let (first, first_resumed) = seen("first");
    assert_eq!(
        first, AT_ONCE,
        "the first round: every probe reached the origin"
    );
    assert!(
        first_resumed < AT_ONCE / 2,
        "the first round: mostly full handshakes, {first_resumed} of {AT_ONCE} resumed"
    );
    assert_eq!(
        seen("second"),
        (AT_ONCE, AT_ONCE),
        "the second round: all resumed"
    );
}
