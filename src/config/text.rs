//! Settings written as text and read through a parser of their own
//! (durations, words, addresses): [`parse_text`] hands serde's string to
//! the parser and the parser's error to serde, so a malformed value is
//! refused with the parser's own message as the file is read. Anything but
//! a string stays serde's type error ("expected a string"), which the
//! reader places on its line (`raw/strict.rs`).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{Error, Visitor};

/// Reads a string from `deserializer` and returns what `parse` makes of
/// it; `parse`'s error is the refusal's message.
pub(super) fn parse_text<'de, D, T>(
    deserializer: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    /// A visitor that takes only a string.
    struct Text<F, T>(F, PhantomData<T>);

    impl<F, T> Visitor<'_> for Text<F, T>
    where
        F: FnOnce(&str) -> Result<T, String>,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: Error>(self, text: &str) -> Result<T, E> {
            (self.0)(text).map_err(E::custom)
        }
    }

    deserializer.deserialize_str(Text(parse, PhantomData))
}
