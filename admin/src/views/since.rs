//! Points in time given by an operator: an RFC 3339 instant, or an age (`90s`, `30m`, `2h`,
//! `7d`) meaning that long before now. The CLI's `--since`/`--until` and the HTTP API's
//! `since`/`until` parameters read the same forms.
//!
//! An age is at most [`MAX_AGE_DAYS`] days: far enough for any history, and near enough that
//! "now minus the age" is always a time the clock (and a database) can hold. A longer age is
//! refused when it is read, with the allowed range; an earlier point is given as an instant.
//!
//! The other way, [`human`] writes a duration as people read it (`4.2s`, `3m05s`): the CLI's
//! tables and the status view's attention lines use the same words.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Deserializer};
use std::str::FromStr;

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

/// The longest age accepted: 100 years, in days.
pub const MAX_AGE_DAYS: i64 = 36_500;

/// A point in time, resolved against the clock when used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// An instant.
    At(DateTime<Utc>),
    /// This long before now.
    Ago(TimeDelta),
}

impl Since {
    /// The instant it names at `now`. An age built by hand past what the clock can hold
    /// (parsing refuses one longer than [`MAX_AGE_DAYS`]) names the earliest instant
    /// rather than panicking.
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Since::At(t) => t,
            Since::Ago(d) => now
                .checked_sub_signed(d)
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
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
        if n.is_empty() {
            return Err(format!(
                "`{s}` is neither an RFC 3339 time nor an age like 30m"
            ));
        }
        let seconds_per_unit: i64 = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err(format!("`{s}`: the unit of an age is s, m, h or d")),
        };
        let out_of_range = || {
            format!(
                "`{s}` is out of range: an age is at most {MAX_AGE_DAYS}d (100 years); give an RFC 3339 time for an earlier point"
            )
        };
        // Only digits are left, so a parse failure is an overflow.
        let n: i64 = n.parse().map_err(|_| out_of_range())?;
        match n.checked_mul(seconds_per_unit) {
            Some(seconds) if seconds <= MAX_AGE_DAYS * 86_400 => {
                Ok(Since::Ago(TimeDelta::seconds(seconds)))
            }
            _ => Err(out_of_range()),
        }
    }
}

impl<'de> Deserialize<'de> for Since {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
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
    fn an_age_past_the_range_is_refused_with_the_range() {
        let now = DateTime::from_timestamp(10_000, 0).unwrap();
        let longest = format!("{MAX_AGE_DAYS}d").parse::<Since>().unwrap();
        assert_eq!(longest.at(now).timestamp(), 10_000 - MAX_AGE_DAYS * 86_400);
        for age in [
            "1000000000d",
            "36501d",
            "9999999999999s",
            "99999999999999999999999h",
        ] {
            let refused = age.parse::<Since>().unwrap_err();
            assert!(
                refused.contains("out of range") && refused.contains("at most 36500d"),
                "{age}: {refused}"
            );
        }
        // An age made by hand past the clock's range names the earliest instant, no panic.
        assert_eq!(Since::Ago(TimeDelta::MAX).at(now), DateTime::<Utc>::MIN_UTC);
    }

    #[test]
    fn json_strings_parse_the_same_forms() {
        let since: Since = serde_json::from_str("\"90s\"").unwrap();
        assert_eq!(since, Since::Ago(TimeDelta::seconds(90)));
        assert!(serde_json::from_str::<Since>("\"5w\"").is_err());
    }
}
