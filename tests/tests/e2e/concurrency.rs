//! `--max-concurrent-provider-calls` bounds what a mass apply fires at a provider: with 40
//! Proxies applied at once and a bound of 2, the operator never has more than 2 provider
//! calls of reconciles in flight (the metered decorator's high-water mark, read from its
//! metrics). The decorator also counts the calls of the two loops that call the provider
//! besides the reconciles, one at a time each: GC's `list` and the provider health `check`
//! (the leader checks at the start of its term, while the mass apply runs). Each that ran
//! may add one to the mark.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, PostParams};
use proxy_crd::Proxy;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, binary};
use proxy_tests::pod_runner::PodRunner;
use serde_json::json;

use crate::metrics::scrape;
use crate::operated::provisioned;

const PROXIES: usize = 40;
const BOUND: &str = "2";

#[tokio::test]
async fn a_mass_apply_never_has_more_provider_calls_in_flight_than_the_bound() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "bounded").await;
    // Pods get an address but run no squid: provisioning is what is measured.
    let _runner = PodRunner::start_address_only(client.clone(), &ns)
        .await
        .unwrap();
    let operator = Operator::start_with(
        plane,
        &ns,
        binary(),
        Polls::FAST,
        None,
        &["--max-concurrent-provider-calls", BOUND],
    );
    let proxies: Api<Proxy> = Api::namespaced(client, &ns);
    stream::iter(0..PROXIES)
        .map(|i| {
            let proxies = proxies.clone();
            async move {
                let proxy: Proxy = serde_json::from_value(json!({
                    "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
                    "metadata": {"name": format!("mass-{i:02}")},
                    "spec": {"mode": "Managed", "provider": "pods"}
                }))
                .unwrap();
                proxies.create(&PostParams::default(), &proxy).await
            }
        })
        .buffer_unordered(PROXIES)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let mut done = 0;
    for _ in 0..1200 {
        let list = proxies.list(&Default::default()).await.unwrap();
        done = list.items.iter().filter(|p| provisioned(p)).count();
        if done == PROXIES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        done,
        PROXIES,
        "not every Proxy was provisioned within 120 s; operator log:\n{}",
        operator.log()
    );
    let metrics = scrape(&operator.metrics).await;
    let max = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"proxy_operator_provider_calls_in_flight_max{provider="pods"} "#)
        })
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no in-flight high-water mark in:\n{metrics}"));
    let ran = |op: &str| {
        let series =
            format!(r#"proxy_operator_provider_requests_total{{provider="pods",op="{op}","#);
        metrics.lines().any(|l| l.starts_with(&series))
    };
    let others = u32::from(ran("list")) + u32::from(ran("check"));
    let bound: u32 = BOUND.parse().unwrap();
    assert!(
        (1..=bound + others).contains(&max),
        "{max} provider calls were in flight at once, bound {bound} for the reconciles \
         plus {others} for GC's list and the provider check that ran"
    );
}

/// The bound is per provider, and holds back only provider calls (issue 40): while a slow
/// cloud holds its one permit (each gcp insert takes 4 s, the bound is 1), Proxies of the
/// kubernetes provider, and External ones, are reconciled and become Ready meanwhile. With
/// one bound for every reconcile, the gcp reconciles waiting on their inserts held every
/// slot, and the others waited behind them.
#[tokio::test]
async fn a_slow_provider_holds_back_only_its_own_proxies() {
    let mut bed = crate::operated::Bed::with_gce(
        "perprovider",
        &[
            "--max-concurrent-provider-calls",
            "1",
            "--max-concurrent-reconciles",
            "8",
        ],
    )
    .await;
    bed.gce().set_insert_latency(Some(Duration::from_secs(4)));
    for i in 0..4 {
        bed.create(&format!("slow-{i}"), crate::gcp::gcp_spec(&bed, json!({})))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    for i in 0..3 {
        bed.create(
            &format!("pod-{i}"),
            json!({"mode": "Managed", "provider": "pods"}),
        )
        .await;
    }
    for i in 0..3 {
        bed.wait_for(&format!("pod-{i}"), "provisioned", provisioned)
            .await;
    }
    let pods_took = started.elapsed();
    let gcp_inserts = bed.gce().inserts().len();
    assert!(
        gcp_inserts < 4,
        "the Pods waited for every gcp insert: {gcp_inserts} inserts in {pods_took:?}"
    );
    assert!(
        pods_took < Duration::from_secs(8),
        "3 Pods took {pods_took:?} behind the slow provider"
    );
    bed.gce().set_insert_latency(None);
}
