//! `bench-gateway memory`: the gateway's resident memory with many kept-alive client
//! connections (issue 52), before and after a change, side by side in one run.
//!
//! A modest crawl holds a pool of connections to its proxy, each idle most of the time
//! between its requests. Here every client connection makes one request (`connect`: a tunnel
//! to the origin and one GET inside it, as an `https://` site's client does; `http`: one
//! forwarded `GET http://`), reads the answer and stays open. For each mode and each count
//! (`BENCH_MEMORY_CONNECTIONS`, 2000,10000), each gateway in turn: its RSS (`VmRSS`) before
//! the burst, with every connection open and answered (after a second's rest), and once every
//! connection has closed and the book has had every lease back (plus [`AFTER`], and again
//! at [`SETTLED`]): whether the memory went back. The figures per connection are the
//! growth over the RSS before the burst, divided by the connections.
//!
//! The gateways: this tree's release build ("after") and `BENCH_BASELINE_BINARY` ("before", a
//! release build of an earlier commit), each in its own process, both through the same four
//! squids, origin and book; `BENCH_MEMORY_ENV` (`NAME=value,...`) adds a third, this tree's
//! build with that environment (say `MALLOC_ARENA_MAX=2`), to try an allocator setting.
//!
//! File descriptors: N connections hold 2N in a gateway (the client's and the upstream's) and
//! about 2N here (the clients, and the origin's side of squid's connections). The
//! benchmark raises its `RLIMIT_NOFILE`, soft and hard, to [`OPEN_FILES`] before it starts
//! anything, and its children (squids, gateways) inherit it; raising a hard limit takes
//! `CAP_SYS_RESOURCE` (root). Without it, it says so and runs only the counts that fit.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use proxy_operator::discovery::Discovery;
use proxy_tests::operator::release_binary;
use proxy_tests::ports::Port;
use proxy_tests::process_usage::resident_bytes;
use proxy_tests::run_dir::subdir;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::{
    Mode, discovery_api, mode_name, open_at, origin, read_answer, start_gateway, start_squids,
    wait_listening,
};

/// The open-files limit the benchmark asks for: 10 000 connections with room to spare.
const OPEN_FILES: u64 = 65_536;
/// How many connections are being opened at once during a burst.
const OPENING: usize = 128;
/// How long the book may take to have every lease back after a burst closed.
const RELEASED_WITHIN: Duration = Duration::from_secs(60);
/// When the memory after a burst is read, from the last lease back.
const AFTER: Duration = Duration::from_secs(2);
/// When it is read again: past jemalloc's decay time (10 s), by which it gives back the
/// pages its background threads found unused.
const SETTLED: Duration = Duration::from_secs(15);

/// A gateway under measurement.
struct Measured {
    name: String,
    addr: SocketAddr,
    child: std::process::Child,
}

/// One burst's figures.
struct Burst {
    mode: Mode,
    connections: usize,
    gateway: String,
    before: u64,
    open: u64,
    /// [`AFTER`] after the book had every lease back.
    after: u64,
    /// [`SETTLED`] after it: once an allocator that gives memory back by time has.
    settled: u64,
    /// Connections that failed to open or got no 200.
    failed: usize,
    /// Leases the book still held when the wait for them ended.
    leases_left: usize,
}

pub async fn run() -> anyhow::Result<()> {
    let mut counts: Vec<usize> = std::env::var("BENCH_MEMORY_CONNECTIONS")
        .unwrap_or_else(|_| "2000,10000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let limit = raise_open_files();
    println!("bench-gateway memory: RLIMIT_NOFILE {limit}");
    // 2N here and in the gateway, and a margin for the rest.
    let fits = |n: &usize| (*n as u64) * 2 + 1024 <= limit;
    if let Some(n) = counts.iter().find(|n| !fits(n)) {
        println!(
            "bench-gateway memory: {n} connections do not fit in {limit} open files (raising the hard limit needs CAP_SYS_RESOURCE): skipped"
        );
    }
    counts.retain(fits);

    let origin = origin(Duration::ZERO).await?;
    let dir = subdir("bench-gateway-memory");
    let (squids, squid_addrs) = start_squids(&dir)?;
    let (discovery, book) = discovery_api(&squid_addrs).await?;
    let ports = [Port::reserve(), Port::reserve(), Port::reserve()];
    let addr = |i: usize| SocketAddr::from((Ipv4Addr::LOCALHOST, ports[i].number()));
    let mut gateways = Vec::new();
    if let Some(binary) = std::env::var_os("BENCH_BASELINE_BINARY") {
        let binary = std::path::PathBuf::from(binary);
        println!("bench-gateway memory: before = {}", binary.display());
        let child = start_gateway(&dir, &discovery, addr(0), &binary, ("before", &[]))?;
        gateways.push(Measured {
            name: "before".into(),
            addr: addr(0),
            child,
        });
    }
    let child = start_gateway(&dir, &discovery, addr(1), release_binary(), ("after", &[]))?;
    gateways.push(Measured {
        name: "after".into(),
        addr: addr(1),
        child,
    });
    if let Ok(settings) = std::env::var("BENCH_MEMORY_ENV") {
        let env: Vec<(&str, &str)> = settings
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .collect();
        let name = format!("after, {settings}");
        let child = start_gateway(&dir, &discovery, addr(2), release_binary(), (&name, &env))?;
        gateways.push(Measured {
            name,
            addr: addr(2),
            child,
        });
    }
    for gateway in &gateways {
        wait_listening(gateway.addr).await?;
    }

    let mut bursts = Vec::new();
    for mode in [Mode::Connect, Mode::Http] {
        for &connections in &counts {
            for gateway in &gateways {
                let burst = burst(gateway, mode, connections, origin, &book).await?;
                eprintln!(
                    "bench-gateway memory: {:>7} {connections:>6} {:<24} {:>7.1} MiB before, {:>7.1} MiB open, {:>7.1} MiB after, {:>7.1} MiB settled; {} failed, {} leases left",
                    mode_name(mode),
                    burst.gateway,
                    mib(burst.before),
                    mib(burst.open),
                    mib(burst.after),
                    mib(burst.settled),
                    burst.failed,
                    burst.leases_left,
                );
                bursts.push(burst);
            }
        }
    }

    println!();
    println!(
        "| mode | connections | gateway | RSS before | RSS with all open | per connection | RSS 2 s after all closed | kept of the growth | RSS 15 s after | kept | failed | leases left |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for b in &bursts {
        let grown = b.open.saturating_sub(b.before);
        let kept = |rss: u64| rss.saturating_sub(b.before) as f64 / grown.max(1) as f64 * 100.0;
        println!(
            "| {} | {} | {} | {:.1} MiB | {:.1} MiB | {:.1} KiB | {:.1} MiB | {:.0} % | {:.1} MiB | {:.0} % | {} | {} |",
            mode_name(b.mode),
            b.connections,
            b.gateway,
            mib(b.before),
            mib(b.open),
            grown as f64 / 1024.0 / b.connections as f64,
            mib(b.after),
            kept(b.after),
            mib(b.settled),
            kept(b.settled),
            b.failed,
            b.leases_left,
        );
    }
    // Each gateway's growth per connection as a ratio to the first's ("before" when given).
    if let Some(first) = gateways.first() {
        println!();
        for b in bursts.iter().filter(|b| b.gateway != first.name) {
            let Some(base) = bursts.iter().find(|a| {
                a.gateway == first.name && a.mode == b.mode && a.connections == b.connections
            }) else {
                continue;
            };
            let per = |x: &Burst| x.open.saturating_sub(x.before) as f64 / x.connections as f64;
            println!(
                "bench-gateway memory: {} {} connections: {} takes {:.2}x the memory per connection of {}",
                mode_name(b.mode),
                b.connections,
                b.gateway,
                per(b) / per(base).max(1.0),
                first.name,
            );
        }
    }
    for mut gateway in gateways {
        let _ = gateway.child.kill();
        let _ = gateway.child.wait();
    }
    for squid in squids {
        squid.stop();
    }
    Ok(())
}

/// `connections` client connections to `gateway`, each with one request answered, held
/// open, then closed; the gateway's RSS before, while open and after.
async fn burst(
    gateway: &Measured,
    mode: Mode,
    connections: usize,
    origin: SocketAddr,
    book: &Arc<Discovery>,
) -> anyhow::Result<Burst> {
    let pid = gateway.child.id();
    let before = resident_bytes(pid)?;
    let opened: Vec<anyhow::Result<BufReader<TcpStream>>> = futures::stream::iter(0..connections)
        .map(|_| async move {
            let (mut stream, request) = open_at(gateway.addr, true, mode, origin).await?;
            stream.get_mut().write_all(request.as_bytes()).await?;
            let (status, _) = read_answer(&mut stream, true).await?;
            anyhow::ensure!(status == 200, "answered {status}");
            Ok(stream)
        })
        .buffer_unordered(OPENING)
        .collect()
        .await;
    let failed = opened.iter().filter(|o| o.is_err()).count();
    if let Some(Err(error)) = opened.iter().find(|o| o.is_err()) {
        eprintln!(
            "bench-gateway memory: {failed} of {connections} connections to {} failed, the first with: {error:#}",
            gateway.name
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let open = resident_bytes(pid)?;
    drop(opened);
    let released = tokio::time::timeout(RELEASED_WITHIN, async {
        while book.book().active_leases() > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if released.is_err() {
        eprintln!(
            "bench-gateway memory: {} leases still held {RELEASED_WITHIN:?} after the connections to {} closed",
            book.book().active_leases(),
            gateway.name
        );
    }
    tokio::time::sleep(AFTER).await;
    let after = resident_bytes(pid)?;
    tokio::time::sleep(SETTLED.saturating_sub(AFTER)).await;
    Ok(Burst {
        mode,
        connections,
        gateway: gateway.name.clone(),
        before,
        open,
        after,
        settled: resident_bytes(pid)?,
        failed,
        leases_left: book.book().active_leases(),
    })
}

/// Raises this process's open-files limit, soft and hard, to [`OPEN_FILES`] (its children
/// inherit it); without the privilege, the soft limit to the hard one. The limit now.
fn raise_open_files() -> u64 {
    let wanted = Rlimit {
        current: Some(OPEN_FILES),
        maximum: Some(OPEN_FILES),
    };
    if setrlimit(Resource::Nofile, wanted).is_err() {
        let hard = getrlimit(Resource::Nofile).maximum;
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: hard,
                maximum: hard,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
