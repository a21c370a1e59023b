//! Stage 4: the idempotency key and the request fingerprint.
//!
//! The **key** says "this is the same delivery": its parts are read with
//! selectors, each checked (non-empty, at most 255 bytes; a header value
//! that starts with `"` must be a valid RFC 8941 sf-string, whose content
//! is then the part), joined with a 4-byte length before each part so
//! `["a:b","c"]` and `["a","b:c"]` can not collide, and hashed with SHA-256.
//! Without configured parts the fingerprint itself is the key.
//!
//! The **fingerprint** says "this is the same request": SHA-256 over the
//! configured parts, each tagged and length-prefixed. Its `method` and
//! `path` parts are the canonical ones stage 1 matched the route with
//! ([`Canonical`]), so `/notify/`, `//notify` or `/%6Eotify` (which the
//! backend runs as `/notify`) are the same request, also when the
//! fingerprint is the key. Its body part is the SHA-256 of the raw body,
//! or, with `fingerprint_ignore`, of a canonical form without the volatile
//! fields (JSON: keys sorted, compact, numbers exactly as written, so
//! `10.5` and `10.50` differ; form: pairs sorted by name with a stable
//! sort, so the values of a repeated name keep the order they were sent
//! in and `a=1&a=2` differs from `a=2&a=1`; XML: the leaf elements as
//! `(path, text)` pairs sorted by path with a stable sort, each path and
//! text preceded by its 4-byte length, so repeated elements keep their
//! order and no two documents' leaves join alike). A route's
//! `fingerprint_ignore` names fields of one body format only (checked at
//! start-up). A JSON body that names a key twice, and an XML body with a
//! DTD or an undeclared entity, never get this far (`crate::extract`).

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use crate::config::{FingerprintPart, KeyPart, Route, Selector};
use crate::error::Rejection;
use crate::extract::Inbound;
use crate::hot_keys::KeyId;
use crate::pipeline::admit::entity::EntityIdentity;
use crate::pipeline::admit::route::Canonical;
use crate::pipeline::admit::verify::Verified;
use crate::pipeline::probe::Skip;
use crate::record::Fingerprint;
use crate::signature::lower_hex;
use crate::store::StoreKey;
use crate::store::probe::ProbePlan;

use crate::pipeline::admit::key_join::length_prefix;
pub use crate::pipeline::admit::key_join::{MAX_KEY_PART, hash_key_parts};

/// Who a delivery is, for the store.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The store key.
    pub key: StoreKey,
    /// Hex SHA-256 of the joined key parts, with the entity tag after it
    /// on an entity route: the key's last part (safe to log).
    pub key_hash: String,
    /// The digest `key_hash` spells: fixed-size, for per-request
    /// bookkeeping that must not allocate (hot keys).
    pub key_digest: [u8; 32],
    /// The request fingerprint.
    pub fingerprint: Fingerprint,
    /// The key value when the route's key has exactly one part: kept in
    /// the record so the admin listing can show it (`crate::record`).
    pub key_value: Option<bytes::Bytes>,
    /// The entity the delivery is about, on a route with `[route.entity]`
    /// (stage 4b, `crate::pipeline::admit::entity`); its hash tags [`Identity::key`].
    pub entity: Option<EntityIdentity>,
    /// On a route with `[route.probe]`, the probe plan its claim keeps in
    /// the store, rendered from the verified delivery (`crate::pipeline::probe`), or
    /// why the delivery's values could not name the probe's resource
    /// (counted if it is forwarded); `None` on a route without a probe.
    pub(crate) probe: Option<Result<ProbePlan, Skip>>,
}

impl Identity {
    /// The key as the route's hot keys count it: the digest, and the
    /// entity tag on an entity route, so the hash they show names the
    /// record as `key_hash` does.
    pub(crate) fn hot_key(&self) -> KeyId {
        KeyId::new(
            self.key_digest,
            self.entity.as_ref().map(|entity| entity.hash.as_str()),
        )
    }
}

/// Computes the identity of a verified delivery; `canonical` is stage 1's
/// reading of its method and path.
pub fn identify(
    verified: &Verified,
    route: &Route,
    canonical: &Canonical,
    key_prefix: &str,
) -> Result<Identity, Rejection> {
    let request = verified.inbound();
    let fingerprint = fingerprint(request, route, canonical)?;
    let (digest, key_value) = match key_digest(verified, route)? {
        Some((digest, value)) => (digest, value),
        None => (fingerprint.0, None),
    };
    let scope = &route.idempotency.scope;
    let entity = route
        .entity
        .as_ref()
        .map(|entity| crate::pipeline::admit::entity::identify(request, entity, key_prefix, scope))
        .transpose()?;
    let hex = lower_hex(&digest);
    let key = match &entity {
        None => StoreKey::new(key_prefix, scope, &hex),
        Some(entity) => StoreKey::for_entity(key_prefix, scope, &hex, &entity.hash),
    };
    // A probe route's writes keep the probe plan in step (store::probe).
    let key = if route.probe.is_some() {
        key.probed()
    } else {
        key
    };
    // What logs print and the admin API takes: the key's last part.
    let key_hash = key.hash().to_owned();
    let probe = route
        .probe
        .as_ref()
        .map(|probe| crate::pipeline::probe::plan(route, probe, request));
    Ok(Identity {
        key,
        entity,
        probe,
        key_hash,
        key_digest: digest,
        fingerprint,
        key_value,
    })
}

/// A key's digest and, for a single-part key, its value.
type KeyDigest = ([u8; 32], Option<bytes::Bytes>);

/// SHA-256 of the length-prefixed key parts and, for a single-part key,
/// its value; `None` when the route has no key parts (or they are
/// optional and absent).
fn key_digest(verified: &Verified, route: &Route) -> Result<Option<KeyDigest>, Rejection> {
    let Some(parts) = &route.idempotency.key else {
        return Ok(None);
    };
    let request = verified.inbound();
    let mut values = Vec::with_capacity(parts.len());
    for part in parts {
        let raw = match part {
            KeyPart::Value(selector) => request.value(selector)?,
            KeyPart::SignedId => verified
                .authenticity()
                .signed_id(&request.body)
                .map(|id| Cow::Owned(id.to_vec())),
        };
        let Some(raw) = raw else {
            if route.idempotency.require_key {
                return Err(Rejection::KeyMissing(part.to_string()));
            }
            return Ok(None);
        };
        values.push(key_part(part, raw)?);
    }
    let digest = hash_key_parts(values.iter().map(AsRef::as_ref));
    let single = match values.as_slice() {
        [only] => Some(bytes::Bytes::copy_from_slice(only)),
        _ => None,
    };
    Ok(Some((digest, single)))
}

fn key_part<'a>(part: &KeyPart, raw: Cow<'a, [u8]>) -> Result<Cow<'a, [u8]>, Rejection> {
    let invalid = || Rejection::KeyInvalid(part.to_string());
    let value = match part {
        KeyPart::Value(Selector::Header(_)) if raw.first() == Some(&b'"') => {
            Cow::Owned(parse_sf_string(&raw).ok_or_else(invalid)?)
        }
        KeyPart::Value(Selector::Header(_)) => match raw {
            Cow::Borrowed(b) => Cow::Borrowed(b.trim_ascii()),
            Cow::Owned(b) => Cow::Owned(b.trim_ascii().to_vec()),
        },
        _ => raw,
    };
    if value.is_empty() || value.len() > MAX_KEY_PART {
        return Err(invalid());
    }
    Ok(value)
}

/// Parses an RFC 8941 sf-string (`"…"` with `\"` and `\\` escapes, printable
/// ASCII only). Returns its content, or `None` if malformed.
pub fn parse_sf_string(raw: &[u8]) -> Option<Vec<u8>> {
    let inner = raw.trim_ascii().strip_prefix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return None,
            },
            b'"' => return bytes.as_slice().is_empty().then_some(out),
            0x20..=0x7e => out.push(b),
            _ => return None,
        }
    }
    None
}

fn fingerprint(
    request: &Inbound,
    route: &Route,
    canonical: &Canonical,
) -> Result<Fingerprint, Rejection> {
    let mut hasher = Sha256::new();
    let mut put = |tag: u8, bytes: &[u8]| {
        hasher.update([tag]);
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    for part in &route.idempotency.fingerprint {
        match part {
            FingerprintPart::Method => put(b'M', canonical.method.as_str().as_bytes()),
            FingerprintPart::Path => put(b'P', canonical.path.as_bytes()),
            FingerprintPart::Query => put(b'Q', request.parts.uri.query().unwrap_or("").as_bytes()),
            FingerprintPart::Header(name) => {
                let mut joined = Vec::new();
                for value in request.parts.headers.get_all(name) {
                    joined.extend_from_slice(&length_prefix(value.as_bytes()).to_be_bytes());
                    joined.extend_from_slice(value.as_bytes());
                }
                put(b'H', &joined);
            }
            FingerprintPart::Body => {
                let digest = body_digest(request, &route.idempotency.fingerprint_ignore)?;
                put(b'B', &digest);
            }
            // Tagged by position only, not by selector: routes of one scope
            // read the same value through different selectors.
            FingerprintPart::Value(selector) => match request.value(selector)? {
                Some(value) => put(b'V', &value),
                None => put(b'A', b""),
            },
        }
    }
    Ok(Fingerprint(hasher.finalize().into()))
}

fn body_digest(request: &Inbound, ignore: &[Selector]) -> Result<[u8; 32], Rejection> {
    if ignore.is_empty() {
        return Ok(Sha256::digest(&request.body).into());
    }
    // Start-up validation keeps the list to one body format.
    let canonical = if ignore.iter().any(|s| matches!(s, Selector::Json(_))) {
        canonical_json(request, ignore)?
    } else if ignore.iter().any(|s| matches!(s, Selector::Xml(_))) {
        canonical_xml(request, ignore)?
    } else {
        canonical_form(request, ignore)?
    };
    Ok(Sha256::digest(canonical).into())
}

/// Compact JSON with sorted keys (serde_json's map is ordered) and the
/// ignored pointers removed.
fn canonical_json(request: &Inbound, ignore: &[Selector]) -> Result<Vec<u8>, Rejection> {
    let mut value = request.json()?.clone();
    for selector in ignore {
        if let Selector::Json(pointer) = selector {
            remove_pointer(&mut value, pointer);
        }
    }
    Ok(value.to_string().into_bytes())
}

fn remove_pointer(value: &mut serde_json::Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let token = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(serde_json::Value::Object(map)) => {
            map.remove(&token);
        }
        Some(serde_json::Value::Array(items)) => {
            if let Ok(index) = token.parse::<usize>() {
                if index < items.len() {
                    items.remove(index);
                }
            }
        }
        _ => {}
    }
}

/// `key=value` pairs without the ignored fields, sorted by name only (a
/// stable sort: the values of one name stay in the order sent, since
/// backends take the first or the last), re-encoded.
fn canonical_form(request: &Inbound, ignore: &[Selector]) -> Result<Vec<u8>, Rejection> {
    let pairs = kept_by_name(request.form()?, |name| {
        ignore
            .iter()
            .any(|s| matches!(s, Selector::Form(f) if f == name))
    });
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        out.append_pair(k, v);
    }
    Ok(out.finish().into_bytes())
}

/// The XML leaves without the ignored paths, sorted by path only (a
/// stable sort: repeated elements keep the order sent), each path and
/// text written after its 4-byte length so the join is unambiguous.
fn canonical_xml(request: &Inbound, ignore: &[Selector]) -> Result<Vec<u8>, Rejection> {
    let leaves = kept_by_name(request.xml()?.leaves(), |path| {
        ignore
            .iter()
            .any(|s| matches!(s, Selector::Xml(p) if p == path))
    });
    let mut out = Vec::new();
    for (path, text) in leaves {
        for part in [path.as_bytes(), text.as_bytes()] {
            out.extend_from_slice(&length_prefix(part).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    Ok(out)
}

/// The `(name, value)` pairs whose name is not `ignored`, sorted by name
/// only: a stable sort, so the values of one name keep the order sent.
fn kept_by_name(
    pairs: &[(String, String)],
    ignored: impl Fn(&str) -> bool,
) -> Vec<&(String, String)> {
    let mut kept: Vec<_> = pairs.iter().filter(|(name, _)| !ignored(name)).collect();
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::admit::verify::verify;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn route(idempotency: &str) -> Route {
        crate::config::test_route(idempotency)
    }

    fn identity(
        route: &Route,
        headers: &[(&str, &[u8])],
        body: &str,
    ) -> Result<Identity, Rejection> {
        let mut parts = http::Request::post("/n?q=1")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        for (k, v) in headers {
            parts.headers.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(v).unwrap(),
            );
        }
        let inbound = Inbound::new(parts, Bytes::from(body.to_owned()));
        let verified = verify(inbound, route, 0).unwrap();
        let canonical = Canonical {
            method: http::Method::POST,
            path: "/n".to_owned(),
        };
        identify(&verified, route, &canonical, "idemgate")
    }

    #[test]
    fn composite_keys_do_not_collide() {
        let r = route(r#"key = ["json:/a", "json:/b"]"#);
        let one = identity(&r, &[], r#"{"a":"x:y","b":"z"}"#).unwrap();
        let two = identity(&r, &[], r#"{"a":"x","b":"y:z"}"#).unwrap();
        assert_ne!(one.key, two.key);
        assert!(one.key.as_str().starts_with("idemgate:r:"));
        assert_eq!(one.key.as_str().len(), "idemgate:r:".len() + 64);
    }

    #[test]
    fn only_a_single_part_key_keeps_its_value() {
        let single = route(r#"key = ["header:Idempotency-Key"]"#);
        let one = identity(&single, &[("idempotency-key", b"\"evt_1\"")], "").unwrap();
        // The value as hashed: the sf-string's content, so `?key=evt_1` names it.
        assert_eq!(one.key_value.as_deref(), Some(&b"evt_1"[..]));
        assert_eq!(one.key_hash, lower_hex(&hash_key_parts([&b"evt_1"[..]])));
        let composite = route(r#"key = ["json:/a", "json:/b"]"#);
        let two = identity(&composite, &[], r#"{"a":"x","b":"y"}"#).unwrap();
        assert_eq!(two.key_value, None);
        let fingerprint = route("fingerprint = [\"body\"]");
        assert_eq!(identity(&fingerprint, &[], "b").unwrap().key_value, None);
    }

    #[test]
    fn key_errors() {
        let r = route(r#"key = ["json:/a"]"#);
        assert!(matches!(
            identity(&r, &[], "{}"),
            Err(Rejection::KeyMissing(_))
        ));
        assert!(matches!(
            identity(&r, &[], r#"{"a":""}"#),
            Err(Rejection::KeyInvalid(_))
        ));
        let long = format!(r#"{{"a":"{}"}}"#, "x".repeat(256));
        assert!(matches!(
            identity(&r, &[], &long),
            Err(Rejection::KeyInvalid(_))
        ));
        let ok = format!(r#"{{"a":"{}"}}"#, "x".repeat(255));
        assert!(identity(&r, &[], &ok).is_ok());
        assert_eq!(
            identity(&r, &[], "nope").unwrap_err(),
            Rejection::BadRequestBody("json")
        );
        let optional = route("key = [\"json:/a\"]\nrequire_key = false");
        let fallback = identity(&optional, &[], "{}").unwrap();
        assert_eq!(fallback.key_hash, hex::encode(fallback.fingerprint.0));
        assert_eq!(fallback.key_digest, fallback.fingerprint.0);
        // With a key, the digest is what the hash spells, not the fingerprint.
        let keyed = identity(&optional, &[], r#"{"a":"k"}"#).unwrap();
        assert_eq!(keyed.key_hash, hex::encode(keyed.key_digest));
        assert_ne!(keyed.key_digest, keyed.fingerprint.0);
    }

    #[test]
    fn sf_string_and_token_mean_the_same_key() {
        let r = route(r#"key = ["header:Idempotency-Key"]"#);
        let quoted = identity(&r, &[("idempotency-key", b"\"abc\"")], "").unwrap();
        let token = identity(&r, &[("idempotency-key", b"abc")], "").unwrap();
        assert_eq!(quoted.key, token.key);
        for bad in [&b"\"abc"[..], b"\"a\\bc\"", b"\"abc\"x", b"\"\""] {
            assert!(
                matches!(
                    identity(&r, &[("idempotency-key", bad)], ""),
                    Err(Rejection::KeyInvalid(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(parse_sf_string(b"\"a\\\"b\\\\\""), Some(b"a\"b\\".to_vec()));
    }

    #[test]
    fn fingerprint_ignores_volatile_fields_only() {
        let r = route("key = [\"json:/id\"]\nfingerprint_ignore = [\"json:/notify_time\"]");
        let a = identity(&r, &[], r#"{"id":"1","amount":5,"notify_time":"10:00"}"#).unwrap();
        let b = identity(
            &r,
            &[],
            r#"{ "notify_time":"10:05", "amount":5, "id":"1" }"#,
        )
        .unwrap();
        let c = identity(&r, &[], r#"{"id":"1","amount":6,"notify_time":"10:00"}"#).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_eq!(a.key, c.key);

        let form = route("key = [\"form:id\"]\nfingerprint_ignore = [\"form:ts\"]");
        let a = identity(&form, &[], "id=1&x=2&ts=5").unwrap();
        let b = identity(&form, &[], "ts=9&x=2&id=1").unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        let first = identity(&form, &[], "id=1&amount=10&amount=9999").unwrap();
        let swapped = identity(&form, &[], "amount=9999&id=1&amount=10").unwrap();
        let moved = identity(&form, &[], "amount=10&id=1&amount=9999").unwrap();
        assert_ne!(
            first.fingerprint, swapped.fingerprint,
            "repeated values keep their order"
        );
        assert_eq!(first.fingerprint, moved.fingerprint, "names still sort");
    }

    #[test]
    fn fingerprint_ignore_on_xml_bodies() {
        let r = route(
            "key = [\"xml:/xml/out_trade_no\"]\nfingerprint_ignore = [\"xml:/xml/nonce_str\"]",
        );
        let body = |nonce: &str, fee: &str| {
            format!(
                "<xml><out_trade_no><![CDATA[T1]]></out_trade_no>\
                 <nonce_str><![CDATA[{nonce}]]></nonce_str><total_fee>{fee}</total_fee></xml>"
            )
        };
        let a = identity(&r, &[], &body("n1", "1")).unwrap();
        let b = identity(&r, &[], &body("n2", "1")).unwrap();
        let c = identity(&r, &[], &body("n1", "2")).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint, "only the nonce changed");
        assert_ne!(a.fingerprint, c.fingerprint, "the amount changed");
        assert_eq!(a.key, c.key);
        let reordered = identity(
            &r,
            &[],
            "<xml>\n<total_fee>1</total_fee><nonce_str>n3</nonce_str><out_trade_no>T1</out_trade_no></xml>",
        )
        .unwrap();
        assert_eq!(a.fingerprint, reordered.fingerprint, "paths sort");
        let shifted = identity(
            &r,
            &[],
            "<xml><out_trade_no>T1</out_trade_no><total_fee></total_fee><total_fee>1</total_fee></xml>",
        )
        .unwrap();
        let other = identity(
            &r,
            &[],
            "<xml><out_trade_no>T1</out_trade_no><total_fee>1</total_fee><total_fee></total_fee></xml>",
        )
        .unwrap();
        assert_ne!(
            shifted.fingerprint, other.fingerprint,
            "repeats keep their order"
        );
        assert_eq!(
            identity(
                &r,
                &[],
                "<!DOCTYPE x><xml><out_trade_no>T1</out_trade_no></xml>"
            )
            .unwrap_err(),
            Rejection::BadRequestBody("xml")
        );
    }

    #[test]
    fn without_key_the_fingerprint_is_the_key() {
        let r = route("fingerprint = [\"method\", \"path\", \"query\", \"header:x-a\", \"body\"]");
        let a = identity(&r, &[("x-a", b"1")], "same").unwrap();
        let b = identity(&r, &[("x-a", b"2")], "same").unwrap();
        assert_ne!(a.key, b.key);
        assert_eq!(a.key_hash, hex::encode(a.fingerprint.0));
    }

    proptest! {
        #[test]
        fn sf_string_parser_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_sf_string(&raw);
        }

        #[test]
        fn key_extraction_never_panics(body in ".{0,80}", header in proptest::collection::vec(32u8..127, 0..300)) {
            let r = route(r#"key = ["json:/a", "header:Idempotency-Key"]"#);
            let _ = identity(&r, &[("idempotency-key", &header)], &body);
            let f = route("key = [\"form:a\"]\nfingerprint_ignore = [\"form:b\"]");
            let _ = identity(&f, &[], &body);
        }
    }
}
