//! The CPU time of another process (the operator a benchmark runs), from `/proc`.

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
