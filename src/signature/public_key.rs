//! RSA public keys for the payment channels that sign with RSA (Alipay,
//! WeChat Pay v3): resolved from `env:`, `file:` or `literal:` like
//! secrets, parsed once, re-read on SIGHUP.
//!
//! An entry is PEM (`PUBLIC KEY` = SPKI, `RSA PUBLIC KEY` = PKCS#1, or one
//! or more `CERTIFICATE`s) or the bare base64 of an SPKI the Alipay console
//! shows. A certificate names its key by its serial number (what WeChat
//! Pay sends in `Wechatpay-Serial`); a bare key can be bound to an id with
//! `{ id = "PUB_KEY_ID_…", key = "file:…" }`, since nothing inside it says
//! which id the sender will present. Keys outside 2048–8192 bits are
//! refused at start-up: `ring` verifies those sizes only, and another key
//! would otherwise fail every delivery at run time. Certificates are
//! trusted as configured: neither their chain nor their validity dates
//! are checked (the operator pins the sender's key, as the SDKs do).
//!
//! [`PublicKeys`] is a shared cell like [`super::Secret`]: clones of a
//! configuration see a reload. A reload that fails keeps every old key.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use base64::Engine;
use serde::{Deserialize, Serialize};
use x509_cert::Certificate;
use x509_cert::der::{Decode, Document};
use x509_cert::spki::SubjectPublicKeyInfoRef;

use crate::error::Rejection;

/// Shortest accepted modulus, in bits (`ring`'s lower bound).
pub const MIN_RSA_BITS: usize = 2048;

/// Longest accepted modulus, in bits (`ring`'s upper bound).
pub const MAX_RSA_BITS: usize = 8192;

/// The OID of `rsaEncryption`, the only SPKI algorithm these channels use.
const RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";

/// One `public_keys` entry as written: a source, or a source bound to the
/// id the sender presents for it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RawPublicKey {
    /// `"file:…"`, `"env:…"` or `"literal:…"`.
    Source(String),
    /// `{ id = "PUB_KEY_ID_…", key = "file:…" }`.
    Bound {
        /// What the sender names the key by (e.g. `Wechatpay-Serial`).
        id: String,
        /// Where the key is read from.
        key: String,
    },
}

impl RawPublicKey {
    fn parts(&self) -> (&str, Option<&str>) {
        match self {
            Self::Source(source) => (source, None),
            Self::Bound { id, key } => (key, Some(id)),
        }
    }
}

/// The digest of an RSA PKCS#1 v1.5 signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsaDigest {
    /// SHA256withRSA (Alipay `RSA2`, WeChat Pay v3).
    Sha256,
    /// SHA1withRSA (Alipay's legacy `RSA`), only where explicitly allowed.
    Sha1,
}

/// One parsed key: the PKCS#1 `RSAPublicKey` DER `ring` verifies with,
/// and the id it answers to, if any.
#[derive(Clone, PartialEq, Eq)]
struct VerifyingKey {
    /// Which configured entry it came from (the logged `key_index`).
    entry: usize,
    /// Certificate serial (upper-case hex, no leading zeros) or bound id.
    id: Option<String>,
    pkcs1: Vec<u8>,
}

/// Where one entry comes from (`spec` as written: a reload reads it again).
#[derive(Debug, Clone)]
struct Source {
    spec: String,
    id: Option<String>,
    /// Set for `file:` entries: a reload only happens if there is one.
    file: Option<PathBuf>,
}

/// A route's RSA public keys (rotation: any may verify).
#[derive(Clone)]
pub struct PublicKeys {
    sources: Arc<Vec<Source>>,
    keys: Arc<RwLock<Vec<VerifyingKey>>>,
}

impl fmt::Debug for PublicKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.sources.iter().map(|s| printable(&s.spec)))
            .finish()
    }
}

impl PublicKeys {
    /// Resolves and parses every entry. Errors are `(index, message)` so
    /// the caller can name `public_keys[index]`.
    pub fn resolve(entries: &[RawPublicKey]) -> Result<Self, Vec<(usize, String)>> {
        let mut sources = Vec::with_capacity(entries.len());
        let mut errors = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let (spec, id) = entry.parts();
            let file = spec.strip_prefix("file:").map(PathBuf::from);
            sources.push(Source {
                spec: spec.to_owned(),
                id: id.map(str::to_owned),
                file,
            });
            if let Some(id) = id
                && id.trim().is_empty()
            {
                errors.push((index, "the id bound to a key must not be empty".to_owned()));
            }
        }
        let keys = match load(entries.iter().map(|e| e.parts())) {
            Ok(keys) => keys,
            Err(mut found) => {
                errors.append(&mut found);
                Vec::new()
            }
        };
        if !errors.is_empty() {
            errors.sort_by_key(|(index, _)| *index);
            return Err(errors);
        }
        Ok(Self {
            sources: Arc::new(sources),
            keys: Arc::new(RwLock::new(keys)),
        })
    }

    /// How many entries are configured (the range of the logged index).
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Where each entry comes from, as `check-config` prints it.
    pub fn sources(&self) -> Vec<RawPublicKey> {
        self.sources
            .iter()
            .map(|s| match &s.id {
                Some(id) => RawPublicKey::Bound {
                    id: id.clone(),
                    key: printable(&s.spec),
                },
                None => RawPublicKey::Source(printable(&s.spec)),
            })
            .collect()
    }

    /// Verifies `signature` over `message` with the key named `id` (any
    /// key when `None`). Returns the index of the entry that verified.
    /// A presented id no key answers to is `signature_invalid`, like a
    /// wrong signature: the sender signed with a key this route does not
    /// trust.
    pub fn verify(
        &self,
        id: Option<&str>,
        digest: RsaDigest,
        message: &[u8],
        signature: &[u8],
    ) -> Result<usize, Rejection> {
        use ring::signature::{
            RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY, RSA_PKCS1_2048_8192_SHA256,
            UnparsedPublicKey,
        };
        let algorithm = match digest {
            RsaDigest::Sha256 => &RSA_PKCS1_2048_8192_SHA256,
            RsaDigest::Sha1 => &RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        };
        let wanted = id.map(normalize_id);
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter(|key| wanted.is_none() || key.id == wanted)
            .find(|key| {
                UnparsedPublicKey::new(algorithm, &key.pkcs1)
                    .verify(message, signature)
                    .is_ok()
            })
            .map(|key| key.entry)
            .ok_or(Rejection::SignatureInvalid)
    }

    /// The paths of the `file:` entries (what the secret watcher polls).
    pub fn files(&self) -> impl Iterator<Item = &std::path::Path> {
        self.sources.iter().filter_map(|s| s.file.as_deref())
    }

    /// Re-reads every entry if any is a `file:` key (SIGHUP). `Ok(true)`:
    /// the keys changed. `Err`: nothing changed, every old key stays.
    pub fn reload(&self) -> Result<bool, String> {
        if self.sources.iter().all(|s| s.file.is_none()) {
            return Ok(false);
        }
        let fresh =
            load(self.sources.iter().map(|s| (&s.spec, s.id.as_ref()))).map_err(|errors| {
                errors
                    .into_iter()
                    .map(|(i, e)| {
                        format!(
                            "public_keys[{i}] ({}): {e}",
                            printable(&self.sources[i].spec)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if *keys == fresh {
            return Ok(false);
        }
        *keys = fresh;
        Ok(true)
    }
}

/// `literal:` keys are public, but long: printed by kind only.
fn printable(spec: &str) -> String {
    if spec.starts_with("literal:") {
        "literal:<key>".to_owned()
    } else {
        spec.to_owned()
    }
}

/// Reads and parses every `(spec, bound id)` entry; a certificate chain
/// gives one key per certificate. Errors name the entry's index.
fn load<S, I>(
    entries: impl Iterator<Item = (S, Option<I>)>,
) -> Result<Vec<VerifyingKey>, Vec<(usize, String)>>
where
    S: AsRef<str>,
    I: AsRef<str>,
{
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    for (entry, (spec, id)) in entries.enumerate() {
        let parsed = read_source(spec.as_ref()).and_then(|text| parse_keys(&text));
        match parsed {
            Ok(found) => {
                for (serial, pkcs1) in found {
                    let id = match (id.as_ref(), serial) {
                        (Some(bound), _) => Some(normalize_id(bound.as_ref())),
                        (None, serial) => serial,
                    };
                    keys.push(VerifyingKey { entry, id, pkcs1 });
                }
            }
            Err(error) => errors.push((entry, error)),
        }
    }
    if errors.is_empty() {
        Ok(keys)
    } else {
        Err(errors)
    }
}

fn read_source(spec: &str) -> Result<String, String> {
    let (kind, argument) = spec
        .split_once(':')
        .ok_or_else(|| "a key is written env:NAME, file:PATH or literal:PEM".to_owned())?;
    let text = match kind {
        "env" => std::env::var(argument)
            .map_err(|_| format!("environment variable {argument} is not set"))?,
        "file" => std::fs::read_to_string(argument)
            .map_err(|e| format!("cannot read key file {argument}: {e}"))?,
        "literal" => argument.to_owned(),
        _ => {
            return Err(format!(
                "unknown key source {kind:?}; expected env:NAME, file:PATH or literal:PEM"
            ));
        }
    };
    if text.trim().is_empty() {
        return Err("the key is empty".to_owned());
    }
    Ok(text)
}

/// Upper-case hex without leading zeros: how WeChat Pay writes a serial
/// (Java's `BigInteger.toString(16)`), so `0A1B` and `a1b` name one key.
/// Bound ids that are not hex are compared as written.
fn normalize_id(id: &str) -> String {
    let id = id.trim();
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        let trimmed = id.trim_start_matches('0');
        if trimmed.is_empty() {
            "0".to_owned()
        } else {
            trimmed.to_ascii_uppercase()
        }
    } else {
        id.to_owned()
    }
}

/// One key found in an entry's text: its certificate serial, if it came
/// in a certificate, and its PKCS#1 DER.
type Found = (Option<String>, Vec<u8>);

/// The keys in one entry's text.
fn parse_keys(text: &str) -> Result<Vec<Found>, String> {
    let text = text.trim();
    if text.contains("-----BEGIN CERTIFICATE-----") {
        let certificates = Certificate::load_pem_chain(text.as_bytes())
            .map_err(|e| format!("not a valid PEM certificate: {e}"))?;
        return certificates
            .iter()
            .map(|certificate| {
                let tbs = certificate.tbs_certificate();
                let serial = normalize_id(&hex::encode(tbs.serial_number().as_bytes()));
                let spki = x509_cert::der::Encode::to_der(tbs.subject_public_key_info())
                    .map_err(|e| format!("certificate key: {e}"))?;
                Ok((Some(serial), rsa_from_spki(&spki)?))
            })
            .collect();
    }
    if text.starts_with("-----BEGIN") {
        let (label, document) =
            Document::from_pem(text).map_err(|e| format!("not a valid PEM block: {e}"))?;
        let key = match label {
            "PUBLIC KEY" => rsa_from_spki(document.as_bytes())?,
            "RSA PUBLIC KEY" => checked_pkcs1(document.as_bytes())?,
            other => {
                return Err(format!(
                    "a PEM {other:?} block is not a public key; expected PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE"
                ));
            }
        };
        return Ok(vec![(None, key)]);
    }
    let compact: String = text.split_whitespace().collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| {
            "neither PEM nor the bare base64 of a public key (as the Alipay console shows it)"
                .to_owned()
        })?;
    Ok(vec![(None, rsa_from_spki(&der)?)])
}

fn rsa_from_spki(der: &[u8]) -> Result<Vec<u8>, String> {
    let spki = SubjectPublicKeyInfoRef::from_der(der)
        .map_err(|e| format!("not a valid SubjectPublicKeyInfo: {e}"))?;
    if spki.algorithm.oid.to_string() != RSA_ENCRYPTION {
        return Err(format!(
            "the key's algorithm is {}, not RSA",
            spki.algorithm.oid
        ));
    }
    let pkcs1 = spki
        .subject_public_key
        .as_bytes()
        .ok_or("the key's bit string is not whole bytes")?;
    checked_pkcs1(pkcs1)
}

/// Checks a PKCS#1 `RSAPublicKey` and its size.
fn checked_pkcs1(der: &[u8]) -> Result<Vec<u8>, String> {
    let key = pkcs1::RsaPublicKey::<x509_cert::der::asn1::UintRef<'_>>::from_der(der)
        .map_err(|e| format!("not a valid RSA public key: {e}"))?;
    let modulus = key.modulus.as_bytes();
    let bits = modulus.iter().position(|b| *b != 0).map_or(0, |first| {
        (modulus.len() - first) * 8 - modulus[first].leading_zeros() as usize
    });
    if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
        return Err(format!(
            "the RSA key has {bits} bits; {MIN_RSA_BITS} to {MAX_RSA_BITS} are supported"
        ));
    }
    Ok(der.to_vec())
}

#[cfg(test)]
mod tests;
