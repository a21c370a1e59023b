//! The reported double executions, end to end: a real gate, a real Redis
//! and an upstream that counts executions. Each captured delivery is
//! re-sent with what its signature does not cover changed; the upstream
//! runs it once.

use super::{Delivery, LONG_SECRET, body_signed, hmac_signature, route_text};
use crate::support::*;

/// Sends every delivery to a fresh gate with `routes`; returns the
/// statuses and how many executions the upstream saw.
async fn run(routes: &str, deliveries: &[Delivery]) -> (Vec<(u16, Option<String>)>, usize) {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = format!(
        "{}{routes}",
        base_sections(&redis_store(&redis), &upstream.url())
    );
    let gate = Gate::start(&text).await;
    let mut answers = Vec::new();
    for delivery in deliveries {
        let answer = send(
            &delivery.method,
            &gate.url(&delivery.target),
            &delivery.headers,
            delivery.body.clone(),
        )
        .await;
        answers.push((answer.status, answer.replayed().map(str::to_owned)));
    }
    let calls = upstream.calls();
    gate.stop().await;
    (answers, calls)
}

/// Every answer is the first execution, a replay, or a refusal.
fn assert_once(answers: &[(u16, Option<String>)], calls: usize, what: &str) {
    assert_eq!(
        answers[0],
        (200, Some("false".to_owned())),
        "{what}: the genuine delivery"
    );
    for answer in &answers[1..] {
        assert!(
            *answer == (200, Some("true".to_owned())) || (400..500).contains(&answer.0),
            "{what}: {answer:?} in {answers:?}"
        );
    }
    assert_eq!(calls, 1, "{what}: executed {calls} times, {answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wechatpay_v2_respelled_values_execute_once() {
    let vector = payment_vector("wxv2-hmac");
    let signature = payment_signature("wechatpay-v2", &[right_credential(&vector)], "");
    let routes = route_text(
        vector.prefix(),
        "",
        &signature,
        "key = [\"xml:/xml/out_trade_no\"]",
    );
    let genuine = Delivery {
        method: "POST".into(),
        target: vector.path.clone(),
        headers: vector.header_list(),
        body: vector.body.clone(),
    };
    let open = genuine.body.find("<out_trade_no>").expect("out_trade_no") + "<out_trade_no>".len();
    let close = genuine.body.find("</out_trade_no>").unwrap();
    let element = &genuine.body[open..close];
    let value = element
        .strip_prefix("<![CDATA[")
        .and_then(|v| v.strip_suffix("]]>"))
        .unwrap_or(element)
        .to_owned();
    let respelled = |text: String| Delivery {
        body: format!("{}{text}{}", &genuine.body[..open], &genuine.body[close..]),
        ..genuine.clone()
    };
    let mut deliveries = vec![genuine.clone()];
    for text in [
        format!(" {value}"),
        format!("{value} "),
        format!("\n  {value}\n"),
        format!("<![CDATA[\t{value}]]>"),
        format!("\u{3000}{value}\u{3000}"),
    ] {
        deliveries.push(respelled(text));
    }
    let (answers, calls) = run(&routes, &deliveries).await;
    assert_once(&answers, calls, "wechatpay-v2 out_trade_no");
    assert!(
        answers[1..5].iter().all(|a| a.1.as_deref() == Some("true")),
        "re-spellings the SDK trims verify and replay: {answers:?}"
    );
    assert_eq!(
        answers[5].0, 401,
        "U+3000 is no Java whitespace: it is part of the signed value"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_signature_on_paths_below_the_prefix_executes_once() {
    let routes = route_text("/nokey", "", &hmac_signature(""), "");
    let body = r#"{"id":"p1","amount":"10.00"}"#;
    let deliveries: Vec<Delivery> = ["/nokey", "/nokey/x", "/nokey/y", "/nokey/a/b", "/nokey;p/z"]
        .into_iter()
        .map(|target| body_signed(target, body, "application/json"))
        .collect();
    let (answers, calls) = run(&routes, &deliveries).await;
    assert_once(&answers, calls, "one body signature, five paths");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_delivery_headers_on_a_captured_body_execute_once() {
    for scheme in ["github", "shopify"] {
        let routes = route_text(
            "/hook",
            "",
            &format!("scheme = \"{scheme}\"\nsecrets = [\"literal:{LONG_SECRET}\"]"),
            "",
        );
        let body = preset_body(scheme, "evt_1");
        let deliveries: Vec<Delivery> = ["d-1", "d-2", "d-3", "d-4"]
            .into_iter()
            .map(|id| Delivery {
                method: "POST".into(),
                target: "/hook".into(),
                headers: preset_headers(scheme, LONG_SECRET, now_secs(), id, &body),
                body: body.clone(),
            })
            .collect();
        let (answers, calls) = run(&routes, &deliveries).await;
        assert_once(&answers, calls, scheme);
    }
}
