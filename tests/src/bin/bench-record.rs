//! Benchmark (not a test): what recording costs a reconcile. Runs the decide calls of the
//! golden incidents in `tests/replay/` with and without the recorder (ring buffers only, and
//! ring buffers plus the append-only file), in turns, and prints the cost per decide call
//! and the overhead next to a reconcile's measured duration.
//!
//! Run: `just bench-record` (`cargo run --release -p proxy-tests --bin bench-record`).

use std::time::{Duration, Instant};

use proxy_core::record::{Config, DecideRecord, Header, Operator, Record, Recording};
use proxy_core::{Decision, decide};
use proxy_operator::recorder::Recorder;
use proxy_tests::bins::repo_root;

const ROUNDS: usize = 5;
const PASSES: usize = 2_000;

fn header() -> Header {
    Header::new(
        Operator {
            version: "bench".into(),
            commit: "bench".into(),
        },
        Config::new(proxy_core::Timing::default(), ["pods".to_owned()]),
        jiff::Timestamp::UNIX_EPOCH,
    )
}

/// Nanoseconds per decide call, best of `ROUNDS`, running `step` over every input.
fn time(
    inputs: &[proxy_core::record::DecideInput],
    mut step: impl FnMut(&proxy_core::record::DecideInput) -> Decision,
) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..PASSES {
            for input in inputs {
                let _ = std::hint::black_box(step(input));
            }
        }
        best = best.min(started.elapsed().as_nanos() as f64 / (PASSES * inputs.len()) as f64);
    }
    best
}

fn main() -> anyhow::Result<()> {
    let mut inputs = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("tests/replay"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for record in Recording::parse(&std::fs::read_to_string(&path)?)?.records() {
                if let Record::Decide(record) = record {
                    inputs.push(record.input.clone());
                }
            }
        }
    }
    let ring = Recorder::new(header(), 64, 8 * 1024 * 1024, None)?;
    let dir = tempfile_dir()?;
    let with_file = Recorder::new(
        header(),
        64,
        8 * 1024 * 1024,
        Some((dir.join("bench.jsonl"), 64 * 1024 * 1024)),
    )?;
    let bare = time(&inputs, |i| decide(&i.spec, &i.status, &i.observed));
    let recorded = time(&inputs, |i| {
        let decision = decide(&i.spec, &i.status, &i.observed);
        ring.decide(DecideRecord::new(
            &i.spec,
            &i.status,
            &i.observed,
            &decision,
        ));
        decision
    });
    let filed = time(&inputs, |i| {
        let decision = decide(&i.spec, &i.status, &i.observed);
        with_file.decide(DecideRecord::new(
            &i.spec,
            &i.status,
            &i.observed,
            &decision,
        ));
        decision
    });
    let _ = std::fs::remove_dir_all(&dir);
    let per = |ns: f64| Duration::from_nanos(ns as u64);
    println!(
        "bench-record: {} decide inputs from tests/replay, {PASSES} passes, best of {ROUNDS}",
        inputs.len()
    );
    println!(
        "  decide alone:                    {:>9.2?} per call",
        per(bare)
    );
    println!(
        "  decide + ring buffer:            {:>9.2?} per call (+{:.2?})",
        per(recorded),
        per(recorded - bare)
    );
    println!(
        "  decide + ring buffer + file:     {:>9.2?} per call (+{:.2?})",
        per(filed),
        per(filed - bare)
    );
    println!(
        "  a reconcile makes 1-2 decide calls and 2+ API round trips (bench-reconcile: milliseconds)"
    );
    Ok(())
}

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("bench-record.{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
