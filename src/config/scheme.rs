//! `[route.signature]`, validated: the checks that turn a [`RawSignature`]
//! into a [`Scheme`].
//!
//! The schemes themselves, the generic `scheme = "hmac"` and the named
//! senders' presets, are `crate::signature`'s; this file reads the table
//! into them, holds each secret to its scheme's strength, and refuses the
//! keys a scheme does not read. The preset-only checks are in
//! `scheme/preset.rs`.

mod preset;

use serde::{Deserialize, Serialize};

use super::choice::choices;
use super::duration::ConfigDuration;
use super::problems::Problems;
use crate::extract::{Selector, Template};
use crate::signature::{
    Algorithm, DEFAULT_TOLERANCE, Encoding, HmacScheme, PresetKind, Scheme, Secret, Strength,
    TimestampRule, TimestampUnit, secret_strength,
};
use preset::{preset, preset_only_keys};

/// `[route.signature]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    /// Scheme name.
    pub scheme: String,
    /// Secret sources; any one may match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// `"sha256"` or `"sha512"`.
    pub algorithm: Option<Algorithm>,
    /// Selector of the presented signature.
    pub signature: Option<String>,
    /// `"hex"` or `"base64"`.
    pub encoding: Option<Encoding>,
    /// Text stripped before decoding.
    pub prefix: Option<String>,
    /// Template of the signed content.
    pub message: Option<String>,
    /// Selector of the timestamp.
    pub timestamp: Option<String>,
    /// `"s"` or `"ms"`.
    pub timestamp_unit: Option<TimestampUnit>,
    /// Allowed clock difference.
    pub tolerance: Option<ConfigDuration>,
    /// RSA public keys (alipay, wechatpay-v3); any one may verify.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public_keys: Vec<crate::signature::RawPublicKey>,
    /// The scheme and host the sender called (twilio signs the full URL).
    pub public_url: Option<String>,
    /// Accept Alipay's legacy SHA1withRSA (`sign_type=RSA`).
    pub allow_rsa1: Option<bool>,
}

choices! {
    Algorithm { "sha256" => Sha256, "sha512" => Sha512 }
    Encoding { "hex" => Hex, "base64" => Base64 }
    TimestampUnit { "s" => Seconds, "ms" => Millis }
}

/// The secrets `check` accepts out of `entries` (sources to resolve, or
/// secrets to hold to a rule); each refused one is a problem of
/// `{key}.secrets[i]`, so resolving, strength and decoding all name a
/// bad secret by the same index.
fn checked_secrets<T>(
    problems: &mut Problems,
    key: &str,
    entries: &[T],
    check: impl Fn(&T) -> Result<Secret, String>,
) -> Vec<Secret> {
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| problems.take(&format!("{key}.secrets[{i}]"), check(entry)))
        .collect()
}

/// Holds each secret to `strength`, naming the refused one by its index.
fn strong(
    problems: &mut Problems,
    key: &str,
    secrets: &[Secret],
    strength: Strength,
) -> Vec<Secret> {
    checked_secrets(problems, key, secrets, |secret| {
        secret
            .require(strength)
            .map_err(|why| format!("{}: the key {why}", secret.source()))
    })
}

/// Validates `[route.signature]` under `key` (`route[0].signature`).
pub(super) fn scheme(problems: &mut Problems, key: &str, raw: &RawSignature) -> Scheme {
    let secrets = checked_secrets(problems, key, &raw.secrets, |spec| Secret::resolve(spec));
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

/// The generic scheme: every parameter from the table.
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
    let algorithm = raw.algorithm.unwrap_or(Algorithm::Sha256);
    let signature = signature_selector(problems, key, raw.signature.as_deref());
    let encoding = raw.encoding.unwrap_or(Encoding::Hex);
    let message = match &raw.message {
        Some(text) => problems
            .take(&format!("{key}.message"), Template::parse(text))
            .unwrap_or_else(Template::body_only),
        None => Template::body_only(),
    };
    let timestamp = timestamp_rule(problems, key, raw);
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

/// Where `scheme = "hmac"` reads the presented signature (required).
fn signature_selector(problems: &mut Problems, key: &str, text: Option<&str>) -> Selector {
    let stand_in = || Selector::Query(String::new());
    match text {
        Some(text) => problems
            .take(&format!("{key}.signature"), Selector::parse(text))
            .unwrap_or_else(stand_in),
        None => {
            problems.push(
                &format!("{key}.signature"),
                "required with scheme = \"hmac\", e.g. \"header:X-Signature\"",
            );
            stand_in()
        }
    }
}

/// The freshness check of `scheme = "hmac"`: none without a `timestamp`
/// selector, and then `timestamp_unit` and `tolerance` have no effect.
fn timestamp_rule(problems: &mut Problems, key: &str, raw: &RawSignature) -> Option<TimestampRule> {
    let rule = raw.timestamp.as_ref().and_then(|text| {
        let selector = problems.take(&format!("{key}.timestamp"), Selector::parse(text))?;
        let unit = raw.timestamp_unit.unwrap_or(TimestampUnit::Seconds);
        let tolerance = raw.tolerance.map_or(DEFAULT_TOLERANCE, ConfigDuration::get);
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
    rule
}

/// `[route.signature]` as `check-config` prints it: every key the scheme
/// reads, defaults included, secrets and keys by their source only.
pub(super) fn to_raw(scheme: &Scheme) -> RawSignature {
    let sources = |secrets: &[Secret]| secrets.iter().map(|s| s.source().to_owned()).collect();
    match scheme {
        Scheme::None => RawSignature {
            scheme: "none".to_owned(),
            ..RawSignature::default()
        },
        Scheme::Hmac(hmac) => {
            let timestamp = hmac.timestamp.as_ref();
            RawSignature {
                scheme: "hmac".to_owned(),
                secrets: sources(&hmac.secrets),
                algorithm: Some(hmac.algorithm),
                signature: Some(hmac.signature.to_string()),
                encoding: Some(hmac.encoding),
                prefix: Some(hmac.prefix.clone()),
                message: Some(hmac.message.to_string()),
                timestamp: timestamp.map(|rule| rule.selector.to_string()),
                timestamp_unit: timestamp.map(|rule| rule.unit),
                tolerance: timestamp.map(|rule| rule.tolerance.into()),
                ..RawSignature::default()
            }
        }
        Scheme::Preset(preset) => RawSignature {
            scheme: preset.kind.name().to_owned(),
            secrets: sources(&preset.keys),
            public_keys: preset.public_keys.sources(),
            public_url: preset.public_url.clone(),
            allow_rsa1: (preset.kind == PresetKind::Alipay).then_some(preset.allow_rsa1),
            tolerance: preset.tolerance.map(ConfigDuration::from),
            ..RawSignature::default()
        },
    }
}
