//! The CPU time and the resident memory of a process (the operator a benchmark runs, or the
//! benchmark itself), from `/proc`.

use std::sync::OnceLock;

/// User + system CPU seconds of the whole process `pid`, all its threads: `utime` and
/// `stime` of `/proc/PID/stat`, in clock ticks (`getconf CLK_TCK`, 100 on Linux).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // "pid (name) state ...": split after the last ')', as a name may hold anything;
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat has no field {}: {stat}", i + 3))
    };
    Ok((field(11)? + field(12)?) / ticks_per_second())
}

/// Resident memory of `pid`, in bytes: `VmRSS` of `/proc/PID/status`, which the kernel
/// gives in KiB whatever the page size.
pub fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

fn ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}
