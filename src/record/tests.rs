//! Round trips, layout pins and malformed input for the record encoding.
use super::*;
use proptest::prelude::*;

#[test]
fn fields_too_long_for_their_prefix_are_refused_not_truncated() {
    let answer = |headers: Vec<(Bytes, Bytes)>| {
        sample(RecordState::Completed(StoredResponse {
            status: 200,
            headers,
            body: StoredBody::Kept(Bytes::new()),
        }))
    };
    let long_name = Bytes::from(vec![b'x'; usize::from(u16::MAX) + 1]);
    assert_eq!(
        answer(vec![(long_name, Bytes::new())]).encode(),
        Err(TooLong {
            field: "header name",
            len: 65_536
        })
    );
    let many = vec![(Bytes::from_static(b"x-a"), Bytes::new()); usize::from(u16::MAX) + 1];
    assert_eq!(answer(many).encode().unwrap_err().field, "header count");
    let longest_name = Bytes::from(vec![b'x'; usize::from(u16::MAX)]);
    let fits = answer(vec![(longest_name, Bytes::new())]);
    assert_eq!(Record::decode(&fits.encode().unwrap()), Ok(fits));
}

#[test]
fn round_trips_every_state() {
    let completed = RecordState::Completed(StoredResponse {
        status: 201,
        headers: vec![
            (
                Bytes::from_static(b"content-type"),
                Bytes::from_static(b"text/plain"),
            ),
            (Bytes::from_static(b"x-a"), Bytes::new()),
        ],
        body: StoredBody::Kept(Bytes::from_static(b"success")),
    });
    let not_stored = RecordState::Completed(StoredResponse {
        status: 200,
        headers: vec![(
            Bytes::from_static(b"content-type"),
            Bytes::from_static(b"application/pdf"),
        )],
        body: StoredBody::TooLarge,
    });
    for state in [
        RecordState::InFlight(Default::default()),
        RecordState::Unknown,
        completed,
        not_stored,
    ] {
        let record = sample(state);
        assert_eq!(Record::decode(&record.encode().unwrap()), Ok(record));
    }
}

#[test]
fn owner_sits_where_the_scripts_read_it() {
    let encoded = sample(RecordState::InFlight(Default::default()))
        .encode()
        .unwrap();
    assert_eq!(&encoded[OWNER_RANGE], &[7u8; 16]);
}

#[test]
fn rejects_foreign_and_truncated_values() {
    let encoded = sample(RecordState::InFlight(Default::default()))
        .encode()
        .unwrap();
    let mut foreign = encoded.to_vec();
    foreign[0] = 9;
    assert_eq!(
        Record::decode(&Bytes::from(foreign)),
        Err(DecodeError::Version(9))
    );
    assert_eq!(
        Record::decode(&encoded.slice(..20)),
        Err(DecodeError::Truncated)
    );
    assert_eq!(Record::decode(&Bytes::new()), Err(DecodeError::Truncated));
}

#[test]
fn trace_and_answer_time_round_trip() {
    let mut record = sample(RecordState::Unknown);
    record.answered_at_ms = 1_700_000_000_500;
    record.trace = TraceContext::new([3; 16], [4; 8], true);
    assert_eq!(Record::decode(&record.encode().unwrap()), Ok(record));
}

/// An in-flight record keeps its claim's hold after the key value; one
/// without (an older build's) still reads, as "no hold of its own".
#[test]
fn an_in_flight_record_keeps_its_claims_hold() {
    let hold = std::time::Duration::from_millis(90_500);
    let record = sample(RecordState::InFlight(Default::default()))
        .with_key(Some(b"evt_9"))
        .with_hold(hold);
    assert_eq!(record.state, RecordState::InFlight(ClaimHold(Some(hold))));
    let encoded = record.encode().unwrap();
    assert_eq!(&encoded[encoded.len() - 4..], &90_500u32.to_be_bytes());
    assert_eq!(Record::decode(&encoded), Ok(record.clone()));
    let without = Record::decode(&encoded.slice(..encoded.len() - 4)).unwrap();
    assert_eq!(without.state, RecordState::InFlight(ClaimHold(None)));
    assert_eq!(
        Record::decode(&encoded.slice(..encoded.len() - 1)),
        Err(DecodeError::Trailing),
        "three bytes are not a hold"
    );
    let completed = record.with_state(RecordState::Unknown);
    assert_eq!(
        completed.clone().with_hold(hold),
        completed,
        "only a claim has one"
    );
}

#[test]
fn key_value_round_trips_and_is_capped() {
    for state in [
        RecordState::InFlight(Default::default()),
        RecordState::Unknown,
    ] {
        let record = sample(state).with_key(Some(b"evt_123"));
        assert_eq!(record.key.as_deref(), Some(&b"evt_123"[..]));
        assert_eq!(Record::decode(&record.encode().unwrap()), Ok(record));
    }
    let completed = sample(RecordState::Completed(StoredResponse {
        status: 201,
        headers: vec![(Bytes::from_static(b"x-a"), Bytes::from_static(b"1"))],
        body: StoredBody::Kept(Bytes::from_static(b"ok")),
    }))
    .with_key(Some(&[b'k'; MAX_STORED_KEY]));
    let encoded = completed.encode().unwrap();
    assert_eq!(
        &encoded[91..93],
        &u16::try_from(MAX_STORED_KEY).unwrap().to_be_bytes()
    );
    assert_eq!(Record::decode(&encoded), Ok(completed.clone()));
    // Longer than the cap: no key kept, and a later state keeps the key.
    let long = sample(RecordState::InFlight(Default::default()))
        .with_key(Some(&[b'k'; MAX_STORED_KEY + 1]));
    assert_eq!(long.key, None);
    assert_eq!(
        completed.with_state(RecordState::Unknown).key,
        completed.key
    );
}

#[test]
fn version_2_records_are_still_read() {
    // A version 2 record, as the previous build wrote it: the header up to
    // the span id (no key length), then the completed answer.
    let mut v2 = vec![2u8, 2];
    v2.extend([7u8; 16]);
    v2.extend([9u8; 32]);
    v2.extend(1_700_000_000_000u64.to_be_bytes());
    v2.extend(1_700_000_000_500u64.to_be_bytes());
    v2.push(0b11);
    v2.extend([3u8; 16]);
    v2.extend([4u8; 8]);
    v2.extend(201u16.to_be_bytes());
    v2.extend(0u16.to_be_bytes());
    v2.extend(2u32.to_be_bytes());
    v2.extend(b"ok");
    let decoded = Record::decode(&Bytes::from(v2)).unwrap();
    assert_eq!(decoded.key, None);
    assert_eq!(decoded.answered_at_ms, 1_700_000_000_500);
    assert_eq!(decoded.trace, TraceContext::new([3; 16], [4; 8], true));
    assert_eq!(
        decoded.state,
        RecordState::Completed(StoredResponse {
            status: 201,
            headers: vec![],
            body: StoredBody::Kept(Bytes::from_static(b"ok")),
        })
    );
    let unknown_v2 = [&[2u8, 3][..], &[0; 89]].concat();
    assert_eq!(
        Record::decode(&Bytes::from(unknown_v2)).map(|r| (r.key, r.state)),
        Ok((None, RecordState::Unknown))
    );
    // Version 3 with a key length past the end is truncated.
    let mut short = sample(RecordState::InFlight(Default::default()))
        .encode()
        .unwrap()
        .to_vec();
    short[92] = 5;
    assert_eq!(
        Record::decode(&Bytes::from(short)),
        Err(DecodeError::Truncated)
    );
}

#[test]
fn version_1_records_are_still_read() {
    // A version 1 record, as the previous build wrote it: the header
    // without bytes 58..91, then the completed answer.
    let mut v1 = vec![1u8, 2];
    v1.extend([7u8; 16]);
    v1.extend([9u8; 32]);
    v1.extend(1_700_000_000_000u64.to_be_bytes());
    v1.extend(201u16.to_be_bytes());
    v1.extend(0u16.to_be_bytes());
    v1.extend(2u32.to_be_bytes());
    v1.extend(b"ok");
    let decoded = Record::decode(&Bytes::from(v1)).unwrap();
    assert_eq!(
        decoded.answered_at_ms, 1_700_000_000_000,
        "answered = created"
    );
    assert_eq!(decoded.trace, None);
    assert_eq!(
        decoded.state,
        RecordState::Completed(StoredResponse {
            status: 201,
            headers: vec![],
            body: StoredBody::Kept(Bytes::from_static(b"ok")),
        })
    );
    let in_flight_with_tail = [&[1u8, 1][..], &[0; 56], &[0]].concat();
    assert_eq!(
        Record::decode(&Bytes::from(in_flight_with_tail)),
        Err(DecodeError::Trailing)
    );
}

#[test]
fn only_a_new_answer_stamps_the_answer_time() {
    let claimed = Record::in_flight(OwnerToken([1; 16]), Fingerprint([2; 32]), None);
    let mut old = claimed.clone();
    old.answered_at_ms = 5;
    let completed = old.with_state(RecordState::Completed(StoredResponse {
        status: 200,
        headers: vec![],
        body: StoredBody::Kept(Bytes::new()),
    }));
    assert!(completed.answered_at_ms >= claimed.created_at_ms, "stamped");
    assert_eq!(
        old.with_state(RecordState::Unknown).answered_at_ms,
        5,
        "no answer"
    );
    assert_eq!(
        completed.answer_age_secs(completed.answered_at_ms + 2_999),
        2
    );
    assert_eq!(completed.answer_age_secs(0), 0, "a clock that went back");
}

#[test]
fn a_not_stored_answer_carries_no_body() {
    let kept = sample(RecordState::Completed(StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: StoredBody::Kept(Bytes::from_static(b"x")),
    }));
    let mut encoded = kept.encode().unwrap().to_vec();
    assert_eq!(encoded[1], 2);
    encoded[1] = 4;
    assert_eq!(
        Record::decode(&Bytes::from(encoded)),
        Err(DecodeError::Trailing)
    );
}

#[test]
fn tokens_are_unique() {
    let mint = OwnerMint::new();
    assert_ne!(mint.next(), mint.next());
    assert_ne!(OwnerMint::new().next(), OwnerMint::new().next());
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Record::decode(&Bytes::from(bytes));
    }

    #[test]
    fn decode_never_panics_on_valid_prefixes(tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        for state in [2, 4] {
            let mut bytes = sample(RecordState::InFlight(Default::default())).encode().unwrap().to_vec();
            bytes[1] = state;
            bytes.extend(&tail);
            let _ = Record::decode(&Bytes::from(bytes));
        }
    }

    #[test]
    fn completed_round_trip(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..300),
                            value in proptest::collection::vec(any::<u8>(), 0..40)) {
        let record = sample(RecordState::Completed(StoredResponse {
            status,
            headers: vec![(Bytes::from_static(b"x-v"), Bytes::from(value))],
            body: StoredBody::Kept(Bytes::from(body)),
        }));
        prop_assert_eq!(Record::decode(&record.encode().unwrap()), Ok(record));
    }
}

/// The v3 record lengths `bench/record-bytes` measures Redis memory for
/// (bench/RESULTS.md, "Redis memory per completed key"): a completed
/// record holding the channel's acknowledgement with a `date` and,
/// where sent, a `content-type` header, and the event id as key value
/// where the preset's key is single-part.
#[test]
fn v3_lengths_of_the_preset_acknowledgements() {
    let date = (
        Bytes::from_static(b"date"),
        Bytes::from_static(b"Fri, 04 Dec 2026 12:16:10 GMT"),
    );
    let length = |key: usize, content_type: Option<&'static str>, body: &'static str| {
        let mut headers = vec![date.clone()];
        headers.extend(content_type.map(|value| {
            (
                Bytes::from_static(b"content-type"),
                Bytes::from_static(value.as_bytes()),
            )
        }));
        let record = sample(RecordState::Completed(StoredResponse {
            status: 200,
            headers,
            body: StoredBody::Kept(Bytes::from_static(body.as_bytes())),
        }))
        .with_key(Some(&vec![b'k'; key]).filter(|_| key > 0).map(|k| &k[..]));
        record.encode().unwrap().len()
    };
    let wechat = "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>";
    assert_eq!(
        length(28, Some("application/json"), r#"{"received":true}"#),
        219
    );
    assert_eq!(length(0, Some("text/plain;charset=utf-8"), "success"), 189);
    assert_eq!(length(0, Some("text/xml"), wechat), 262);
    assert_eq!(length(36, None, ""), 176);
    assert_eq!(length(0, Some("text/plain"), "[accepted]"), 178);
    assert_eq!(length(0, Some("text/xml"), "<Response/>"), 177);
    assert_eq!(length(0, None, ""), 140);
}
