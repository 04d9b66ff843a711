//! Times on the command line: what `--since`/`--until` take (the shared [`Since`]: an RFC
//! 3339 instant, or an age such as `30m`), and durations printed for people.

use chrono::TimeDelta;

pub use shardbox_admin::views::Since;

/// A duration for people: `4.2s`, `3m05s`, `2h10m`, `3d4h`.
pub fn human(d: TimeDelta) -> String {
    let ms = d.num_milliseconds();
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    let s = ms / 1000;
    let text = if s < 60 {
        format!("{}.{}s", s, (ms % 1000) / 100)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{}h", s / 86_400, (s % 86_400) / 3600)
    };
    format!("{sign}{text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(TimeDelta::milliseconds(4_250)), "4.2s");
        assert_eq!(human(TimeDelta::seconds(185)), "3m05s");
        assert_eq!(human(TimeDelta::seconds(7_800)), "2h10m");
        assert_eq!(human(TimeDelta::seconds(-3)), "-3.0s");
    }
}
