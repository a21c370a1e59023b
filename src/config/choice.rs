//! Settings chosen from a fixed list of words (`on_in_flight = "wait"`).
//!
//! Each such enum names its words once, in [`Choice::NAMES`]: serde reads
//! the file with that list and `check-config` prints the effective value
//! with it, so the two can never drift apart. The lists are written with
//! [`choices!`] beside the validator of the setting they belong to, which
//! also makes the enum a serde type, so a raw struct holds the value
//! rather than its word; this file only defines the trait, so it imports
//! no other config module.

use serde::{Deserializer, Serializer};

use super::text::parse_text;

/// An enum configured by one of a few words.
pub trait Choice: Copy + PartialEq + 'static {
    /// Every value with the word the file spells it with.
    const NAMES: &'static [(&'static str, Self)];

    /// The value a word stands for, if any.
    fn from_name(text: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, value)| *value)
    }

    /// The word for this value, as the file spells it.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, value)| *value == self)
            .map_or("?", |(name, _)| name)
    }

    /// Reads the value from its word; any other word is refused with the
    /// list of valid ones.
    fn deserialize_word<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_text(deserializer, |text| {
            Self::from_name(text).ok_or_else(|| {
                let names: Vec<String> =
                    Self::NAMES.iter().map(|(n, _)| format!("{n:?}")).collect();
                format!(
                    "{text:?} is not valid; expected one of {}",
                    names.join(", ")
                )
            })
        })
    }

    /// Writes the value as its word.
    fn serialize_word<S: Serializer>(self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Implements [`Choice`], `Deserialize` and `Serialize` for each enum from
/// its word list:
/// `choices! { Mode { "enforce" => Enforce, "shadow" => Shadow } }`.
macro_rules! choices {
    ($($kind:ty { $($word:literal => $value:ident),+ $(,)? })+) => {$(
        impl $crate::config::Choice for $kind {
            const NAMES: &'static [(&'static str, Self)] = &[$(($word, Self::$value)),+];
        }

        impl<'de> serde::Deserialize<'de> for $kind {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <Self as $crate::config::Choice>::deserialize_word(deserializer)
            }
        }

        impl serde::Serialize for $kind {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $crate::config::Choice::serialize_word(*self, serializer)
            }
        }
    )+};
}
pub(super) use choices;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        Algorithm, Encoding, Mode, OnInFlight, OnUnavailable, OnUpstreamTimeout, TimestampUnit,
        Unmatched, UnsignedKey,
    };

    fn names_round_trip<T: Choice + std::fmt::Debug>() {
        for (name, value) in T::NAMES {
            assert_eq!(value.name(), *name);
            assert_eq!(T::from_name(name), Some(*value));
        }
        assert_eq!(T::from_name("no-such-word"), None);
    }

    #[test]
    fn a_word_is_read_and_printed_as_the_file_spells_it() {
        #[derive(Debug, serde::Deserialize, serde::Serialize)]
        struct Table {
            mode: Mode,
        }
        let table: Table = toml::from_str("mode = \"shadow\"").unwrap();
        assert_eq!(table.mode, Mode::Shadow);
        assert_eq!(toml::to_string(&table).unwrap().trim(), "mode = \"shadow\"");
        let error = toml::from_str::<Table>("mode = \"loud\"").unwrap_err();
        assert!(
            error
                .message()
                .contains("\"loud\" is not valid; expected one of \"enforce\", \"shadow\""),
            "{error}"
        );
    }

    #[test]
    fn every_word_names_one_value() {
        names_round_trip::<Unmatched>();
        names_round_trip::<OnUnavailable>();
        names_round_trip::<OnInFlight>();
        names_round_trip::<OnUpstreamTimeout>();
        names_round_trip::<Mode>();
        names_round_trip::<Algorithm>();
        names_round_trip::<Encoding>();
        names_round_trip::<TimestampUnit>();
        names_round_trip::<UnsignedKey>();
    }
}
