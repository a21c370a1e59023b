//! The signature schemes a route can require, and their validation.
//!
//! Owns `[route.signature]`: the generic `scheme = "hmac"` description
//! ([`HmacScheme`]), the named senders ([`Preset`]) that fix every parameter
//! themselves, and the checks that turn a [`RawSignature`] into a [`Scheme`].
//! Kept apart from the idempotency rules because the two are configured,
//! validated and read (by `signature` vs. the later stages) independently.

use std::time::Duration;

use super::raw::RawSignature;
use super::validate::Problems;
use base64::Engine;

use super::preset::{Preset, PresetKind, preset, preset_only_keys};
use super::secret::Strength;
use super::{Secret, Selector, Template};
use crate::encoding::BASE64;

/// The default signature tolerance: five minutes either side of now.
///
/// It is the window Standard Webhooks, Stripe and Slack document for their
/// own signatures, so the presets apply it as theirs and the generic
/// `scheme = "hmac"` uses it when `tolerance` is not set: wide enough for
/// ordinary clock skew and queueing, narrow enough to refuse replays of an
/// old captured delivery.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The least key material a route's secrets must hold, in key bytes after
/// the scheme's own decoding (`None`: the generic `scheme = "hmac"`).
///
/// A floor of 16 bytes (128 bits) where the sender lets the operator
/// choose or issues longer; the issued length itself where the sender
/// issues one fixed length, so a truncated key is refused as well.
/// Every genuine secret of these senders passes; a weaker one is refused
/// at start-up and by `check-config`, and kept out on reload.
pub fn secret_strength(preset: Option<PresetKind>) -> Strength {
    const FLOOR: usize = 16;
    match preset {
        None => Strength::at_least(
            FLOOR,
            "an hmac secret needs at least 16 bytes (128 bits); generate one with `openssl rand -hex 32`",
        ),
        Some(PresetKind::StandardWebhooks) => Strength::at_least(
            FLOOR,
            "a standard-webhooks key is \"whsec_\" + base64 of at least 16 bytes (the spec asks for 24 to 64; Svix issues 24); copy the whole secret from the sender",
        ),
        Some(PresetKind::Stripe) => Strength::at_least(
            FLOOR,
            "Stripe issues \"whsec_\" + 32 characters; copy the whole signing secret from the dashboard",
        ),
        Some(PresetKind::Github) => Strength::at_least(
            FLOOR,
            "set a GitHub webhook secret of at least 16 bytes, e.g. `openssl rand -hex 32`, on both sides",
        ),
        Some(PresetKind::Slack) => Strength::at_least(
            FLOOR,
            "Slack issues a 32-character signing secret; copy the whole value from the app's Basic Information page",
        ),
        Some(PresetKind::Shopify) => Strength::at_least(
            FLOOR,
            "Shopify issues a 32-hex client secret (\"shpss_\" + 32 hex); copy the whole value",
        ),
        Some(PresetKind::WechatpayV2) => Strength::exactly(
            32,
            "WeChat Pay's API v2 key is exactly 32 characters, as set in the merchant platform",
        ),
        Some(PresetKind::Adyen) => Strength::exactly(
            32,
            "Adyen issues 64 hex characters (32 bytes); copy the whole HMAC key from the Customer Area",
        ),
        Some(PresetKind::Twilio) => Strength::at_least(
            FLOOR,
            "Twilio issues a 32-hex auth token; copy the whole value from the Console",
        ),
        // Never applied: these take `public_keys`, and `secrets` is an error.
        Some(PresetKind::Alipay | PresetKind::WechatpayV3) => {
            Strength::at_least(FLOOR, "this scheme verifies with public_keys, not secrets")
        }
    }
}

/// Holds each secret to `strength`, naming the refused one by its index.
fn strong(
    problems: &mut Problems,
    key: &str,
    secrets: &[Secret],
    strength: Strength,
) -> Vec<Secret> {
    secrets
        .iter()
        .enumerate()
        .filter_map(|(i, secret)| {
            problems.take(
                &format!("{key}.secrets[{i}]"),
                secret
                    .require(strength)
                    .map_err(|why| format!("{}: the key {why}", secret.source())),
            )
        })
        .collect()
}

/// Decodes a Standard Webhooks `whsec_…` secret (or a bare base64 key)
/// into MAC key bytes, once when the configuration is loaded and again on
/// each reload, so verification never sees the text form.
pub fn decode_whsec(text: &[u8]) -> Option<Vec<u8>> {
    let encoded = text.strip_prefix(b"whsec_").unwrap_or(text);
    BASE64.decode(encoded).ok().filter(|key| !key.is_empty())
}

/// HMAC digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// HMAC-SHA-256.
    Sha256,
    /// HMAC-SHA-512.
    Sha512,
}

/// Text encoding of a presented signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Lower- or upper-case hex.
    Hex,
    /// Standard base64 (padding optional).
    Base64,
}

/// Units of a timestamp value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampUnit {
    /// Unix seconds.
    Seconds,
    /// Unix milliseconds.
    Millis,
}

/// The freshness check of a route.
#[derive(Debug, Clone)]
pub struct TimestampRule {
    /// Where the timestamp is read.
    pub selector: Selector,
    /// Its unit.
    pub unit: TimestampUnit,
    /// Largest allowed |now − timestamp|.
    pub tolerance: Duration,
}

/// The generic `scheme = "hmac"` parameters.
#[derive(Debug, Clone)]
pub struct HmacScheme {
    /// Any one may match (rotation).
    pub secrets: Vec<Secret>,
    /// Digest.
    pub algorithm: Algorithm,
    /// Where the presented signature is read.
    pub signature: Selector,
    /// How it is encoded.
    pub encoding: Encoding,
    /// Stripped before decoding, e.g. `sha256=`.
    pub prefix: String,
    /// The signed content.
    pub message: Template,
    /// Freshness check, if any.
    pub timestamp: Option<TimestampRule>,
}

/// How a route authenticates deliveries.
#[derive(Debug, Clone)]
pub enum Scheme {
    /// No verification (warned about at start-up).
    None,
    /// Generic HMAC.
    Hmac(HmacScheme),
    /// A published sender's scheme.
    Preset(Preset),
}

impl Scheme {
    /// How many secrets the scheme tries (the range of `secret_index`).
    pub fn secret_count(&self) -> usize {
        match self {
            Self::None => 0,
            Self::Hmac(h) => h.secrets.len(),
            Self::Preset(preset) => preset.credential_count(),
        }
    }

    /// The signature tolerance, which `retention` must exceed (SPEC §4 rule 8).
    pub fn tolerance(&self) -> Option<Duration> {
        match self {
            Self::None => None,
            Self::Hmac(h) => h.timestamp.as_ref().map(|t| t.tolerance),
            Self::Preset(preset) => preset.tolerance,
        }
    }
}

pub(super) fn scheme(problems: &mut Problems, key: &str, raw: &RawSignature) -> Scheme {
    let secrets: Vec<Secret> = raw
        .secrets
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| {
            problems.take(&format!("{key}.secrets[{i}]"), Secret::resolve(spec))
        })
        .collect();
    match raw.scheme.as_str() {
        "none" => {
            let all = [
                ("secrets", !raw.secrets.is_empty()),
                ("tolerance", raw.tolerance.is_some()),
            ];
            let others = hmac_only_keys(raw).into_iter().chain(preset_only_keys(raw));
            for (field, set) in all.into_iter().chain(others) {
                if set {
                    problems.push(
                        &format!("{key}.{field}"),
                        "has no effect with scheme = \"none\"",
                    );
                }
            }
            Scheme::None
        }
        "hmac" => {
            let resolved = secrets.len();
            let mut hmac = hmac_scheme(problems, key, raw, secrets);
            if resolved == raw.secrets.len() {
                hmac.secrets = strong(problems, key, &hmac.secrets, secret_strength(None));
            }
            Scheme::Hmac(hmac)
        }
        name => match PresetKind::ALL.iter().find(|(n, _)| *n == name) {
            Some((_, kind)) => {
                let mut preset = preset(problems, key, raw, *kind, &secrets);
                // Indices name the configured entries only while none was
                // dropped (an unresolved or undecodable one is already an
                // error of its own).
                if preset.keys.len() == raw.secrets.len() {
                    preset.keys = strong(problems, key, &preset.keys, secret_strength(Some(*kind)));
                }
                Scheme::Preset(preset)
            }
            None => {
                let names: Vec<&str> = PresetKind::ALL.iter().map(|(n, _)| *n).collect();
                problems.push(
                    &format!("{key}.scheme"),
                    format!(
                        "{name:?} is not valid; expected \"hmac\", \"none\" or a preset: {}",
                        names.join(", ")
                    ),
                );
                Scheme::None
            }
        },
    }
}

/// The `[route.signature]` keys only `scheme = "hmac"` reads, and whether
/// each is set (an error with any other scheme).
pub(super) fn hmac_only_keys(raw: &RawSignature) -> [(&'static str, bool); 7] {
    [
        ("algorithm", raw.algorithm.is_some()),
        ("signature", raw.signature.is_some()),
        ("encoding", raw.encoding.is_some()),
        ("prefix", raw.prefix.is_some()),
        ("message", raw.message.is_some()),
        ("timestamp", raw.timestamp.is_some()),
        ("timestamp_unit", raw.timestamp_unit.is_some()),
    ]
}

fn hmac_scheme(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    secrets: Vec<Secret>,
) -> HmacScheme {
    for (field, set) in preset_only_keys(raw) {
        if set {
            problems.push(
                &format!("{key}.{field}"),
                "only for the presets that read it; scheme = \"hmac\" does not",
            );
        }
    }
    if raw.secrets.is_empty() {
        problems.push(
            &format!("{key}.secrets"),
            "at least one secret is required, e.g. [\"env:WEBHOOK_SECRET\"]",
        );
    }
    let algorithm = problems.choice(
        &format!("{key}.algorithm"),
        raw.algorithm.as_deref(),
        Algorithm::Sha256,
    );
    let signature = match &raw.signature {
        Some(text) => problems
            .take(&format!("{key}.signature"), Selector::parse(text))
            .unwrap_or(Selector::Query(String::new())),
        None => {
            problems.push(
                &format!("{key}.signature"),
                "required with scheme = \"hmac\", e.g. \"header:X-Signature\"",
            );
            Selector::Query(String::new())
        }
    };
    let encoding = problems.choice(
        &format!("{key}.encoding"),
        raw.encoding.as_deref(),
        Encoding::Hex,
    );
    let message = match &raw.message {
        Some(text) => problems
            .take(&format!("{key}.message"), Template::parse(text))
            .unwrap_or_else(Template::body_only),
        None => Template::body_only(),
    };
    let timestamp = raw.timestamp.as_ref().and_then(|text| {
        let selector = problems.take(&format!("{key}.timestamp"), Selector::parse(text))?;
        let unit = problems.choice(
            &format!("{key}.timestamp_unit"),
            raw.timestamp_unit.as_deref(),
            TimestampUnit::Seconds,
        );
        let tolerance = problems.duration_or(
            &format!("{key}.tolerance"),
            raw.tolerance.as_deref(),
            DEFAULT_TOLERANCE,
        );
        if tolerance.is_zero() {
            problems.push(&format!("{key}.tolerance"), "must be greater than zero");
        }
        Some(TimestampRule {
            selector,
            unit,
            tolerance,
        })
    });
    if raw.timestamp.is_none() {
        for (field, set) in [
            ("timestamp_unit", raw.timestamp_unit.is_some()),
            ("tolerance", raw.tolerance.is_some()),
        ] {
            if set {
                problems.push(
                    &format!("{key}.{field}"),
                    "has no effect without a timestamp selector",
                );
            }
        }
    }
    HmacScheme {
        secrets,
        algorithm,
        signature,
        encoding,
        prefix: raw.prefix.clone().unwrap_or_default(),
        message,
        timestamp,
    }
}
