//! Micro-benchmark: the cost of one acquire plus its release, by fleet size.
//!
//! Run with `cargo bench -p proxy-core --bench lease`. Fleets of 100, 1,000 and 10,000
//! healthy proxies (four `geo` values, latencies spread over 0–499 ms, `maxLeases` 5), half
//! of them already holding a long lease, so the order has ties and depth. Each timed
//! iteration acquires a lease (selector, target and a 60 s TTL) and releases it, with the
//! clock advancing 10 ms per iteration: 100 grants a second, so with the default 5-minute
//! retention the ledger settles around 30,000 retained leases, as in a busy fleet. Lease IDs
//! are made before the timing starts. The sizes take turns over several rounds and each
//! keeps its best round, so machine noise hits them alike; the ratio
//! cost(10,000) / cost(100) is the figure to compare (target: at most 2).

use std::hint::black_box;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use proxy_core::lease::{AcquireRequest, LeaseBook, LeaseConfig, ProxyView, Selector};

const SIZES: [usize; 3] = [100, 1_000, 10_000];
const GEOS: [&str; 4] = ["eu", "us", "ap", "sa"];
const ROUNDS: usize = 5;
const ITERATIONS: usize = 100_000;
const STEP: Duration = Duration::from_millis(10);

struct Scenario {
    name: &'static str,
    selector: Selector,
    target: Option<&'static str>,
}

fn start() -> Timestamp {
    Timestamp::from_second(1_780_000_000).expect("a valid timestamp")
}

/// `n` proxies, half of them holding one long lease.
fn fleet(n: usize) -> LeaseBook {
    let mut book = LeaseBook::new(LeaseConfig::default());
    for i in 0..n {
        book.upsert(ProxyView {
            key: proxy_core::ProxyKey::new("crawl", format!("proxy-{i:05}")),
            labels: [("geo".to_owned(), GEOS[i % GEOS.len()].to_owned())].into(),
            healthy: true,
            latency_ms: u32::try_from(i * 7_919 % 500).expect("below 500"),
            max_leases: 5,
            host: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            port: 3128,
            shared_egress: false,
        });
    }
    for i in 0..n / 2 {
        let request = AcquireRequest {
            id: format!("held-{i}"),
            selector: Selector::all(),
            target: None,
            ttl: Duration::from_secs(86_400),
            distinct_egress: false,
            holder: None,
        };
        book.acquire(request, start()).expect("a free proxy");
    }
    book
}

/// Nanoseconds per acquire + release, over `ids.len()` iterations.
#[allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; the library itself never reads the clock"
)]
fn time_acquire_release(book: &mut LeaseBook, scenario: &Scenario, ids: Vec<String>) -> f64 {
    let iterations = ids.len();
    let mut now = start();
    let started = Instant::now();
    for id in ids {
        now += STEP;
        let request = AcquireRequest {
            id,
            selector: scenario.selector.clone(),
            target: scenario.target.map(str::to_owned),
            ttl: Duration::from_secs(60),
            distinct_egress: false,
            holder: None,
        };
        let lease = book.acquire(black_box(request), now).expect("a free proxy");
        black_box(book.release(&lease.id, now));
    }
    started.elapsed().as_nanos() as f64 / iterations as f64
}

fn main() {
    let scenarios = [
        Scenario {
            name: "selector geo=eu, target example.com",
            selector: [("geo", "eu")].into_iter().collect(),
            target: Some("example.com"),
        },
        Scenario {
            name: "any proxy, no target",
            selector: Selector::all(),
            target: None,
        },
    ];
    let fleets: Vec<LeaseBook> = SIZES.iter().map(|n| fleet(*n)).collect();
    println!("lease book: acquire + release, best of {ROUNDS} rounds of {ITERATIONS}");
    for scenario in &scenarios {
        let mut best = [f64::INFINITY; SIZES.len()];
        for round in 0..ROUNDS {
            for (size, fleet) in fleets.iter().enumerate() {
                let ids = (0..ITERATIONS).map(|i| format!("r{round}-{i}")).collect();
                let mut book = fleet.clone();
                best[size] = best[size].min(time_acquire_release(&mut book, scenario, ids));
            }
        }
        println!("{}:", scenario.name);
        for (n, ns) in SIZES.iter().zip(best) {
            println!("  {n:>6} proxies: {ns:>7.0} ns");
        }
        println!(
            "  cost(10,000) / cost(100) = {:.2} (target <= 2)",
            best[2] / best[0]
        );
    }
}
