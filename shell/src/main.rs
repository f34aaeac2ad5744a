//! `proxy-operator`: the effects shell around the pure core (see `docs/architecture.md`).
//! The flags are [`proxy_operator::args`], `run` is [`proxy_operator::wiring`], the other
//! subcommands are [`proxy_operator::commands`].

use std::process::ExitCode;

use clap::Parser;
use proxy_operator::args::{Cli, Command};
use proxy_operator::{commands, gateway, wiring};

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => wiring::run(*args),
        Command::Gateway(args) => gateway::run::run(*args),
        Command::CheckConfig { file } => commands::check_config(&file),
        Command::Replay { file, quiet } => commands::replay(&file, quiet),
        Command::Crd { write } => commands::crd(write.as_deref()),
        Command::Rbac {
            providers_config,
            namespace,
        } => commands::rbac(&providers_config, &namespace),
    }
}
