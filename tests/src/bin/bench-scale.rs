//! Benchmark (not a test): the operator at fleet scale, 1 000 and 10 000 External proxies
//! over real squids (issue 20, goal 2).
//!
//! On the test bed (real kube-apiserver and etcd), with a few dozen real squids on loopback
//! addresses in front of the HTTPS probe origin, many proxies per squid (as bench-health
//! does), the release operator runs with its default configuration, once per fleet size, in
//! a fresh namespace. For each size it prints:
//!
//! - its resident memory idle, with every proxy Ready, and the marginal memory per proxy;
//!   then sampled every 10 s through the steady window, to show whether it stays flat;
//! - the time from the first create to all Ready, over one probe interval;
//! - the operator's CPU per probe in the steady window (the whole process: in steady state
//!   the prober is nearly all of it);
//! - status writes per second in the steady window (the API server's own counts);
//! - `GET /v1/proxies` p50 and p99 (sequential requests with the bearer token).
//!
//! Run: `just bench-scale` (or `cargo run -p proxy-tests --bin bench-scale`; it builds and
//! runs the *release* operator). `BENCH_SIZES` (default `1000,10000`), `BENCH_SQUIDS`
//! (default 40), `BENCH_INTERVAL` (the probe interval, seconds, default 30, the CRD's
//! default) and `BENCH_STEADY` (the steady window, seconds, default 300) change it;
//! `BENCH_OPERATOR` runs another operator binary (an older commit's, or a wrapper that starts
//! it under a heap profiler). All traffic stays on loopback addresses; `tests/bed/reap.sh`
//! stops every squid when it exits.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, ListParams, PostParams};
use proxy_crd::{Phase, Proxy};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{DISCOVERY_TOKEN, Operator, Polls, release_binary};
use proxy_tests::probe_origin::ProbeOrigin;
use proxy_tests::squid::{Squid, next_loopback_addr};
use proxy_tests::write_counts::{status_writes, writes};
use serde_json::json;

const PORT: u16 = 3128;
/// Creates in flight at once.
const CREATE_CONCURRENCY: usize = 32;
/// How often the memory is sampled in the steady window.
const SAMPLE: Duration = Duration::from_secs(10);
/// `GET /v1/proxies` requests per size.
const LISTS: usize = 60;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident memory of `pid`, in bytes (`VmRSS` of `/proc/PID/status`).
fn rss(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))?;
    Ok(kib * 1024.0)
}

/// User + system CPU seconds of the whole process `pid`.
fn cpu_seconds(pid: u32, ticks_per_second: f64) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // "pid (name) state ...": split after the last ')'; utime and stime are fields 14, 15.
    let after = &stat[stat.rfind(')').unwrap_or(0) + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| -> f64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    Ok((field(11) + field(12)) / ticks_per_second)
}

const MIB: f64 = 1024.0 * 1024.0;

fn proxy(origin: &ProbeOrigin, run: &str, i: usize, host: Ipv4Addr, interval: u32) -> Proxy {
    let name = format!("px-{i:05}");
    serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": name, "labels": {"geo": if i.is_multiple_of(2) { "eu" } else { "us" }}},
        "spec": {
            "mode": "External",
            "endpoint": {"host": host.to_string(), "port": PORT},
            "healthCheck": {
                "probeURL": origin.url(&format!("/generate_204?run={run}&p={name}")),
                "intervalSeconds": interval
            }
        }
    }))
    .expect("a valid Proxy")
}

/// The `p`-th percentile (0..=100) of `sorted`.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let index = (sorted.len().saturating_sub(1) * p).div_ceil(100);
    sorted.get(index).copied().unwrap_or_default()
}

/// What one fleet size measured.
struct Measured {
    n: usize,
    created: Duration,
    to_ready: Duration,
    rss_idle: f64,
    rss_ready: f64,
    rss_steady: Vec<f64>,
    steady: Duration,
    probes: usize,
    cpu: f64,
    status_writes: f64,
    list_p50: Duration,
    list_p99: Duration,
    list_bytes: usize,
}

struct Bench<'a> {
    plane: &'a ControlPlane,
    client: kube::Client,
    origin: &'a ProbeOrigin,
    squids: &'a [Squid],
    addrs: &'a [Ipv4Addr],
    binary: &'a Path,
    interval: u32,
    steady: Duration,
    ticks_per_second: f64,
}

impl Bench<'_> {
    async fn run(&self, n: usize) -> anyhow::Result<Measured> {
        let ns = self
            .plane
            .namespace(&self.client, &format!("bench-scale-{n}"))
            .await;
        let polls = Polls {
            provisioning: 1.0,
            deletion: 1.0,
            drift: 60.0,
        };
        // The operator's default leadership timings, not the test bed's fast ones: a 2 s
        // renew deadline on a loaded machine loses the claim, and every reconcile with it.
        let operator = Operator::start_with(
            self.plane,
            &ns,
            self.binary,
            polls,
            Some(&self.origin.ca_pem),
            &[
                "--leadership-duration-seconds",
                "15",
                "--leadership-renew-deadline-seconds",
                "10",
                "--leadership-retry-period-seconds",
                "2",
            ],
        );
        let http = reqwest::Client::new();
        // Up and leading: its discovery API answers and its watches are running.
        let list_url = format!("{}/v1/proxies", operator.discovery);
        let deadline = Instant::now() + Duration::from_secs(60);
        while http
            .get(&list_url)
            .bearer_auth(DISCOVERY_TOKEN)
            .send()
            .await
            .map_or(true, |r| !r.status().is_success())
        {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the operator did not start:\n{}",
                operator.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let pid = operator.pid();
        let rss_idle = rss(pid)?;

        let proxies: Api<Proxy> = Api::namespaced(self.client.clone(), &ns);
        let started = Instant::now();
        stream::iter(0..n)
            .map(|i| {
                let proxies = proxies.clone();
                let object = proxy(
                    self.origin,
                    &ns,
                    i,
                    self.addrs[i % self.addrs.len()],
                    self.interval,
                );
                async move { proxies.create(&PostParams::default(), &object).await }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        let created = started.elapsed();
        let deadline = Instant::now() + Duration::from_secs(30 * 60);
        loop {
            let list = proxies.list(&ListParams::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
                .count();
            if ready == n {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{ready} of {n} Ready after 30 min; operator log:\n{}",
                operator.log()
            );
            // Listing 10 000 Proxies costs this (debug) process most of a core: look less
            // often the larger the fleet (every 1 s at 1 000, 6 s at 10 000).
            let every = 1 + u64::try_from(n / 2_000).unwrap_or(u64::MAX);
            tokio::time::sleep(Duration::from_secs(every)).await;
        }
        let to_ready = started.elapsed();
        let rss_ready = rss(pid)?;

        // The steady window: every proxy Ready, nothing changing but the probes.
        let writes_before = writes(self.plane);
        let cpu_before = cpu_seconds(pid, self.ticks_per_second)?;
        let window_start = Instant::now();
        let mut rss_steady = Vec::new();
        while window_start.elapsed() < self.steady {
            tokio::time::sleep(SAMPLE).await;
            rss_steady.push(rss(pid)?);
        }
        let steady = window_start.elapsed();
        let cpu = cpu_seconds(pid, self.ticks_per_second)? - cpu_before;
        let writes_after = writes(self.plane);
        let window_end = window_start + steady;
        let run = format!("run={ns}&");
        let probes = self
            .origin
            .requests()
            .iter()
            .filter(|r| r.at >= window_start && r.at <= window_end && r.path.contains(&run))
            .count();

        let mut lists = Vec::with_capacity(LISTS);
        let mut list_bytes = 0;
        for _ in 0..LISTS {
            let at = Instant::now();
            let body = http
                .get(&list_url)
                .bearer_auth(DISCOVERY_TOKEN)
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await?;
            lists.push(at.elapsed());
            list_bytes = body.len();
        }
        lists.sort();
        drop(operator);
        Ok(Measured {
            n,
            created,
            to_ready,
            rss_idle,
            rss_ready,
            rss_steady,
            steady,
            probes,
            cpu,
            status_writes: status_writes(&writes_before, &writes_after),
            list_p50: percentile(&lists, 50),
            list_p99: percentile(&lists, 99),
            list_bytes,
        })
    }
}

fn report(m: &Measured, interval: u32, squids: usize) {
    let n = m.n as f64;
    let steady_s = m.steady.as_secs_f64();
    println!(
        "  {} External proxies over {squids} squids, probe interval {interval} s:",
        m.n
    );
    println!(
        "    RSS idle {:.1} MiB, all Ready {:.1} MiB: marginal {:.1} KiB per proxy",
        m.rss_idle / MIB,
        m.rss_ready / MIB,
        (m.rss_ready - m.rss_idle) / n / 1024.0
    );
    let (min, max) = m
        .rss_steady
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let last = m.rss_steady.last().copied().unwrap_or_default();
    println!(
        "    RSS over the {:.0} s steady window (every {} s): min {:.1}, max {:.1}, last {:.1} MiB; \
         first {:.1} MiB",
        steady_s,
        SAMPLE.as_secs(),
        min / MIB,
        max / MIB,
        last / MIB,
        m.rss_steady.first().copied().unwrap_or_default() / MIB
    );
    println!(
        "    samples (MiB): {}",
        m.rss_steady
            .iter()
            .map(|v| format!("{:.1}", v / MIB))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "    time to all Ready: {:.1} s = {:.2} probe intervals (creating the {} Proxies took {:.1} s)",
        m.to_ready.as_secs_f64(),
        m.to_ready.as_secs_f64() / f64::from(interval),
        m.n,
        m.created.as_secs_f64()
    );
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let probes = m.probes as f64;
    println!(
        "    steady window: {} probes ({:.1}/s), operator CPU {:.2} s = {:.1}% of one core, {:.0} us per probe",
        m.probes,
        probes / steady_s,
        m.cpu,
        100.0 * m.cpu / steady_s,
        1e6 * m.cpu / probes.max(1.0)
    );
    println!(
        "    status writes in the steady window: {:.0} = {:.2} per second",
        m.status_writes,
        m.status_writes / steady_s
    );
    println!(
        "    GET /v1/proxies ({} requests, {} bytes): p50 {:.1} ms, p99 {:.1} ms",
        LISTS,
        m.list_bytes,
        m.list_p50.as_secs_f64() * 1e3,
        m.list_p99.as_secs_f64() * 1e3
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "1000,10000".to_owned())
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("BENCH_SIZES: {v:?}: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let squid_count: usize = env_or("BENCH_SQUIDS", 40);
    let interval: u32 = env_or("BENCH_INTERVAL", 30);
    let steady = Duration::from_secs(env_or("BENCH_STEADY", 300));
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let other = std::env::var_os("BENCH_OPERATOR").map(PathBuf::from);
    let binary = other.as_deref().unwrap_or_else(|| release_binary());
    let origin = ProbeOrigin::start().await?;
    let addrs: Vec<Ipv4Addr> = (0..squid_count).map(|_| next_loopback_addr()).collect();
    let squids = {
        let (addrs, hosts) = (addrs.clone(), origin.hosts_file.clone());
        tokio::task::spawn_blocking(move || {
            addrs
                .iter()
                .map(|addr| Squid::start(&format!("scale-{addr}"), *addr, PORT, &hosts))
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await??
    };
    let ticks_per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    let bench = Bench {
        plane,
        client,
        origin: &origin,
        squids: &squids,
        addrs: &addrs,
        binary,
        interval,
        steady,
        ticks_per_second,
    };
    println!(
        "bench-scale: operator {} (default configuration), {} squids, {} CPUs",
        binary.display(),
        bench.squids.len(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    for &n in &sizes {
        let measured = bench.run(n).await?;
        report(&measured, interval, squids.len());
    }
    Ok(())
}
