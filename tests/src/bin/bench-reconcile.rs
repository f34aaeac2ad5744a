//! Benchmark (not a test): how close does the operator get to the minimum API work when 200
//! Proxies are applied at once?
//!
//! On the test bed (real kube-apiserver and etcd; the pod runner in address-only mode, so
//! squid's start-up is not what is measured), in one run:
//! 1. baseline: create 200 Proxies, the 200 Pods they need, wait for the Pods to run, and
//!    write each Proxy's status directly — the least API work that ends in the same state;
//! 2. the release operator does the same from the 200 Proxies alone.
//!
//! Prints (a) the operator's time to all Provisioned divided by the baseline's, (b) the
//! operator's API writes per proxy (from the API server's own `apiserver_request_total`), and
//! (c) its status writes per proxy per minute in steady state (target 0).
//!
//! Step 2 runs once per value of `--max-concurrent-provider-calls` (until issue 40, the bound
//! was `--max-concurrent-reconciles`, which held every reconcile back) in
//! `BENCH_MAX_CONCURRENT_RECONCILES` (default `1,4,16,0`; 0 is unbounded), each with a fresh
//! operator in a fresh namespace, so the rows compare side by side against one baseline.
//! Each row also gives (d) the most provider calls the operator had in flight at once
//! (`proxy_operator_provider_calls_in_flight_max`, from its metrics) and (e) its CPU per proxy
//! until all are provisioned (user + system, all its threads, from `/proc`), and (f) its
//! reads of one object (`GET`) per proxy until then.
//!
//! Run: `just bench-reconcile` (or `cargo run -p proxy-tests --bin bench-reconcile`).
//! `BENCH_PROXIES` (default 200) and `BENCH_PROVISIONING_POLL` (seconds, default 1) change
//! the size and the operator's provisioning poll. `BENCH_BEFORE` names another operator
//! binary (an older commit's release build): each bound then runs it too, right before this
//! tree's, against the same baseline, so a change is measured before and after in one run.

use proxy_tests::proxy_status::provisioned;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher};
use proxy_crd::Proxy;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, release_binary};
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::process_usage::cpu_seconds;
use proxy_tests::write_counts::writes_and_reads;
use serde_json::json;
use std::path::Path;

const CONCURRENCY: usize = 16;
const STEADY_STATE: Duration = Duration::from_secs(60);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn proxy(i: usize) -> Proxy {
    serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": format!("bench-{i:04}")},
        "spec": {"mode": "Managed", "provider": "pods"}
    }))
    .expect("a valid Proxy")
}

async fn create_proxies(api: &Api<Proxy>, n: usize) -> anyhow::Result<Vec<Proxy>> {
    stream::iter(0..n)
        .map(|i| async move { api.create(&PostParams::default(), &proxy(i)).await })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .map_err(Into::into)
}

/// Waits until `done` holds for the objects, as a watch sees them (as `kubectl wait` does).
///
/// Until 2026-12-04 this listed every object each 100 ms: on 2 cores shared with the API
/// server and the operator, the benchmark's own lists (200 objects, 10 a second, decoded by
/// a debug build) took CPU from what it measures, more in the operator's step, which is
/// CPU-bound, than in the baseline's, which waits on the pod runner.
async fn wait_until<K>(
    api: &Api<K>,
    what: &str,
    done: impl Fn(&[Arc<K>]) -> bool,
) -> anyhow::Result<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let events = reflector(writer, watcher(api.clone(), watcher::Config::default()));
    let wait = async {
        let mut events = std::pin::pin!(events);
        let mut listed = false;
        while let Some(event) = events.try_next().await? {
            listed |= matches!(event, watcher::Event::InitDone);
            if listed && done(&store.state()) {
                return Ok(());
            }
        }
        anyhow::bail!("the watch for {what} ended")
    };
    tokio::time::timeout(Duration::from_secs(600), wait)
        .await
        .map_err(|_| anyhow::anyhow!("timed out waiting for {what}"))?
}

/// The requests the operator made between two counter snapshots: everything on proxies
/// except the benchmark's own creates, Pods (creates, deletes and reads), events, and
/// credentials Secrets. (The pod runner writes only Pod bindings and Pod status, and reads
/// no Pod.)
fn operator_requests(
    before: &BTreeMap<(String, String, String), f64>,
    after: &BTreeMap<(String, String, String), f64>,
) -> BTreeMap<String, f64> {
    let mut by_kind = BTreeMap::new();
    for (key @ (resource, subresource, verb), value) in after {
        let delta = value - before.get(key).copied().unwrap_or(0.0);
        let ours = match resource.as_str() {
            "proxies" => !(verb == "POST" && subresource.is_empty()),
            "pods" => subresource.is_empty(),
            "events" => true,
            // The credentials Secret of each proxy (since issue 17; counted since 2026-12-04).
            "secrets" => subresource.is_empty(),
            _ => false,
        };
        if ours && delta > 0.0 {
            *by_kind
                .entry(format!(
                    "{verb} {resource}{}",
                    if subresource.is_empty() {
                        String::new()
                    } else {
                        format!("/{subresource}")
                    }
                ))
                .or_insert(0.0) += delta;
        }
    }
    by_kind
}

/// What one operator run measured.
struct Run {
    concurrency: u16,
    to_provisioned: Duration,
    /// The operator's CPU seconds from the first create until all are provisioned.
    cpu: f64,
    writes: BTreeMap<String, f64>,
    /// The operator's reads of one object (`GET`) until all are provisioned.
    reads: BTreeMap<String, f64>,
    /// Health verdicts already written when the last proxy was provisioned: each is one
    /// status write and one event inside `writes` that provisioning did not make.
    early_verdicts: usize,
    first_verdicts: BTreeMap<String, f64>,
    steady_state: BTreeMap<String, f64>,
    max_in_flight: f64,
}

/// The operator's high-water mark of provider calls in flight, from its metrics.
async fn max_in_flight(operator: &Operator) -> anyhow::Result<f64> {
    let text = reqwest::get(&operator.metrics).await?.text().await?;
    Ok(text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"proxy_operator_provider_calls_in_flight_max{provider="pods"} "#)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

/// Step 2 for one `--max-concurrent-provider-calls`: a fresh operator creates `n` Proxies'
/// Pods.
async fn operator_run(
    plane: &ControlPlane,
    client: &kube::Client,
    binary: &Path,
    n: usize,
    provisioning_poll: f64,
    concurrency: u16,
) -> anyhow::Result<Run> {
    let ns = plane
        .namespace(client, &format!("bench-operator-c{concurrency}"))
        .await;
    let _runner = PodRunner::start_address_only(client.clone(), &ns).await?;
    let polls = Polls {
        provisioning: provisioning_poll,
        deletion: 1.0,
        drift: 10.0,
    };
    let concurrency_arg = concurrency.to_string();
    let operator = Operator::start_with(
        plane,
        &ns,
        binary,
        polls,
        None,
        &["--max-concurrent-provider-calls", &concurrency_arg],
    );
    tokio::time::sleep(Duration::from_secs(2)).await; // its watches are up
    let proxies: Api<Proxy> = Api::namespaced(client.clone(), &ns);
    let before = writes_and_reads(plane);
    let cpu_before = cpu_seconds(operator.pid())?;
    let started = Instant::now();
    create_proxies(&proxies, n).await?;
    if let Err(e) = wait_until(&proxies, "Proxies provisioned by the operator", |items| {
        items.iter().filter(|p| provisioned(p)).count() == n
    })
    .await
    {
        anyhow::bail!("{e}; operator log:\n{}", operator.log());
    }
    let to_provisioned = started.elapsed();
    let cpu = cpu_seconds(operator.pid())? - cpu_before;
    let provisioned_requests = writes_and_reads(plane);
    // A proxy is probed as soon as it has an address: the first verdicts of the proxies
    // provisioned early land before the last one is (a status write and an event each).
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let early_verdicts = events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("ProbeFailed" | "ProbeSucceeded")))
        .count();
    // Steady state starts once every proxy has its first health verdict (that first verdict
    // is a status write by design). The address-only Pods run no squid, so the verdicts are
    // Unhealthy; a verdict that does not change is never written again.
    wait_until(&proxies, "a health verdict on every proxy", |items| {
        items
            .iter()
            .filter(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Healthy" && c.status != "Unknown")
                })
            })
            .count()
            == n
    })
    .await?;
    let settled = writes_and_reads(plane);
    tokio::time::sleep(STEADY_STATE).await;
    let steady = writes_and_reads(plane);
    let (writes, reads) = operator_requests(&before, &provisioned_requests)
        .into_iter()
        .partition(|(kind, _)| !kind.starts_with("GET "));
    Ok(Run {
        concurrency,
        to_provisioned,
        cpu,
        writes,
        reads,
        early_verdicts,
        first_verdicts: operator_requests(&provisioned_requests, &settled),
        steady_state: operator_requests(&settled, &steady),
        max_in_flight: max_in_flight(&operator).await?,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    proxy_tests::operator::log_as_deployed();
    let n: usize = env_or("BENCH_PROXIES", 200);
    let provisioning_poll: f64 = env_or("BENCH_PROVISIONING_POLL", 1.0);
    let concurrencies: Vec<u16> = std::env::var("BENCH_MAX_CONCURRENT_RECONCILES")
        .unwrap_or_else(|_| "1,4,16,0".to_owned())
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("BENCH_MAX_CONCURRENT_RECONCILES: {v:?}: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let before = std::env::var_os("BENCH_BEFORE").map(std::path::PathBuf::from);
    let mut binaries: Vec<(&str, &Path)> = before
        .as_deref()
        .map(|path| ("before", path))
        .into_iter()
        .collect();
    binaries.push(("this tree", release_binary()));

    // 1. Baseline: the minimum API work for the same end state.
    let ns = plane.namespace(&client, "bench-baseline").await;
    let _runner = PodRunner::start_address_only(client.clone(), &ns).await?;
    let (proxies, pods): (Api<Proxy>, Api<Pod>) = (
        Api::namespaced(client.clone(), &ns),
        Api::namespaced(client.clone(), &ns),
    );
    let started = Instant::now();
    let created = create_proxies(&proxies, n).await?;
    stream::iter(&created)
        .map(|p| {
            let pods = pods.clone();
            let name = proxy_core::naming::instance_name(p.metadata.uid.as_deref().unwrap_or_default());
            async move {
                let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [
                    {"name": "squid", "image": "ubuntu/squid:6.6-24.04_beta", "ports": [{"containerPort": 3128}]}]}}))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    wait_until(&pods, "baseline Pods running", |items| {
        items.len() == n
            && items
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
    })
    .await?;
    let ips: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.status.and_then(|s| s.pod_ip).unwrap_or_default(),
            )
        })
        .collect();
    stream::iter(&created)
        .map(|p| {
            let proxies = proxies.clone();
            let pod = proxy_core::naming::instance_name(p.metadata.uid.as_deref().unwrap_or_default());
            let ip = ips[&pod].clone();
            let name = p.metadata.name.clone().unwrap_or_default();
            async move {
                let status = json!({"status": {"phase": "Provisioning", "ip": ip, "providerID": pod, "conditions": [
                    {"type": "Provisioned", "status": "True", "reason": "Created", "message": "", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}});
                proxies.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    wait_until(&proxies, "baseline Proxies provisioned", |items| {
        items.iter().filter(|p| provisioned(p)).count() == n
    })
    .await?;
    let baseline = started.elapsed();

    // 2. The operator, from the Proxies alone, once per concurrency bound.
    let mut runs = Vec::new();
    for &concurrency in &concurrencies {
        for &(label, binary) in &binaries {
            let run = operator_run(plane, &client, binary, n, provisioning_poll, concurrency);
            runs.push((label, run.await?));
        }
    }

    let minutes = STEADY_STATE.as_secs_f64() / 60.0;
    println!(
        "bench-reconcile: {n} Proxies, operator provisioning poll {provisioning_poll} s (release build)"
    );
    for (label, binary) in &binaries {
        println!("  operator {label}: {}", binary.display());
    }
    println!(
        "  baseline (create Proxies + Pods, write status directly): {:.2} s",
        baseline.as_secs_f64()
    );
    for (label, run) in &runs {
        let bound = match run.concurrency {
            0 => "unbounded".to_owned(),
            c => c.to_string(),
        };
        let total: f64 = run.writes.values().sum();
        // An empty f64 sum is -0.0; adding 0.0 prints it as 0.000.
        let status_writes: f64 = run
            .steady_state
            .iter()
            .filter(|(k, _)| k.ends_with("proxies/status"))
            .map(|(_, v)| v)
            .sum::<f64>()
            + 0.0;
        println!("  --max-concurrent-provider-calls {bound}, operator {label}:");
        println!(
            "    operator (create Proxies only):                        {:.2} s",
            run.to_provisioned.as_secs_f64()
        );
        println!(
            "    (a) time to all Provisioned, operator / baseline:      {:.2}",
            run.to_provisioned.as_secs_f64() / baseline.as_secs_f64()
        );
        println!(
            "    (b) API writes per proxy to get there:                 {:.2}",
            total / n as f64
        );
        for (kind, count) in &run.writes {
            println!("          {kind:<28} {:.2} per proxy", count / n as f64);
        }
        #[expect(clippy::cast_precision_loss, reason = "a count of events")]
        let early = run.early_verdicts as f64;
        println!(
            "        of which first health verdicts of proxies provisioned earlier: {} (a status write and an event each)",
            run.early_verdicts
        );
        println!(
            "    (b) without them, the writes of provisioning alone:   {:.2}",
            (total - 2.0 * early) / n as f64
        );
        let secrets: f64 = run
            .writes
            .iter()
            .filter(|(k, _)| k.ends_with(" secrets"))
            .map(|(_, v)| v)
            .sum();
        println!(
            "        and without the credentials Secret (as counted before): {:.2}",
            (total - 2.0 * early - secrets) / n as f64
        );
        println!(
            "    (f) API reads per proxy to get there (GET of one object): {:.2}",
            run.reads.values().sum::<f64>() / n as f64
        );
        for (kind, count) in &run.reads {
            println!("          {kind:<28} {:.2} per proxy", count / n as f64);
        }
        println!(
            "        then, until every proxy had its first health verdict: {:?}",
            run.first_verdicts
        );
        println!(
            "    (c) status writes per proxy per minute, steady state:  {:.3}",
            (status_writes / n as f64 / minutes).max(0.0)
        );
        println!(
            "        all operator writes and reads in the {:.0} s steady-state window: {:?}",
            STEADY_STATE.as_secs_f64(),
            run.steady_state
        );
        println!(
            "    (d) most provider calls in flight at once:             {}",
            run.max_in_flight
        );
        println!(
            "    (e) operator CPU per proxy to Provisioned:             {:.2} ms",
            run.cpu * 1000.0 / n as f64
        );
    }
    Ok(())
}
