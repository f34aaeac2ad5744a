//! The subcommands besides `run` (which is [`crate::operator`]'s): each prints its answer and
//! returns the exit code `--help` documents.

use std::path::Path;
use std::process::ExitCode;

use proxy_core::record::{Recording, timeline};

use crate::config::ProvidersConfig;

/// `check-config FILE`: a one-line summary, or every problem and exit 1.
pub fn check_config(file: &Path) -> ExitCode {
    match ProvidersConfig::load(file) {
        Ok(config) => {
            println!("{}: {}", file.display(), config.summary());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// `crd [--write DIR]`: every CustomResourceDefinition as YAML documents on stdout, or one
/// file per CRD in `DIR` (what `deploy/crds/` holds).
pub fn crd(write: Option<&Path>) -> ExitCode {
    let crds = proxy_crd::crds();
    let Some(dir) = write else {
        let documents: Vec<&str> = crds.iter().map(|(_, yaml)| yaml.as_str()).collect();
        print!("{}", documents.join("---\n"));
        return ExitCode::SUCCESS;
    };
    for (file, yaml) in &crds {
        let path = dir.join(file);
        if let Err(error) = std::fs::write(&path, yaml) {
            eprintln!("{}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// `rbac --providers-config FILE`: the RBAC the operator needs for that config, or every
/// problem of the config and exit 1.
pub fn rbac(file: &Path, namespace: &str) -> ExitCode {
    match ProvidersConfig::load(file) {
        Ok(config) => {
            let configured = config.providers.iter().map(|p| &p.settings);
            let rbac = crate::providers::types::rbac_yaml(configured, &config.summary(), namespace);
            print!("{rbac}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// `replay FILE`: the timeline (unless `quiet`), then the verdict: 0 when every decision is
/// the same, 1 at the first divergence, 2 when the file cannot be read.
pub fn replay(file: &Path, quiet: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    let recording = match Recording::parse(&text) {
        Ok(recording) => recording,
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    if !quiet {
        for line in timeline(&recording) {
            println!("{line}");
        }
    }
    match recording.replay() {
        Ok(report) => {
            for note in &report.notes {
                println!("note: {note}");
            }
            match &report.divergence {
                None => {
                    println!(
                        "replay: {} of {} records replayed, every decision identical",
                        report.checked, report.records
                    );
                    ExitCode::SUCCESS
                }
                Some(divergence) => {
                    println!("replay: DIVERGED\n{divergence}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            ExitCode::from(2)
        }
    }
}
