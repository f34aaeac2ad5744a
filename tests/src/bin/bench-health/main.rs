//! Benchmark (not a test): the health engine against real squid proxies and endpoints that
//! accept connections and never answer.
//!
//! The operator's own `HealthEngine` and `Prober` run in this process, fed from an in-memory
//! store of External-mode Proxies (no API server: the engine only reads the store). In one
//! run, side by side, because the machine is shared and only ratios taken together compare:
//!
//! - (a) isolation, interval 2 s and timeout 2 s (a hung probe holds its permit for as long
//!   as the interval): each healthy proxy's observed probe period, from the probe origin's
//!   request log, divided by the configured one. Three runs: the healthy squids alone; the
//!   same plus as many hung endpoints (50% of all proxies hang) at the default concurrency;
//!   and that again at a concurrency of 8, saturated on purpose, to show what starvation
//!   looks like.
//! - (b) cost: the healthy squids only, every second: completed probes per CPU-second of the
//!   prober's threads (the origin and the hung endpoints run on other threads; squid in
//!   other processes). Then the probe alone, with no engine, side by side with a baseline:
//!   the same probes made by a general-purpose client per probe (reqwest, as the prober
//!   made them before issue 20). Then the probe's parts alone ([`floor`]): the tunnel, the
//!   tunnel with TLS's two exchanges in size but no cryptography, and TLS in memory; how
//!   far the probe is above what its parts cost.
//! - (c) scale: a fleet of `BENCH_FLEET` proxies at a 30 s interval spread over the same
//!   squids; the prober's share of one core gives the proxies one core can probe at 30 s.
//!   Then the same fleet at a 1 h interval, so that almost nothing is due: what the schedule
//!   itself costs, the part of (c) that (b) does not see.
//!
//! Run: `just bench-health` (a release build; `cargo run -p proxy-tests --bin bench-health`
//! builds debug, which the report flags). `BENCH_HEALTHY` (default 50) squids, `BENCH_HUNG`
//! (default: as many) hung endpoints, `BENCH_FLEET` (default 3000) proxies, `BENCH_WINDOW`
//! (default 30) seconds measured in each run of (a). About four minutes; a
//! watchdog ends the process after 15, and `tests/bed/reap.sh` stops every squid when it
//! exits. All traffic stays on loopback addresses.

mod floor;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector;
use kube::runtime::watcher;
use proxy_core::leadership::{self, Candidate};
use proxy_core::probe_schedule::ProbeSpec;
use proxy_crd::Proxy;
use proxy_operator::health::ProbeMetrics;
use proxy_operator::health::probe::Prober;
use proxy_operator::health::{DEFAULT_CONCURRENCY, HealthEngine};
use proxy_operator::leadership::Leadership;
use proxy_operator::runtime::metrics::Registry;
use proxy_operator::runtime::supervise::Panics;
use proxy_tests::probe_origin::{ProbeOrigin, Request};
use proxy_tests::process_usage::cpu_seconds;
use proxy_tests::squid::{Squid, next_loopback_addr};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// The port of every proxy, squid or hung; each has a loopback address of its own.
const PORT: u16 = 3128;
/// The name of the engine's thread (the operator's own, [`proxy_operator::health::THREAD`]):
/// the thread whose CPU is counted.
const PROBER_THREADS: &str = proxy_operator::health::THREAD;
/// The thread name of the runtime of the origin, the hung endpoints and the floor's endpoint.
const BED_THREADS: &str = "bed";
/// The engine's concurrency in the saturated run of (a).
const SATURATED_CONCURRENCY: usize = 8;
/// The handshakes of (b)'s TLS alone, in memory.
const TLS_ROUNDS: usize = 3000;
/// The whole benchmark's upper bound; it normally takes about four minutes.
const WATCHDOG: Duration = Duration::from_secs(15 * 60);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An address that accepts TCP connections and never answers: what a frozen proxy looks like
/// to the prober. Records when each connection arrives.
#[derive(Debug)]
struct Hung {
    addr: Ipv4Addr,
    accepted: Arc<Mutex<Vec<Instant>>>,
}

impl Hung {
    /// Listens on `addr` on the current runtime.
    async fn start(addr: Ipv4Addr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((addr, PORT)).await?;
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let log = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                log.lock().expect("accept log").push(Instant::now());
                // Read whatever comes (the CONNECT) and never write: the connection stays
                // open until the prober gives up on it.
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut stream, &mut tokio::io::sink()).await;
                });
            }
        });
        Ok(Self { addr, accepted })
    }

    fn accepted_between(&self, start: Instant, end: Instant) -> Vec<Instant> {
        let log = self.accepted.lock().expect("accept log");
        log.iter()
            .copied()
            .filter(|t| (start..end).contains(t))
            .collect()
    }
}

/// The real parts: an HTTPS probe origin, real squids in front of it, hung endpoints.
struct Bed {
    /// Runs the origin, the hung endpoints and the floor's plain endpoint; dropping it stops
    /// them.
    runtime: Runtime,
    origin: ProbeOrigin,
    squids: Vec<Squid>,
    hung: Vec<Hung>,
}

impl Bed {
    fn start(healthy: usize, hung: usize) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(BED_THREADS)
            .enable_all()
            .build()?;
        let origin = runtime.block_on(ProbeOrigin::start())?;
        let hung = runtime.block_on(async {
            let mut endpoints = Vec::new();
            for _ in 0..hung {
                endpoints.push(Hung::start(next_loopback_addr()).await?);
            }
            anyhow::Ok(endpoints)
        })?;
        // Squids start one at a time (each waits until it listens): four threads at once.
        let addrs: Vec<Ipv4Addr> = (0..healthy).map(|_| next_loopback_addr()).collect();
        let squids = std::thread::scope(|scope| {
            let starting: Vec<_> = addrs
                .chunks(healthy.div_ceil(4).max(1))
                .map(|chunk| {
                    let hosts = &origin.hosts_file;
                    scope.spawn(move || {
                        chunk
                            .iter()
                            .map(|addr| Squid::start(&format!("bench-{addr}"), *addr, PORT, hosts))
                            .collect::<anyhow::Result<Vec<_>>>()
                    })
                })
                .collect();
            starting
                .into_iter()
                .map(|t| t.join().expect("squid start thread"))
                .collect::<anyhow::Result<Vec<Vec<_>>>>()
        })?
        .into_iter()
        .flatten()
        .collect();
        Ok(Self {
            runtime,
            origin,
            squids,
            hung,
        })
    }

    /// An External proxy at `host` probed at `interval` with `timeout`, seconds. Its probe
    /// URL carries `run` and `name`, so the origin's log tells its probes apart.
    fn proxy(&self, run: &str, name: &str, host: Ipv4Addr, interval: u32, timeout: u32) -> Proxy {
        serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "namespace": "bench", "uid": format!("uid-{run}-{name}")},
            "spec": {
                "mode": "External",
                "endpoint": {"host": host.to_string(), "port": PORT},
                "healthCheck": {
                    "probeURL": self.origin.url(&probe_path(run, name)),
                    "intervalSeconds": interval, "timeoutSeconds": timeout
                }
            }
        }))
        .expect("a valid Proxy")
    }

    /// `proxy` with a healthy verdict in its status, as after the operator's restart: its
    /// first probe is spread over one interval instead of at once.
    fn seeded(mut proxy: Proxy) -> Proxy {
        let host = proxy.spec.endpoint.as_ref().map(|e| e.host.clone());
        proxy.status = Some(
            serde_json::from_value(json!({
                "ip": host,
                "lastProbeLatencyMs": 5,
                "lastHealthCheckTime": "2026-01-01T00:00:00Z",
                "conditions": [{
                    "type": "Healthy", "status": "True", "reason": "ProbeSucceeded",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"
                }]
            }))
            .expect("a valid status"),
        );
        proxy
    }

    /// Runs a fresh engine over `proxies` for `warm_up`, then measures for `window`, then
    /// stops it (dropping its runtime ends every probe still in flight).
    fn probe(
        &self,
        proxies: Vec<Proxy>,
        concurrency: usize,
        warm_up: Duration,
        window: Duration,
    ) -> anyhow::Result<Window> {
        let (store, mut writer) = reflector::store::<Proxy>();
        for proxy in proxies {
            writer.apply_watcher_event(&watcher::Event::Apply(proxy));
        }
        let prober = Prober::new(Some(self.origin.ca_pem.as_bytes()), concurrency)?;
        // The engine records every probe in the operator's metrics, as in production.
        let mut registry = Registry::default();
        let metrics = Arc::new(ProbeMetrics::register(&mut registry));
        let panics = Panics::register(&mut registry, ["health"]);
        let engine = Arc::new(HealthEngine::new(prober, concurrency, metrics, panics));
        // The controller's side of the channel: only drained here, until the engine stops.
        let (reconcile, mut requests) = mpsc::channel(1024);
        std::thread::spawn(move || while requests.blocking_recv().is_some() {});
        // One process, no election: it always leads. The engine runs on its own thread, as
        // in the operator.
        let candidate =
            Candidate::new("bench-health", leadership::Durations::default()).expect("an identity");
        let thread = engine.start(
            store,
            proxy_operator::credentials::CredentialsCache::empty(),
            reconcile,
            Arc::new(Leadership::unopposed(candidate)),
        )?;

        std::thread::sleep(warm_up);
        let before = self.cpu();
        let start = Instant::now();
        std::thread::sleep(window);
        let end = Instant::now();
        let after = self.cpu();
        // Stopped, and its thread gone, before the next run counts the prober's threads.
        futures::executor::block_on(thread.stop());
        drop(writer);
        Ok(Window {
            start,
            end,
            prober_cpu: after.prober - before.prober,
            bed_cpu: after.bed - before.bed,
            squid_cpu: after.squids - before.squids,
        })
    }

    /// (b)'s comparison: `probe` of every healthy squid once a second for `window`, with no
    /// engine around it, on a thread and current-thread runtime of its own, as the
    /// operator's probes run. Returns the probes that succeeded and that thread's CPU
    /// seconds.
    fn bare<F, Fut>(&self, run: &str, window: Duration, probe: F) -> anyhow::Result<(usize, f64)>
    where
        F: Fn(String, String) -> Fut + Send,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let targets: Vec<(String, String)> = self
            .squids
            .iter()
            .enumerate()
            .map(|(i, squid)| {
                let url = self.origin.url(&probe_path(run, &format!("b{i:03}")));
                (format!("{}:{PORT}", squid.addr), url)
            })
            .collect();
        let on_thread = move || -> anyhow::Result<(usize, f64)> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let own_cpu = || {
                std::fs::read_to_string("/proc/thread-self/schedstat")
                    .ok()
                    .as_deref()
                    .and_then(schedstat_seconds)
                    .unwrap_or(0.0)
            };
            let before = own_cpu();
            let started = Instant::now();
            let succeeded = runtime.block_on(async {
                let mut succeeded = 0;
                let mut second = tokio::time::interval(Duration::from_secs(1));
                while started.elapsed() < window {
                    second.tick().await;
                    let round: Vec<_> = targets
                        .iter()
                        .map(|(proxy, url)| tokio::spawn(probe(proxy.clone(), url.clone())))
                        .collect();
                    for done in futures::future::join_all(round).await {
                        succeeded += usize::from(done.unwrap_or(false));
                    }
                }
                succeeded
            });
            Ok((succeeded, own_cpu() - before))
        };
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name(PROBER_THREADS.to_owned())
                .spawn_scoped(scope, on_thread)?
                .join()
                .map_err(|_| anyhow::anyhow!("the probing thread panicked"))?
        })
    }

    /// CPU seconds used so far, by part.
    fn cpu(&self) -> Cpu {
        // This process's threads to the nanosecond (the scheduler's own count of their time
        // on a CPU): (b) counts about a thousand probes of a few hundred microseconds each,
        // which clock ticks of 10 ms would measure to a few per cent only.
        let mut by_thread: BTreeMap<String, f64> = BTreeMap::new();
        for task in std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
        {
            let read = |file: &str| std::fs::read_to_string(task.path().join(file)).ok();
            let (Some(name), Some(seconds)) = (
                read("comm"),
                read("schedstat").as_deref().and_then(schedstat_seconds),
            ) else {
                continue;
            };
            *by_thread.entry(name.trim().to_owned()).or_default() += seconds;
        }
        Cpu {
            prober: by_thread.get(PROBER_THREADS).copied().unwrap_or(0.0),
            bed: by_thread.get(BED_THREADS).copied().unwrap_or(0.0),
            squids: self
                .squids
                .iter()
                .filter_map(|squid| cpu_seconds(squid.pid()).ok())
                .sum(),
        }
    }

    /// The share of the origin's requests of `run` whose TLS handshake resumed a session.
    fn resumed(&self, run: &str) -> f64 {
        let tag = format!("run={run}&");
        let (all, resumed) = self
            .origin
            .requests()
            .iter()
            .filter(|request| request.path.contains(&tag))
            .fold((0, 0), |(all, resumed), request| {
                (all + 1, resumed + usize::from(request.resumed))
            });
        resumed as f64 / f64::from(all.max(1))
    }

    /// The origin's requests of `run`, by probe path, in the window.
    fn arrivals(&self, run: &str, window: &Window) -> BTreeMap<String, Vec<Instant>> {
        let tag = format!("run={run}&");
        let mut by_path: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
        for Request { at, path, .. } in self.origin.requests() {
            if path.contains(&tag) && (window.start..window.end).contains(&at) {
                by_path.entry(path).or_default().push(at);
            }
        }
        by_path
    }
}

/// The baseline of (b)'s comparison: a probe as a general-purpose HTTP client makes it, as
/// the operator's prober did until issue 20 (goal 4): a new reqwest client per probe, with
/// no connection pool and the same TLS configuration, through the proxy.
async fn general_client_probe(tls: ClientConfig, proxy: String, url: String) -> bool {
    let Ok(proxy) = reqwest::Proxy::all(format!("http://{proxy}")) else {
        return false;
    };
    let Ok(client) = reqwest::Client::builder()
        .proxy(proxy)
        .tls_backend_preconfigured(tls)
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    else {
        return false;
    };
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|response| response.status().as_u16() == 204)
}

/// The TLS configuration the prober builds: Mozilla's roots and the origin's CA.
fn probe_tls(ca_pem: &str) -> anyhow::Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn probe_path(run: &str, name: &str) -> String {
    format!("/generate_204?run={run}&p={name}")
}

/// The time on a CPU, in seconds, of a `/proc/.../schedstat` line (its first field, in
/// nanoseconds).
fn schedstat_seconds(schedstat: &str) -> Option<f64> {
    let nanos: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
    Some(nanos as f64 / 1e9)
}

#[derive(Debug, Clone, Copy)]
struct Cpu {
    prober: f64,
    bed: f64,
    squids: f64,
}

/// One measurement window of one engine run.
#[derive(Debug)]
struct Window {
    start: Instant,
    end: Instant,
    prober_cpu: f64,
    bed_cpu: f64,
    squid_cpu: f64,
}

impl Window {
    fn seconds(&self) -> f64 {
        (self.end - self.start).as_secs_f64()
    }
}

/// Observed probe periods of the healthy proxies of one run, as ratios to the configured one.
#[derive(Debug)]
struct Periods {
    /// Fleet mean: the probes that should have arrived over those that did.
    mean: f64,
    /// The worst proxy's mean period (first to last probe in the window).
    worst_proxy: f64,
    /// The longest gap between two probes of one proxy.
    longest_gap: f64,
    /// Proxies with fewer than two probes in the window (no period to measure).
    starved: usize,
    /// Proxies measured.
    proxies: usize,
}

fn periods(
    arrivals: &BTreeMap<String, Vec<Instant>>,
    names: &[String],
    run: &str,
    window: &Window,
    interval: f64,
) -> Periods {
    let (mut probes, mut worst_proxy, mut longest_gap, mut starved) = (0, 0.0_f64, 0.0_f64, 0);
    for name in names {
        let times = arrivals
            .get(&probe_path(run, name))
            .map(Vec::as_slice)
            .unwrap_or_default();
        probes += times.len();
        let [first, .., last] = times else {
            starved += 1;
            continue;
        };
        let mean = (*last - *first).as_secs_f64() / (times.len() - 1) as f64;
        worst_proxy = worst_proxy.max(mean);
        for pair in times.windows(2) {
            longest_gap = longest_gap.max((pair[1] - pair[0]).as_secs_f64());
        }
    }
    let expected = names.len() as f64 * window.seconds() / interval;
    Periods {
        mean: expected / probes.max(1) as f64,
        worst_proxy: worst_proxy / interval,
        longest_gap: longest_gap / interval,
        starved,
        proxies: names.len(),
    }
}

/// One line of the isolation table.
fn print_periods(label: &str, p: &Periods) {
    // With every proxy starved there is no period to show but the mean.
    let measured = |ratio: f64| {
        if p.starved < p.proxies {
            format!("{ratio:.3}")
        } else {
            "-".to_owned()
        }
    };
    println!(
        "    {label:<36} {:>6.3} {:>8} {:>9} {:>6}",
        p.mean,
        measured(p.worst_proxy),
        measured(p.longest_gap),
        p.starved
    );
}

fn main() -> anyhow::Result<()> {
    std::thread::spawn(|| {
        std::thread::sleep(WATCHDOG);
        eprintln!("bench-health: still running after {WATCHDOG:?}, giving up");
        std::process::exit(2);
    });
    let healthy: usize = env_or("BENCH_HEALTHY", 50);
    let hung: usize = env_or("BENCH_HUNG", healthy);
    let fleet: usize = env_or("BENCH_FLEET", 3000);
    anyhow::ensure!(healthy > 0, "BENCH_HEALTHY must be at least 1");

    let started = Instant::now();
    let bed = Bed::start(healthy, hung)?;
    let build = if cfg!(debug_assertions) {
        "DEBUG build: use `just bench-health` for figures"
    } else {
        "release build"
    };
    println!(
        "bench-health: {healthy} real squids + {hung} hung endpoints ({:.0}% hang), {build}, {} CPUs; bed up in {:.1} s",
        100.0 * hung as f64 / (healthy + hung) as f64,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        started.elapsed().as_secs_f64()
    );

    // (a) Isolation. Warm-up: the first probe is jittered over one interval; after it every
    // proxy is on its grid.
    let (interval, timeout) = (2, 2);
    let warm_up = Duration::from_secs(interval as u64 + 1);
    let window = Duration::from_secs(env_or("BENCH_WINDOW", 30));
    let healthy_names: Vec<String> = (0..healthy).map(|i| format!("h{i:03}")).collect();
    let fleet_of = |run: &str, with_hung: bool| {
        let mut proxies: Vec<Proxy> = healthy_names
            .iter()
            .zip(&bed.squids)
            .map(|(name, squid)| bed.proxy(run, name, squid.addr, interval, timeout))
            .collect();
        if with_hung {
            proxies.extend(
                bed.hung
                    .iter()
                    .enumerate()
                    .map(|(i, h)| bed.proxy(run, &format!("x{i:03}"), h.addr, interval, timeout)),
            );
        }
        proxies
    };
    println!(
        "(a) isolation: interval {interval} s, timeout {timeout} s, {} s window after {} s warm-up",
        window.as_secs(),
        warm_up.as_secs()
    );
    println!("    healthy proxies' observed probe period / configured (target <= 1.1):");
    println!(
        "    {:<36} {:>6} {:>8} {:>9} {:>6}",
        "", "mean", "worst", "longest", "starved"
    );
    println!("    {:<36} {:>6} {:>8} {:>9}", "", "", "proxy", "gap");
    println!(
        "    (mean: probes due / probes arrived, whole window; worst proxy: the slowest proxy's"
    );
    println!("    mean period; starved: proxies with fewer than two probes in the window)");
    let runs = [
        (
            "A0",
            false,
            DEFAULT_CONCURRENCY,
            "healthy only, concurrency 512",
        ),
        ("A1", true, DEFAULT_CONCURRENCY, "50% hang, concurrency 512"),
        (
            "A2",
            true,
            SATURATED_CONCURRENCY,
            "50% hang, concurrency 8 (saturated)",
        ),
    ];
    let mut hung_periods = Vec::new();
    for (run, with_hung, concurrency, label) in runs {
        let measured = bed.probe(fleet_of(run, with_hung), concurrency, warm_up, window)?;
        let arrivals = bed.arrivals(run, &measured);
        print_periods(
            label,
            &periods(&arrivals, &healthy_names, run, &measured, interval as f64),
        );
        if with_hung && !bed.hung.is_empty() {
            let attempts: usize = bed
                .hung
                .iter()
                .map(|h| h.accepted_between(measured.start, measured.end).len())
                .sum();
            let period = bed.hung.len() as f64 * measured.seconds() / attempts.max(1) as f64;
            hung_periods.push(format!("{run} {period:.2} s"));
        }
    }
    if !hung_periods.is_empty() {
        println!(
            "    hung proxies: one probe every {} (a slot is skipped while the previous probe still waits)",
            hung_periods.join(", ")
        );
    }

    // (b) Cost: healthy squids only, as often as the engine allows (1 s). New proxies are
    // all probed at once, and stay together on their grids; seeded ones (after a restart, the
    // fleet's steady state) are spread over the interval.
    let window_b = Duration::from_secs(20);
    let mut per_cpu_second = 0.0;
    for (run, spread) in [("B", false), ("BS", true)] {
        let proxies: Vec<Proxy> = healthy_names
            .iter()
            .zip(&bed.squids)
            .map(|(name, squid)| bed.proxy(run, name, squid.addr, 1, 5))
            .map(|proxy| if spread { Bed::seeded(proxy) } else { proxy })
            .collect();
        let measured = bed.probe(
            proxies,
            DEFAULT_CONCURRENCY,
            Duration::from_secs(2),
            window_b,
        )?;
        let probes: usize = bed.arrivals(run, &measured).values().map(Vec::len).sum();
        let per_second = probes as f64 / measured.prober_cpu.max(f64::EPSILON);
        let micros = |cpu: f64| 1e6 * cpu / probes.max(1) as f64;
        let how = if spread {
            "spread over the interval (seeded, as after a restart)"
        } else {
            "all started together (new proxies)"
        };
        println!(
            "(b) cost: {healthy} squids at 1 s for {} s, {how}: {probes} probes, prober CPU {:.3} s",
            window_b.as_secs(),
            measured.prober_cpu
        );
        println!(
            "    {per_second:.0} probes per CPU-second ({:.0} us of prober CPU per probe)",
            micros(measured.prober_cpu)
        );
        println!(
            "    not counted, for context: squid {:.0} us, origin {:.0} us per probe",
            micros(measured.squid_cpu),
            micros(measured.bed_cpu)
        );
        if !spread {
            per_cpu_second = per_second;
        }
    }
    // Side by side: the probe alone, the operator's against a general-purpose client's.
    let tls = probe_tls(&bed.origin.ca_pem)?;
    let (general, general_cpu) = bed.bare("B0", window_b, |proxy, url| {
        general_client_probe(tls.clone(), proxy, url)
    })?;
    let prober = Prober::new(
        Some(bed.origin.ca_pem.as_bytes()),
        proxy_operator::health::DEFAULT_CONCURRENCY,
    )?;
    let (ours, ours_cpu) = bed.bare("B1", window_b, |proxy, url| {
        let prober = prober.clone();
        async move {
            let spec = ProbeSpec {
                proxy,
                url,
                timeout: Duration::from_secs(5),
                expected_status_codes: vec![204],
                egress_url: None,
            };
            prober.probe(&spec, None).await.ok
        }
    })?;
    let per_probe = |cpu: f64, probes: usize| 1e6 * cpu / probes.max(1) as f64;
    println!(
        "    the probe alone (no engine), each squid once a second for {} s, side by side:",
        window_b.as_secs()
    );
    println!(
        "      a general-purpose client per probe (reqwest, the prober before issue 20): {general} probes, {:.0} us of CPU per probe, {:.0}% of handshakes resumed",
        per_probe(general_cpu, general),
        100.0 * bed.resumed("B0")
    );
    println!(
        "      the operator's prober: {ours} probes, {:.0} us of CPU per probe, {:.0}% of handshakes resumed",
        per_probe(ours_cpu, ours),
        100.0 * bed.resumed("B1")
    );
    println!(
        "      -> {:.2}x the probes per CPU-second",
        per_probe(general_cpu, general) / per_probe(ours_cpu, ours).max(f64::EPSILON)
    );

    // The floor: the probe's parts alone, on the same squids and the same kind of thread.
    let tls = floor::tls_alone(
        Prober::new(Some(bed.origin.ca_pem.as_bytes()), DEFAULT_CONCURRENCY)?.tls_config(),
        bed.origin.tls_config(),
        TLS_ROUNDS,
    )?;
    let flights = tls.flights;
    let answerer = bed.runtime.block_on(floor::answerer(flights))?;
    let (tunnels, tunnels_cpu) = bed.bare("F0", window_b, move |proxy, _| {
        floor::through_tunnel(proxy, answerer, None)
    })?;
    let (exchanges, exchanges_cpu) = bed.bare("F1", window_b, move |proxy, _| {
        floor::through_tunnel(proxy, answerer, Some(flights))
    })?;
    let parts = per_probe(exchanges_cpu, exchanges) + tls.client_micros;
    println!("    the probe's parts alone (no engine, the same squids, each once a second):");
    println!(
        "      the tunnel (connection, CONNECT, its answer, reset): {tunnels} tunnels, {:.0} us of CPU each",
        per_probe(tunnels_cpu, tunnels)
    );
    println!(
        "      the tunnel and TLS's two exchanges in size ({} and {} bytes out, {} and {} back), with a plain endpoint: {exchanges} probes, {:.0} us each",
        flights.client[0],
        flights.client[1],
        flights.server[0],
        flights.server[1],
        per_probe(exchanges_cpu, exchanges)
    );
    println!(
        "      TLS alone, in memory (the prober's configuration and the origin's, the client's calls, median of {TLS_ROUNDS} handshakes and requests, {:.0}% resumed): {:.0} us",
        100.0 * tls.resumed,
        tls.client_micros
    );
    println!(
        "      -> the parts add up to {parts:.0} us; the operator's probe costs {:.2}x its parts",
        per_probe(ours_cpu, ours) / parts.max(f64::EPSILON)
    );

    // (c) Scale: a fleet at the default-like 30 s interval, spread over the squids. The
    // first probes are jittered over one interval, so the probe rate is steady from the
    // start; a 30 s window holds one probe of every proxy.
    let (interval_c, window_c) = (30, Duration::from_secs(30));
    let names: Vec<String> = (0..fleet).map(|i| format!("f{i:05}")).collect();
    let proxies: Vec<Proxy> = names
        .iter()
        .enumerate()
        .map(|(i, name)| bed.proxy("C", name, bed.squids[i % healthy].addr, interval_c, 5))
        .collect();
    let measured = bed.probe(
        proxies,
        DEFAULT_CONCURRENCY,
        Duration::from_secs(5),
        window_c,
    )?;
    let arrivals = bed.arrivals("C", &measured);
    let scale = periods(&arrivals, &names, "C", &measured, interval_c as f64);
    let core_share = measured.prober_cpu / measured.seconds();
    println!(
        "(c) scale: {fleet} proxies at {interval_c} s over {healthy} squids, {} s window: observed period / configured {:.3}",
        window_c.as_secs(),
        scale.mean
    );
    println!(
        "    prober CPU {:.2} s = {:.1}% of one core -> about {:.0} proxies per core at 30 s (linear extrapolation)",
        measured.prober_cpu,
        100.0 * core_share,
        fleet as f64 / core_share.max(f64::EPSILON)
    );
    let not_counted = format!(
        "    not counted: squid {:.1}%, origin {:.1}% of one core",
        100.0 * measured.squid_cpu / measured.seconds(),
        100.0 * measured.bed_cpu / measured.seconds()
    );

    // The part of (c) that is not probing: once a second the engine refreshes its schedule
    // from the store, for every proxy, whatever the interval. The same fleet at a
    // 1 h interval has almost no probe due in the window (the first probes are jittered over
    // the hour); the few that run are charged at (b)'s cost and taken out.
    let proxies: Vec<Proxy> = names
        .iter()
        .enumerate()
        .map(|(i, name)| bed.proxy("D", name, bed.squids[i % healthy].addr, 3600, 5))
        .collect();
    let measured = bed.probe(
        proxies,
        DEFAULT_CONCURRENCY,
        Duration::from_secs(5),
        window_c,
    )?;
    let stray: usize = bed.arrivals("D", &measured).values().map(Vec::len).sum();
    let upkeep = (measured.prober_cpu - stray as f64 / per_cpu_second).max(0.0);
    let per_proxy_second = upkeep / (fleet as f64 * measured.seconds());
    println!(
        "    of that, schedule upkeep (same fleet at a 1 h interval, {stray} probes ran): {:.1}% of one core = {:.1} us per proxy per second",
        100.0 * upkeep / measured.seconds(),
        1e6 * per_proxy_second
    );
    println!(
        "    probe cost alone, from (b): {:.0} proxies per core at 30 s",
        per_cpu_second * 30.0
    );
    println!(
        "    the upkeep runs in the engine's one loop task, which it alone would fill at about {:.0} proxies",
        1.0 / per_proxy_second.max(f64::EPSILON)
    );
    println!("{not_counted}");
    println!("done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
