//! Times on the command line: an RFC 3339 instant, or an age (`90s`, `30m`, `2h`, `7d`)
//! meaning that long before now.

use chrono::{DateTime, TimeDelta, Utc};
use std::str::FromStr;

/// A point in time given on the command line, resolved against the clock when used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// An instant.
    At(DateTime<Utc>),
    /// This long before now.
    Ago(TimeDelta),
}

impl Since {
    /// The instant it names at `now`.
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Since::At(t) => t,
            Since::Ago(d) => now - d,
        }
    }
}

impl FromStr for Since {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(t) = DateTime::parse_from_rfc3339(s) {
            return Ok(Since::At(t.with_timezone(&Utc)));
        }
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (n, unit) = s.split_at(split);
        let n: i64 = n
            .parse()
            .map_err(|_| format!("`{s}` is neither an RFC 3339 time nor an age like 30m"))?;
        let d = match unit {
            "s" => TimeDelta::try_seconds(n),
            "m" => TimeDelta::try_minutes(n),
            "h" => TimeDelta::try_hours(n),
            "d" => TimeDelta::try_days(n),
            _ => return Err(format!("`{s}`: the unit of an age is s, m, h or d")),
        };
        d.map(Since::Ago)
            .ok_or_else(|| format!("`{s}` is too long ago"))
    }
}

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
    fn ages_and_instants_parse() {
        let now = DateTime::from_timestamp(10_000, 0).unwrap();
        assert_eq!(
            "30m".parse::<Since>().unwrap().at(now).timestamp(),
            10_000 - 1800
        );
        assert_eq!(
            "2h".parse::<Since>().unwrap().at(now).timestamp(),
            10_000 - 7200
        );
        assert_eq!(
            "1970-01-01T00:00:05Z"
                .parse::<Since>()
                .unwrap()
                .at(now)
                .timestamp(),
            5
        );
        assert!("5w".parse::<Since>().is_err());
        assert!("soon".parse::<Since>().is_err());
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(TimeDelta::milliseconds(4_250)), "4.2s");
        assert_eq!(human(TimeDelta::seconds(185)), "3m05s");
        assert_eq!(human(TimeDelta::seconds(7_800)), "2h10m");
        assert_eq!(human(TimeDelta::seconds(-3)), "-3.0s");
    }
}
