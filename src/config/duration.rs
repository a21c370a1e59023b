//! The duration syntax of the configuration file: `"250ms"`, `"30s"`,
//! `"5m"`, `"24h"`, `"7d"` and sums such as `"1m30s"`.
//!
//! Owns the parser, its printer, and the error messages: each malformed
//! form says what is wrong and, where there is one, the spelling to write
//! instead (`"1.5h"` → "fractions are not supported, write 90m").
//! [`ConfigDuration`] is the setting itself: serde reads it with this
//! parser and prints it with this printer, so no section keeps a duration
//! as text.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::text::parse_text;

/// What every duration error ends with.
const HINT: &str = "expected a duration such as \"250ms\", \"30s\", \"5m\", \"24h\"";

/// Units, largest first, in milliseconds.
const UNITS: [(&str, u128); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing (or only spaces) was written.
    #[error("empty duration; {HINT}")]
    Empty,
    /// A leading minus sign.
    #[error("{0:?}: negative durations are not allowed")]
    Negative(String),
    /// Spaces inside, e.g. `"10 s"`; `write` is the same without them.
    #[error("{text:?}: no spaces inside a duration, write {write}")]
    Space {
        /// The text as written.
        text: String,
        /// The same duration without spaces.
        write: String,
    },
    /// A decimal point or comma, e.g. `"1.5h"`; `write` is the same
    /// duration in one whole unit, when it is a whole number of
    /// milliseconds.
    #[error("{text:?}: fractions are not supported{}", fraction_hint(.write.as_deref()))]
    Fraction {
        /// The text as written.
        text: String,
        /// The same duration in a whole unit (`90m`).
        write: Option<String>,
    },
    /// A unit with no number before it, e.g. `"h"`.
    #[error("{0:?} has no number before its unit; {HINT}")]
    NoNumber(String),
    /// A number with no unit after it, e.g. `"30"`.
    #[error("{0:?} has no unit; {HINT}")]
    NoUnit(String),
    /// A unit that is not one of `ms`, `s`, `m`, `h`, `d`.
    #[error("unknown unit {unit:?} in {text:?}; {HINT}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// More than `u64::MAX` milliseconds.
    #[error("{0:?} is too large")]
    TooLarge(String),
    /// Anything else, e.g. `"5s!"`.
    #[error("{0:?} is not a duration; {HINT}")]
    Invalid(String),
}

fn fraction_hint(write: Option<&str>) -> String {
    match write {
        Some(write) => format!(", write {write}"),
        None => "; use a smaller unit (the finest is ms)".to_owned(),
    }
}

/// Parses `"250ms"`, `"30s"`, `"5m"`, `"24h"`, `"7d"` and sums such as
/// `"1m30s"`. The error says what would be valid.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative(text.to_owned()));
    }
    if text.contains(char::is_whitespace) {
        let compact: String = text.split_whitespace().collect();
        return match parse_duration(&compact) {
            Ok(_) => Err(DurationError::Space {
                text: text.to_owned(),
                write: compact,
            }),
            Err(error) => Err(error),
        };
    }
    let (millis, exact, fraction) = sum(text)?;
    if fraction {
        let write = exact.then(|| in_one_unit(millis));
        return Err(DurationError::Fraction {
            text: text.to_owned(),
            write,
        });
    }
    u64::try_from(millis)
        .map(Duration::from_millis)
        .map_err(|_| DurationError::TooLarge(text.to_owned()))
}

/// Adds up the parts of `text` (fractions allowed here, so the error can
/// name the whole-unit spelling): (milliseconds, whether they are whole,
/// whether a fraction was written).
fn sum(text: &str) -> Result<(u128, bool, bool), DurationError> {
    let too_large = || DurationError::TooLarge(text.to_owned());
    let (mut total, mut exact, mut fraction) = (0u128, true, false);
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(digits);
        let (decimals, after) = match after.strip_prefix(['.', ',']) {
            Some(after) => {
                fraction = true;
                let count = after.bytes().take_while(u8::is_ascii_digit).count();
                after.split_at(count)
            }
            None => ("", after),
        };
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        if whole.is_empty() && decimals.is_empty() {
            return Err(if UNITS.iter().any(|(name, _)| *name == unit) {
                DurationError::NoNumber(text.to_owned())
            } else {
                DurationError::Invalid(text.to_owned())
            });
        }
        let size = match UNITS.iter().find(|(name, _)| *name == unit) {
            Some((_, size)) => *size,
            None if unit.is_empty() => return Err(DurationError::NoUnit(text.to_owned())),
            None => {
                return Err(DurationError::UnknownUnit {
                    unit: unit.to_owned(),
                    text: text.to_owned(),
                });
            }
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        let mut part = whole.checked_mul(size).ok_or_else(too_large)?;
        if !decimals.is_empty() {
            // More than 30 decimals cannot be a whole number of ms anyway.
            let places = u32::try_from(decimals.len()).ok().filter(|n| *n <= 30);
            match (decimals.parse::<u128>(), places) {
                (Ok(numerator), Some(places)) => {
                    let denominator = 10u128.pow(places);
                    let scaled = numerator.checked_mul(size).ok_or_else(too_large)?;
                    exact &= scaled % denominator == 0;
                    part = part
                        .checked_add(scaled / denominator)
                        .ok_or_else(too_large)?;
                }
                _ => exact = false,
            }
        }
        total = total.checked_add(part).ok_or_else(too_large)?;
        rest = after;
    }
    Ok((total, exact, fraction))
}

/// `millis` in the largest unit that holds it whole: `90m`, `250ms`.
fn in_one_unit(millis: u128) -> String {
    UNITS
        .iter()
        .skip(1) // Hours at most, like `format_duration`.
        .find(|(_, size)| millis % size == 0)
        .map_or_else(
            || format!("{millis}ms"),
            |(unit, size)| format!("{}{unit}", millis / size),
        )
}

/// Writes `duration` the way [`parse_duration`] reads it, in the largest
/// whole units: `"24h"`, `"1m30s"`, `"250ms"`, `"0s"`. Parts finer than a
/// millisecond are dropped (no setting is that fine).
pub fn format_duration(duration: Duration) -> String {
    let mut rest = duration.as_millis();
    if rest == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in UNITS.iter().skip(1) {
        let amount = rest / size;
        if amount > 0 {
            out.push_str(&format!("{amount}{unit}"));
            rest -= amount * size;
        }
    }
    out
}

/// A duration setting: written `"30s"` in the file, read through
/// [`parse_duration`] (a malformed one is an error naming the key, with
/// the parser's own advice) and printed by `check-config` through
/// [`format_duration`], so reading and printing never disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// `secs` whole seconds, for defaults written as constants.
    pub const fn secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    /// `millis` milliseconds, for defaults written as constants.
    pub const fn millis(millis: u64) -> Self {
        Self(Duration::from_millis(millis))
    }

    /// The duration itself.
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl From<Duration> for ConfigDuration {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl From<ConfigDuration> for Duration {
    fn from(setting: ConfigDuration) -> Self {
        setting.0
    }
}

impl fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_text(deserializer, |text| {
            parse_duration(text)
                .map(ConfigDuration)
                .map_err(|error| error.to_string())
        })
    }
}

/// `#[serde(with = "duration::field")]`: a `Duration` field of a typed
/// section, read and printed as [`ConfigDuration`] is.
pub mod field {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ConfigDuration;

    /// Prints the duration in the file's syntax.
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        ConfigDuration(*duration).serialize(serializer)
    }

    /// Reads the duration from the file's syntax.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        ConfigDuration::deserialize(deserializer).map(ConfigDuration::get)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_reads_and_prints_through_the_same_syntax() {
        #[derive(Debug, Deserialize, Serialize)]
        struct Table {
            lease: ConfigDuration,
        }
        let table: Table = toml::from_str("lease = \"1m30s\"").unwrap();
        assert_eq!(table.lease.get(), Duration::from_secs(90));
        assert_eq!(toml::to_string(&table).unwrap().trim(), "lease = \"1m30s\"");
        let error = toml::from_str::<Table>("lease = \"1.5h\"").unwrap_err();
        assert!(
            error
                .message()
                .contains("\"1.5h\": fractions are not supported, write 90m"),
            "{error}"
        );
        let error = toml::from_str::<Table>("lease = 30").unwrap_err();
        assert!(
            error
                .message()
                .contains("invalid type: integer `30`, expected a string"),
            "{error}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 30s "), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn malformed_durations_say_what_is_wrong() {
        for (bad, message) in [
            ("1.5h", "\"1.5h\": fractions are not supported, write 90m"),
            ("1,5h", "\"1,5h\": fractions are not supported, write 90m"),
            (
                "0.25s",
                "\"0.25s\": fractions are not supported, write 250ms",
            ),
            (
                "1m0.5s",
                "\"1m0.5s\": fractions are not supported, write 60500ms",
            ),
            (".5m", "\".5m\": fractions are not supported, write 30s"),
            (
                "1.5ms",
                "\"1.5ms\": fractions are not supported; use a smaller unit (the finest is ms)",
            ),
            ("1.5", "\"1.5\" has no unit; expected a duration"),
            (
                "h",
                "\"h\" has no number before its unit; expected a duration",
            ),
            ("", "empty duration; expected a duration"),
            ("   ", "empty duration; expected a duration"),
            ("-1s", "\"-1s\": negative durations are not allowed"),
            ("10 s", "\"10 s\": no spaces inside a duration, write 10s"),
            (
                "1m 30s",
                "\"1m 30s\": no spaces inside a duration, write 1m30s",
            ),
            ("5 parsecs", "unknown unit \"parsecs\" in \"5parsecs\""),
            ("5", "\"5\" has no unit"),
            ("5s!", "\"5s!\" is not a duration"),
            (
                "99999999999999999999s",
                "\"99999999999999999999s\" is too large",
            ),
            ("18446744073709551616ms", "is too large"),
            (&format!("{}s", "9".repeat(60)), "is too large"),
            ("soon", "\"soon\" is not a duration; expected a duration"),
        ] {
            let error = parse_duration(bad).unwrap_err().to_string();
            assert!(error.contains(message), "{bad:?}: {error}");
        }
        assert_eq!(
            parse_duration("18446744073709551615ms"),
            Ok(Duration::from_millis(u64::MAX))
        );
    }

    #[test]
    fn durations_print_as_they_parse() {
        for (text, millis) in [
            ("0s", 0),
            ("250ms", 250),
            ("30s", 30_000),
            ("1m30s", 90_000),
            ("24h", 86_400_000),
            ("168h", 604_800_000),
            ("1h1m1s1ms", 3_661_001),
        ] {
            let duration = Duration::from_millis(millis);
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration));
        }
    }

    proptest::proptest! {
        #[test]
        fn every_printed_duration_parses_back(millis in 0u64..10_000_000_000) {
            let duration = Duration::from_millis(millis);
            proptest::prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }

        #[test]
        fn no_text_panics(text in "\\PC{0,40}") {
            let _ = parse_duration(&text);
        }
    }
}
