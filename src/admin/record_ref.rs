//! How a record URL names its record: `?hash=`, `?key=` or a key value in
//! the path, exactly one of them (the table in the `admin` module docs).
//! The record API and the inbox API both read their target through
//! [`key_hash_of`], so the two never disagree on what a URL names.
//!
//! On a route with `[route.entity]` a record's key ends in its entity's
//! tag (`{hash}{{entity}}`, so a Cluster keeps an entity's records in one
//! slot): a key value alone does not name one. There `?key=` and the path
//! form take `entity=` (the entity id, hashed as the entities API hashes
//! `id=`), and `?hash=` must carry the tag (as listings, log lines and hot
//! keys print it). Either omission is a 400 saying what to add, never a
//! 404 for a record that exists.

use super::query_pairs;
use crate::pipeline::admit::entity::entity_hash;
use crate::pipeline::admit::identify::hash_key_parts;
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
    /// A query parameter other than `key`, `hash` and `entity`.
    #[error(
        "unknown query parameter {0:?}; expected hash= or key= (and entity= on an entity route)"
    )]
    UnknownParameter(String),
    /// A key value on an entity route without `entity=`.
    #[error(
        "on an entity route a key value names a record with its entity: add entity=<the entity id>, or use hash= as listings, log lines and hot keys print it (with its {{entity}} tag)"
    )]
    EntityNeeded,
    /// `?hash=` without the entity tag on an entity route.
    #[error(
        "on an entity route a record's hash ends in its {{entity}} tag: use the hash as listings, log lines and hot keys print it, or key= with entity="
    )]
    UntaggedHash,
    /// `entity=` where it names nothing: a route without entities, or
    /// beside `hash=` (whose tag names the entity already).
    #[error(
        "entity= goes with key= or a path key on an entity route (hash= carries the entity in its tag)"
    )]
    EntityMisplaced,
    /// `entity=` given twice or empty.
    #[error("entity= must be one non-empty entity id")]
    BadEntity,
}

/// The key hash a record URL names (the store key's last part): `?hash=`
/// as given (lower-cased), `?key=` or the path key percent-decoded and
/// hashed as a single-part key, with the entity tag of `entity=` after it
/// on an entity route (`entity_route`; module docs).
pub(super) fn key_hash_of(
    path_key: Option<&str>,
    query: Option<&str>,
    entity_route: bool,
) -> Result<String, RecordRefError> {
    let decode = |raw: &str| -> Vec<u8> { percent_encoding::percent_decode_str(raw).collect() };
    let mut named: Vec<Result<Named, RecordRefError>> = Vec::new();
    let mut entity: Option<Vec<u8>> = None;
    if let Some(raw) = path_key.filter(|k| !k.is_empty()) {
        named.push(Ok(Named::Value(hash_value(&decode(raw)))));
    }
    for (name, value) in query_pairs(query) {
        match name {
            "hash" => {
                let hash = String::from_utf8_lossy(&decode(value)).to_ascii_lowercase();
                named.push(if is_key_hash(&hash) {
                    Ok(Named::Hash(hash))
                } else {
                    Err(RecordRefError::BadHash)
                });
            }
            "key" if value.is_empty() => return Err(RecordRefError::EmptyKey),
            "key" => named.push(Ok(Named::Value(hash_value(&decode(value))))),
            "entity" if value.is_empty() || entity.is_some() => {
                return Err(RecordRefError::BadEntity);
            }
            "entity" => entity = Some(decode(value)),
            other => return Err(RecordRefError::UnknownParameter(other.to_owned())),
        }
    }
    let named = match named.len() {
        0 => return Err(RecordRefError::Missing),
        1 => named.remove(0)?,
        _ => return Err(RecordRefError::Ambiguous),
    };
    match (named, entity, entity_route) {
        (Named::Hash(hash) | Named::Value(hash), None, false) => Ok(hash),
        (Named::Hash(hash), None, true) if hash.len() > KEY_HASH_HEX => Ok(hash),
        (Named::Hash(_), None, true) => Err(RecordRefError::UntaggedHash),
        (Named::Value(_), None, true) => Err(RecordRefError::EntityNeeded),
        (Named::Value(hash), Some(id), true) => {
            Ok(format!("{hash}{{{}}}", entity_hash([id.as_slice()])))
        }
        (_, Some(_), _) => Err(RecordRefError::EntityMisplaced),
    }
}

/// Hex digits of a key hash without an entity tag.
const KEY_HASH_HEX: usize = 64;

/// How the URL named the record, before the entity is considered.
enum Named {
    /// `?hash=`: the store key's last part as given.
    Hash(String),
    /// A key value (`?key=` or the path), hashed.
    Value(String),
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

    /// On a route without entities.
    fn plain(path_key: Option<&str>, query: Option<&str>) -> Result<String, RecordRefError> {
        key_hash_of(path_key, query, false)
    }

    #[test]
    fn an_entity_route_names_a_record_with_its_entity() {
        fn entity(path_key: Option<&str>, query: Option<&str>) -> Result<String, RecordRefError> {
            key_hash_of(path_key, query, true)
        }
        let tagged = format!("{}{{{}}}", hash_value(b"n 1"), entity_hash([&b"o 1"[..]]));
        assert_eq!(
            entity(None, Some("key=n%201&entity=o%201")),
            Ok(tagged.clone())
        );
        assert_eq!(
            entity(Some("n%201"), Some("entity=o%201")),
            Ok(tagged.clone())
        );
        let by_hash = format!("hash={}", tagged.replace('{', "%7B").replace('}', "%7D"));
        assert_eq!(entity(None, Some(&by_hash)), Ok(tagged));
        assert_eq!(
            entity(None, Some("key=n")),
            Err(RecordRefError::EntityNeeded)
        );
        assert_eq!(entity(Some("n"), None), Err(RecordRefError::EntityNeeded));
        assert_eq!(
            entity(None, Some(&format!("hash={HEX}"))),
            Err(RecordRefError::UntaggedHash)
        );
        assert_eq!(
            entity(None, Some(&format!("hash={HEX}&entity=o"))),
            Err(RecordRefError::EntityMisplaced)
        );
        assert_eq!(
            plain(None, Some("key=n&entity=o")),
            Err(RecordRefError::EntityMisplaced)
        );
        assert_eq!(
            entity(None, Some("key=n&entity=")),
            Err(RecordRefError::BadEntity)
        );
        assert_eq!(
            entity(None, Some("key=n&entity=a&entity=b")),
            Err(RecordRefError::BadEntity)
        );
    }

    #[test]
    fn a_record_is_named_one_way_only() {
        // A 64-hex key value in the path or in ?key= is a value, never a hash.
        assert_eq!(plain(Some(HEX), None), Ok(hash_value(HEX.as_bytes())));
        assert_eq!(
            plain(None, Some(&format!("key={HEX}"))),
            Ok(hash_value(HEX.as_bytes()))
        );
        assert_ne!(hash_value(HEX.as_bytes()), HEX);
        // ?hash= is the hash itself, in either case.
        assert_eq!(
            plain(None, Some(&format!("hash={}", HEX.to_uppercase()))),
            Ok(HEX.to_owned())
        );
        // Percent-decoding is strict: `+` stays a plus sign.
        assert_eq!(
            plain(None, Some("key=a%20b+c%2Fd")),
            Ok(hash_value(b"a b+c/d"))
        );
        assert_eq!(plain(Some("a%2Fb"), None), Ok(hash_value(b"a/b")));
        assert_eq!(plain(Some("a/b"), None), Ok(hash_value(b"a/b")));

        assert_eq!(plain(None, None), Err(RecordRefError::Missing));
        assert_eq!(plain(Some(""), None), Err(RecordRefError::Missing));
        assert_eq!(
            plain(Some("v"), Some(&format!("hash={HEX}"))),
            Err(RecordRefError::Ambiguous)
        );
        assert_eq!(
            plain(None, Some(&format!("key=v&hash={HEX}"))),
            Err(RecordRefError::Ambiguous)
        );
        assert_eq!(plain(None, Some("hash=abc")), Err(RecordRefError::BadHash));
        assert_eq!(plain(None, Some("key=")), Err(RecordRefError::EmptyKey));
        assert_eq!(
            plain(None, Some("keys=v")),
            Err(RecordRefError::UnknownParameter("keys".into()))
        );
    }
}
