//! Text encodings shared by the configuration (decoding `whsec_` secrets)
//! and signature verification (decoding presented signatures).
//!
//! A base module of its own so that neither of those layers has to import
//! the other for one constant.

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Standard base64 that accepts input with or without `=` padding.
pub(crate) const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
