//! Durations as people write them, in flags and in the providers config: plain seconds
//! (`30`, `2.5`) or a number with a unit (`500ms`, `30s`, `10m`, `1h`), and sums of those
//! (`1h30m`, `2m30s`).
//!
//! Parsing is input handling, not a decision: the core receives [`Duration`]s.

use std::fmt;
use std::time::Duration;

/// Why a duration was refused; the message names the text and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDuration(String);

impl fmt::Display for BadDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadDuration {}

/// What every refusal says is accepted.
const ACCEPTED: &str =
    "expected seconds (30, 2.5) or a number with a unit ms, s, m, h (500ms, 30s, 10m, 1h30m)";

/// Parses `text` (surrounding spaces ignored) into a duration.
pub fn parse(text: &str) -> Result<Duration, BadDuration> {
    let bad = || BadDuration(format!("{text:?}: {ACCEPTED}"));
    let text = text.trim();
    if text.is_empty() {
        return Err(bad());
    }
    // Plain seconds.
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return seconds(text).ok_or_else(bad);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_end);
        let unit_end = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        let value: f64 = number.parse().map_err(|_| bad())?;
        let part = Duration::try_from_secs_f64(value * scale).map_err(|_| bad())?;
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = tail;
    }
    Ok(total)
}

fn seconds(text: &str) -> Option<Duration> {
    let value: f64 = text.parse().ok()?;
    Duration::try_from_secs_f64(value).ok()
}

/// A duration of whole seconds, for a setting that counts seconds (an integer, or a string
/// [`parse`] takes that comes out whole).
pub fn whole_seconds(text: &str) -> Result<u64, BadDuration> {
    let duration = parse(text)?;
    if duration.subsec_nanos() != 0 {
        return Err(BadDuration(format!(
            "{text:?}: must be a whole number of seconds"
        )));
    }
    Ok(duration.as_secs())
}

/// Serde's side of [`whole_seconds`]: a providers-config field in seconds that takes `30` or
/// `"30s"`, `"10m"`.
pub fn deserialize_whole_seconds<'de, D>(deserializer: D) -> Result<u64, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "a whole number of seconds or a duration such as \"30s\" or \"10m\""
            )
        }
        fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<u64, E> {
            Ok(value)
        }
        fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<u64, E> {
            u64::try_from(value).map_err(|_| E::custom(format!("{value}: must not be negative")))
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<u64, E> {
            whole_seconds(text).map_err(E::custom)
        }
    }
    deserializer.deserialize_any(Visitor)
}

/// A flag's duration, at least 10 ms, so that no loop spins on a zero.
pub fn at_least_10ms(duration: Duration) -> Duration {
    duration.max(Duration::from_millis(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_units_and_sums_are_durations() {
        for (text, expected) in [
            ("30", Duration::from_secs(30)),
            (" 2.5 ", Duration::from_millis(2500)),
            ("0", Duration::ZERO),
            ("500ms", Duration::from_millis(500)),
            ("30s", Duration::from_secs(30)),
            ("10m", Duration::from_secs(600)),
            ("1h", Duration::from_secs(3600)),
            ("1h30m", Duration::from_secs(5400)),
            ("2m30s", Duration::from_secs(150)),
            ("1.5m", Duration::from_secs(90)),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_what_is_accepted() {
        for text in [
            "", "  ", "10x", "m", "10 m", "-5", "-5s", "1e400", "s10", "1..5", "10m5",
        ] {
            let message = parse(text).map(|d| format!("{d:?}")).unwrap_err().0;
            assert!(message.starts_with(&format!("{:?}", text)), "{message}");
            assert!(message.contains("10m"), "{message}");
        }
    }

    #[test]
    fn whole_seconds_refuse_a_fraction() {
        assert_eq!(whole_seconds("2m"), Ok(120));
        assert_eq!(whole_seconds("45"), Ok(45));
        assert_eq!(
            whole_seconds("1.5s").map_err(|e| e.0),
            Err("\"1.5s\": must be a whole number of seconds".to_owned())
        );
    }
}
