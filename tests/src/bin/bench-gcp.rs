//! Benchmark (not a test): 200 gcp Proxies to all Ready against the local Compute Engine API
//! (`proxy_tests::gce`: no usable GCE emulator exists), with a configured create latency.
//!
//! The fake's VMs are real squids on loopback addresses, so Ready means what it means in
//! production: the VM runs, has its external IP, and a probe through its squid passed. The
//! release operator runs with its default settings but for the provisioning poll.
//!
//! Prints:
//! - (a) the time from applying the Proxies to all Ready, over the fake's minimum: the
//!   longest any of these VMs took from its insert to serving with a natIP (the configured
//!   latency plus squid's start, on this machine, under this load);
//! - (b) the Compute API calls per proxy by method on the way, against the minimum of one
//!   insert and one get (the goal is at most 1.5 times that);
//! - (c) the calls per proxy per minute in steady state (60 s after all are Ready);
//! - (d) under quota (issue 38): `BENCH_QUOTA_PROXIES` more Proxies (default 20) while every
//!   insert's operation ends with `QUOTA_EXCEEDED` for `BENCH_QUOTA_INTERVALS` (default 4)
//!   quota retry intervals of `BENCH_QUOTA_RETRY` seconds (default 10): the inserts per
//!   Proxy per retry interval (the goal is at most 1: one insert per interval), then the
//!   time until all of them are Ready once the quota frees up.
//!
//! Run: `just bench-gcp` (or `cargo run -p proxy-tests --bin bench-gcp`). `BENCH_PROXIES`
//! (default 200), `BENCH_CREATE_SECONDS` (insert to RUNNING, default 5),
//! `BENCH_PROVISIONING_POLL` (seconds, default 1) and `BENCH_STEADY_SECONDS` (default 60)
//! change the run; `BENCH_OPERATOR` runs another operator binary (an older build, for a
//! before and after).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, ListParams, PostParams};
use proxy_crd::{Phase, Proxy};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::gce::{Durations, FakeGce, FakeOptions, InsertFault, Method};
use proxy_tests::operator::{Operator, Polls, release_binary};
use proxy_tests::probe_origin::ProbeOrigin;
use proxy_tests::proxy_status::wait_all_ready;
use serde_json::json;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The calls of each method the fake has answered.
fn calls(gce: &FakeGce) -> BTreeMap<Method, u64> {
    Method::ALL.map(|m| (m, gce.calls(m))).into()
}

fn delta(before: &BTreeMap<Method, u64>, after: &BTreeMap<Method, u64>) -> BTreeMap<Method, u64> {
    after
        .iter()
        .map(|(m, n)| (*m, n - before.get(m).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn per_proxy(calls: &BTreeMap<Method, u64>, n: usize) -> String {
    let parts: Vec<String> = calls
        .iter()
        .map(|(m, c)| format!("{m:?} {:.2}", *c as f64 / n as f64))
        .collect();
    parts.join(", ")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    proxy_tests::operator::log_as_deployed();
    let n: usize = env_or("BENCH_PROXIES", 200);
    let create_seconds: f64 = env_or("BENCH_CREATE_SECONDS", 5.0);
    let provisioning_poll: f64 = env_or("BENCH_PROVISIONING_POLL", 1.0);
    let steady = Duration::from_secs(env_or("BENCH_STEADY_SECONDS", 60));
    let quota_retry: u64 = env_or("BENCH_QUOTA_RETRY", 10);
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let other = std::env::var_os("BENCH_OPERATOR").map(std::path::PathBuf::from);
    let binary = other.as_deref().unwrap_or_else(|| release_binary());
    let origin = ProbeOrigin::start().await?;
    let half = Duration::from_secs_f64(create_seconds / 2.0);
    let gce = FakeGce::start(FakeOptions {
        durations: Durations {
            provisioning: half,
            staging: half,
            ..Durations::default()
        },
        ..FakeOptions::with_squid(origin.hosts_file.clone())
    })
    .await?;
    let ns = plane.namespace(&client, "bench-gcp").await;
    let polls = Polls {
        provisioning: provisioning_poll,
        deletion: 10.0,
        drift: 60.0,
    };
    let operator = Operator::start_with_providers(
        plane,
        &ns,
        binary,
        polls,
        Some(&origin.ca_pem),
        &gce.provider_entry("gcp"),
        &["--quota-retry-seconds", &quota_retry.to_string()],
    );
    tokio::time::sleep(Duration::from_secs(2)).await; // its watches are up
    let proxies: Api<Proxy> = Api::namespaced(client.clone(), &ns);
    let probe_url = origin.url("/generate_204");
    let before = calls(&gce);
    let started = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let proxies = proxies.clone();
            let proxy: Proxy = serde_json::from_value(json!({
                "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
                "metadata": {"name": format!("gcp-{i:04}")},
                "spec": {"mode": "Managed", "provider": "gcp", "healthCheck": {
                    "probeURL": probe_url, "intervalSeconds": 5, "timeoutSeconds": 2}}
            }))
            .expect("a valid Proxy");
            async move { proxies.create(&PostParams::default(), &proxy).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let every = Duration::from_millis(100);
    wait_all_ready(&proxies, n, Duration::from_secs(900), every, || {
        operator.log()
    })
    .await?;
    let to_ready = started.elapsed();
    let to_ready_calls = delta(&before, &calls(&gce));
    let minimum = gce
        .instances()
        .iter()
        .filter_map(|vm| Some(vm.running_at? - vm.inserted_at?))
        .max()
        .unwrap_or_default();
    let settled = calls(&gce);
    tokio::time::sleep(steady).await;
    let steady_calls = delta(&settled, &calls(&gce));

    let total: u64 = to_ready_calls.values().sum();
    let minutes = steady.as_secs_f64() / 60.0;
    let steady_total: u64 = steady_calls.values().sum();
    println!(
        "bench-gcp: {n} gcp Proxies, create latency {create_seconds} s, provisioning poll \
         {provisioning_poll} s, drift poll 60 s (release build, real squid per VM)"
    );
    println!(
        "  (a) apply to all Ready: {:.2} s; the fake's minimum (slowest insert to natIP): {:.2} s; \
         ratio {:.2}",
        to_ready.as_secs_f64(),
        minimum.as_secs_f64(),
        to_ready.as_secs_f64() / minimum.as_secs_f64().max(0.001)
    );
    println!(
        "  (b) Compute API calls per proxy to Ready: {:.2} ({}); minimum 2 (one insert, one get); \
         ratio {:.2}",
        total as f64 / n as f64,
        per_proxy(&to_ready_calls, n),
        total as f64 / n as f64 / 2.0
    );
    println!(
        "  (c) steady state: {:.2} calls per proxy per minute ({})",
        steady_total as f64 / n as f64 / minutes,
        per_proxy(&steady_calls, n)
    );
    under_quota(
        &gce,
        &proxies,
        &probe_url,
        Duration::from_secs(quota_retry),
        &operator,
    )
    .await
}

/// (d): Proxies created while every insert's operation fails on quota.
async fn under_quota(
    gce: &FakeGce,
    proxies: &Api<Proxy>,
    probe_url: &str,
    retry: Duration,
    operator: &Operator,
) -> anyhow::Result<()> {
    let m: usize = env_or("BENCH_QUOTA_PROXIES", 20);
    let intervals: u32 = env_or("BENCH_QUOTA_INTERVALS", 4);
    gce.fail_all_inserts(Some(InsertFault::OperationQuota));
    let inserts_before = gce.inserts().len();
    for i in 0..m {
        let proxy: Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": format!("quota-{i:04}")},
            "spec": {"mode": "Managed", "provider": "gcp", "healthCheck": {
                "probeURL": probe_url, "intervalSeconds": 5, "timeoutSeconds": 2}}
        }))?;
        proxies.create(&PostParams::default(), &proxy).await?;
    }
    let window = retry * intervals;
    tokio::time::sleep(window).await;
    let inserts = gce.inserts().len() - inserts_before;
    gce.fail_all_inserts(None);
    let freed = Instant::now();
    let deadline = freed + Duration::from_secs(600);
    loop {
        let list = proxies.list(&ListParams::default()).await?;
        let waiting = list
            .items
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("quota-"))
            })
            .filter(|p| p.status.as_ref().and_then(|s| s.phase) != Some(Phase::Ready))
            .count();
        if waiting == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{waiting} of {m} not Ready 10 min after the quota freed up; operator log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let per = inserts as f64 / m as f64 / f64::from(intervals);
    println!(
        "  (d) under quota (every insert's operation ends QUOTA_EXCEEDED) for {intervals} retry \
         intervals of {} s: {inserts} inserts for {m} Proxies, {per:.2} per Proxy per interval \
         (goal at most 1.00); all Ready {:.1} s after the quota freed up",
        retry.as_secs(),
        freed.elapsed().as_secs_f64()
    );
    Ok(())
}
