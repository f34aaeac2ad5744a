//! `proxy-operator`: the effects shell around the pure core (see `docs/architecture.md`).
//! It only dispatches: the command line is [`proxy_operator::cli`], each program owns its
//! flags and its start ([`proxy_operator::operator`], [`proxy_operator::gateway`]), the other
//! subcommands are [`proxy_operator::commands`].

use std::process::ExitCode;

use clap::Parser;
use proxy_operator::cli::{Cli, Command};
use proxy_operator::{commands, gateway, operator};

/// jemalloc, for the memory a burst took to go back once it ends: see `shell/Cargo.toml`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => operator::run(*args),
        Command::Gateway(args) => gateway::run(*args),
        Command::CheckConfig { file } => commands::check_config(&file),
        Command::Replay { file, quiet } => commands::replay(&file, quiet),
        Command::Crd { write } => commands::crd(write.as_deref()),
        Command::Rbac {
            providers_config,
            namespace,
        } => commands::rbac(&providers_config, &namespace),
    }
}
