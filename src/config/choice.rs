//! Settings chosen from a fixed list of words (`on_in_flight = "wait"`).
//!
//! Each such enum names its words once, in [`Choice::NAMES`]: validation
//! reads the file with that list and `check-config` prints the effective
//! value with it, so the two can never drift apart.

use super::{
    Algorithm, Encoding, Mode, OnInFlight, OnUnavailable, OnUpstreamTimeout, TimestampUnit,
    Unmatched,
};

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

impl Choice for Unmatched {
    const NAMES: &'static [(&'static str, Self)] =
        &[("forward", Self::Forward), ("reject", Self::Reject)];
}

impl Choice for OnUnavailable {
    const NAMES: &'static [(&'static str, Self)] =
        &[("reject", Self::Reject), ("forward", Self::Forward)];
}

impl Choice for OnInFlight {
    const NAMES: &'static [(&'static str, Self)] =
        &[("wait", Self::Wait), ("conflict", Self::Conflict)];
}

impl Choice for OnUpstreamTimeout {
    const NAMES: &'static [(&'static str, Self)] =
        &[("hold", Self::Hold), ("release", Self::Release)];
}

impl Choice for Mode {
    const NAMES: &'static [(&'static str, Self)] =
        &[("enforce", Self::Enforce), ("shadow", Self::Shadow)];
}

impl Choice for Algorithm {
    const NAMES: &'static [(&'static str, Self)] =
        &[("sha256", Self::Sha256), ("sha512", Self::Sha512)];
}

impl Choice for Encoding {
    const NAMES: &'static [(&'static str, Self)] = &[("hex", Self::Hex), ("base64", Self::Base64)];
}

impl Choice for TimestampUnit {
    const NAMES: &'static [(&'static str, Self)] = &[("s", Self::Seconds), ("ms", Self::Millis)];
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
