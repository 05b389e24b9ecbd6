//! How onecharge writes values for people — the command line's tables, the console's pages
//! and the messages of refusals alike: times in UTC with how long ago, durations as the
//! configuration spells them, amounts in major units, and text from producers and gateways
//! made safe for a terminal. Output meant to be read by a tired person, so every time says
//! its zone and how far from now it is.

use time::format_description::FormatItem;
use time::macros::format_description;
use time::{Duration, OffsetDateTime, UtcOffset};

const TIME: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second]Z");
const TIME_MS: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]Z");

/// `text` cut to `max` characters (shown on one line, escaped, by the tables that print it).
pub fn cell(text: &str, max: usize) -> String {
    crate::domain::bounded(text, max)
}

/// `text` safe for a terminal: control characters (C0 including newline, CR, BEL, NUL and
/// ESC, DEL, C1) and the invisible bidirectional overrides are shown escaped, as Rust
/// writes them (`\u{1b}`, `\r`, `\0`), so that ESC/OSC/CSI sequences from a producer
/// neither act on the terminal nor hide text.
pub fn printable(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.contains(hidden) {
        return text.to_owned();
    }
    text.chars().fold(String::new(), |mut out, c| {
        if hidden(c) {
            let escaped = c.escape_debug();
            if escaped.len() > 1 {
                out.extend(escaped);
            } else {
                out.extend(c.escape_unicode());
            }
        } else {
            out.push(c);
        }
        out
    })
}

/// An optional value, or `-`.
pub fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

/// `2026-11-29 10:15:01Z`
pub fn at(t: OffsetDateTime) -> String {
    t.to_offset(UtcOffset::UTC)
        .format(TIME)
        .unwrap_or_else(|_| t.to_string())
}

/// `2026-11-29 10:15:01.234Z`
pub fn at_ms(t: OffsetDateTime) -> String {
    t.to_offset(UtcOffset::UTC)
        .format(TIME_MS)
        .unwrap_or_else(|_| t.to_string())
}

/// `2026-11-29 10:15:01Z (4m ago)` / `(in 4m)`
pub fn at_relative(t: OffsetDateTime, now: OffsetDateTime) -> String {
    format!("{} ({})", at(t), relative(t, now))
}

/// `in 4m`, `4m ago`, `now`.
pub fn relative(t: OffsetDateTime, now: OffsetDateTime) -> String {
    let delta = t - now;
    if delta.whole_seconds().abs() < 1 {
        "now".to_owned()
    } else if delta.is_positive() {
        format!("in {}", short(delta))
    } else {
        format!("{} ago", short(-delta))
    }
}

/// A duration in its two largest units: `2d3h`, `4h05m`, `4m10s`, `12s`.
pub fn short(d: Duration) -> String {
    let secs = d.whole_seconds().max(0);
    let (days, hours, minutes, seconds) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    if days > 0 {
        format!("{days}d{hours}h")
    } else if hours > 0 {
        format!("{hours}h{minutes:02}m")
    } else if minutes > 0 {
        format!("{minutes}m{seconds:02}s")
    } else {
        format!("{seconds}s")
    }
}

/// A std duration as the configuration spells it (`14days`, `1h`).
pub fn setting(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn times_say_how_far_from_now_they_are() {
        let now = datetime!(2026-11-29 10:00:00 UTC);
        assert_eq!(
            at_relative(datetime!(2026-11-29 10:04:10 UTC), now),
            "2026-11-29 10:04:10Z (in 4m10s)"
        );
        assert_eq!(
            relative(datetime!(2026-11-27 07:00:00 UTC), now),
            "2d3h ago"
        );
        assert_eq!(relative(now, now), "now");
    }
}
