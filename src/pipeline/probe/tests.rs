use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::config::Config;
use crate::config::tests::MINIMAL;
use crate::record::StoredBody;

fn probe(table: &str) -> Probe {
    let text = format!(
        "{MINIMAL}\nunknown_hold = \"10m\"\n[route.probe]\nhandler_deadline = \"30s\"\n{table}\n"
    );
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{}", e.0.join("\n")));
    config.routes[0].probe.clone().unwrap()
}

fn answer(status: u16, body: &str) -> StoredResponse {
    StoredResponse {
        status,
        headers: vec![(
            Bytes::from_static(b"content-type"),
            Bytes::from_static(b"application/json"),
        )],
        body: StoredBody::Kept(Bytes::from(body.to_owned())),
    }
}

fn delivery(body: &str) -> Inbound {
    let (parts, ()) = http::Request::post("/notify")
        .header("content-type", "application/json")
        .body(())
        .unwrap()
        .into_parts();
    Inbound::new(parts, Bytes::from(body.to_owned()))
}

#[test]
fn the_path_is_filled_from_the_delivery_and_escaped() {
    let probe = probe("path = \"/orders/{json:/paymentNo}/status?x=1\"");
    let request = render(&probe, &delivery(r#"{"paymentNo":"a/b?c=d&e f"}"#)).unwrap();
    assert_eq!(request.target, "/orders/a%2Fb%3Fc%3Dd%26e%20f/status?x=1");
    assert_eq!(request.method, Method::GET);
    let missing = render(&probe, &delivery(r#"{"other":1}"#)).unwrap_err();
    assert!(missing.contains("absent"), "{missing}");
}

#[test]
fn statuses_decide_without_a_field() {
    let probe = probe("path = \"/p\"");
    assert!(matches!(
        classify(&probe, answer(200, "{}")),
        Verdict::Applied(_)
    ));
    assert_eq!(classify(&probe, answer(404, "")), Verdict::NotApplied);
    assert_eq!(classify(&probe, answer(500, "")), Verdict::Undecided);
    assert_eq!(classify(&probe, answer(202, "")), Verdict::Undecided);
}

#[test]
fn a_field_decides_within_its_statuses() {
    let probe = probe(
        "path = \"/p\"\nnot_applied_status = [200, 404]\nfield = \"json:/state\"\napplied = [\"PAID\"]\nnot_applied = [\"NONE\"]",
    );
    assert!(matches!(
        classify(&probe, answer(200, r#"{"state":"PAID"}"#)),
        Verdict::Applied(_)
    ));
    assert_eq!(
        classify(&probe, answer(200, r#"{"state":"NONE"}"#)),
        Verdict::NotApplied
    );
    assert_eq!(
        classify(&probe, answer(200, r#"{"state":"PENDING"}"#)),
        Verdict::Undecided
    );
    assert_eq!(
        classify(&probe, answer(200, "not json")),
        Verdict::Undecided
    );
    assert_eq!(
        classify(&probe, answer(500, r#"{"state":"PAID"}"#)),
        Verdict::Undecided
    );
}

#[test]
fn check_config_refuses_a_probe_before_the_handler_can_have_given_up() {
    let text = format!(
        "{MINIMAL}\nunknown_hold = \"10m\"\n[route.probe]\npath = \"/p\"\nhandler_deadline = \"30s\"\nstart_after = \"45s\"\n"
    );
    // The default upstream timeout is 30s: 45s < 30s + 30s.
    let err = Config::parse(&text).unwrap_err().0.join("\n");
    assert!(
        err.contains("route[0].probe.start_after: 45s would probe before the upstream timeout (30s) plus handler_deadline (30s)"),
        "{err}"
    );
    let late = format!(
        "{MINIMAL}\nunknown_hold = \"1m\"\n[route.probe]\npath = \"/p\"\nhandler_deadline = \"30s\"\n"
    );
    let err = Config::parse(&late).unwrap_err().0.join("\n");
    assert!(err.contains("not before unknown_hold (1m) ends"), "{err}");
    assert_eq!(probe("path = \"/p\"").start_after, Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_waits_the_whole_start_after() {
    let probe = probe("path = \"/p\"\nstart_after = \"90s\"");
    let ended = Instant::now();
    let first = first_attempt(&probe, ended);
    let waiting = tokio::spawn(async move {
        tokio::time::sleep_until(first).await;
        Instant::now()
    });
    tokio::time::sleep(Duration::from_secs(89)).await;
    assert!(!waiting.is_finished(), "not before start_after");
    let at = waiting.await.unwrap();
    assert_eq!(at - ended, Duration::from_secs(90));
}
