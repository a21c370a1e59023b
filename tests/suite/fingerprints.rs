//! Fingerprints that could hide a changed request: a
//! JSON body naming a key twice is refused wherever idemgate reads JSON
//! (key, fingerprint, signature), repeated form fields keep their order in
//! the canonical form, and numbers are compared as written. Real Redis,
//! real upstream.

use crate::support::*;

/// A 400 `bad_request_body`: the body can not be read one way only.
fn assert_bad_body(answer: &Answer) {
    assert_eq!(
        (answer.status, answer.reason().as_deref()),
        (400, Some("bad_request_body")),
        "{answer:?}"
    );
}

/// The reported reproduction: under `fingerprint_ignore` the duplicate-key
/// body matched the clean one and was replayed.
#[tokio::test]
async fn a_duplicate_json_key_is_refused_not_replayed() {
    let (redis, upstream, gate) = redis_gate("fingerprint_ignore = [\"json:/notify_time\"]").await;
    let url = gate.url("/notify");
    let clean = r#"{"id":"d1","amount":"9999.00"}"#;
    let twice = r#"{"id":"d1","amount":"10.00","amount":"9999.00"}"#;

    let first = deliver(&url, clean).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    let second = deliver(&url, twice).await;
    assert_eq!(second.status, 400, "{:?}", second.body);
    assert_eq!(second.reason().as_deref(), Some("bad_request_body"));
    assert_eq!(second.replayed(), None, "not a replay");

    // the other order: the duplicate-key body never executes either
    let dup_first = r#"{"id":"d2","amount":"10.00","amount":"9999.00"}"#;
    assert_eq!(deliver(&url, dup_first).await.status, 400);
    assert_eq!(upstream.calls(), 1);
    assert_eq!(
        redis.keys("idemgate:pay:*").len(),
        1,
        "no claim for refused bodies"
    );
    gate.stop().await;
}

/// Any route that reads JSON refuses duplicates at any depth, also when
/// the duplicated key is the idempotency key itself (a backend that reads
/// the first `id` would run the delivery again under another key).
#[tokio::test]
async fn duplicate_keys_are_refused_at_any_depth() {
    let (_redis, upstream, gate) = redis_gate("").await;
    let url = gate.url("/notify");
    for body in [
        r#"{"id":"k1","id":"k2"}"#,
        r#"{"id":"k3","payer":{"acct":"1","acct":"2"}}"#,
        r#"{"id":"k4","items":[{"sku":"a"},{"sku":"b","sku":"c"}]}"#,
        r#"{"id":"k5","a":1,"\u0061":2}"#,
    ] {
        let answer = deliver(&url, body).await;
        assert_eq!(answer.status, 400, "{body}");
        assert_eq!(
            answer.reason().as_deref(),
            Some("bad_request_body"),
            "{body}"
        );
    }
    // the same key under different objects is no duplicate
    let fine = r#"{"id":"k6","a":{"x":1},"b":{"x":1}}"#;
    assert_eq!(deliver(&url, fine).await.status, 200);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

/// A route whose signed message reads JSON values: a duplicate key could
/// make idemgate verify one value while a first-wins backend acts on
/// another. Refused before verification succeeds.
#[tokio::test]
async fn signed_json_selectors_refuse_duplicate_keys() {
    // A message without {body} must cover the key (json:/id) too.
    let (_redis, upstream, gate) = redis_gate_edited(Upstream::start().await, "", |text| {
        let text = text.replace(
            "{timestamp}.{body}",
            "{timestamp}.{json:/id}.{json:/status}",
        );
        assert!(
            text.contains("{timestamp}.{json:/id}.{json:/status}"),
            "{text}"
        );
        text
    })
    .await;
    let sign = |id: &str, status: &str| {
        let ts = now_secs().to_string();
        let mac = idemgate::signature::mac(
            idemgate::config::Algorithm::Sha256,
            SECRET.as_bytes(),
            &[ts.as_bytes(), b".", id.as_bytes(), b".", status.as_bytes()],
        );
        vec![
            ("x-signature".to_owned(), hex::encode(mac)),
            ("x-timestamp".to_owned(), ts),
            ("content-type".to_owned(), "application/json".to_owned()),
        ]
    };
    let url = gate.url("/notify");
    let honest = r#"{"id":"s1","status":"PAID"}"#;
    assert_eq!(
        send("POST", &url, &sign("s1", "PAID"), honest).await.status,
        200
    );
    // signed for PAID (the last value) while a first-wins backend reads REFUNDED
    let forged = r#"{"id":"s2","status":"REFUNDED","status":"PAID"}"#;
    let answer = send("POST", &url, &sign("s2", "PAID"), forged).await;
    assert_bad_body(&answer);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

/// Repeated form fields keep their order in the canonical form, so
/// `amount=10&amount=9999` and `amount=9999&amount=10` are different
/// requests: 422, never a replay.
#[tokio::test]
async fn repeated_form_fields_keep_their_order() {
    let (_redis, upstream, gate) = redis_gate_edited(
        Upstream::start().await,
        "fingerprint_ignore = [\"form:ts\"]",
        |text| text.replace("key = [\"json:/id\"]", "key = [\"form:id\"]"),
    )
    .await;
    let url = gate.url("/notify");
    let first = deliver_form(&url, "id=f1&amount=10&amount=9999&ts=1").await;
    assert_eq!(first.status, 200);
    let swapped = deliver_form(&url, "ts=2&id=f1&amount=9999&amount=10").await;
    assert_eq!(swapped.status, 422, "{:?}", swapped.body);
    assert_eq!(swapped.reason().as_deref(), Some("fingerprint_mismatch"));
    // pairs of different names still compare in any order
    let reordered = deliver_form(&url, "ts=3&amount=10&amount=9999&id=f1").await;
    assert_eq!(
        (reordered.status, reordered.replayed()),
        (200, Some("true"))
    );
    // a field a selector reads must be there once: which one would the
    // backend take?
    let ambiguous_key = deliver_form(&url, "id=f2&id=f3&amount=1").await;
    assert_bad_body(&ambiguous_key);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

/// Numbers are compared as written (serde_json `arbitrary_precision`):
/// `10.5` and `10.50` are different requests for the fingerprint, never
/// silently equal.
#[tokio::test]
async fn numbers_compare_as_written() {
    let (_redis, upstream, gate) = redis_gate("fingerprint_ignore = [\"json:/notify_time\"]").await;
    let url = gate.url("/notify");
    let first = deliver(&url, r#"{"id":"n1","amount":10.5,"notify_time":1}"#).await;
    assert_eq!(first.status, 200);
    let same = deliver(&url, r#"{ "notify_time":2, "amount":10.5, "id":"n1" }"#).await;
    assert_eq!((same.status, same.replayed()), (200, Some("true")));
    let respelled = deliver(&url, r#"{"id":"n1","amount":10.50,"notify_time":3}"#).await;
    assert_eq!(respelled.status, 422);
    let exponent = deliver(&url, r#"{"id":"n1","amount":1.05e1,"notify_time":4}"#).await;
    assert_eq!(exponent.status, 422);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}
