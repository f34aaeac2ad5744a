//! Benchmark (not a test): requests per second and p99 latency through the gateway against
//! straight through squid, side by side in one run with the same squids and the same origin,
//! at 1, 64 and 512 concurrent client connections; and the same for an established Go
//! gateway, glider (built by `tests/bed/peer.sh` from the Go module proxy), as the peer;
//! and a byte relay, the floor: a process that only copies bytes between a client and a
//! squid, what any hop costs on this machine ([`relay`]).
//! It prints each path's throughput as a ratio to direct squid and its p99 minus direct
//! squid's ("added p99").
//!
//! Setup, all on loopback: 4 real squids (each on its own address), an origin that answers
//! every request with 200 and a 4 KiB body over kept-alive connections, the discovery API
//! (its lease book holding the 4 squids) in this process, the release build of
//! `proxy-operator gateway` in its own process, glider in its own process forwarding
//! round-robin over the same 4 squids (`-strategy rr`, health checks off). The clients are in
//! this process: each connection sends one request at a time for the window and records each
//! one's latency, request sent to body read. Like any HTTP client, a connection whose answer
//! said `Connection: close` opens a new one (and its tunnel) for the next request, inside
//! that request's latency; the "reconnects" column counts them. glider answers a forwarded
//! `http://` request so (it forwards it through a CONNECT tunnel to squid, then relays the
//! connection blind), and a client that ignored it would measure a tunnel to the origin, not
//! a forward proxy.
//!
//! Two modes: `http` sends absolute `http://` URIs to the proxy (the gateway and glider
//! forward them through a squid; "direct" sends them to a squid, connections spread over the
//! four as the gateway's leases spread them); `connect` opens a tunnel to the origin first
//! (CONNECT through the gateway, glider, or a squid) and sends the requests inside it, as a
//! client of an `https://` site does, without the TLS (it would cost the client and the
//! origin the same on every path). Each connection of the gateway is a lease without a
//! session (the fresh choice per connection), released when it closes.
//!
//! Run: `just bench-gateway` (builds glider if needed, then `cargo run --release -p
//! proxy-tests --bin bench-gateway`). `BENCH_SECONDS` (5) is each measured window, after a
//! second of warm-up; `BENCH_ROUNDS` (2) runs every configuration that many times, in turns,
//! and keeps each one's best round, so a burst of load elsewhere falls on one round only;
//! `BENCH_CONNECTIONS` (1,64,512) and `BENCH_MODES` (http,connect) choose the rows;
//! `BENCH_ORIGIN_DELAY_MS` (0) makes the origin wait that long before each answer, as a
//! site on the internet does (its distance and its own work): with 0 the hop is measured
//! against an origin a few microseconds away, its worst case, and with a delay against the
//! answers a crawler actually waits for;
//! `BENCH_BASELINE_BINARY`, a copy of an earlier release build of `proxy-operator`, adds it
//! as a fourth path, "gateway (baseline)", before and after a change side by side in one run
//! (its figures are as noisy as the others', its ratio to direct squid is not). A watchdog
//! ends it after 20 minutes;
//! `tests/bed/reap.sh` stops every process it started.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use proxy_core::gateway::credentials::basic_header;
use proxy_core::lease::{LeaseConfig, ProxyView};
use proxy_operator::discovery::{self, Discovery, Limits};
use proxy_tests::bins;
use proxy_tests::operator::release_binary;
use proxy_tests::ports::Port;
use proxy_tests::process_usage::cpu_seconds;
use proxy_tests::run_dir::subdir;
use proxy_tests::squid::{Squid, next_loopback_addr};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

mod memory;

const SQUIDS: usize = 4;
const TOKEN: &str = "bench";
const TENANT_TOKEN: &str = "bench-tenant-token";
/// The origin's answer body.
const BODY: usize = 4096;
const WATCHDOG: Duration = Duration::from_secs(20 * 60);
/// A request not answered within this is an error, its connection dropped: a path that stops
/// answering costs its row errors, not the run.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Where a client connection goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Direct,
    Gateway,
    /// The gateway of `BENCH_BASELINE_BINARY`.
    Baseline,
    Glider,
    /// The least any hop can cost: a process that only copies bytes between each client
    /// connection and one squid ([`relay`]).
    Relay,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Self::Direct => "squid (direct)",
            Self::Gateway => "gateway",
            Self::Baseline => "gateway (baseline)",
            Self::Glider => "glider (Go peer)",
            Self::Relay => "byte relay (floor)",
        }
    }
}

/// How a client connection talks to the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Http,
    Connect,
}

/// The addresses every path needs.
#[derive(Clone, Debug)]
struct Bed {
    origin: SocketAddr,
    squids: Vec<SocketAddr>,
    gateway: SocketAddr,
    baseline: Option<SocketAddr>,
    glider: SocketAddr,
    relay: SocketAddr,
}

impl Bed {
    /// Where client connection `i` of `path` goes: direct ones spread over the squids.
    fn address(&self, path: Path, i: usize) -> anyhow::Result<SocketAddr> {
        Ok(match path {
            Path::Direct => self.squids[i % self.squids.len()],
            Path::Gateway => self.gateway,
            Path::Baseline => self
                .baseline
                .ok_or_else(|| anyhow::anyhow!("no BENCH_BASELINE_BINARY"))?,
            Path::Glider => self.glider,
            Path::Relay => self.relay,
        })
    }
}

/// One configuration's result.
#[derive(Clone, Debug, Default)]
struct Measured {
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// CPU seconds per 1000 requests of the proxy in the middle (the gateway or glider).
    cpu_per_1000: Option<f64>,
    /// How many requests of the window needed a new connection, the proxy having closed
    /// the last one (`Connection: close`).
    reopened: u64,
    /// How many requests of the window failed ([`Tally::errors`]).
    errors: u64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    std::thread::spawn(|| {
        std::thread::sleep(WATCHDOG);
        eprintln!("bench-gateway: still running after {WATCHDOG:?}, giving up");
        std::process::exit(2);
    });
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("relay") {
        return relay(args);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if first.as_deref() == Some("memory") {
        return runtime.block_on(memory::run());
    }
    runtime.block_on(bench())
}

async fn bench() -> anyhow::Result<()> {
    let seconds: u64 = env_or("BENCH_SECONDS", 5);
    let rounds: usize = env_or("BENCH_ROUNDS", 2);
    let connections: Vec<usize> = std::env::var("BENCH_CONNECTIONS")
        .unwrap_or_else(|_| "1,64,512".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let modes: Vec<Mode> = std::env::var("BENCH_MODES")
        .unwrap_or_else(|_| "http,connect".into())
        .split(',')
        .filter_map(|m| match m.trim() {
            "http" => Some(Mode::Http),
            "connect" => Some(Mode::Connect),
            _ => None,
        })
        .collect();
    if cfg!(debug_assertions) {
        println!("bench-gateway: a DEBUG build of the benchmark's clients; run it with --release");
    }

    let delay = Duration::from_millis(env_or("BENCH_ORIGIN_DELAY_MS", 0));
    let origin = origin(delay).await?;
    let dir = subdir("bench-gateway");
    let (squids, squid_addrs) = start_squids(&dir)?;
    let (discovery, _) = discovery_api(&squid_addrs).await?;
    let ports = [
        Port::reserve(),
        Port::reserve(),
        Port::reserve(),
        Port::reserve(),
    ];
    let [gateway_addr, baseline_addr, glider_addr, relay_addr] = ports
        .each_ref()
        .map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, p.number())));
    let mut children = vec![(
        Path::Gateway,
        start_gateway(
            &dir,
            &discovery,
            gateway_addr,
            release_binary(),
            ("gateway", &[]),
        )?,
    )];
    let baseline = std::env::var_os("BENCH_BASELINE_BINARY").map(std::path::PathBuf::from);
    if let Some(binary) = &baseline {
        println!(
            "bench-gateway: the baseline gateway is {}",
            binary.display()
        );
        let child = start_gateway(&dir, &discovery, baseline_addr, binary, ("baseline", &[]))?;
        children.push((Path::Baseline, child));
    }
    children.push((Path::Glider, start_glider(&dir, glider_addr, &squid_addrs)?));
    children.push((Path::Relay, start_relay(&dir, relay_addr, &squid_addrs)?));
    let bed = Bed {
        origin,
        squids: squid_addrs,
        gateway: gateway_addr,
        baseline: baseline.is_some().then_some(baseline_addr),
        glider: glider_addr,
        relay: relay_addr,
    };
    let mut paths = vec![Path::Direct];
    for (path, _) in &children {
        paths.push(*path);
        wait_listening(bed.address(*path, 0)?).await?;
    }
    let pids: Vec<(Path, u32)> = children.iter().map(|(p, c)| (*p, c.id())).collect();
    println!(
        "bench-gateway: {SQUIDS} squids, origin answering {BODY} bytes after {} ms, {seconds} s windows, best of {rounds} rounds, {} cores, load average {}",
        delay.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );

    let mut results = std::collections::BTreeMap::<(usize, &str, &str), Measured>::new();
    for &mode in &modes {
        for &conns in &connections {
            for round in 0..rounds {
                // Alternate the order, so that no path always runs first.
                let order: Vec<Path> = if round % 2 == 0 {
                    paths.to_vec()
                } else {
                    paths.iter().rev().copied().collect()
                };
                for path in order {
                    let pid = pids.iter().find(|(p, _)| *p == path).map(|(_, pid)| *pid);
                    let measured = measure(&bed, path, mode, conns, seconds, pid).await?;
                    let key = (conns, mode_name(mode), path.name());
                    if results
                        .get(&key)
                        .is_none_or(|best| measured.rate > best.rate)
                    {
                        results.insert(key, measured);
                    }
                }
            }
        }
    }
    println!();
    println!(
        "| mode | connections | path | requests/s | p50 | p99 | throughput / direct | added p99 | proxy CPU per 1000 requests | reconnects | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for &mode in &modes {
        for &conns in &connections {
            let direct = results
                .get(&(conns, mode_name(mode), Path::Direct.name()))
                .cloned()
                .unwrap_or_default();
            for &path in &paths {
                let Some(m) = results.get(&(conns, mode_name(mode), path.name())) else {
                    continue;
                };
                // A path that answered nothing has no latency and no cost per request.
                let answered = |figure: String| if m.rate > 0.0 { figure } else { "-".to_owned() };
                let added = m.p99.as_secs_f64() - direct.p99.as_secs_f64();
                println!(
                    "| {} | {conns} | {} | {:.0} | {} | {} | {:.2} | {} | {} | {} | {} |",
                    mode_name(mode),
                    path.name(),
                    m.rate,
                    answered(format!("{:.2} ms", ms(m.p50))),
                    answered(format!("{:.2} ms", ms(m.p99))),
                    m.rate / direct.rate.max(1e-9),
                    answered(format!("{:+.2} ms", added * 1000.0)),
                    m.cpu_per_1000.map_or_else(
                        || "-".to_owned(),
                        |cpu| answered(format!("{:.0} ms", cpu * 1000.0))
                    ),
                    m.reopened,
                    m.errors,
                );
            }
        }
    }
    println!();
    println!("bench-gateway: load average at the end {}", load_average());
    for (_, child) in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    for squid in squids {
        squid.stop();
    }
    Ok(())
}

/// The machine's 1, 5 and 15 minute load averages (the benchmark's own load included).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Http => "http",
        Mode::Connect => "connect",
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The origin: 200 and [`BODY`] bytes to every request, `delay` after it came, on
/// kept-alive connections.
async fn origin(delay: Duration) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut answer =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\nContent-Type: text/plain\r\n\r\n")
            .into_bytes();
    answer.extend(std::iter::repeat_n(b'x', BODY));
    let answer: Arc<[u8]> = answer.into();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut stream = BufReader::new(stream);
                let mut head = Vec::with_capacity(512);
                loop {
                    head.clear();
                    if read_head(&mut stream, &mut head).await.is_err() {
                        return;
                    }
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if stream.get_mut().write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// Reads one message head (through the blank line) into `head`.
async fn read_head(stream: &mut BufReader<TcpStream>, head: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        let byte = stream.read_u8().await?;
        head.push(byte);
        if head.ends_with(b"\r\n\r\n") {
            return Ok(());
        }
        if head.len() > 64 * 1024 {
            return Err(std::io::Error::other("head too large"));
        }
    }
}

/// [`SQUIDS`] real squids on addresses of their own, and those addresses.
fn start_squids(dir: &std::path::Path) -> anyhow::Result<(Vec<Squid>, Vec<SocketAddr>)> {
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 origin.test\n")?;
    let mut squids = Vec::new();
    for i in 0..SQUIDS {
        let addr = next_loopback_addr();
        squids.push(Squid::start(&format!("bench-gw-{i}"), addr, 3128, &hosts)?);
    }
    let addrs = squids
        .iter()
        .map(|s| SocketAddr::from((s.addr, s.port)))
        .collect();
    Ok((squids, addrs))
}

/// The discovery API in this process, its lease book holding the squids; its base URL, and
/// the book.
async fn discovery_api(squids: &[SocketAddr]) -> anyhow::Result<(String, Arc<Discovery>)> {
    let discovery = Arc::new(Discovery::new(
        Some(TOKEN),
        LeaseConfig::default(),
        Limits::default(),
    ));
    discovery
        .book()
        .replace_fleet(squids.iter().enumerate().map(|(i, addr)| ProxyView {
            key: proxy_core::ProxyKey::new("bench", format!("squid-{i}")),
            labels: [("geo".to_owned(), "eu".to_owned())].into(),
            healthy: true,
            latency_ms: 1,
            max_leases: 100_000,
            host: addr.ip().to_string(),
            port: addr.port(),
            shared_egress: false,
        }));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(discovery::serve(
        discovery.clone(),
        listener,
        proxy_operator::runtime::server::Settings::default(),
        std::future::pending(),
    ));
    Ok((url, discovery))
}

/// `binary`'s gateway on `addr` with `env` added to its environment, logging to
/// `<name>.log`.
fn start_gateway(
    dir: &std::path::Path,
    discovery: &str,
    addr: SocketAddr,
    binary: &std::path::Path,
    (name, env): (&str, &[(&str, &str)]),
) -> anyhow::Result<std::process::Child> {
    let tenants = dir.join("tenants");
    std::fs::create_dir_all(&tenants)?;
    std::fs::write(tenants.join("bench"), TENANT_TOKEN)?;
    let metrics = Port::reserve();
    // The name may hold a path (`after, LD_PRELOAD=/usr/lib/...`): not one for the log's.
    let file = name.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let log = std::fs::File::create(dir.join(format!("{file}.log")))?;
    Ok(std::process::Command::new(binary)
        .arg("gateway")
        .args(["--listen", &addr.to_string()])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", metrics.number())])
        .args(["--discovery-url", discovery])
        .arg("--tenants-dir")
        .arg(&tenants)
        .env("DISCOVERY_TOKEN", TOKEN)
        .env(
            "RUST_LOG",
            proxy_operator::runtime::telemetry::DEFAULT_FILTER,
        )
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// glider, forwarding round-robin over `squids`, health checks off (its default check URL is
/// on the internet); started through a link in the run directory, so the bed's reaper finds
/// it.
fn start_glider(
    dir: &std::path::Path,
    addr: SocketAddr,
    squids: &[SocketAddr],
) -> anyhow::Result<std::process::Child> {
    let link = dir.join("glider");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(bins::glider(), &link)?;
    let log = std::fs::File::create(dir.join("glider.log"))?;
    let mut command = std::process::Command::new(&link);
    command.args(["-listen", &format!("http://{addr}")]).args([
        "-strategy",
        "rr",
        "-check",
        "disable",
    ]);
    for squid in squids {
        command.args(["-forward", &format!("http://{squid}")]);
    }
    Ok(command
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// This benchmark's own binary as the byte relay ([`relay`]) on `addr`, over `squids`.
fn start_relay(
    dir: &std::path::Path,
    addr: SocketAddr,
    squids: &[SocketAddr],
) -> anyhow::Result<std::process::Child> {
    let log = std::fs::File::create(dir.join("relay.log"))?;
    Ok(std::process::Command::new(std::env::current_exe()?)
        .arg("relay")
        .arg(addr.to_string())
        .args(squids.iter().map(ToString::to_string))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// `bench-gateway relay <listen> <squid>...`: the floor path. Each accepted connection is
/// joined to the next squid in turn and their bytes copied both ways
/// (`tokio::io::copy_bidirectional`) until either side closes: no HTTP parsing, no lease, no
/// credentials, on the same runtime as the gateway (tokio's multi-threaded default). The
/// client's CONNECT or `http://` request goes to squid as it came. Whatever a hop costs on
/// top of this is the hop's own work; this much any hop costs on this machine.
fn relay(mut args: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let listen: SocketAddr = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("relay: no listen address"))?
        .parse()?;
    let squids: Vec<SocketAddr> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    anyhow::ensure!(!squids.is_empty(), "relay: no squid address");
    tokio::runtime::Runtime::new()?.block_on(async move {
        let listener = TcpListener::bind(listen).await?;
        let mut next = 0;
        loop {
            let (mut client, _) = listener.accept().await?;
            let squid = squids[next % squids.len()];
            next += 1;
            tokio::spawn(async move {
                let _ = client.set_nodelay(true);
                let Ok(mut upstream) = TcpStream::connect(squid).await else {
                    return;
                };
                let _ = upstream.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    })
}

async fn wait_listening(addr: SocketAddr) -> anyhow::Result<()> {
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("nothing listens on {addr}")
}

/// Runs `conns` connections on `path` in `mode` for a second of warm-up and `seconds` of
/// measurement; the proxy process `pid`'s CPU over the window.
async fn measure(
    bed: &Bed,
    path: Path,
    mode: Mode,
    conns: usize,
    seconds: u64,
    pid: Option<u32>,
) -> anyhow::Result<Measured> {
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        let (bed, measuring, stop) = (bed.clone(), measuring.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            client(&bed, path, mode, i, &measuring, &stop).await
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu_before = pid.map(cpu_seconds).transpose()?;
    let started = Instant::now();
    measuring.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::SeqCst);
    let elapsed = started.elapsed();
    let cpu_after = pid.map(cpu_seconds).transpose()?;
    stop.store(true, Ordering::SeqCst);
    let mut latencies = Vec::new();
    let (mut reopened, mut errors) = (0, 0);
    for task in tasks {
        let tally = task.await??;
        latencies.extend(tally.latencies);
        reopened += tally.reopened;
        errors += tally.errors;
    }
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let requests = latencies.len() as f64;
    let measured = Measured {
        rate: requests / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        cpu_per_1000: cpu_before
            .zip(cpu_after)
            .map(|(b, a)| (a - b) / requests.max(1.0) * 1000.0),
        reopened,
        errors,
    };
    eprintln!(
        "bench-gateway: {:>7} {:>3} connections {:<16} {:>8.0} req/s  p50 {:.2} ms  p99 {:.2} ms  {} reconnects  {} errors",
        mode_name(mode),
        conns,
        path.name(),
        measured.rate,
        ms(measured.p50),
        ms(measured.p99),
        measured.reopened,
        measured.errors,
    );
    Ok(measured)
}

/// What one client connection counted in the window.
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    /// Requests that needed a new connection, the proxy having closed the last one
    /// (`Connection: close`).
    reopened: u64,
    /// Requests that failed: not a 200, the connection broken, no new one opened, or no
    /// answer within [`REQUEST_DEADLINE`].
    errors: u64,
}

/// One client connection: requests one at a time until `stop`; the latency of each one sent
/// while `measuring`, how many times the proxy closed the connection after an answer
/// (`Connection: close`), and how many failed. A client honours a close as any HTTP client
/// does: it opens a new connection (and tunnel) for its next request, whose latency includes
/// it. A failed request, the first connection's included, is counted, not fatal (a peer
/// that fails under load is a figure): the next one opens a new connection.
async fn client(
    bed: &Bed,
    path: Path,
    mode: Mode,
    i: usize,
    measuring: &AtomicBool,
    stop: &AtomicBool,
) -> anyhow::Result<Tally> {
    let mut stream = None;
    let mut request = String::new();
    let mut opened = false;
    let mut tally = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        let counted = measuring.load(Ordering::Relaxed);
        let sent = Instant::now();
        let answered = tokio::time::timeout(REQUEST_DEADLINE, async {
            let mut connection = match stream.take() {
                Some(connection) => connection,
                None => {
                    if counted && opened {
                        tally.reopened += 1;
                    }
                    let (connection, line) = open(bed, path, mode, i).await?;
                    (request, opened) = (line, true);
                    connection
                }
            };
            connection.get_mut().write_all(request.as_bytes()).await?;
            let (status, close) = read_answer(&mut connection, true).await?;
            anyhow::ensure!(status == 200, "{} answered {status}", path.name());
            if !close {
                stream = Some(connection);
            }
            anyhow::Ok(())
        })
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {REQUEST_DEADLINE:?}")));
        // A request counts if it was sent in the window; its latency only if it was also
        // answered in it (a failure after the window, such as a deadline, still counts).
        match answered {
            Ok(()) if counted && measuring.load(Ordering::Relaxed) => {
                tally.latencies.push(sent.elapsed());
            }
            Ok(()) => {}
            Err(_) => {
                if counted {
                    tally.errors += 1;
                }
                // A path that refuses at once is not hammered.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    Ok(tally)
}

/// A connection to `path`'s proxy, ready for requests (a tunnel to the origin in `connect`
/// mode), and the request to send on it.
async fn open(
    bed: &Bed,
    path: Path,
    mode: Mode,
    i: usize,
) -> anyhow::Result<(BufReader<TcpStream>, String)> {
    let gateway = matches!(path, Path::Gateway | Path::Baseline);
    open_at(bed.address(path, i)?, gateway, mode, bed.origin)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.name()))
}

/// A connection to the proxy at `proxy` (a gateway, which takes the tenant's credentials,
/// if `gateway`), ready for requests to `origin`, and the request to send on it.
async fn open_at(
    proxy: SocketAddr,
    gateway: bool,
    mode: Mode,
    origin: SocketAddr,
) -> anyhow::Result<(BufReader<TcpStream>, String)> {
    let stream = TcpStream::connect(proxy).await?;
    stream.set_nodelay(true)?;
    let mut stream = BufReader::new(stream);
    let auth = if gateway {
        format!(
            "Proxy-Authorization: {}\r\n",
            basic_header("user-bench", TENANT_TOKEN)
        )
    } else {
        String::new()
    };
    let request = match mode {
        Mode::Http => format!("GET http://{origin}/page HTTP/1.1\r\nHost: {origin}\r\n{auth}\r\n"),
        Mode::Connect => {
            let connect = format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n{auth}\r\n");
            stream.get_mut().write_all(connect.as_bytes()).await?;
            let (status, _) = read_answer(&mut stream, false).await?;
            anyhow::ensure!(status == 200, "CONNECT answered {status}");
            format!("GET /page HTTP/1.1\r\nHost: {origin}\r\n\r\n")
        }
    };
    Ok((stream, request))
}

/// Reads an answer's head and, with `body`, its Content-Length body; its status, and whether
/// it says `Connection: close`.
async fn read_answer(stream: &mut BufReader<TcpStream>, body: bool) -> anyhow::Result<(u16, bool)> {
    let mut head = Vec::with_capacity(512);
    read_head(stream, &mut head).await?;
    let text = std::str::from_utf8(&head)?;
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP answer: {text}"))?;
    let header = |wanted: &str| {
        text.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case(wanted).then(|| value.trim())
        })
    };
    if body {
        let length: usize = header("content-length")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut rest = vec![0; length];
        stream.read_exact(&mut rest).await?;
    }
    let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    Ok((status, close))
}
