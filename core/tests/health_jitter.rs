//! Status writes under latency jitter (issue 20, goal 5): at 10 000 healthy proxies whose
//! probe latencies jitter as real ones do, the health book's reports, each of which is one
//! status write, stay at most 10 a second for the whole fleet.
//!
//! A deterministic simulation of the book alone, driven as the shell drives it (every
//! report delivered): no clock, no timing, so the count is exact and the same on every
//! machine. Run with `--nocapture` to see the figures; the same file run against an older
//! core gives the figure before (docs/benchmarks.md, "Status writes under latency jitter").
//!
//! The jitter model, per proxy and probe:
//! - each proxy has its own typical latency, log-uniform between 20 ms and 800 ms (a fleet
//!   spread over regions and networks);
//! - each probe is that latency times a log-normal factor (sigma 0.3: a TLS handshake, a
//!   busy origin, a queue somewhere);
//! - 3% of probes are spikes, 3 to 10 times the typical latency;
//! - 0.2% of probes fail (a timeout), below the failure threshold of 3, so the verdicts hold.

use jiff::{SignedDuration, Timestamp};
use proxy_core::ProxyKey;
use proxy_core::health::{HealthBook, Probe, ReportReason, Target, Thresholds};
use proxy_core::testing::at;

const FLEET: usize = 10_000;
/// Simulated after the warm-up, in which every proxy gets its first verdict.
const WINDOW_SECS: i64 = 30 * 60;
const WARM_UP_SECS: i64 = 2 * 60;

/// A small deterministic generator (xorshift64*), so the simulation needs no RNG crate
/// and gives the same figures everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "53 bits of a 64-bit draw")]
        let draw = (self.next() >> 11) as f64;
        draw / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(f64::MIN_POSITIVE), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Steady-state reports (= status writes) per second of the fleet, by reason, with every
/// proxy probed each `interval_secs`.
fn writes_per_second(interval_secs: i64) -> (f64, Vec<(ReportReason, usize)>) {
    let mut rng = Rng(0x5EED_CAFE_F00D_0001);
    let typical: Vec<f64> = (0..FLEET).map(|_| 20.0 * 40f64.powf(rng.unit())).collect();
    let keys: Vec<ProxyKey> = (0..FLEET)
        .map(|i| ProxyKey::new("crawl", format!("px-{i:05}")))
        .collect();
    let targets: Vec<Target> = (0..FLEET)
        .map(|i| Target {
            uid: format!("uid-{i}"),
            host: format!("10.{}.{}.{}", i / 65_536, (i / 256) % 256, i % 256),
            since: None,
        })
        .collect();
    let thresholds = Thresholds::new(3, 1);
    let start = at("2026-12-01T00:00:00Z");
    let mut book = HealthBook::new();
    let mut counted: Vec<(ReportReason, usize)> = Vec::new();
    // Each proxy has its own place in the interval, as the schedule spreads them.
    let offset = |i: usize| i64::try_from(i).unwrap() * interval_secs * 1000 / FLEET as i64;
    let mut round = 0;
    loop {
        let round_start = round * interval_secs;
        if round_start >= WARM_UP_SECS + WINDOW_SECS {
            break;
        }
        for i in 0..FLEET {
            let millis = round_start * 1000 + offset(i);
            let now: Timestamp = start + SignedDuration::from_millis(millis);
            let failed = rng.unit() < 0.002;
            let spike = rng.unit() < 0.03;
            let factor = if spike {
                3.0 + 7.0 * rng.unit()
            } else {
                (0.3 * rng.normal()).exp()
            };
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a positive latency of a few seconds at most"
            )]
            let latency_ms = if failed {
                5_000
            } else {
                (typical[i] * factor).round() as u32
            };
            let probe = Probe {
                ok: !failed,
                latency_ms,
                at: now,
                failure: None,
                egress: None,
            };
            if let Some(report) = book.record(&keys[i], &targets[i], probe, thresholds) {
                assert!(book.delivered(&report));
                if millis >= WARM_UP_SECS * 1000 {
                    match counted
                        .iter_mut()
                        .find(|(reason, _)| *reason == report.reason)
                    {
                        Some((_, n)) => *n += 1,
                        None => counted.push((report.reason, 1)),
                    }
                }
            }
        }
        round += 1;
    }
    let total: usize = counted.iter().map(|(_, n)| n).sum();
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let rate = total as f64 / WINDOW_SECS as f64;
    (rate, counted)
}

#[test]
fn status_writes_under_latency_jitter_stay_under_ten_a_second_at_10_000_proxies() {
    // The default interval (30 s), and the 5 s of the profile.
    for interval in [30, 5] {
        let (rate, by_reason) = writes_per_second(interval);
        println!(
            "{FLEET} proxies probed every {interval} s, {} min of jitter: {rate:.2} status writes/s \
             (reports by reason: {by_reason:?})",
            WINDOW_SECS / 60
        );
        assert!(
            rate <= 10.0,
            "{rate:.2} status writes/s at a {interval} s interval: {by_reason:?}"
        );
    }
}
