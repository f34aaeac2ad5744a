//! Benchmark (not a test): first the lease book after a sustained lease rate (300,000
//! acquire + release pairs at 500 a second, in the core alone): the ended leases it keeps,
//! their memory, and what the owner's once-a-second save of the book copies under its lock
//! and serializes (`bench-discovery --sustained` runs only this). Then lease acquire +
//! release over HTTP on loopback, as a ratio to a
//! trivial warp handler measured in the same run, with 100, 1,000 and 10,000 proxies in the
//! book; with two replicas (1,000 proxies), the owner of the book and a follower that
//! forwards to it: every request to the owner, as the discovery Service sends them once it
//! selects the owner's Pod ("through the Service"), each request sent to a replica picked at
//! random (a Service over both Pods), and every request sent to the follower; the core's
//! acquire cost at 10,000 proxies divided by that at 100; p50 and p99.
//!
//! Then the listing at 10,000 proxies: `GET /v1/proxies` whole, a page of 500 (walking every
//! page) and count-only, p50 and p99; and lease acquire + release p50, p99 and max while
//! whole listings of the 10,000 proxies are served at the same time, next to the same
//! clients without listings.
//!
//! Run: `just bench-discovery` (`cargo run --release -p proxy-tests --bin bench-discovery`).
//!
//! `bench-discovery --instructions trivial|discovery PAIRS` only serves both (the API with
//! 1,000 proxies) and sends PAIRS acquire + release pairs, one at a time, to the one named:
//! run it under `valgrind --tool=callgrind` with two values of PAIRS, and the difference of
//! the instruction counts over the difference of PAIRS is the cost of one pair, client and
//! HTTP included, free of the noise of a shared machine (docs/benchmarks.md).
//! `bench-discovery --load trivial|discovery ROUNDS` serves one of them and runs the
//! benchmark's clients against it alone, ROUNDS times: for a profiler or `perf stat`.
//! Client and server share the machine's cores, the same for the trivial handler and the
//! API, so the ratio compares like with like.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_core::leadership::{Candidate, Durations};
use proxy_core::lease::{AcquireRequest, LeaseBook, LeaseConfig, ProxyView, Selector, Standing};
use proxy_operator::discovery::{self, Discovery, Limits};
use proxy_operator::leadership::Leadership;
use proxy_operator::lease_book::{self, Book, Replica};
use proxy_tests::process_usage::resident_bytes;
use warp::Filter;

const CLIENTS: usize = 8;
const PAIRS_PER_CLIENT: usize = 600;
const ROUNDS: usize = 4;
const TOKEN: &str = "bench";

fn fleet(n: usize) -> impl Iterator<Item = ProxyView> {
    (0..n).map(|i| ProxyView {
        key: proxy_core::ProxyKey::new("crawl", format!("p{i:05}")),
        labels: [(
            "geo".to_owned(),
            if i % 2 == 0 { "eu" } else { "us" }.to_owned(),
        )]
        .into(),
        healthy: true,
        latency_ms: (i % 97) as u32,
        max_leases: 1_000,
        host: format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
        port: 3128,
        shared_egress: false,
    })
}

/// Runs `CLIENTS` clients, each doing `PAIRS_PER_CLIENT` POST + DELETE pairs, each request
/// to one of `bases` picked at random; returns pairs per second and the per-pair latencies,
/// sorted.
async fn load(bases: &[String], body: &'static str) -> (f64, Vec<Duration>) {
    load_by(CLIENTS, bases, body).await
}

/// [`load`] with `clients` clients.
async fn load_by(clients: usize, bases: &[String], body: &'static str) -> (f64, Vec<Duration>) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (bases, http) = (bases.to_vec(), reqwest::Client::new());
        // xorshift64, seeded per client.
        let mut rng =
            0x9e37_79b9_7f4a_7c15_u64 ^ (client as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let mut pick = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            bases[(rng % bases.len() as u64) as usize].clone()
        };
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(PAIRS_PER_CLIENT);
            for _ in 0..PAIRS_PER_CLIENT {
                let t = Instant::now();
                let (acquire_at, release_at) = (pick(), pick());
                pair(&http, &acquire_at, &release_at, body).await;
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a client"));
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    (rate, latencies)
}

/// One lease acquired at `acquire_at` and released at `release_at`.
async fn pair(http: &reqwest::Client, acquire_at: &str, release_at: &str, body: &'static str) {
    let lease: serde_json::Value = http
        .post(format!("{acquire_at}/v1/leases"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    let id = lease["leaseID"].as_str().expect("a lease");
    let status = http
        .delete(format!("{release_at}/v1/leases/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("DELETE")
        .status();
    assert_eq!(status, 204);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

async fn serve(
    filter: impl Filter<Extract = (impl warp::Reply,), Error = std::convert::Infallible>
    + Clone
    + Send
    + Sync
    + 'static,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(warp::serve(filter).incoming(listener).run());
    base
}

/// The trivial handler: same routes and methods, no state, no logic, and a fixed answer of
/// the same shape and size as a real lease, so that both servers send the clients the same
/// bytes to read (client and server share the machine's cores).
async fn trivial() -> String {
    let lease = serde_json::json!({
        "leaseID": "8b35c149-ce36-4e7f-bf3f-9605e7c7fe26",
        "proxy": {"namespace": "crawl", "name": "p00042", "host": "10.0.0.42", "port": 3128, "url": "http://10.0.0.42:3128"},
        "target": "example.com", "expiresAt": "2026-11-30T15:30:41.051563121Z", "ttlSeconds": 60
    });
    let post = warp::path!("v1" / "leases").and(warp::post()).map(move || {
        warp::reply::with_status(warp::reply::json(&lease), warp::http::StatusCode::CREATED)
    });
    let delete = warp::path!("v1" / "leases" / String)
        .and(warp::delete())
        .map(|_id| warp::reply::with_status(warp::reply(), warp::http::StatusCode::NO_CONTENT));
    serve(
        post.map(warp::Reply::into_response)
            .or(delete.map(warp::Reply::into_response))
            .unify()
            .recover(|_| async {
                Ok::<_, std::convert::Infallible>(warp::http::StatusCode::NOT_FOUND.into_response())
            })
            .unify(),
    )
    .await
}

use warp::Reply;

/// A replica of the fleet's discovery API, as the operator runs one: it owns the book while
/// `leadership` says it leads, and forwards to the owner otherwise.
fn replica(leadership: Leadership) -> Arc<Discovery> {
    let book = Book::replicated(
        LeaseConfig::default(),
        Replica {
            own_url: None,
            leadership: Arc::new(leadership),
        },
        // Nothing saves the book here: never fence its grants.
        Duration::MAX,
    );
    Arc::new(Discovery::serving(
        Arc::new(book),
        Some(TOKEN),
        Limits::default(),
    ))
}

/// Two replicas of the discovery API, as the operator runs them, with `n` proxies: the owner
/// of the book (the leader), and a follower that forwards every request to it (what a
/// replica that does not lead does). Their base URLs.
async fn two_replicas(n: usize) -> (String, String) {
    let candidate = |name: &str| Candidate::new(name, Durations::default()).expect("an identity");
    // The owner leads for good; the follower never runs for leadership.
    let (owner, follower) = (
        replica(Leadership::unopposed(candidate("owner"))),
        replica(Leadership::new(candidate("follower"))),
    );
    owner.book().replace_fleet(fleet(n));
    follower.book().replace_fleet(fleet(n));
    owner.book().shared().standing = Standing::Owner;
    let owner = serve(discovery::routes(owner)).await;
    follower.book().shared().standing = Standing::Follower {
        owner: Some(owner.clone()),
    };
    (owner, serve(discovery::routes(follower)).await)
}

/// Core cost of acquire + release, nanoseconds, best of 3 rounds.
#[allow(clippy::disallowed_methods, reason = "a benchmark reads the clock")]
fn core_cost(n: usize) -> f64 {
    let mut book = LeaseBook::new(LeaseConfig::default());
    fleet(n).for_each(|view| book.upsert(view));
    let selector: Selector = [("geo", "eu")].into_iter().collect();
    let mut now = jiff::Timestamp::UNIX_EPOCH;
    let mut best = f64::MAX;
    for round in 0..3 {
        let iterations = 50_000;
        let started = Instant::now();
        for i in 0..iterations {
            now += Duration::from_millis(10);
            let id = format!("{round}-{i}");
            let request = AcquireRequest {
                id: id.clone(),
                selector: selector.clone(),
                target: Some("example.com".into()),
                ttl: Duration::from_secs(60),
                distinct_egress: false,
                holder: None,
            };
            book.acquire(request, now).expect("a lease");
            book.release(&id, now);
        }
        best = best.min(started.elapsed().as_nanos() as f64 / iterations as f64);
    }
    best
}

#[tokio::main]
async fn main() {
    let body = r#"{"selector": {"geo": "eu"}, "target": "example.com", "ttlSeconds": 60}"#;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, server, pairs] = args.as_slice()
        && flag == "--instructions"
    {
        instructions(server, pairs.parse().expect("a number of pairs"), body).await;
        return;
    }
    if let [flag] = args.as_slice()
        && flag == "--sustained"
    {
        sustained();
        return;
    }
    if let [flag, server, rounds] = args.as_slice()
        && flag == "--load"
    {
        let base = one_server(server).await;
        for _ in 0..rounds.parse::<usize>().expect("a number of rounds") {
            let (rate, _) = load(std::slice::from_ref(&base), body).await;
            println!("{server}: {rate:.0} pairs/s");
        }
        return;
    }
    println!(
        "bench-discovery: {CLIENTS} clients x {PAIRS_PER_CLIENT} acquire+release pairs over HTTP on loopback, \
         {ROUNDS} rounds taking turns (best round of each kept, so a burst of load elsewhere hurts none of them alone)"
    );
    // First, on a fresh heap (its RSS difference is the book's).
    sustained();
    let mut servers = vec![("trivial warp handler".to_owned(), vec![trivial().await])];
    for n in [100, 1_000, 10_000] {
        let state = Arc::new(Discovery::new(
            Some(TOKEN),
            LeaseConfig::default(),
            Limits::default(),
        ));
        state.book().replace_fleet(fleet(n));
        servers.push((
            format!("discovery, {n:>6} proxies"),
            vec![serve(discovery::routes(state)).await],
        ));
    }
    let (owner, follower) = two_replicas(1_000).await;
    servers.push((
        "2 replicas, through Service".to_owned(),
        vec![owner.clone()],
    ));
    servers.push((
        "2 replicas, random one".to_owned(),
        vec![owner.clone(), follower.clone()],
    ));
    servers.push(("2 replicas, via follower".to_owned(), vec![follower]));
    let mut best: Vec<Option<(f64, Vec<Duration>)>> = vec![None; servers.len()];
    for _ in 0..ROUNDS {
        for (slot, (_, bases)) in best.iter_mut().zip(&servers) {
            let (rate, latencies) = load(bases, body).await;
            if slot.as_ref().is_none_or(|(best_rate, _)| rate > *best_rate) {
                *slot = Some((rate, latencies));
            }
        }
    }
    let trivial_rate = best[0].as_ref().expect("measured").0;
    for ((name, _), result) in servers.iter().zip(&best) {
        let (rate, latencies) = result.as_ref().expect("measured");
        println!(
            "  {name:<26} {rate:>8.0} pairs/s   p50 {:>9.2?}  p99 {:>9.2?}   ratio to trivial {:.2}",
            percentile(latencies, 0.5),
            percentile(latencies, 0.99),
            rate / trivial_rate
        );
    }
    let (small, large) = (core_cost(100), core_cost(10_000));
    println!(
        "  core acquire+release: {small:.0} ns at 100 proxies, {large:.0} ns at 10,000: ratio {:.2}",
        large / small
    );
    listing(body).await;
}

/// The listing at [`LISTED`] proxies, and leases while it is served.
async fn listing(body: &'static str) {
    let state = Arc::new(Discovery::new(
        Some(TOKEN),
        LeaseConfig::default(),
        Limits::default(),
    ));
    state.book().replace_fleet(fleet(LISTED));
    let base = serve(discovery::routes(state)).await;
    let http = reqwest::Client::new();
    println!("listing at {LISTED} proxies, one client, sequential requests:");
    let whole = timed_gets(&http, &base, "", 20).await;
    report_gets("whole list", whole.as_deref());
    let count = timed_gets(&http, &base, "countOnly=true", 200).await;
    report_gets("countOnly=true", count.as_deref());
    let pages = pages(&http, &base, 10).await;
    report_gets("page of 500 (every page)", pages.as_deref());
    // Leases with and without whole listings served at the same time.
    let (_, quiet) = load_by(LEASE_CLIENTS, std::slice::from_ref(&base), body).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listers: Vec<_> = (0..LISTERS)
        .map(|_| {
            let (http, base, stop) = (http.clone(), base.clone(), stop.clone());
            tokio::spawn(async move {
                let mut served = 0_usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let answer = get(&http, &base, "").await;
                    assert_eq!(answer.0, 200);
                    served += 1;
                }
                served
            })
        })
        .collect();
    let started = Instant::now();
    let (_, loaded) = load_by(LEASE_CLIENTS, std::slice::from_ref(&base), body).await;
    let elapsed = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut lists = 0;
    for lister in listers {
        lists += lister.await.expect("a lister");
    }
    println!(
        "lease acquire+release, {LEASE_CLIENTS} clients x {PAIRS_PER_CLIENT} pairs, {LISTED} proxies:"
    );
    for (name, latencies) in [("alone", &quiet), ("with lists", &loaded)] {
        println!(
            "  {name:<12} p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?}",
            percentile(latencies, 0.5),
            percentile(latencies, 0.99),
            latencies.last().expect("measured"),
        );
    }
    println!(
        "  lists served meanwhile by {LISTERS} clients: {lists} whole lists ({:.1} per second)",
        lists as f64 / elapsed.as_secs_f64()
    );
}

/// Proxies of the listing benchmark.
const LISTED: usize = 10_000;
/// Lease clients while lists are served.
const LEASE_CLIENTS: usize = 4;
/// Clients listing the whole fleet in a loop meanwhile.
const LISTERS: usize = 2;

/// `GET /v1/proxies?{query}`: its status and body.
async fn get(http: &reqwest::Client, base: &str, query: &str) -> (u16, bytes::Bytes) {
    let answer = http
        .get(format!("{base}/v1/proxies?{query}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET");
    let status = answer.status().as_u16();
    (status, answer.bytes().await.expect("a body"))
}

/// `times` sequential `GET /v1/proxies?{query}`, each timed to its last byte, sorted; `None`
/// when the server refuses the query (a build before paging).
async fn timed_gets(
    http: &reqwest::Client,
    base: &str,
    query: &str,
    times: usize,
) -> Option<Vec<(Duration, usize)>> {
    let mut taken = Vec::with_capacity(times);
    for _ in 0..times {
        let started = Instant::now();
        let (status, body) = get(http, base, query).await;
        if status == 400 {
            return None;
        }
        assert_eq!(status, 200, "{query}");
        taken.push((started.elapsed(), body.len()));
    }
    taken.sort();
    Some(taken)
}

/// Walks every page of 500, `rounds` times, each request timed; `None` when the server
/// refuses `limit` (a build before paging).
async fn pages(
    http: &reqwest::Client,
    base: &str,
    rounds: usize,
) -> Option<Vec<(Duration, usize)>> {
    let mut taken = Vec::new();
    for _ in 0..rounds {
        let mut token = String::new();
        loop {
            let started = Instant::now();
            let (status, body) = get(http, base, &format!("limit=500&continue={token}")).await;
            if status == 400 {
                return None;
            }
            taken.push((started.elapsed(), body.len()));
            let page: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            match page["continue"].as_str() {
                Some(next) => token = next.to_owned(),
                None => break,
            }
        }
    }
    taken.sort();
    Some(taken)
}

fn report_gets(name: &str, taken: Option<&[(Duration, usize)]>) {
    let Some(taken) = taken else {
        println!("  {name:<26} not served by this build (query refused)");
        return;
    };
    let at = |p: f64| taken[((taken.len() as f64 * p) as usize).min(taken.len() - 1)].0;
    println!(
        "  {name:<26} p50 {:>9.2?}  p99 {:>9.2?}  ({} requests, {} bytes each)",
        at(0.5),
        at(0.99),
        taken.len(),
        taken[taken.len() / 2].1
    );
}

/// Serves the trivial handler and the API (1,000 proxies), then sends `pairs` sequential
/// acquire + release pairs to `server` (`trivial` or `discovery`): for instruction counts.
async fn instructions(server: &str, pairs: usize, body: &'static str) {
    let base = one_server(server).await;
    let http = reqwest::Client::new();
    for _ in 0..pairs {
        pair(&http, &base, &base, body).await;
    }
}

/// Serves `server`: `trivial`, the trivial handler, or `discovery`, the API with 1,000
/// proxies; its base URL.
async fn one_server(server: &str) -> String {
    match server {
        "trivial" => trivial().await,
        "discovery" => {
            let state = Arc::new(Discovery::new(
                Some(TOKEN),
                LeaseConfig::default(),
                Limits::default(),
            ));
            state.book().replace_fleet(fleet(1_000));
            serve(discovery::routes(state)).await
        }
        other => panic!("trivial|discovery, not {other}"),
    }
}

/// Lease pairs of the sustained-rate run: 500 a second for 10 minutes, all within the
/// default retention (30 minutes).
const SUSTAINED_PAIRS: usize = 300_000;
/// Their spacing: 500 pairs a second.
const SUSTAINED_GAP: Duration = Duration::from_millis(2);

/// The lease book after a sustained lease rate, in the core alone, with the default
/// configuration: how many ended leases it still knows, what they cost in memory (the
/// process's RSS before and after), and what the owner's save of the book costs each second
/// (`LeaseBook::checkpoint`, taken under the book's lock, and its JSON, which the save
/// serializes before trimming it to its ConfigMap). Run first, on a fresh heap, so that the
/// RSS difference is the book's.
#[allow(clippy::disallowed_methods, reason = "a benchmark reads the clock")]
fn sustained() {
    let rss_before = rss_bytes();
    let mut book = LeaseBook::new(LeaseConfig::default());
    fleet(1_000).for_each(|view| book.upsert(view));
    let selector: Selector = [("geo", "eu")].into_iter().collect();
    let mut now = jiff::Timestamp::UNIX_EPOCH;
    let id = |i: usize| format!("00000000-0000-4000-8000-{i:012x}");
    for i in 0..SUSTAINED_PAIRS {
        now += SUSTAINED_GAP;
        let request = AcquireRequest {
            id: id(i),
            selector: selector.clone(),
            target: Some("example.com".into()),
            ttl: Duration::from_secs(60),
            distinct_egress: false,
            holder: None,
        };
        book.acquire(request, now).expect("a lease");
        book.release(&id(i), now);
    }
    let rss_after = rss_bytes();
    let known = (0..SUSTAINED_PAIRS)
        .filter(|&i| book.knows(&id(i), now))
        .count();
    let mut taken = Vec::new();
    let mut encoded = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let checkpoint = book.checkpoint(now, lease_book::ownership::SAVED_RETAINED);
        taken.push(started.elapsed());
        let started = Instant::now();
        bytes = serde_json::to_string(&checkpoint).expect("JSON").len();
        encoded.push(started.elapsed());
    }
    taken.sort();
    encoded.sort();
    let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "lease book after {SUSTAINED_PAIRS} acquire+release pairs at {} a second (core alone, 1,000 proxies):",
        Duration::from_secs(1).as_nanos() / SUSTAINED_GAP.as_nanos()
    );
    println!(
        "  ended leases still known: {known}; RSS grew by {:.1} MiB ({:.0} bytes per pair)",
        mib(rss_after.saturating_sub(rss_before)),
        rss_after.saturating_sub(rss_before) as f64 / SUSTAINED_PAIRS as f64
    );
    println!(
        "  each save: checkpoint under the lock p50 {:.2?}, its JSON {:.1} MiB in p50 {:.2?}",
        taken[taken.len() / 2],
        mib(bytes),
        encoded[encoded.len() / 2]
    );
}

/// The resident set of this process.
fn rss_bytes() -> usize {
    let bytes = resident_bytes(std::process::id()).expect("this process's VmRSS");
    usize::try_from(bytes).expect("a resident set that fits in memory")
}
