//! The compact layout: which answers it takes, its size, byte-exact
//! replays, a changed acknowledgement, and malformed input.
use super::*;
use crate::record::sample;
use proptest::prelude::*;

/// 2023-11-14T22:13:20Z, the sample record's times.
const ANSWERED_MS: u64 = 1_700_000_000_000;

fn header(name: &'static str, value: &str) -> (Bytes, Bytes) {
    (
        Bytes::from_static(name.as_bytes()),
        Bytes::copy_from_slice(value.as_bytes()),
    )
}

/// Adyen's acknowledgement as `[route.inbox]` configures it.
fn adyen() -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: vec![header("content-type", "text/plain")],
        body: StoredBody::Kept(Bytes::from_static(b"[accepted]")),
    }
}

/// `ack` as an upstream sends it, with `date` (IMF-fixdate) at `at`.
fn answered(ack: &StoredResponse, date: &str, at: usize) -> StoredResponse {
    let mut answer = ack.clone();
    answer.headers.insert(at, header("date", date));
    answer
}

fn completed(answer: StoredResponse) -> Record {
    sample(RecordState::Completed(answer))
}

const DATE: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

#[test]
fn an_answer_equal_to_the_ack_is_sixty_bytes_and_replays_identical_bytes() {
    for at in [0, 1] {
        let answer = answered(&adyen(), DATE, at);
        let record = completed(answer.clone()).compacted(Some(&adyen()));
        let bytes = record.encode().unwrap();
        assert_eq!(bytes.len(), ENCODED_LEN);
        assert_eq!(bytes.len(), 60);
        assert_eq!(bytes[0], VERSION_4);
        assert_eq!(bytes[1], 2, "state byte where claim.lua reads it");
        assert_eq!(
            &bytes[OWNER_RANGE], &record.owner.0,
            "where the scripts fence"
        );
        let decoded = Record::decode(&bytes).unwrap();
        assert_eq!(decoded.fingerprint, record.fingerprint);
        assert_eq!(decoded.answered_at_ms, ANSWERED_MS);
        let RecordState::Acknowledged(marker) = decoded.state else {
            panic!("{decoded:?}")
        };
        assert_eq!(
            marker.replay(Some(&adyen()), decoded.answered_at_ms),
            answer
        );
    }
}

#[test]
fn a_date_off_the_answer_time_is_rebuilt_exactly() {
    for (date, offset) in [
        ("Tue, 14 Nov 2023 22:13:19 GMT", -1),
        ("Tue, 14 Nov 2023 22:13:51 GMT", 31),
        ("Tue, 14 Nov 2023 22:12:48 GMT", -32),
    ] {
        let answer = answered(&adyen(), date, 1);
        let record = completed(answer.clone()).compacted(Some(&adyen()));
        let RecordState::Acknowledged(marker) =
            Record::decode(&record.encode().unwrap()).unwrap().state
        else {
            panic!("{date} not compacted")
        };
        assert_eq!(marker.date.unwrap().offset_secs, offset);
        assert_eq!(marker.replay(Some(&adyen()), ANSWERED_MS + 999), answer);
    }
}

#[test]
fn an_empty_ack_without_a_date_compacts_too() {
    let empty = StoredResponse {
        status: 204,
        headers: Vec::new(),
        body: StoredBody::Kept(Bytes::new()),
    };
    let record = completed(empty.clone()).compacted(Some(&empty));
    let bytes = record.encode().unwrap();
    assert_eq!(bytes.len(), 60);
    assert_eq!(bytes[55], 0, "no date");
    let RecordState::Acknowledged(marker) = Record::decode(&bytes).unwrap().state else {
        panic!()
    };
    assert_eq!(marker.status(), 204);
    assert_eq!(marker.replay(Some(&empty), ANSWERED_MS), empty);
}

#[test]
fn any_other_answer_is_kept_whole() {
    let ack = adyen();
    let mut other_body = answered(&ack, DATE, 1);
    other_body.body = StoredBody::Kept(Bytes::from_static(b"[accepted] "));
    let mut other_status = answered(&ack, DATE, 1);
    other_status.status = 201;
    let mut extra_header = answered(&ack, DATE, 1);
    extra_header.headers.push(header("server", "BaseHTTP/0.6"));
    let mut other_type = answered(&ack, DATE, 1);
    other_type.headers[0] = header("content-type", "text/plain; charset=utf-8");
    let mut no_type = ack.clone();
    no_type.headers.clear();
    let mut two_dates = answered(&ack, DATE, 1);
    two_dates.headers.push(header("date", DATE));
    let mut not_stored = answered(&ack, DATE, 1);
    not_stored.body = StoredBody::TooLarge;
    let rfc850 = answered(&ack, "Tuesday, 14-Nov-23 22:13:20 GMT", 1);
    let far = answered(&ack, "Tue, 14 Nov 2023 22:13:52 GMT", 1);
    let upper = {
        let mut answer = ack.clone();
        answer.headers.push(header("Date", DATE));
        answer
    };
    for answer in [
        other_body,
        other_status,
        extra_header,
        other_type,
        no_type,
        two_dates,
        not_stored,
        rfc850,
        far,
        upper,
    ] {
        let record = completed(answer.clone()).compacted(Some(&ack));
        assert_eq!(record.state, RecordState::Completed(answer.clone()));
        assert_eq!(record.encode().unwrap()[0], crate::record::VERSION);
    }
    // No acknowledgement configured: nothing to compare with.
    let plain = completed(answered(&ack, DATE, 1));
    assert_eq!(plain.clone().compacted(None), plain);
}

#[test]
fn an_answer_time_past_the_layouts_seconds_is_kept_whole() {
    let late = (u64::from(u32::MAX) + 1) * 1000;
    let answer = adyen();
    let record = Record {
        answered_at_ms: late,
        ..completed(answer.clone())
    };
    let kept = record.compacted(Some(&adyen()));
    assert_eq!(kept.state, RecordState::Completed(answer));
    assert!(kept.encode().is_ok());
}

#[test]
fn a_changed_ack_replays_as_an_answer_not_stored() {
    let record = completed(answered(&adyen(), DATE, 1)).compacted(Some(&adyen()));
    let RecordState::Acknowledged(marker) = record.state else {
        panic!()
    };
    let mut edited = adyen();
    edited.body = StoredBody::Kept(Bytes::from_static(b"[ACCEPTED]"));
    let mut retyped = adyen();
    retyped.headers[0] = header("content-type", "text/html");
    for ack in [Some(&edited), Some(&retyped), None] {
        assert_eq!(
            marker.replay(ack, ANSWERED_MS),
            StoredResponse {
                status: 200,
                headers: Vec::new(),
                body: StoredBody::TooLarge,
            }
        );
    }
}

#[test]
fn malformed_compact_records_are_decode_errors() {
    let record = completed(answered(&adyen(), DATE, 1)).compacted(Some(&adyen()));
    let bytes = record.encode().unwrap().to_vec();
    assert_eq!(
        Record::decode(&Bytes::copy_from_slice(&bytes[..59])),
        Err(DecodeError::Truncated)
    );
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(
        Record::decode(&Bytes::from(long)),
        Err(DecodeError::Trailing)
    );
    let mut in_flight = bytes.clone();
    in_flight[1] = 1;
    assert_eq!(
        Record::decode(&Bytes::from(in_flight)),
        Err(DecodeError::State(1))
    );
    let mut flags = bytes;
    flags[55] = DATE_FIRST;
    assert_eq!(
        Record::decode(&Bytes::from(flags)),
        Err(DecodeError::AckDate(DATE_FIRST))
    );
}

proptest! {
    #[test]
    fn decode_never_panics_on_compact_prefixes(tail in proptest::collection::vec(any::<u8>(), 0..80)) {
        let mut bytes = vec![VERSION_4, 2];
        bytes.extend(&tail);
        let _ = Record::decode(&Bytes::from(bytes));
    }

    #[test]
    fn compact_layout_is_canonical(tail in proptest::collection::vec(any::<u8>(), 58)) {
        let mut bytes = vec![VERSION_4, 2];
        bytes.extend(&tail);
        let bytes = Bytes::from(bytes);
        if let Ok(record) = Record::decode(&bytes) {
            prop_assert_eq!(record.encode().unwrap(), bytes);
        }
    }

    #[test]
    fn compact_round_trip(secs in 0u64..u64::from(u32::MAX), offset in -32i64..=31, first: bool,
                          status in 200u16..=299, body in proptest::collection::vec(any::<u8>(), 0..40)) {
        let ack = StoredResponse {
            status,
            headers: vec![header("content-type", "application/json")],
            body: StoredBody::Kept(Bytes::from(body)),
        };
        let date_secs = secs.saturating_add_signed(offset);
        let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(date_secs));
        let answer = answered(&ack, &date, if first { 0 } else { 1 });
        let record = Record { answered_at_ms: secs * 1000 + 456, ..completed(answer.clone()) }
            .compacted(Some(&ack));
        let decoded = Record::decode(&record.encode().unwrap()).unwrap();
        prop_assert_eq!(decoded.encode().unwrap(), record.encode().unwrap());
        let RecordState::Acknowledged(marker) = decoded.state else {
            panic!("not compacted: {date}")
        };
        prop_assert_eq!(marker.replay(Some(&ack), decoded.answered_at_ms), answer);
    }
}
