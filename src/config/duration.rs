//! The one duration parser of onecharge (settings, `--older-than`, `?stuck=`), and the serde
//! adapters through which every duration setting is read with it.

use std::time::Duration;

/// The longest duration any setting, flag or query parameter accepts. Far beyond any
/// sensible value and far inside what time arithmetic (`now - max_age`) and PostgreSQL
/// timestamps hold, so an absurd value is refused by name instead of panicking later.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Parses a duration such as `15m`, `2h` or `14days`, at most [`MAX_DURATION`]. The one
/// parser for every duration onecharge reads: settings, `--older-than`, `?stuck=`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration such as 15m or 2h ({e})"))?;
    if duration > MAX_DURATION {
        return Err(format!("`{text}` is too long: at most 100 years"));
    }
    Ok(duration)
}

/// A duration setting, read with [`parse_duration`] and written as humantime text. Every
/// duration setting uses it, so none escapes the bound.
pub(super) mod bounded_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
        humantime_serde::serialize(duration, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// A list of durations written like `["1m", "5m", "2h"]`, each bounded like any duration.
pub(super) mod duration_list {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(list: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            list.iter()
                .map(|d| humantime::format_duration(*d).to_string()),
        )
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| super::parse_duration(text).map_err(serde::de::Error::custom))
            .collect()
    }
}
