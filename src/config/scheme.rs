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

use super::{KeyPart, Secret, Selector, Template};
use crate::encoding::BASE64;

/// The default signature tolerance: five minutes either side of now.
///
/// It is the window Standard Webhooks, Stripe and Slack document for their
/// own signatures, so the presets apply it as theirs and the generic
/// `scheme = "hmac"` uses it when `tolerance` is not set: wide enough for
/// ordinary clock skew and queueing, narrow enough to refuse replays of an
/// old captured delivery.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

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

/// A published sender's signature scheme (SPEC §2 "Presets").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresetKind {
    /// Standard Webhooks / Svix: `webhook-*` or `svix-*` headers.
    StandardWebhooks,
    /// Stripe: `Stripe-Signature: t=…,v1=…`.
    Stripe,
    /// GitHub: `X-Hub-Signature-256: sha256=…`.
    Github,
    /// Slack: `X-Slack-Signature: v0=…`.
    Slack,
    /// Shopify: `X-Shopify-Hmac-Sha256: <base64>`.
    Shopify,
}

impl PresetKind {
    /// Every preset with its `scheme` name.
    pub const ALL: [(&'static str, Self); 5] = [
        ("standard-webhooks", Self::StandardWebhooks),
        ("stripe", Self::Stripe),
        ("github", Self::Github),
        ("slack", Self::Slack),
        ("shopify", Self::Shopify),
    ];

    /// The sender's own replay window, if its scheme signs a timestamp.
    pub fn default_tolerance(self) -> Option<Duration> {
        match self {
            Self::StandardWebhooks | Self::Stripe | Self::Slack => Some(DEFAULT_TOLERANCE),
            Self::Github | Self::Shopify => None,
        }
    }

    /// The idempotency key the sender's documentation recommends.
    pub fn default_key(self) -> KeyPart {
        let header = |name: &'static str| {
            KeyPart::Value(Selector::Header(http::HeaderName::from_static(name)))
        };
        match self {
            Self::StandardWebhooks => KeyPart::SignedId,
            Self::Stripe => KeyPart::Value(Selector::Json("/id".into())),
            Self::Github => header("x-github-delivery"),
            Self::Slack => KeyPart::Value(Selector::Json("/event_id".into())),
            Self::Shopify => header("x-shopify-webhook-id"),
        }
    }
}

/// A preset route's parameters: everything else is fixed by the sender.
#[derive(Debug, Clone)]
pub struct Preset {
    /// Which sender.
    pub kind: PresetKind,
    /// MAC keys, in configured order (rotation: any may match). For
    /// standard-webhooks these are the decoded `whsec_` keys.
    pub keys: Vec<Secret>,
    /// Replay window (`None` for senders that sign no timestamp).
    pub tolerance: Option<Duration>,
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
            Self::Preset(problems) => problems.keys.len(),
        }
    }

    /// The signature tolerance, which `retention` must exceed (SPEC §4 rule 8).
    pub fn tolerance(&self) -> Option<Duration> {
        match self {
            Self::None => None,
            Self::Hmac(h) => h.timestamp.as_ref().map(|t| t.tolerance),
            Self::Preset(problems) => problems.tolerance,
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
            for (field, set) in all.into_iter().chain(hmac_only_keys(raw)) {
                if set {
                    problems.push(
                        &format!("{key}.{field}"),
                        "has no effect with scheme = \"none\"",
                    );
                }
            }
            Scheme::None
        }
        "hmac" => Scheme::Hmac(hmac_scheme(problems, key, raw, secrets)),
        name => match PresetKind::ALL.iter().find(|(n, _)| *n == name) {
            Some((_, kind)) => Scheme::Preset(preset(problems, key, raw, *kind, &secrets)),
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
fn hmac_only_keys(raw: &RawSignature) -> [(&'static str, bool); 7] {
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

fn preset(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
    secrets: &[Secret],
) -> Preset {
    for (field, set) in hmac_only_keys(raw) {
        if set {
            problems.push(
                &format!("{key}.{field}"),
                format!(
                    "only for scheme = \"hmac\"; scheme = {:?} fixes it itself",
                    raw.scheme
                ),
            );
        }
    }
    if raw.secrets.is_empty() {
        problems.push(
            &format!("{key}.secrets"),
            "at least one secret is required, e.g. [\"env:WEBHOOK_SECRET\"]",
        );
    }
    let tolerance = match (kind.default_tolerance(), raw.tolerance.as_deref()) {
        (None, Some(_)) => {
            problems.push(
                &format!("{key}.tolerance"),
                format!(
                    "scheme = {:?} signs no timestamp, so there is no window to set",
                    raw.scheme
                ),
            );
            None
        }
        (None, None) => None,
        (Some(default), None) => Some(default),
        (Some(_), Some(text)) => {
            let tolerance =
                problems.duration_or(&format!("{key}.tolerance"), Some(text), DEFAULT_TOLERANCE);
            if tolerance.is_zero() {
                problems.push(&format!("{key}.tolerance"), "must be greater than zero");
            }
            Some(tolerance)
        }
    };
    let keys = match kind {
        PresetKind::StandardWebhooks => secrets
            .iter()
            .enumerate()
            .filter_map(|(i, secret)| {
                problems.take(
                    &format!("{key}.secrets[{i}]"),
                    secret.derived(decode_whsec).map_err(|_| {
                        "a standard-webhooks secret is \"whsec_\" followed by base64".to_owned()
                    }),
                )
            })
            .collect(),
        _ => secrets.to_vec(),
    };
    Preset {
        kind,
        keys,
        tolerance,
    }
}

fn hmac_scheme(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    secrets: Vec<Secret>,
) -> HmacScheme {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConfigError};

    fn preset_route(signature: &str, idempotency: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!(
            "[store]\nkind = \"embedded\"\npath = \"/tmp/x.redb\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
             [[route]]\nname = \"hook\"\npath_prefix = \"/hook\"\n[route.signature]\n{signature}\n[route.idempotency]\n{idempotency}\n"
        ))
    }

    #[test]
    fn presets_fix_their_own_parameters() {
        let config =
            preset_route("scheme = \"stripe\"\nsecrets = [\"literal:whsec_x\"]", "").unwrap();
        let route = &config.routes[0];
        assert_eq!(
            route.idempotency.key,
            Some(vec![KeyPart::Value(Selector::Json("/id".into()))])
        );
        assert_eq!(route.scheme.tolerance(), Some(Duration::from_secs(300)));

        let err = preset_route(
            "scheme = \"github\"\nsecrets = [\"literal:x\"]\nalgorithm = \"sha512\"\nmessage = \"{body}\"\ntolerance = \"1m\"",
            "",
        )
        .unwrap_err()
        .0
        .join("\n");
        assert!(
            err.contains("route[0].signature.algorithm: only for scheme = \"hmac\""),
            "{err}"
        );
        assert!(
            err.contains("route[0].signature.message: only for scheme = \"hmac\""),
            "{err}"
        );
        assert!(
            err.contains("route[0].signature.tolerance: scheme = \"github\" signs no timestamp"),
            "{err}"
        );

        let err = preset_route(
            "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_***\"]",
            "",
        )
        .unwrap_err();
        assert!(
            err.0[0].starts_with("route[0].signature.secrets[0]"),
            "{err}"
        );
        let err = preset_route("scheme = \"paypal\"\nsecrets = [\"literal:x\"]", "").unwrap_err();
        assert!(
            err.0[0].contains("stripe"),
            "the error lists the presets: {err}"
        );
    }

    #[test]
    fn preset_default_keys_can_be_overridden() {
        let config = preset_route(
            "scheme = \"shopify\"\nsecrets = [\"literal:x\"]",
            "key = [\"header:X-Shopify-Event-Id\"]",
        )
        .unwrap();
        assert_eq!(
            config.routes[0].idempotency.key,
            Some(vec![KeyPart::Value(
                Selector::parse("header:x-shopify-event-id").unwrap()
            )])
        );
        let sw = preset_route(
            "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_AAAA\"]",
            "",
        )
        .unwrap();
        assert_eq!(sw.routes[0].idempotency.key, Some(vec![KeyPart::SignedId]));
    }

    #[test]
    fn presets_without_a_window_warn() {
        for scheme in ["github", "shopify"] {
            let config = preset_route(
                &format!("scheme = \"{scheme}\"\nsecrets = [\"literal:x\"]"),
                "",
            )
            .unwrap();
            let warnings = config.warnings().join("\n");
            assert!(
                warnings.contains("rests on retention"),
                "{scheme}: {warnings}"
            );
        }
        let slack = preset_route("scheme = \"slack\"\nsecrets = [\"literal:x\"]", "").unwrap();
        assert!(slack.warnings().is_empty());
    }

    #[test]
    fn secrets_with_and_without_prefix_are_the_same_key() {
        assert_eq!(
            decode_whsec(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            decode_whsec(b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        );
        assert_eq!(decode_whsec(b"whsec_!!!"), None);
        assert_eq!(decode_whsec(b"whsec_"), None);
    }
}
