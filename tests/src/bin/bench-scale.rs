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
//! - the time from the first create to all Ready, and from the last create to all Ready,
//!   over one probe interval (issue 40's goal: the latter at most 1 at 10 000);
//! - the operator's CPU per probe in the steady window (the whole process: in steady state
//!   the prober is nearly all of it), and the share of those probes' TLS handshakes the
//!   origin saw resume a session (a full one verifies the certificate chain again);
//! - status writes of Proxies from the first create to all Ready, per proxy, and per second
//!   in the steady window (the API server's own counts);
//! - `GET /v1/proxies` p50 and p99 (sequential requests with the bearer token);
//! - then a loaded window of its own (goal 6; `proxy_tests::leadership_load`), with
//!   `BENCH_LISTERS` clients listing every proxy back to back and `BENCH_LEASERS` clients
//!   acquiring and releasing leases back to back (4 each): the lists and lease pairs served;
//! - leadership (goal 6): the age of the leadership Lease's `spec.renewTime`, sampled every
//!   250 ms from the first create on (p50, p99, max on the way to Ready, in the steady
//!   window and in the loaded window), the claims the operator lost (`lost leadership` in
//!   its log) and the reconciles stopped because it no longer led
//!   (`proxy_operator_reconcile_errors_total{class="not_leader"}`, and the log lines that say
//!   `no longer the leader`). `BENCH_BUSY` busy-loop processes (default 0) run from the
//!   first create to the end, as outside CPU load.
//!
//! Run: `just bench-scale` (or `cargo run -p proxy-tests --bin bench-scale`; it builds and
//! runs the *release* operator). `BENCH_SIZES` (default `1000,10000`), `BENCH_SQUIDS`
//! (default 40), `BENCH_INTERVAL` (the probe interval, seconds, default 30, the CRD's
//! default), `BENCH_STEADY` (the steady window, seconds, default 300) and `BENCH_LOADED`
//! (the loaded window, seconds, default 120; 0 skips it) change it;
//! `BENCH_OPERATOR` runs another operator binary (an older commit's, or a wrapper that starts
//! it under a heap profiler; a wrapper must `exec` the operator, since the RSS and CPU above
//! are read from the PID it starts). All traffic stays on loopback addresses; `tests/bed/reap.sh`
//! stops every squid when it exits.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{Api, PostParams};
use proxy_crd::Proxy;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::leadership_load::{self, Load, RenewAges, Sampler, percentile};
use proxy_tests::operator::{DISCOVERY_TOKEN, Operator, Polls, release_binary};
use proxy_tests::probe_origin::ProbeOrigin;
use proxy_tests::process_usage::{cpu_seconds, resident_bytes};
use proxy_tests::proxy_status::{ready_since, wait_all_ready};
use proxy_tests::run_dir::subdir;
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

/// Resident memory of `pid`, in bytes.
fn rss(pid: u32) -> anyhow::Result<f64> {
    Ok(resident_bytes(pid)? as f64)
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

/// Busy-loop processes, outside CPU load; killed when dropped.
struct Busy(Vec<Child>);

impl Busy {
    fn start(count: usize) -> anyhow::Result<Self> {
        // The run directory in the command line: tests/bed/reap.sh kills them too.
        let tag = subdir("busy");
        (0..count)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .arg(&tag)
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(anyhow::Error::from)
            })
            .collect::<anyhow::Result<_>>()
            .map(Self)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the leadership samples and the operator's log and metrics say, over one size's run.
struct Leadership {
    /// Renew ages from the first create to all Ready, in the steady window, in the loaded
    /// window.
    phases: Vec<(&'static str, RenewAges)>,
    /// `lost leadership` lines in the operator's log.
    losses: usize,
    /// Reconciles stopped because the operator no longer led (its metric).
    not_leader: u64,
    /// Log lines that say `no longer the leader`.
    not_leader_lines: usize,
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
    /// Of `probes`, those whose TLS handshake resumed a session (no certificate to verify).
    resumed: usize,
    cpu: f64,
    status_writes: f64,
    ramp_status_writes: f64,
    turns: ReadyTurns,
    list_p50: Duration,
    list_p99: Duration,
    list_bytes: usize,
    recording: Recording,
    loaded: Option<leadership_load::Measured>,
    leadership: Leadership,
}

/// When the Proxies turned Ready, read from their own `Ready` conditions (the operator's
/// clock, the machine's): unlike the time the bench's polling saw the last one, this is
/// not rounded up to the next list of 10 000 objects.
struct ReadyTurns {
    /// From the last create to the last `Ready` transition.
    last: Duration,
    /// Of those Ready by the time the last create returned.
    by_last_create: usize,
    /// From each Proxy's `creationTimestamp` (whole seconds) to its `Ready` transition: p50,
    /// p99, max.
    after_creation: [Duration; 3],
}

impl ReadyTurns {
    fn of(ready: &[Proxy], last_create: jiff::Timestamp) -> Self {
        let since = |from: jiff::Timestamp, to: jiff::Timestamp| {
            Duration::try_from(to.duration_since(from)).unwrap_or_default()
        };
        let turns: Vec<(jiff::Timestamp, Option<jiff::Timestamp>)> = ready
            .iter()
            .filter_map(|p| {
                let created = p
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .and_then(|t| t.0.to_string().parse().ok());
                Some((ready_since(p)?, created))
            })
            .collect();
        let last = turns.iter().map(|(at, _)| *at).max();
        let mut after: Vec<Duration> = turns
            .iter()
            .filter_map(|(at, created)| Some(since((*created)?, *at)))
            .collect();
        after.sort();
        Self {
            last: last.map_or_else(Duration::default, |at| since(last_create, at)),
            by_last_create: turns.iter().filter(|(at, _)| *at <= last_create).count(),
            after_creation: [50, 99, 100].map(|p| percentile(&after, p)),
        }
    }
}

/// What the recorder held after the steady window (its metrics), and the size of its dump.
struct Recording {
    records: u64,
    lines: u64,
    dictionaries: u64,
    dumped: usize,
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
    load: LoadSettings,
}

/// The loaded window's length and load.
struct LoadSettings {
    window: Duration,
    listers: usize,
    leasers: usize,
    busy: usize,
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

        let sampler = Sampler::start(
            &leadership_load::Watched {
                namespace: ns.clone(),
                lease: "proxy-operator".to_owned(),
                identity: operator.identity.clone(),
            },
            self.plane.config().await,
        )?;
        let busy = Busy::start(self.load.busy)?;
        let mut phases = Vec::new();
        let proxies: Api<Proxy> = Api::namespaced(self.client.clone(), &ns);
        let writes_at_start = writes(self.plane);
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
        let last_create = jiff::Timestamp::now();
        // Listing 10 000 Proxies costs this (debug) process most of a core: look less often
        // the larger the fleet (every 1 s at 1 000, 6 s at 10 000).
        let every = Duration::from_secs(1 + u64::try_from(n / 2_000).unwrap_or(u64::MAX));
        let ready = wait_all_ready(&proxies, n, Duration::from_secs(30 * 60), every, || {
            operator.log()
        })
        .await?;
        let to_ready = started.elapsed();
        let turns = ReadyTurns::of(&ready, last_create);
        let rss_ready = rss(pid)?;
        phases.push(("to all Ready", sampler.take()));

        // The steady window: every proxy Ready, nothing changing but the probes.
        let writes_before = writes(self.plane);
        let ramp_status_writes = status_writes(&writes_at_start, &writes_before);
        let cpu_before = cpu_seconds(pid)?;
        let window_start = Instant::now();
        let mut rss_steady = Vec::new();
        while window_start.elapsed() < self.steady {
            tokio::time::sleep(SAMPLE).await;
            rss_steady.push(rss(pid)?);
        }
        let steady = window_start.elapsed();
        phases.push(("steady", sampler.take()));
        let cpu = cpu_seconds(pid)? - cpu_before;
        let writes_after = writes(self.plane);
        let window_end = window_start + steady;
        let run = format!("run={ns}&");
        let (probes, resumed) = self
            .origin
            .requests()
            .iter()
            .filter(|r| r.at >= window_start && r.at <= window_end && r.path.contains(&run))
            .fold((0, 0), |(all, resumed), r| {
                (all + 1, resumed + usize::from(r.resumed))
            });

        let recording = Recording {
            records: operator
                .metric_sum("proxy_operator_recording_records", "")
                .await,
            lines: operator
                .metric_sum("proxy_operator_recording_bytes", r#"part="lines""#)
                .await,
            dictionaries: operator
                .metric_sum("proxy_operator_recording_bytes", r#"part="dictionaries""#)
                .await,
            dumped: operator.recording(None).await.len(),
        };
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
        let loaded = if self.load.window.is_zero() {
            None
        } else {
            let load = Load::start(&leadership_load::Settings {
                discovery: operator.discovery.clone(),
                listers: self.load.listers,
                leasers: self.load.leasers,
            });
            tokio::time::sleep(self.load.window).await;
            let load = load.finish().await;
            phases.push(("loaded", sampler.take()));
            Some(load)
        };
        sampler.stop().await;
        drop(busy);
        let log = operator.log();
        let leadership = Leadership {
            phases,
            losses: log.matches("lost leadership").count(),
            not_leader: operator
                .metric_sum(
                    "proxy_operator_reconcile_errors_total",
                    r#"class="not_leader""#,
                )
                .await,
            not_leader_lines: log.matches("no longer the leader").count(),
        };
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
            resumed,
            cpu,
            status_writes: status_writes(&writes_before, &writes_after),
            ramp_status_writes,
            turns,
            list_p50: percentile(&lists, 50),
            list_p99: percentile(&lists, 99),
            list_bytes,
            recording,
            loaded,
            leadership,
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
    let after_last = m.to_ready.saturating_sub(m.created);
    println!(
        "    from the last create to all Ready: {:.1} s = {:.2} probe intervals (goal at most 1.00)",
        after_last.as_secs_f64(),
        after_last.as_secs_f64() / f64::from(interval)
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
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let resumed = m.resumed as f64;
    println!(
        "    TLS handshakes of those probes that resumed a session: {:.1}%",
        100.0 * resumed / probes.max(1.0)
    );
    let t = &m.turns;
    println!(
        "    the objects' own Ready times: the last {:.1} s after the last create = {:.2} probe \
         intervals; {} Ready when the last create returned; creation to Ready p50 {:.0} s, p99 \
         {:.0} s, max {:.0} s",
        t.last.as_secs_f64(),
        t.last.as_secs_f64() / f64::from(interval),
        t.by_last_create,
        t.after_creation[0].as_secs_f64(),
        t.after_creation[1].as_secs_f64(),
        t.after_creation[2].as_secs_f64()
    );
    println!(
        "    status writes from the first create to all Ready: {:.0} = {:.2} per proxy",
        m.ramp_status_writes,
        m.ramp_status_writes / n
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
    let r = &m.recording;
    println!(
        "    recorder after the steady window: {} records, {:.2} MiB packed ({:.1}x smaller than \
         the {:.2} MiB dump) and {:.0} KiB of dictionaries",
        r.records,
        r.lines as f64 / MIB,
        r.dumped as f64 / (r.lines as f64).max(1.0),
        r.dumped as f64 / MIB,
        r.dictionaries as f64 / 1024.0
    );
    if let Some(load) = &m.loaded {
        report_load(load);
    }
    report_leadership(&m.leadership);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report_load(load: &leadership_load::Measured) {
    let window = load.window.as_secs_f64();
    println!(
        "    loaded window {:.0} s: {} lists ({:.1}/s, {} failed), {} lease pairs ({:.1}/s, p99 {:.1} ms, {} failed)",
        window,
        load.lists,
        load.lists as f64 / window,
        load.list_errors,
        load.lease_pairs.len(),
        load.lease_pairs.len() as f64 / window,
        ms(percentile(&load.lease_pairs, 99)),
        load.lease_errors
    );
}

fn report_leadership(l: &Leadership) {
    println!(
        "    leadership renew age (sampled every {} ms):",
        leadership_load::SAMPLE.as_millis()
    );
    for (phase, renew) in &l.phases {
        let ages = &renew.ages;
        println!(
            "      {phase}: {} samples, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {} not held",
            ages.len(),
            ms(percentile(ages, 50)),
            ms(percentile(ages, 99)),
            ms(ages.last().copied().unwrap_or_default()),
            renew.not_held
        );
    }
    println!(
        "    claims lost: {}; reconciles stopped as not the leader: {} ({} log lines say so)",
        l.losses, l.not_leader, l.not_leader_lines
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    proxy_tests::operator::log_as_deployed();
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
    let load = LoadSettings {
        window: Duration::from_secs(env_or("BENCH_LOADED", 120)),
        listers: env_or("BENCH_LISTERS", 4),
        leasers: env_or("BENCH_LEASERS", 4),
        busy: env_or("BENCH_BUSY", 0),
    };
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
    let bench = Bench {
        plane,
        client,
        origin: &origin,
        squids: &squids,
        addrs: &addrs,
        binary,
        interval,
        steady,
        load,
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
