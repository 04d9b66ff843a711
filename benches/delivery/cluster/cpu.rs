//! CPU time as Linux accounts it, read from `/proc`: this process's own (a node's cost) and
//! the whole machine's (how busy the cores were while a run was timed). Both read 0 where
//! `/proc` is missing.

/// CPU time (user + system) this process has used so far, in seconds, from
/// `/proc/self/stat` (in clock ticks of 1/100 s, Linux's `USER_HZ`); 0 if unknown.
pub(super) fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The fields after the command name, which is in parentheses and may hold spaces:
            // state is the 3rd field, utime the 14th and stime the 15th.
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0)
}

/// The machine's CPU time so far, from the first line of `/proc/stat`: (busy, I/O wait,
/// total) in clock ticks over all cores.
pub(super) fn machine_ticks() -> (u64, u64, u64) {
    let line = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = line
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    let busy = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
    (busy, get(4), busy + get(3) + get(4))
}
