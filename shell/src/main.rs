//! `proxy-operator`: the effects shell around the pure core (see `docs/architecture.md`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use proxy_operator::config::ProvidersConfig;

/// Runs fleets of HTTP forward proxies for web crawlers on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "proxy-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a providers config file and print a one-line summary. Exits 1 with every
    /// problem (each naming the path of the offending entry) when it is invalid.
    CheckConfig {
        /// The providers config (YAML), as passed to `--providers-config`.
        file: PathBuf,
    },
    /// Print the Proxy CustomResourceDefinition as YAML (`... crd | kubectl apply -f -`).
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => match ProvidersConfig::load(&file) {
            Ok(config) => {
                println!("{}: {}", file.display(), config.summary());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        },
        Command::Crd => {
            print!("{}", proxy_crd::Proxy::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}
