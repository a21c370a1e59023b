//! How key parts are joined (contract §2): each part preceded by its
//! length, so no two joins read alike, and the SHA-256 of that join, the
//! key hash. A leaf: the delivery's key (`identify`), its entity
//! (`entity`) and the admin API's record names all use it.

use sha2::{Digest, Sha256};

/// Longest accepted key part, in bytes.
pub const MAX_KEY_PART: usize = 255;

/// The 4-byte length contract §2 puts before each joined part. Parts come out
/// of a request bounded by `max_body_bytes` and the header limits, far
/// below 4 GiB; a longer one would saturate, never wrap to a small length
/// that could make two joins read alike.
pub(in crate::pipeline) fn length_prefix(part: &[u8]) -> u32 {
    u32::try_from(part.len()).unwrap_or(u32::MAX)
}

/// SHA-256 over key parts, each preceded by its length as 4 bytes
/// big-endian: the unambiguous join of contract §2. The admin API uses it to
/// find a record from the key an operator knows.
pub fn hash_key_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(length_prefix(part).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}
