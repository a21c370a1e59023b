//! How a route authenticates deliveries: the [`Scheme`] a route verifies
//! with and the parameters of the generic `scheme = "hmac"`.
//!
//! These are the validated forms the verifiers read (`super::verify`);
//! turning `[route.signature]` into them, with every error naming its key,
//! is `crate::config`'s job. The published senders' schemes are
//! [`super::Preset`]s (`preset.rs`).

use std::time::Duration;

use super::{Preset, Secret};
use crate::extract::{Selector, Template};

/// The default signature tolerance: five minutes either side of now.
///
/// It is the window Standard Webhooks, Stripe and Slack document for their
/// own signatures, so the presets apply it as theirs and the generic
/// `scheme = "hmac"` uses it when `tolerance` is not set: wide enough for
/// ordinary clock skew and queueing, narrow enough to refuse replays of an
/// old captured delivery.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

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

    /// The signature tolerance, which `retention` must exceed (contract §4 rule 8).
    pub fn tolerance(&self) -> Option<Duration> {
        match self {
            Self::None => None,
            Self::Hmac(h) => h.timestamp.as_ref().map(|t| t.tolerance),
            Self::Preset(preset) => preset.tolerance,
        }
    }
}
