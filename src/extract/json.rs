//! JSON bodies parsed in one pass into a [`serde_json::Value`], refusing
//! an object that names a key twice, at any depth.
//!
//! RFC 8259 leaves duplicate names undefined and parsers disagree: serde,
//! Go and Python keep the last value, others the first or reject. A body
//! `{"amount":"10.00","amount":"9999.00"}` could therefore be fingerprinted,
//! keyed or signature-checked on one value while the backend acts on the
//! other, so a body that idemgate reads as JSON must name each key once.
//! Keys compare after unescaping (`"a"` and `"\u0061"` are the same key).
//!
//! The check runs while the value is built (no second parse), and the
//! depth stays bounded by serde_json's recursion limit (128), which its
//! deserializer enforces whatever the visitor.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The key under which serde_json (built with `arbitrary_precision`, as
/// this crate is) hands a number's literal text to a visitor.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Start of the error message for a repeated key (how [`parse`] tells it
/// from a syntax error).
const DUPLICATE: &str = "duplicate object key";

/// Why a body is not acceptable JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all (syntax, trailing data, nesting deeper than 128).
    #[error("not json")]
    Syntax,
    /// An object names the same key twice.
    #[error("an object names a key twice")]
    DuplicateKey,
    /// A string spells serde_json's private number token, which the
    /// parser would read as a number (`{"$serde_json::private::Number":"1"}`
    /// is 1 to idemgate, an object to the handler).
    #[error("a string spells serde_json's private number token")]
    NumberToken,
}

/// Parses a whole body as one JSON value whose objects name each key once.
pub fn parse(body: &[u8]) -> Result<Value, JsonError> {
    let classify = |error: serde_json::Error| {
        if error.to_string().starts_with(DUPLICATE) {
            JsonError::DuplicateKey
        } else {
            JsonError::Syntax
        }
    };
    if spells_number_token(body) {
        return Err(JsonError::NumberToken);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = UniqueKeys
        .deserialize(&mut deserializer)
        .map_err(classify)?;
    deserializer.end().map_err(classify)?;
    Ok(value)
}

/// Whether a string literal of `body` decodes to [`NUMBER_TOKEN`]: the one
/// spelling the visitor below can not tell from a real number. A linear
/// scan; only strings holding a `$` or an escape are decoded.
fn spells_number_token(body: &[u8]) -> bool {
    let mut i = 0;
    while i < body.len() {
        if body[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        let mut suspect = false;
        i += 1;
        while i < body.len() && body[i] != b'"' {
            match body[i] {
                b'\\' => {
                    suspect = true;
                    i += 1;
                }
                b'$' => suspect = true,
                _ => {}
            }
            i += 1;
        }
        if i >= body.len() {
            return false;
        }
        i += 1;
        if suspect
            && serde_json::from_slice::<String>(&body[start..i])
                .is_ok_and(|text| text == NUMBER_TOKEN)
        {
            return true;
        }
    }
    false
}

/// Builds a [`Value`] like serde_json's own visitor, failing on a repeated
/// object key.
#[derive(Clone, Copy)]
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a json value whose objects name each key once")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Ok(Value::Object(Map::new()));
        };
        if first == NUMBER_TOKEN {
            // A number's literal text, exactly as sent (as serde_json's own
            // Value visitor reads it).
            let text: String = map.next_value()?;
            return text
                .parse::<Number>()
                .map(Value::Number)
                .map_err(de::Error::custom);
        }
        let mut object = Map::new();
        let value = map.next_value_seed(self)?;
        object.insert(first, value);
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(DUPLICATE));
            }
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        for body in [
            r#"{"a":1,"a":1}"#,
            r#"{"a":1,"b":2,"a":3}"#,
            r#"{"x":{"a":1,"a":2}}"#,
            r#"[{"a":1},{"b":1,"b":1}]"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"":1,"":2}"#,
        ] {
            assert_eq!(
                parse(body.as_bytes()),
                Err(JsonError::DuplicateKey),
                "{body}"
            );
        }
    }

    #[test]
    fn the_private_number_token_is_refused_however_it_is_spelled() {
        for body in [
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"amount":{"$serde_json::private::Number":"1"}}"#,
            r#"{"\u0024serde_json::private::Number":"1"}"#,
            r#"{"\u0024\u0073erde_json::private::Number":"1"}"#,
            r#"["$serde_json::private::Number"]"#,
        ] {
            assert_eq!(
                parse(body.as_bytes()),
                Err(JsonError::NumberToken),
                "{body}"
            );
        }
        assert!(parse(br#"{"price":"$10","esc":"a\"$b"}"#).is_ok());
    }

    #[test]
    fn everything_else_parses_as_serde_json_does() {
        for body in [
            r#"{"id":"p-1","amount":10.50,"n":-0,"e":1e400,"big":123456789012345678901234567890}"#,
            r#"{"a":{"x":1},"b":{"x":1},"c":[1,1,{"x":null}]}"#,
            r#"[] "#,
            r#""text""#,
            "true",
            "null",
            r#"{"$serde_json::private::Numbe":"1"}"#,
        ] {
            let ours = parse(body.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_slice(body.as_bytes()).unwrap();
            assert_eq!(ours, theirs, "{body}");
            assert_eq!(ours.to_string(), theirs.to_string(), "{body}");
        }
        assert_eq!(
            parse(br#"{"amount":10.50}"#).unwrap().to_string(),
            r#"{"amount":10.50}"#,
            "numbers keep their text"
        );
    }

    #[test]
    fn syntax_errors_and_deep_nesting_are_errors_not_panics() {
        for body in ["", "{", r#"{"a":1}x"#, "[1,]", "nope", r#"{"a" 1}"#] {
            assert_eq!(parse(body.as_bytes()), Err(JsonError::Syntax), "{body:?}");
        }
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(deep(100).as_bytes()).is_ok());
        assert_eq!(parse(deep(100_000).as_bytes()), Err(JsonError::Syntax));
        let objects = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
        assert_eq!(parse(objects.as_bytes()), Err(JsonError::Syntax));
    }

    proptest! {
        #[test]
        fn never_panics(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&body);
        }

        /// On JSON-ish text: a success is exactly serde_json's value.
        #[test]
        fn agrees_with_serde_json(body in r#"[\[\]{}",:a-c0-9. -]{0,60}"#) {
            if let Ok(ours) = parse(body.as_bytes()) {
                let theirs: Value = serde_json::from_slice(body.as_bytes()).unwrap();
                prop_assert_eq!(ours, theirs);
            }
        }
    }
}
