//! Nothing unverified reaches the handler (docs/contract.md §4 rule 12):
//! request parts a backend merges with, or reads in place of, what the
//! signature covers. A genuine Alipay or WeChat Pay v2 body with a query
//! string beside it, a query beside a signed form body, and a `_method`
//! parameter (query or form field) that names a protected route's method
//! are refused, and the upstream receives nothing. Real Redis, real
//! upstream counting calls.

use crate::support::*;

/// One gate: Alipay and WeChat Pay v2 routes with the test vectors' keys,
/// the usual HMAC route on `/notify`, and a PUT-only HMAC route on
/// `/putonly` (the REST update a form's `_method=PUT` reaches in Rails,
/// Laravel and Symfony).
async fn gate() -> (RedisServer, Upstream, Gate) {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let wechat = payment_vector("wxv2-md5");
    let hmac = |name: &str, prefix: &str, methods: &str, key: &str| {
        format!(
            r#"
[[route]]
name = "{name}"
path_prefix = "{prefix}"
methods = {methods}
[route.signature]
scheme = "hmac"
secrets = ["literal:{SECRET}"]
signature = "header:X-Signature"
message = "{{timestamp}}.{{body}}"
timestamp = "header:X-Timestamp"
tolerance = "5m"
[route.idempotency]
key = [{key}]
retention = "1h"
"#
        )
    };
    let text = format!(
        "{}{}{}{}{}",
        base_sections(&redis_store(&redis), &upstream.url()),
        route(
            "alipay",
            "/hooks/alipay",
            &payment_signature("alipay", &[public_key_entry("alipay-1")], "")
        ),
        route(
            "wechat",
            "/hooks/wechatpay/v2",
            &payment_signature("wechatpay-v2", &[right_credential(&wechat)], "")
        ),
        hmac("pay", "/notify", "[\"POST\"]", "\"form:id\""),
        hmac("update", "/putonly", "[\"PUT\"]", "\"json:/id\""),
    );
    let gate = Gate::start(&text).await;
    (redis, upstream, gate)
}

fn route(name: &str, prefix: &str, signature: &str) -> String {
    format!(
        "\n[[route]]\nname = \"{name}\"\npath_prefix = \"{prefix}\"\n[route.signature]\n{signature}\n"
    )
}

/// Sends and checks: the status, the reason, and whether the upstream was
/// reached (once) or not at all.
async fn expect(
    upstream: &Upstream,
    (method, url, headers, body): (&str, &str, &Headers, &str),
    status: u16,
    reason: Option<&str>,
) {
    let before = upstream.calls();
    let answer = send(method, url, headers, body.to_owned()).await;
    let reached = upstream.calls() - before;
    assert_eq!(
        (answer.status, answer.reason().as_deref(), reached),
        (status, reason, usize::from(status == 200)),
        "{method} {url}: {answer:?}"
    );
}

/// Alipay signs the form body only: a genuine body with a query beside it
/// (which servlet `getParameter`, PHP `$_REQUEST` and Spring read first)
/// is refused; without the query it executes once.
#[tokio::test]
async fn a_query_beside_a_signed_payment_body_is_refused() {
    let (_redis, upstream, gate) = gate().await;
    let paid = payment_vector("alipay-paid");
    let headers = paid.header_list();
    for query in [
        "?out_trade_no=ORDER-EVIL&total_amount=0.01",
        "?tenant=acme",
        "?trade_status=TRADE_CLOSED",
    ] {
        let url = gate.url(&format!("/hooks/alipay{query}"));
        expect(
            &upstream,
            ("POST", &url, &headers, &paid.body),
            400,
            Some("unsigned_parameters"),
        )
        .await;
    }
    let url = gate.url("/hooks/alipay");
    expect(&upstream, ("POST", &url, &headers, &paid.body), 200, None).await;

    let wechat = payment_vector("wxv2-md5");
    let url = gate.url("/hooks/wechatpay/v2?out_trade_no=ORDER-EVIL");
    expect(
        &upstream,
        ("POST", &url, &wechat.header_list(), &wechat.body),
        400,
        Some("unsigned_parameters"),
    )
    .await;
    let url = gate.url("/hooks/wechatpay/v2");
    expect(
        &upstream,
        ("POST", &url, &wechat.header_list(), &wechat.body),
        200,
        None,
    )
    .await;
    gate.stop().await;
}

/// An HMAC route signing `{timestamp}.{body}`: a query beside a form body
/// is refused, a query beside a JSON body is not merged by any framework
/// and goes through.
#[tokio::test]
async fn a_query_beside_a_signed_form_body_is_refused() {
    let (_redis, upstream, gate) = gate().await;
    let body = "id=order-1&amount=10";
    let headers = as_form(signed(body));
    let url = gate.url("/notify?amount=0.01");
    expect(
        &upstream,
        ("POST", &url, &headers, body),
        400,
        Some("unsigned_parameters"),
    )
    .await;
    expect(
        &upstream,
        ("POST", &gate.url("/notify"), &headers, body),
        200,
        None,
    )
    .await;
    gate.stop().await;
}

/// `_method` in the query or as a form field: a POST that Rails, Laravel
/// or Symfony would run as the PUT of a protected route is refused
/// unverified (no signature at all), never passed through.
#[tokio::test]
async fn method_parameters_do_not_reach_a_protected_method() {
    let (_redis, upstream, gate) = gate().await;
    let form = vec![(
        "content-type".to_owned(),
        "application/x-www-form-urlencoded".to_owned(),
    )];
    let json = vec![("content-type".to_owned(), "application/json".to_owned())];
    let refused: [(&str, &Headers, &str); 6] = [
        ("/putonly?_method=PUT", &json, "{}"),
        ("/putonly/1?_method=put", &Vec::new(), ""),
        ("/putonly", &form, "name=x&_method=PUT"),
        ("/putonly/1", &form, "_method=put&name=x"),
        ("/putonly?x=1", &form, "%5Fmethod=PUT"),
        ("/putonly", &json, r#"{"id":"u1","_method":"PUT"}"#),
    ];
    for (target, headers, body) in refused {
        expect(
            &upstream,
            ("POST", &gate.url(target), headers, body),
            400,
            Some("path_ambiguous"),
        )
        .await;
    }
    let multipart = vec![(
        "content-type".to_owned(),
        "multipart/form-data; boundary=b".to_owned(),
    )];
    let part = "--b\r\ncontent-disposition: form-data; name=\"_method\"\r\n\r\nPUT\r\n--b--\r\n";
    expect(
        &upstream,
        ("POST", &gate.url("/putonly"), &multipart, part),
        400,
        Some("path_ambiguous"),
    )
    .await;
    assert_eq!(upstream.calls(), 0, "nothing reached the upstream");

    // A form POST without the field is passed through, its body intact.
    let body = "name=x&note=_methodless";
    expect(
        &upstream,
        ("POST", &gate.url("/putonly"), &form, body),
        200,
        None,
    )
    .await;
    assert_eq!(
        upstream.bodies().last().map(|b| b.to_vec()),
        Some(body.as_bytes().to_vec())
    );
    let body = r#"{"id":"u1","note":"_method"}"#;
    expect(
        &upstream,
        ("POST", &gate.url("/putonly"), &json, body),
        200,
        None,
    )
    .await;
    // The real PUT is verified as the route.
    expect(
        &upstream,
        (
            "PUT",
            &gate.url("/putonly"),
            &signed(r#"{"id":"u1"}"#),
            r#"{"id":"u1"}"#,
        ),
        200,
        None,
    )
    .await;
    gate.stop().await;
}
