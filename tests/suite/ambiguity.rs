//! A field a guard or key reads must mean one thing to the handler's
//! stack too (docs/contract.md §4 rule 12): a JSON key with a rival
//! differing only in case (Go's `encoding/json` matches keys case
//! insensitively), a form name PHP files under the same name, serde_json's
//! private number token, or a form read from a body sent as another type,
//! are refused before the store or the handler sees them. Real Redis, real
//! upstream.

use crate::support::*;

/// `[[route.guard]]` on `json:/status`.
const STATUS_GUARD: &str = "[[route.guard]]\nfield = \"json:/status\"\none_of = [\"PAID\"]";

#[tokio::test]
async fn a_json_key_with_a_case_rival_is_ambiguous() {
    let (redis, upstream, gate) = redis_gate(STATUS_GUARD).await;
    let url = gate.url("/notify");
    let store = redis.watch_data();
    for body in [
        r#"{"id":"a1","status":"PAID","Status":"PENDING"}"#,
        r#"{"id":"a1","STATUS":"PENDING","status":"PAID"}"#,
        r#"{"id":"a1","status":"PAID","\u017Ftatus":"PENDING"}"#,
        r#"{"id":"a1","Id":"a2","status":"PAID"}"#,
    ] {
        let refused = deliver(&url, body).await;
        assert_eq!(
            (refused.status, refused.reason().as_deref()),
            (400, Some("field_ambiguous")),
            "{body}: {refused:?}"
        );
    }
    let token = deliver(
        &url,
        r#"{"id":{"$serde_json::private::Number":"1"},"status":"PAID"}"#,
    )
    .await;
    assert_eq!(
        (token.status, token.reason().as_deref()),
        (400, Some("bad_request_body"))
    );
    assert_eq!(store.commands(), Vec::<String>::new(), "no store access");
    assert_eq!(upstream.calls(), 0);
    // Other keys may differ in case: only the ones read are judged.
    let fine = deliver(&url, r#"{"id":"a3","status":"PAID","note":"x","Note":"y"}"#).await;
    assert_eq!(fine.status, 200, "{fine:?}");
    gate.stop().await;
}

#[tokio::test]
async fn a_form_name_php_would_read_in_its_place_is_ambiguous() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "")
        .replace("key = [\"json:/id\"]", "key = [\"form:out_trade_no\"]")
        + "\n[[route.guard]]\nfield = \"form:trade_status\"\none_of = [\"TRADE_SUCCESS\"]\n";
    let gate = Gate::start(&text).await;
    let url = gate.url("/notify");
    let form = |body: &str, content_type: &str| {
        let mut headers = signed(body);
        headers.retain(|(name, _)| name != "content-type");
        headers.push(("content-type".into(), content_type.into()));
        (headers, body.to_owned())
    };
    const URLENCODED: &str = "application/x-www-form-urlencoded; charset=utf-8";
    for body in [
        "out_trade_no=o1&trade_status=TRADE_SUCCESS&trade.status=WAIT_BUYER_PAY",
        "out_trade_no=o1&trade_status=TRADE_SUCCESS&trade_status%5B%5D=WAIT_BUYER_PAY",
        "out_trade_no=o1&trade+status=WAIT_BUYER_PAY&trade_status=TRADE_SUCCESS",
        "out_trade_no=o1&out.trade.no=o2&trade_status=TRADE_SUCCESS",
    ] {
        let (headers, body) = form(body, URLENCODED);
        let refused = send("POST", &url, &headers, body.clone()).await;
        assert_eq!(
            (refused.status, refused.reason().as_deref()),
            (400, Some("field_ambiguous")),
            "{body}: {refused:?}"
        );
    }
    // A multipart (or JSON) body is not read as a form.
    let (headers, body) = form(
        "out_trade_no=o1&trade_status=TRADE_SUCCESS",
        "multipart/form-data; boundary=x",
    );
    let refused = send("POST", &url, &headers, body).await;
    assert_eq!(
        (refused.status, refused.reason().as_deref()),
        (400, Some("bad_request_body")),
        "{refused:?}"
    );
    assert_eq!(upstream.calls(), 0);
    let (headers, body) = form("out_trade_no=o1&trade_status=TRADE_SUCCESS", URLENCODED);
    let served = send("POST", &url, &headers, body).await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}
