//! The published senders' schemes (contract §2 "Presets"): which credential
//! each needs, its window, its retries, its default key and fingerprint,
//! which fields it signs, and how strong and in which form its keys are.
//!
//! A preset fixes every signature parameter itself; the operator gives
//! only credentials (`secrets`, or `public_keys` for the RSA senders) and,
//! for Twilio, the `public_url` the sender called. The defaults here are
//! the documented choices of `tests/vectors/payments/ALGORITHMS.md`: keys
//! read only signed fields, stay the same across a sender's retries of one
//! state change and differ between events of one payment; fingerprints
//! leave out what every retry changes, so a genuine retry is a replay.
//!
//! This is what idemgate knows about each sender; reading a route's
//! `[route.signature]` into a [`Preset`] (and refusing what a sender does
//! not take) is `crate::config`'s.

use std::time::Duration;

use base64::Engine;

use super::{DEFAULT_TOLERANCE, PublicKeys, Secret, Strength};
use crate::encoding::BASE64;
use crate::extract::Selector;

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
    /// content ([`EventId::Signed`]). GitHub's `X-GitHub-Delivery` and
    /// Shopify's `X-Shopify-Webhook-Id` are unsigned and neither sender
    /// signs a timestamp, so their key is the signed body itself; Twilio's
    /// is its whole signed content, since its `I-Twilio-Idempotency-Token`
    /// is unsigned.
    pub fn default_key(self) -> EventId {
        match self {
            Self::StandardWebhooks
            | Self::Github
            | Self::Shopify
            | Self::Alipay
            | Self::WechatpayV2
            | Self::Adyen
            | Self::Twilio => EventId::Signed,
            Self::Stripe | Self::WechatpayV3 => EventId::Field(Selector::Json("/id".into())),
            Self::Slack => EventId::Field(Selector::Json("/event_id".into())),
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
    /// webhook platform, which signs the body whole).
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

/// Where a preset's event id comes from: its default idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventId {
    /// A signed field the sender documents as the event id.
    Field(Selector),
    /// The id the signature covers, or the one the preset derives from
    /// signed content ([`super::Authenticity::signed_id`]).
    Signed,
}

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

/// Decodes a Standard Webhooks `whsec_…` secret (or a bare base64 key)
/// into MAC key bytes, once when the configuration is loaded and again on
/// each reload, so verification never sees the text form.
pub fn decode_whsec(text: &[u8]) -> Option<Vec<u8>> {
    let encoded = text.strip_prefix(b"whsec_").unwrap_or(text);
    BASE64.decode(encoded).ok().filter(|key| !key.is_empty())
}

/// Decodes an Adyen HMAC key (hex, as the Customer Area shows it) into
/// MAC key bytes, as its libraries do before computing the HMAC.
pub fn decode_hex_key(text: &[u8]) -> Option<Vec<u8>> {
    hex::decode(text.trim_ascii())
        .ok()
        .filter(|key| !key.is_empty())
}
