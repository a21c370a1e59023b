//! Settings chosen from a fixed list of words (`on_in_flight = "wait"`).
//!
//! Each such enum names its words once, in [`Choice::NAMES`]: validation
//! reads the file with that list and `check-config` prints the effective
//! value with it, so the two can never drift apart. The lists are written
//! with [`choices!`] beside the validator of the setting they belong to;
//! this file only defines the trait, so it imports no other config module.

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
}

/// Implements [`Choice`] for each enum from its word list:
/// `choices! { Mode { "enforce" => Enforce, "shadow" => Shadow } }`.
macro_rules! choices {
    ($($kind:ty { $($word:literal => $value:ident),+ $(,)? })+) => {$(
        impl $crate::config::Choice for $kind {
            const NAMES: &'static [(&'static str, Self)] = &[$(($word, Self::$value)),+];
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
