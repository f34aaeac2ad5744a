//! Benchmark (not a test): 200 gcp Proxies to all Ready against the local Compute Engine API
//! (`proxy_tests::gce`: no usable GCE emulator exists), with a configured create latency,
//! then a burst of rate limits; one or two operator builds side by side in one run.
//!
//! The fake's VMs are real squids on loopback addresses, so Ready means what it means in
//! production: the VM runs, has its external IP, and a probe through its squid passed. The
//! release operator runs with its default settings but for the provisioning poll. The fake
//! counts rate quotas per project and minute as GCE does (1 500 reads and 1 500 writes).
//!
//! Prints, per build:
//! - (a) the time from applying the Proxies to all Ready, over the fake's minimum: the
//!   longest any of these VMs took from its insert to serving with a natIP (the configured
//!   latency plus squid's start, on this machine, under this load);
//! - (b) the Compute API calls per proxy by method on the way, against the minimum of one
//!   insert and one read (the goal of issue 50: at most 2.5 per proxy);
//! - (c) the calls per minute in steady state (`BENCH_STEADY_SECONDS` after all are Ready),
//!   for the fleet and per proxy;
//! - (e) a burst of rate limits (issue 50): every call answered `403 rateLimitExceeded`, in
//!   both body shapes by turns, for `BENCH_BURST_SECONDS` (25), with `BENCH_BURST_PROXIES`
//!   (20) new Proxies applied as it starts: the calls during the burst (the goal: at most
//!   (c)'s per minute), how many Ready Proxies left Ready (the goal: none), the rate-limit
//!   answers after it ended (a storm keeps going), and the time from its end until the new
//!   Proxies are all Ready, against the pause the operator's pacing was in when it ended
//!   (`proxy_operator_provider_pause_seconds`; the goal: within one pause, plus the VMs'
//!   own start), and where in its minute of the clock the burst began (GCE refills its
//!   quotas as each minute starts, and the pacing waits for that);
//! - (d) under quota (issue 38): `BENCH_QUOTA_PROXIES` more Proxies (default 20; 0 skips it)
//!   while every insert's operation ends with `QUOTA_EXCEEDED` for `BENCH_QUOTA_INTERVALS`
//!   (default 4) quota retry intervals of `BENCH_QUOTA_RETRY` seconds (default 10): the
//!   inserts per Proxy per retry interval (the goal is at most 1), then the time until all
//!   of them are Ready once the quota frees up.
//!
//! Run: `just bench-gcp` (or `cargo run -p proxy-tests --bin bench-gcp`). `BENCH_PROXIES`
//! (default 200), `BENCH_CREATE_SECONDS` (insert to RUNNING, default 5),
//! `BENCH_PROVISIONING_POLL` (seconds, default 1) and `BENCH_STEADY_SECONDS` (default 60)
//! change the run; `BENCH_OPERATOR` runs another operator binary instead of this tree's
//! release build, and `BENCH_BEFORE` runs an older build first, side by side with it
//! (`BENCH_BEFORE=<release binary of an older commit>`: the before and after of one run).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
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

/// The rate-limit answers of every method the fake gave.
fn rate_limited(gce: &FakeGce) -> u64 {
    Method::ALL.iter().map(|m| gce.rate_limited(*m)).sum()
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

/// What one run of one operator build measured, as lines of the table.
struct Figures {
    label: String,
    lines: Vec<(String, String)>,
}

impl Figures {
    fn add(&mut self, row: &str, value: String) {
        self.lines.push((row.to_owned(), value));
    }
}

/// The settings every run shares.
#[derive(Clone, Copy)]
struct Settings {
    n: usize,
    create_seconds: f64,
    provisioning_poll: f64,
    steady: Duration,
    burst: Duration,
    burst_proxies: usize,
    quota_retry: u64,
}

/// A Proxy named `name` of the gcp provider, probing `probe_url` every 5 s.
fn gcp_proxy(name: &str, probe_url: &str) -> Proxy {
    serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": name},
        "spec": {"mode": "Managed", "provider": "gcp", "healthCheck": {
            "probeURL": probe_url, "intervalSeconds": 5, "timeoutSeconds": 2}}
    }))
    .expect("a valid Proxy")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    proxy_tests::operator::log_as_deployed();
    let settings = Settings {
        n: env_or("BENCH_PROXIES", 200),
        create_seconds: env_or("BENCH_CREATE_SECONDS", 5.0),
        provisioning_poll: env_or("BENCH_PROVISIONING_POLL", 1.0),
        steady: Duration::from_secs(env_or("BENCH_STEADY_SECONDS", 60)),
        burst: Duration::from_secs(env_or("BENCH_BURST_SECONDS", 25)),
        burst_proxies: env_or("BENCH_BURST_PROXIES", 20),
        quota_retry: env_or("BENCH_QUOTA_RETRY", 10),
    };
    let mut builds: Vec<(String, PathBuf)> = Vec::new();
    if let Some(before) = std::env::var_os("BENCH_BEFORE") {
        builds.push(("before".to_owned(), PathBuf::from(before)));
    }
    let after = std::env::var_os("BENCH_OPERATOR")
        .map_or_else(|| release_binary().to_owned(), PathBuf::from);
    builds.push(("after".to_owned(), after));
    let mut table = Vec::new();
    for (label, binary) in &builds {
        eprintln!("bench-gcp: running {label}: {}", binary.display());
        table.push(run(label, binary, settings).await?);
    }
    println!(
        "bench-gcp: {} gcp Proxies, create latency {} s, provisioning poll {} s, drift poll \
         60 s, a {} s burst of rate limits with {} new Proxies (release builds, real squid \
         per VM, the fake's quotas 1 500 reads and 1 500 writes a minute)",
        settings.n,
        settings.create_seconds,
        settings.provisioning_poll,
        settings.burst.as_secs(),
        settings.burst_proxies
    );
    for (label, binary) in &builds {
        println!("  {label}: {}", binary.display());
    }
    let rows: Vec<&str> = table[0].lines.iter().map(|(r, _)| r.as_str()).collect();
    for (i, row) in rows.iter().enumerate() {
        println!("  {row}");
        for figures in &table {
            if let Some((_, value)) = figures.lines.get(i) {
                println!("      {:>6}: {value}", figures.label);
            }
        }
    }
    Ok(())
}

/// One build's whole run, on a fake and a namespace of its own.
async fn run(label: &str, binary: &std::path::Path, s: Settings) -> anyhow::Result<Figures> {
    let mut figures = Figures {
        label: label.to_owned(),
        lines: Vec::new(),
    };
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let origin = ProbeOrigin::start().await?;
    let half = Duration::from_secs_f64(s.create_seconds / 2.0);
    let gce = FakeGce::start(FakeOptions {
        durations: Durations {
            provisioning: half,
            staging: half,
            ..Durations::default()
        },
        ..FakeOptions::with_squid(origin.hosts_file.clone())
    })
    .await?;
    let ns = plane
        .namespace(&client, &format!("bench-gcp-{label}"))
        .await;
    let polls = Polls {
        provisioning: s.provisioning_poll,
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
        &["--quota-retry-seconds", &s.quota_retry.to_string()],
    )
    .without_log_check();
    tokio::time::sleep(Duration::from_secs(2)).await; // its watches are up
    let proxies: Api<Proxy> = Api::namespaced(client.clone(), &ns);
    let probe_url = origin.url("/generate_204");
    let before = calls(&gce);
    let started = Instant::now();
    stream::iter(0..s.n)
        .map(|i| {
            let proxies = proxies.clone();
            let proxy = gcp_proxy(&format!("gcp-{i:04}"), &probe_url);
            async move { proxies.create(&PostParams::default(), &proxy).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let every = Duration::from_millis(100);
    wait_all_ready(&proxies, s.n, Duration::from_secs(900), every, || {
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
    figures.add(
        "(a) apply to all Ready / the fake's minimum (slowest insert to natIP)",
        format!(
            "{:.2} s / {:.2} s = {:.2}",
            to_ready.as_secs_f64(),
            minimum.as_secs_f64(),
            to_ready.as_secs_f64() / minimum.as_secs_f64().max(0.001)
        ),
    );
    let total: u64 = to_ready_calls.values().sum();
    figures.add(
        "(b) Compute API calls per proxy to Ready (goal <= 2.5; minimum 2: an insert, a read)",
        format!(
            "{:.2} ({})",
            total as f64 / s.n as f64,
            per_proxy(&to_ready_calls, s.n)
        ),
    );
    let settled = calls(&gce);
    tokio::time::sleep(s.steady).await;
    let steady_calls = delta(&settled, &calls(&gce));
    let minutes = s.steady.as_secs_f64() / 60.0;
    let steady_total: u64 = steady_calls.values().sum();
    let steady_per_minute = steady_total as f64 / minutes;
    figures.add(
        "(c) steady state: calls per minute, fleet (per proxy)",
        format!(
            "{steady_per_minute:.1} ({:.3}: {})",
            steady_per_minute / s.n as f64,
            per_proxy(&steady_calls, s.n)
        ),
    );
    burst(
        &gce,
        &proxies,
        &probe_url,
        &operator,
        s,
        steady_per_minute,
        &mut figures,
    )
    .await?;
    under_quota(
        &gce,
        &proxies,
        &probe_url,
        Duration::from_secs(s.quota_retry),
        &operator,
        &mut figures,
    )
    .await?;
    Ok(figures)
}

/// The Proxies of `proxies` whose phase is not Ready, among those named with `prefix`.
async fn not_ready(proxies: &Api<Proxy>, prefix: &str) -> anyhow::Result<BTreeSet<String>> {
    let list = proxies.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase) != Some(Phase::Ready))
        .filter_map(|p| p.metadata.name)
        .filter(|name| name.starts_with(prefix))
        .collect())
}

/// (e): a burst of rate limits over a Ready fleet, with new Proxies applied as it starts.
async fn burst(
    gce: &FakeGce,
    proxies: &Api<Proxy>,
    probe_url: &str,
    operator: &Operator,
    s: Settings,
    steady_per_minute: f64,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    let (calls_before, limited_before) = (calls(gce), rate_limited(gce));
    gce.set_rate_limited(true);
    let started = Instant::now();
    // GCE refills its quotas as each minute of the clock starts, and the pacing waits for
    // that: where in its minute the burst began says how many minutes start within it.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()
        % 60.0;
    for i in 0..s.burst_proxies {
        let proxy = gcp_proxy(&format!("burst-{i:04}"), probe_url);
        proxies.create(&PostParams::default(), &proxy).await?;
    }
    let mut left_ready = BTreeSet::new();
    while started.elapsed() < s.burst {
        left_ready.extend(not_ready(proxies, "gcp-").await?);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pause = operator
        .metric_max("proxy_operator_provider_pause_seconds", "")
        .await;
    gce.set_rate_limited(false);
    let ended = Instant::now();
    let during = delta(&calls_before, &calls(gce));
    let limited_during = rate_limited(gce) - limited_before;
    let deadline = ended + Duration::from_secs(600);
    loop {
        left_ready.extend(not_ready(proxies, "gcp-").await?);
        if not_ready(proxies, "burst-").await?.is_empty() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Proxies applied during the burst were not Ready 10 min after it; operator \
             log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let new_ready = ended.elapsed();
    // The first insert of a new Proxy GCE took after the burst: when the pause let it go.
    let first_insert = gce
        .inserts()
        .iter()
        .filter(|(_, at, _)| *at >= ended)
        .map(|(_, at, _)| *at - ended)
        .min();
    let limited_after = rate_limited(gce) - limited_before - limited_during;
    let total: u64 = during.values().sum();
    figures.add(
        &format!(
            "(e) calls during the {} s burst (goal <= (c)'s per minute), of them rate-limited",
            s.burst.as_secs()
        ),
        format!(
            "{total} ({}), {limited_during} rate-limited; steady per minute {steady_per_minute:.1}",
            during
                .iter()
                .map(|(m, n)| format!("{m:?} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    figures.add(
        "(e) the burst began this far into a minute of the clock",
        format!("{into_minute:.1} s"),
    );
    figures.add(
        "(e) Ready Proxies that left Ready (goal 0)",
        left_ready.len().to_string(),
    );
    figures.add(
        "(e) rate-limit answers after the burst ended (a storm that keeps going)",
        limited_after.to_string(),
    );
    figures.add(
        "(e) after the burst's end: the first insert taken / the new Proxies all Ready (the \
         VMs' own start included) / the pause the pacing was in at the end (goal: the first \
         insert within it)",
        format!(
            "{} / {:.1} s / {}",
            first_insert.map_or_else(
                || "none".to_owned(),
                |d| format!("{:.1} s", d.as_secs_f64())
            ),
            new_ready.as_secs_f64(),
            pause.map_or_else(|| "n/a (no pacing)".to_owned(), |p| format!("{p:.0} s"))
        ),
    );
    Ok(())
}

/// (d): Proxies created while every insert's operation fails on quota.
async fn under_quota(
    gce: &FakeGce,
    proxies: &Api<Proxy>,
    probe_url: &str,
    retry: Duration,
    operator: &Operator,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    let m: usize = env_or("BENCH_QUOTA_PROXIES", 20);
    if m == 0 {
        return Ok(());
    }
    let intervals: u32 = env_or("BENCH_QUOTA_INTERVALS", 4);
    gce.fail_all_inserts(Some(InsertFault::OperationQuota));
    let inserts_before = gce.inserts().len();
    for i in 0..m {
        let proxy = gcp_proxy(&format!("quota-{i:04}"), probe_url);
        proxies.create(&PostParams::default(), &proxy).await?;
    }
    let window = retry * intervals;
    tokio::time::sleep(window).await;
    let inserts = gce.inserts().len() - inserts_before;
    gce.fail_all_inserts(None);
    let freed = Instant::now();
    let deadline = freed + Duration::from_secs(600);
    loop {
        let waiting = not_ready(proxies, "quota-").await?.len();
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
    figures.add(
        &format!(
            "(d) under quota for {intervals} retry intervals of {} s: inserts per Proxy per \
             interval (goal <= 1); all Ready after the quota freed up",
            retry.as_secs()
        ),
        format!(
            "{per:.2} ({inserts} inserts for {m} Proxies); {:.1} s",
            freed.elapsed().as_secs_f64()
        ),
    );
    Ok(())
}
