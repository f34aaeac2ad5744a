//! The runtime layer under both programs, `proxy-operator run` (the operator) and
//! `proxy-operator gateway`: what a long-running process of this project needs whatever it
//! serves.
//!
//! - [`start`]: logging and tracing ([`telemetry`]), the async runtime, the exit code;
//! - [`signals`]: SIGTERM and SIGINT, and a stop a program can send itself;
//! - [`server`]: HTTP servers with the limits warp's own does not set, and the probe routes;
//! - [`admin`]: the one admin router (`GET /metrics` and what a program adds);
//! - [`metrics`]: the registry every component registers its families into, and its encoder;
//! - [`supervise`]: the panic boundary.
//!
//! Nothing here knows a Proxy, a provider or a lease: the programs are built on it, never the
//! other way round.

pub mod admin;
pub mod metrics;
pub mod server;
pub mod signals;
pub mod supervise;
pub mod telemetry;

use std::future::Future;
use std::process::ExitCode;

use self::telemetry::LogFormat;

/// Runs the program `name` (`proxy-operator`, `proxy-operator gateway`): logs in
/// `log_format` (or the one [`LogFormat::detect`] picks), an async runtime for `work`, and an
/// exit code that says whether it ran (a start it refused, with its reason, is a failure).
/// The telemetry is flushed after the runtime stops.
pub fn start<W>(name: &str, log_format: Option<LogFormat>, work: W) -> ExitCode
where
    W: Future<Output = anyhow::Result<()>>,
{
    let _telemetry = telemetry::init(log_format.unwrap_or_else(LogFormat::detect));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{name}: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name}: {error:#}");
            ExitCode::FAILURE
        }
    }
}
