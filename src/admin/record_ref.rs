//! How a record URL names its record: `?hash=`, `?key=` or a key value in
//! the path, exactly one of them (the table in the `admin` module docs).
//! The record API and the inbox API both read their target through
//! [`key_hash_of`], so the two never disagree on what a URL names.

use super::query_pairs;
use crate::pipeline::identify::hash_key_parts;
use crate::signature::lower_hex;

/// Why a record URL names no record.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum RecordRefError {
    /// Neither a path key nor `?key=`/`?hash=`.
    #[error(
        "name the record: /admin/records/{{route}}?hash=<64 hex>, ?key=<value> or /admin/records/{{route}}/{{key value}}"
    )]
    Missing,
    /// More than one of the three forms.
    #[error("name the record one way only: ?hash=, ?key= or a path key")]
    Ambiguous,
    /// `?hash=` that is not 64 hex digits.
    #[error(
        "hash must be what idemgate logs as key=…: 64 hex digits, and on an entity route the {{entity}} tag after them"
    )]
    BadHash,
    /// An empty key value.
    #[error("the key value is empty")]
    EmptyKey,
    /// A query parameter other than `key` and `hash`.
    #[error("unknown query parameter {0:?}; expected hash= or key=")]
    UnknownParameter(String),
}

/// The key hash a record URL names: `?hash=` as given (lower-cased),
/// `?key=` or the path key percent-decoded and hashed as a single-part key.
pub(super) fn key_hash_of(
    path_key: Option<&str>,
    query: Option<&str>,
) -> Result<String, RecordRefError> {
    let decode = |raw: &str| -> Vec<u8> { percent_encoding::percent_decode_str(raw).collect() };
    let mut named: Vec<Result<String, RecordRefError>> = Vec::new();
    if let Some(raw) = path_key.filter(|k| !k.is_empty()) {
        named.push(Ok(hash_value(&decode(raw))));
    }
    for (name, value) in query_pairs(query) {
        match name {
            "hash" => {
                let hash = String::from_utf8_lossy(&decode(value)).to_ascii_lowercase();
                named.push(if is_key_hash(&hash) {
                    Ok(hash)
                } else {
                    Err(RecordRefError::BadHash)
                });
            }
            "key" if value.is_empty() => return Err(RecordRefError::EmptyKey),
            "key" => named.push(Ok(hash_value(&decode(value)))),
            other => return Err(RecordRefError::UnknownParameter(other.to_owned())),
        }
    }
    match named.len() {
        0 => Err(RecordRefError::Missing),
        1 => named.remove(0),
        _ => Err(RecordRefError::Ambiguous),
    }
}

fn is_key_hash(text: &str) -> bool {
    crate::store::is_record_hash(text)
}

/// The hash of a single-part key value, as the pipeline computes it.
fn hash_value(value: &[u8]) -> String {
    lower_hex(&hash_key_parts([value]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_record_is_named_one_way_only() {
        // A 64-hex key value in the path or in ?key= is a value, never a hash.
        assert_eq!(key_hash_of(Some(HEX), None), Ok(hash_value(HEX.as_bytes())));
        assert_eq!(
            key_hash_of(None, Some(&format!("key={HEX}"))),
            Ok(hash_value(HEX.as_bytes()))
        );
        assert_ne!(hash_value(HEX.as_bytes()), HEX);
        // ?hash= is the hash itself, in either case.
        assert_eq!(
            key_hash_of(None, Some(&format!("hash={}", HEX.to_uppercase()))),
            Ok(HEX.to_owned())
        );
        // Percent-decoding is strict: `+` stays a plus sign.
        assert_eq!(
            key_hash_of(None, Some("key=a%20b+c%2Fd")),
            Ok(hash_value(b"a b+c/d"))
        );
        assert_eq!(key_hash_of(Some("a%2Fb"), None), Ok(hash_value(b"a/b")));
        assert_eq!(key_hash_of(Some("a/b"), None), Ok(hash_value(b"a/b")));

        assert_eq!(key_hash_of(None, None), Err(RecordRefError::Missing));
        assert_eq!(key_hash_of(Some(""), None), Err(RecordRefError::Missing));
        assert_eq!(
            key_hash_of(Some("v"), Some(&format!("hash={HEX}"))),
            Err(RecordRefError::Ambiguous)
        );
        assert_eq!(
            key_hash_of(None, Some(&format!("key=v&hash={HEX}"))),
            Err(RecordRefError::Ambiguous)
        );
        assert_eq!(
            key_hash_of(None, Some("hash=abc")),
            Err(RecordRefError::BadHash)
        );
        assert_eq!(
            key_hash_of(None, Some("key=")),
            Err(RecordRefError::EmptyKey)
        );
        assert_eq!(
            key_hash_of(None, Some("keys=v")),
            Err(RecordRefError::UnknownParameter("keys".into()))
        );
    }
}
