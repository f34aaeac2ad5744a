//! The health engine's flags: whom the probe trusts, and how many probes run at once.

use std::path::PathBuf;

use clap::Args;

/// The health engine's flags.
#[derive(Debug, Args)]
#[command(next_help_heading = "Health probes")]
#[group(id = "health")]
pub struct Flags {
    /// PEM file of extra CA certificates to trust for probe URLs (a private probe origin);
    /// the public web PKI is always trusted.
    #[arg(long, env = "PROBE_CA_BUNDLE")]
    pub probe_ca_bundle: Option<PathBuf>,
    /// How many probes may run at once.
    #[arg(long, default_value_t = crate::health::DEFAULT_CONCURRENCY)]
    pub probe_concurrency: usize,
}
