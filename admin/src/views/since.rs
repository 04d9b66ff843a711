//! Points in time given by an operator: an RFC 3339 instant, or an age (`90s`, `30m`, `2h`,
//! `7d`) meaning that long before now. The CLI's `--since`/`--until` and the HTTP API's
//! `since`/`until` parameters read the same forms.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Deserializer};
use std::str::FromStr;

/// A point in time, resolved against the clock when used.
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
    fn json_strings_parse_the_same_forms() {
        let since: Since = serde_json::from_str("\"90s\"").unwrap();
        assert_eq!(since, Since::Ago(TimeDelta::seconds(90)));
        assert!(serde_json::from_str::<Since>("\"5w\"").is_err());
    }
}
