//! The published senders' schemes (SPEC §2 "Presets"): which credential
//! each needs, its window, and its default key and fingerprint.
//!
//! A preset fixes every signature parameter itself; the operator gives
//! only credentials (`secrets`, or `public_keys` for the RSA senders) and,
//! for Twilio, the `public_url` the sender called. The defaults here are
//! the documented choices of `tests/vectors/payments/ALGORITHMS.md`: keys
//! read only signed fields, stay the same across a sender's retries of one
//! state change and differ between events of one payment; fingerprints
//! leave out what every retry changes, so a genuine retry is a replay.

use std::time::Duration;

use super::public_key::{PublicKeys, RawPublicKey};
use super::raw::RawSignature;
use super::scheme::{DEFAULT_TOLERANCE, decode_whsec, hmac_only_keys};
use super::validate::Problems;
use super::{KeyPart, Secret, Selector};

/// A published sender's signature scheme.
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
    /// Alipay: RSA2 over the sorted form parameters.
    Alipay,
    /// WeChat Pay API v2: MD5 or HMAC-SHA256 inside the XML body.
    WechatpayV2,
    /// WeChat Pay API v3: SHA256withRSA over `timestamp\nnonce\nbody\n`.
    WechatpayV3,
    /// Adyen: HMAC-SHA256 (hex key) over eight fields of every item.
    Adyen,
    /// Twilio: HMAC-SHA1 over the public URL and sorted POST parameters.
    Twilio,
}

/// What a preset verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// Shared secrets (`secrets`).
    Secrets,
    /// RSA public keys (`public_keys`).
    PublicKeys,
}

impl PresetKind {
    /// Every preset with its `scheme` name.
    pub const ALL: [(&'static str, Self); 10] = [
        ("standard-webhooks", Self::StandardWebhooks),
        ("stripe", Self::Stripe),
        ("github", Self::Github),
        ("slack", Self::Slack),
        ("shopify", Self::Shopify),
        ("alipay", Self::Alipay),
        ("wechatpay-v2", Self::WechatpayV2),
        ("wechatpay-v3", Self::WechatpayV3),
        ("adyen", Self::Adyen),
        ("twilio", Self::Twilio),
    ];

    /// The `scheme` name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("?", |(name, _)| name)
    }

    /// The sender's own replay window, if its scheme signs a timestamp.
    pub fn default_tolerance(self) -> Option<Duration> {
        match self {
            Self::StandardWebhooks | Self::Stripe | Self::Slack | Self::WechatpayV3 => {
                Some(DEFAULT_TOLERANCE)
            }
            Self::Github
            | Self::Shopify
            | Self::Alipay
            | Self::WechatpayV2
            | Self::Adyen
            | Self::Twilio => None,
        }
    }

    /// How long the sender keeps retrying a delivery it saw no
    /// acknowledgement for, as its documentation gives it: a record must
    /// outlive this, or a late retry of a delivery the handler already
    /// executed runs again. Stripe: up to three days (live mode); Alipay:
    /// 4m, 10m, 10m, 1h, 2h, 6h, 15h, about 25 hours; WeChat Pay (v2 and
    /// v3): 15s … 6h, 24h4m in all; Adyen's retry queue: up to 30 days.
    /// `None`: no documented retries beyond a few minutes, or none known.
    pub fn retry_horizon(self) -> Option<Duration> {
        const HOUR: u64 = 3600;
        let hours = |h: u64| Some(Duration::from_secs(h * HOUR));
        match self {
            Self::Stripe => hours(72),
            Self::Alipay => hours(25),
            Self::WechatpayV2 | Self::WechatpayV3 => Some(Duration::from_secs(24 * HOUR + 4 * 60)),
            Self::Adyen => hours(30 * 24),
            Self::StandardWebhooks | Self::Github | Self::Slack | Self::Shopify | Self::Twilio => {
                None
            }
        }
    }

    /// The retention a route gets when it sets none: a day past the
    /// sender's retry horizon, so every documented retry finds its record.
    /// `None`: the global default (`24h`).
    pub fn default_retention(self) -> Option<Duration> {
        self.retry_horizon()
            .map(|horizon| horizon + Duration::from_secs(24 * 3600))
    }

    /// What the preset verifies with.
    pub fn credential(self) -> Credential {
        match self {
            Self::Alipay | Self::WechatpayV3 => Credential::PublicKeys,
            _ => Credential::Secrets,
        }
    }

    /// The default idempotency key: a signed field the sender documents
    /// as the event id, or the event id the preset derives from signed
    /// content (`KeyPart::SignedId`). GitHub's `X-GitHub-Delivery` and
    /// Shopify's `X-Shopify-Webhook-Id` are unsigned and neither sender
    /// signs a timestamp, so their key is the signed body itself; Twilio's
    /// is its whole signed content, since its `I-Twilio-Idempotency-Token`
    /// is unsigned.
    pub fn default_key(self) -> KeyPart {
        match self {
            Self::StandardWebhooks
            | Self::Github
            | Self::Shopify
            | Self::Alipay
            | Self::WechatpayV2
            | Self::Adyen
            | Self::Twilio => KeyPart::SignedId,
            Self::Stripe | Self::WechatpayV3 => KeyPart::Value(Selector::Json("/id".into())),
            Self::Slack => KeyPart::Value(Selector::Json("/event_id".into())),
        }
    }

    /// Body fields every retry of one event changes, left out of the
    /// default fingerprint so a genuine retry is a replay, never a 422.
    pub fn default_fingerprint_ignore(self) -> Vec<Selector> {
        let form = |names: &[&str]| names.iter().map(|n| Selector::Form((*n).into())).collect();
        let xml = |names: &[&str]| {
            names
                .iter()
                .map(|n| Selector::Xml(format!("/xml/{n}")))
                .collect()
        };
        match self {
            Self::Alipay => form(&["notify_id", "notify_time", "sign"]),
            Self::WechatpayV2 => xml(&["nonce_str", "sign"]),
            _ => Vec::new(),
        }
    }
}

impl PresetKind {
    /// Whether the channel's signature covers what `selector` reads, for
    /// the payment channels, which sign fields one by one (`None`: a
    /// webhook platform, which signs the body whole:
    /// `crate::config::coverage` classifies those).
    pub fn signs(self, selector: &Selector) -> Option<bool> {
        const ADYEN_SIGNED: [&str; 8] = [
            "pspReference",
            "originalReference",
            "merchantAccountCode",
            "merchantReference",
            "amount/value",
            "amount/currency",
            "eventCode",
            "success",
        ];
        Some(match (self, selector) {
            (Self::Alipay, Selector::Form(name)) => name != "sign" && name != "sign_type",
            (Self::WechatpayV2, Selector::Xml(path)) => path
                .strip_prefix("/xml/")
                .is_some_and(|name| !name.contains('/') && name != "sign"),
            (Self::Adyen, Selector::Json(pointer)) => {
                let mut steps = pointer.splitn(4, '/').skip(1);
                steps.next() == Some("notificationItems")
                    && steps.next().is_some_and(|i| i.parse::<usize>().is_ok())
                    && steps
                        .next()
                        .and_then(|rest| rest.strip_prefix("NotificationRequestItem/"))
                        .is_some_and(|field| ADYEN_SIGNED.contains(&field))
            }
            // WeChat Pay v3 signs the whole body; Twilio the URL (so the
            // query) and, for a JSON body, the body's hash. Twilio's form
            // parameters are signed only joined without separators, so a
            // boundary can move (`Sid=SM1&To=x` re-sent as `Sid=SM1T&o=x`
            // keeps the signature): one parameter's value is not signed.
            (Self::WechatpayV3, Selector::Json(_))
            | (Self::Twilio, Selector::Query(_) | Selector::Json(_)) => true,
            (
                Self::Alipay | Self::WechatpayV2 | Self::WechatpayV3 | Self::Adyen | Self::Twilio,
                _,
            ) => false,
            _ => return None,
        })
    }
}

/// A preset route's parameters: everything else is fixed by the sender.
#[derive(Debug, Clone)]
pub struct Preset {
    /// Which sender.
    pub kind: PresetKind,
    /// MAC keys, in configured order (rotation: any may match). For
    /// standard-webhooks these are the decoded `whsec_` keys, for adyen the
    /// hex-decoded keys. Empty for the RSA presets.
    pub keys: Vec<Secret>,
    /// RSA public keys (alipay, wechatpay-v3); empty for the others.
    pub public_keys: PublicKeys,
    /// Replay window (`None` for senders that sign no timestamp).
    pub tolerance: Option<Duration>,
    /// Scheme, host and optional path prefix the sender called (twilio),
    /// without a trailing `/`.
    pub public_url: Option<String>,
    /// Whether Alipay's SHA1withRSA (`sign_type=RSA`) is accepted.
    pub allow_rsa1: bool,
}

impl Preset {
    /// How many credentials are tried (the range of the logged index).
    pub fn credential_count(&self) -> usize {
        match self.kind.credential() {
            Credential::Secrets => self.keys.len(),
            Credential::PublicKeys => self.public_keys.len(),
        }
    }
}

/// The `[route.signature]` keys only some presets read, and whether each
/// is set (an error with `scheme = "hmac"` or `"none"`).
pub(super) fn preset_only_keys(raw: &RawSignature) -> [(&'static str, bool); 3] {
    [
        ("public_keys", !raw.public_keys.is_empty()),
        ("public_url", raw.public_url.is_some()),
        ("allow_rsa1", raw.allow_rsa1.is_some()),
    ]
}

pub(super) fn preset(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
    secrets: &[Secret],
) -> Preset {
    let name = &raw.scheme;
    for (field, set) in hmac_only_keys(raw) {
        if set {
            problems.push(
                &format!("{key}.{field}"),
                format!("only for scheme = \"hmac\"; scheme = {name:?} fixes it itself"),
            );
        }
    }
    let public_keys = credentials(problems, key, raw, kind);
    let tolerance = tolerance(problems, key, raw, kind);
    let keys = match kind {
        PresetKind::StandardWebhooks => derived(
            problems,
            key,
            secrets,
            decode_whsec,
            "a standard-webhooks secret is \"whsec_\" followed by base64",
        ),
        PresetKind::Adyen => derived(
            problems,
            key,
            secrets,
            decode_hex_key,
            "an adyen HMAC key is hex, as the Customer Area shows it",
        ),
        _ => secrets.to_vec(),
    };
    let public_url = match (kind, raw.public_url.as_deref()) {
        (PresetKind::Twilio, Some(text)) => {
            problems.take(&format!("{key}.public_url"), parse_public_url(text))
        }
        (PresetKind::Twilio, None) => {
            problems.push(
                &format!("{key}.public_url"),
                "required with scheme = \"twilio\": the scheme and host the sender calls, e.g. \"https://hooks.example.com\" (Twilio signs the full URL, and idemgate sees only its own address)",
            );
            None
        }
        (_, Some(_)) => {
            problems.push(
                &format!("{key}.public_url"),
                format!("only for scheme = \"twilio\"; scheme = {name:?} does not sign the URL"),
            );
            None
        }
        (_, None) => None,
    };
    if raw.allow_rsa1.is_some() && kind != PresetKind::Alipay {
        problems.push(
            &format!("{key}.allow_rsa1"),
            format!("only for scheme = \"alipay\"; scheme = {name:?} has no RSA1 sign type"),
        );
    }
    Preset {
        kind,
        keys,
        public_keys,
        tolerance,
        public_url,
        allow_rsa1: raw.allow_rsa1.unwrap_or(false),
    }
}

/// Checks that the preset got the credential it verifies with, and only
/// that one; resolves the public keys.
fn credentials(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
) -> PublicKeys {
    let name = &raw.scheme;
    let empty = || PublicKeys::resolve(&[]).expect("no keys, no errors");
    match kind.credential() {
        Credential::Secrets => {
            if raw.secrets.is_empty() {
                problems.push(
                    &format!("{key}.secrets"),
                    "at least one secret is required, e.g. [\"env:WEBHOOK_SECRET\"]",
                );
            }
            if !raw.public_keys.is_empty() {
                problems.push(
                    &format!("{key}.public_keys"),
                    format!("scheme = {name:?} verifies with secrets, not public keys"),
                );
            }
            empty()
        }
        Credential::PublicKeys => {
            if !raw.secrets.is_empty() {
                problems.push(
                    &format!("{key}.secrets"),
                    format!(
                        "scheme = {name:?} verifies RSA signatures with public_keys, not secrets"
                    ),
                );
            }
            if raw.public_keys.is_empty() {
                problems.push(
                    &format!("{key}.public_keys"),
                    "at least one public key is required, e.g. [\"file:/etc/idemgate/sender_public_key.pem\"]",
                );
            }
            match PublicKeys::resolve(&raw.public_keys) {
                Ok(keys) => keys,
                Err(errors) => {
                    for (index, error) in errors {
                        let source = match &raw.public_keys[index] {
                            RawPublicKey::Source(s) | RawPublicKey::Bound { key: s, .. } => s,
                        };
                        let shown = if source.starts_with("literal:") {
                            "literal"
                        } else {
                            source
                        };
                        problems.push(
                            &format!("{key}.public_keys[{index}]"),
                            format!("{shown}: {error}"),
                        );
                    }
                    empty()
                }
            }
        }
    }
}

fn tolerance(
    problems: &mut Problems,
    key: &str,
    raw: &RawSignature,
    kind: PresetKind,
) -> Option<Duration> {
    match (kind.default_tolerance(), raw.tolerance.as_deref()) {
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
    }
}

fn derived(
    problems: &mut Problems,
    key: &str,
    secrets: &[Secret],
    derive: super::secret::Derivation,
    hint: &str,
) -> Vec<Secret> {
    secrets
        .iter()
        .enumerate()
        .filter_map(|(i, secret)| {
            problems.take(
                &format!("{key}.secrets[{i}]"),
                secret.derived(derive).map_err(|_| hint.to_owned()),
            )
        })
        .collect()
}

/// Decodes an Adyen HMAC key (hex, as the Customer Area shows it) into
/// MAC key bytes, as its libraries do before computing the HMAC.
pub fn decode_hex_key(text: &[u8]) -> Option<Vec<u8>> {
    hex::decode(text.trim_ascii())
        .ok()
        .filter(|key| !key.is_empty())
}

/// Checks `public_url`: `http(s)://host[:port][/prefix]`, nothing after
/// and no credentials (errors quote it redacted).
fn parse_public_url(text: &str) -> Result<String, String> {
    let shown = super::redact_url(text);
    let uri: http::Uri = text
        .parse()
        .map_err(|_| format!("{shown:?} is not a URL"))?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(format!(
            "{shown:?}: remove the user and password; public_url holds only scheme, host and an optional path prefix"
        ));
    }
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    if !scheme_ok || uri.host().is_none_or(str::is_empty) {
        return Err(format!(
            "{shown:?} must be an http(s) URL with a host, e.g. \"https://hooks.example.com\""
        ));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!(
            "{shown:?}: only scheme, host and an optional path prefix; the request's own path and query are appended"
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests;
