//! The recorder's flags: how many decide calls it keeps in memory, and the record file.

use std::path::PathBuf;

use clap::Args;

/// The recorder's flags.
#[derive(Debug, Args)]
#[command(next_help_heading = "Recording")]
#[group(id = "recorder")]
pub struct Flags {
    /// How many decide calls are kept in memory per Proxy, for `GET /debug/recording` on
    /// the metrics port (within --record-budget-bytes).
    #[arg(long, default_value_t = 64)]
    pub record_per_object: usize,
    /// Bytes of records kept in memory for the whole fleet (compressed, with the
    /// dictionaries they need: about a tenth of their JSON); past it the oldest records go
    /// first, whichever Proxy they are about. 0 keeps none.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub record_budget_bytes: usize,
    /// Also append every decide call to this file (JSON Lines, `proxy-operator replay`).
    #[arg(long, env = "RECORD_FILE")]
    pub record_file: Option<PathBuf>,
    /// Size at which the record file moves to `<file>.1` and a new one starts.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub record_max_bytes: u64,
}

impl Flags {
    /// The record file and its rotation size, with `--record-file`.
    pub fn file(&self) -> Option<(PathBuf, u64)> {
        self.record_file
            .clone()
            .map(|path| (path, self.record_max_bytes))
    }
}
