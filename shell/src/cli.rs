//! The command line: the subcommands of `proxy-operator`. Each program owns its flags
//! (`run`: [`crate::operator::Args`], `gateway`: [`crate::gateway::Args`]); the other
//! subcommands ([`crate::commands`]) take a file and an option or two, written here.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Runs fleets of HTTP forward proxies for web crawlers on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "proxy-operator", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// A subcommand, with its flags.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: reconcile Proxy objects against the configured providers.
    Run(Box<crate::operator::Args>),
    /// Run the gateway: one HTTP forward proxy address for any client, in front of the
    /// fleet, with its options in the proxy username (docs/gateway.md).
    Gateway(Box<crate::gateway::Args>),
    /// Validate a providers config file and print a one-line summary. Exits 1 with every
    /// problem (each naming the path of the offending entry) when it is invalid.
    CheckConfig {
        /// The providers config (YAML), as passed to `--providers-config`.
        file: PathBuf,
    },
    /// Print the CustomResourceDefinitions (Proxy, ProviderHealth) as YAML documents
    /// (`... crd | kubectl apply -f -`), or write one file per CRD into a directory.
    Crd {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        write: Option<PathBuf>,
    },
    /// Print the RBAC the operator needs for a providers config (a ClusterRole and a Role in
    /// its namespace, both `proxy-operator`): no Pod permissions without a kubernetes
    /// provider.
    Rbac {
        /// The providers config (YAML), as passed to `--providers-config`.
        #[arg(long)]
        providers_config: PathBuf,
        /// The operator's namespace (its Lease and ProviderHealth objects).
        #[arg(long, default_value = "proxy-operator")]
        namespace: String,
    },
    /// Replay a recording through this build's core: print the timeline, then exit 0 when
    /// every decision is the same, 1 at the first divergence (shown), 2 when the file
    /// cannot be read. See docs/replay.md.
    Replay {
        /// The recording (`--record-file`, or `GET /debug/recording` on the metrics port).
        file: PathBuf,
        /// Do not print the timeline, only the verdict.
        #[arg(long)]
        quiet: bool,
    },
}
