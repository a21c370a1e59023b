//! `Record::decode` on arbitrary bytes: the versioned record encoding both
//! stores share (a value read back from Redis or redb is untrusted: it may
//! be corrupt, truncated, or written by another version).
//!
//! Properties checked besides "never panics": whenever a value decodes,
//! `encode()` of the record gives back exactly the same bytes (the layout
//! is canonical), and decoding those gives the same record again.

#![no_main]

use bytes::Bytes;
use idemgate::record::Record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let Ok(record) = Record::decode(&bytes) else {
        return;
    };
    // A decoded record's lengths came out of their own prefixes: it fits.
    let encoded = record.encode().expect("a decoded record encodes");
    assert_eq!(
        Record::decode(&encoded).as_ref(),
        Ok(&record),
        "decode(encode(record)) differs from record"
    );
    assert_eq!(encoded, bytes, "encode(decode(bytes)) differs from bytes");
    // The fixed-offset owner token the Lua scripts compare.
    assert_eq!(&encoded[idemgate::record::OWNER_RANGE], &record.owner.0);
});
