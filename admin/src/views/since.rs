//! Points in time given by an operator: an RFC 3339 instant, or an age (`90s`, `30m`, `2h`,
//! `7d`, `1h30m`, `2w`) meaning that long before now. The CLI's `--since`/`--until` and the
//! HTTP API's `since`/`until` parameters read the same forms.
//!
//! An age is read by [`humantime::parse_duration`]: numbers each followed by a unit, with or
//! without spaces between them (`1h 30m`) — `s` (`sec`, `seconds`), `m` (`min`, `minutes`),
//! `h` (`hr`, `hours`), `d` (`days`), `w` (`weeks`), `M` (`months`, 30.44 days) and `y`
//! (`years`, 365.25 days), and the sub-second `ms`, `us`, `ns`.
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
use std::time::Duration;

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

/// [`MAX_AGE_DAYS`] as a duration.
const MAX_AGE: Duration = Duration::from_secs(MAX_AGE_DAYS as u64 * 86_400);

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
        let out_of_range = || {
            format!(
                "`{s}` is out of range: an age is at most {MAX_AGE_DAYS}d (100 years); give an RFC 3339 time for an earlier point"
            )
        };
        let age = humantime::parse_duration(s).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => out_of_range(),
            other => format!(
                "`{s}` is neither an RFC 3339 time nor an age like 30m, 2h or 1h30m (the unit of an age is s, m, h, d, w, M or y): {other}"
            ),
        })?;
        // Bounded here, so that "now minus the age" is a time the clock and the databases
        // hold; the bound also makes the conversion below infallible.
        if age > MAX_AGE {
            return Err(out_of_range());
        }
        TimeDelta::from_std(age)
            .map(Since::Ago)
            .map_err(|_| out_of_range())
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
        // humantime's syntax: units combined, weeks.
        assert_eq!(
            "1h30m".parse::<Since>().unwrap(),
            Since::Ago(TimeDelta::seconds(5400))
        );
        assert_eq!(
            "1h 30m".parse::<Since>().unwrap(),
            Since::Ago(TimeDelta::seconds(5400))
        );
        assert_eq!(
            "2w".parse::<Since>().unwrap(),
            Since::Ago(TimeDelta::days(14))
        );
        for bad in ["5x", "soon", "", "30", "-5m"] {
            let refused = bad.parse::<Since>().unwrap_err();
            assert!(
                refused.contains("neither an RFC 3339 time"),
                "{bad}: {refused}"
            );
        }
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
        assert!(serde_json::from_str::<Since>("\"5x\"").is_err());
    }
}
