//! Benchmark (not a test): how long from `kubectl apply` of new Proxies to `Ready`, at the
//! default health check interval (30 s)?
//!
//! On the test bed (real kube-apiserver and etcd, the pod runner starting a real squid per
//! Pod, the local HTTPS probe origin), the operator gets `BENCH_PROXIES` (default 50) new
//! Managed Proxies at once, each probed through itself with the default interval. Every
//! 100 ms the benchmark lists them and notes when each first shows `Provisioned=True` and
//! when it first shows phase `Ready`. The part that health scheduling owns is the wait
//! between the two: a proxy that was never probed should be probed as soon as the engine's
//! schedule takes it in (it is refreshed once a second), not up to one interval later.
//!
//! Prints, over the proxies: apply→Provisioned and Provisioned→Ready (median and worst), and
//! the worst Provisioned→Ready divided by the interval (near 0 when new proxies are probed
//! at once; up to 1 when their first probe is spread over an interval).
//!
//! Run: `just bench-ready` (or `cargo run -p proxy-tests --bin bench-ready`). The operator
//! is the debug build the e2e tests run: what is measured is scheduling, in seconds, not CPU.
//! `BENCH_PROVISIONING_POLL` (seconds, default 1) is the operator's provisioning poll.

use proxy_tests::proxy_status::provisioned;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, ListParams, PostParams};
use proxy_crd::{DEFAULT_INTERVAL_SECONDS, Phase, Proxy};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, binary};
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::probe_origin::ProbeOrigin;
use serde_json::json;

const CONCURRENCY: usize = 16;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median and the worst of `durations`, in seconds.
fn median_and_worst(durations: &mut [Duration]) -> (f64, f64) {
    durations.sort();
    let median = durations
        .get(durations.len() / 2)
        .copied()
        .unwrap_or_default();
    let worst = durations.last().copied().unwrap_or_default();
    (median.as_secs_f64(), worst.as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    proxy_tests::operator::log_as_deployed();
    let n: usize = env_or("BENCH_PROXIES", 50);
    let provisioning_poll: f64 = env_or("BENCH_PROVISIONING_POLL", 1.0);
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "bench-ready").await;
    let origin = ProbeOrigin::start().await?;
    let _runner = PodRunner::start(client.clone(), &ns, origin.hosts_file.clone()).await?;
    let polls = Polls {
        provisioning: provisioning_poll,
        deletion: 1.0,
        drift: 10.0,
    };
    let operator = Operator::start_with(plane, &ns, binary(), polls, Some(&origin.ca_pem), &[]);
    tokio::time::sleep(Duration::from_secs(5)).await; // it leads and its watches are up
    let proxies: Api<Proxy> = Api::namespaced(client.clone(), &ns);
    let url = origin.url("/generate_204");
    let started = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (proxies, url) = (proxies.clone(), url.clone());
            async move {
                let proxy: Proxy = serde_json::from_value(json!({
                    "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
                    "metadata": {"name": format!("ready-{i:03}")},
                    "spec": {"mode": "Managed", "provider": "pods", "healthCheck": {"probeURL": url}}
                }))?;
                proxies.create(&PostParams::default(), &proxy).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let applied = started.elapsed();
    let mut provisioned_at: BTreeMap<String, Duration> = BTreeMap::new();
    let mut ready_at: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = Duration::from_secs(300);
    while ready_at.len() < n {
        if started.elapsed() > deadline {
            anyhow::bail!(
                "{} of {n} Ready after {deadline:?}; operator log:\n{}",
                ready_at.len(),
                operator.log()
            );
        }
        for proxy in proxies.list(&ListParams::default()).await?.items {
            let name = proxy.metadata.name.clone().unwrap_or_default();
            let at = started.elapsed();
            if provisioned(&proxy) {
                provisioned_at.entry(name.clone()).or_insert(at);
            }
            if proxy.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready) {
                provisioned_at.entry(name.clone()).or_insert(at);
                ready_at.entry(name).or_insert(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut to_provisioned: Vec<Duration> = provisioned_at.values().copied().collect();
    let mut first_probe: Vec<Duration> = ready_at
        .iter()
        .map(|(name, ready)| ready.saturating_sub(provisioned_at[name]))
        .collect();
    let mut to_ready: Vec<Duration> = ready_at.values().copied().collect();
    let (provisioned_median, provisioned_worst) = median_and_worst(&mut to_provisioned);
    let (wait_median, wait_worst) = median_and_worst(&mut first_probe);
    let (ready_median, ready_worst) = median_and_worst(&mut to_ready);
    let interval = f64::from(DEFAULT_INTERVAL_SECONDS);
    println!(
        "bench-ready: {n} new Proxies, health check interval {interval} s (the default), \
         provisioning poll {provisioning_poll} s, debug build; applied in {:.2} s",
        applied.as_secs_f64()
    );
    println!(
        "  apply -> Provisioned:   median {provisioned_median:6.2} s, worst {provisioned_worst:6.2} s"
    );
    println!("  Provisioned -> Ready:   median {wait_median:6.2} s, worst {wait_worst:6.2} s");
    println!("  apply -> Ready:         median {ready_median:6.2} s, worst {ready_worst:6.2} s");
    println!(
        "  worst Provisioned -> Ready / interval: {:.3}",
        wait_worst / interval
    );
    Ok(())
}
