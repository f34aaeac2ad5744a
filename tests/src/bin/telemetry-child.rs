//! The child process of `tests/tests/telemetry.rs`: initialises the operator's telemetry
//! from the environment the parent gives it (a process has one global subscriber, and the
//! configuration comes from environment variables, which edition-2024 code may not change
//! without `unsafe`), runs a small workload shaped like the operator's, and exits.
//!
//! Usage: `telemetry-child with-endpoint|without-endpoint|text`.

use std::process::ExitCode;

use proxy_operator::runtime::telemetry::{self, LogFormat};
use tracing::Instrument as _;

// The workload every child runs: two reconciles, each with a provider operation, shaped like
// the operator's (`reconcile` span with a `proxy` field, `provider` span inside it).

fn emit_workload() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        tracing::info!("outside any span");
        for key in ["default/alpha", "default/beta"] {
            tokio::spawn(reconcile(key.to_owned()))
                .await
                .expect("reconcile task");
        }
    });
}

#[tracing::instrument(skip_all, fields(proxy = %key))]
async fn reconcile(key: String) {
    tracing::info!("reconciling");
    tokio::task::yield_now().await;
    let span = tracing::info_span!("provider", provider = "fake", op = "create", proxy = %key);
    async {
        tokio::task::yield_now().await;
        tracing::info!("creating machine");
        // A field named like the message, in a span with a field named like the span's
        // name: each must come out under a key of its own.
        let call = tracing::info_span!("compute", name = "instances.insert");
        let _entered = call.enter();
        tracing::warn!(message = "HTTP 503", "provider call failed");
    }
    .instrument(span)
    .await;
    tracing::info!("reconciled");
}

fn main() -> ExitCode {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let (format, exporting) = match scenario.as_str() {
        "with-endpoint" => (LogFormat::Json, true),
        "without-endpoint" => (LogFormat::Json, false),
        "text" => (LogFormat::Text, false),
        other => {
            eprintln!("unknown scenario {other:?}: with-endpoint, without-endpoint or text");
            return ExitCode::from(2);
        }
    };
    let guard = telemetry::init(format);
    if guard.is_exporting() != exporting {
        eprintln!(
            "scenario {scenario}: exporting is {}, expected {exporting}",
            guard.is_exporting()
        );
        return ExitCode::FAILURE;
    }
    emit_workload();
    drop(guard); // flushes the batch to the receiver
    ExitCode::SUCCESS
}
