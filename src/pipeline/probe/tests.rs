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
    let target = render(&probe, &delivery(r#"{"paymentNo":"a?c=d&e f"}"#)).unwrap();
    assert_eq!(target, "/orders/a%3Fc%3Dd%26e%20f/status?x=1");
    assert_eq!(probe.method, http::Method::GET);
    let missing = render(&probe, &delivery(r#"{"other":1}"#)).unwrap_err();
    assert_eq!(missing, Skip::Absent);
}

#[test]
fn statuses_decide_without_a_field() {
    let probe = probe("path = \"/p\"");
    assert!(matches!(
        classify(&probe, answer(200, "{}")),
        Reading::Applied(_)
    ));
    assert_eq!(classify(&probe, answer(404, "")), Reading::NotApplied);
    assert_eq!(classify(&probe, answer(500, "")), Reading::Undecided);
    assert_eq!(classify(&probe, answer(202, "")), Reading::Undecided);
}

#[test]
fn a_field_decides_within_its_statuses() {
    let probe = probe(
        "path = \"/p\"\nnot_applied_status = [200, 404]\nfield = \"json:/state\"\napplied = [\"PAID\"]\nnot_applied = [\"NONE\"]",
    );
    assert!(matches!(
        classify(&probe, answer(200, r#"{"state":"PAID"}"#)),
        Reading::Applied(_)
    ));
    assert_eq!(
        classify(&probe, answer(200, r#"{"state":"NONE"}"#)),
        Reading::NotApplied
    );
    assert_eq!(
        classify(&probe, answer(200, r#"{"state":"PENDING"}"#)),
        Reading::Undecided
    );
    assert_eq!(
        classify(&probe, answer(200, "not json")),
        Reading::Undecided
    );
    assert_eq!(
        classify(&probe, answer(500, r#"{"state":"PAID"}"#)),
        Reading::Undecided
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

#[test]
fn a_value_that_could_reach_another_resource_means_no_probe() {
    let probe = probe("path = \"/orders/{json:/id}/status?from={json:/from}\"");
    let with = |id: &str, from: &str| {
        let body = serde_json::json!({ "id": id, "from": from }).to_string();
        render(&probe, &delivery(&body))
    };
    assert_eq!(with("A-1", "x").unwrap(), "/orders/A-1/status?from=x");
    assert_eq!(with("..", "x"), Err(Skip::DotSegment));
    assert_eq!(with(".", "x"), Err(Skip::DotSegment));
    assert_eq!(with("", "x"), Err(Skip::Empty));
    assert_eq!(with("a/b", "x"), Err(Skip::Separator));
    assert_eq!(with("a\\b", "x"), Err(Skip::Separator));
    // In the query, a dot or a slash is only a value, escaped.
    assert_eq!(with("A", "..").unwrap(), "/orders/A/status?from=..");
    assert_eq!(with("A", "a/b").unwrap(), "/orders/A/status?from=a%2Fb");
    assert_eq!(with("A", ""), Err(Skip::Empty));
    let absent = render(&probe, &delivery(r#"{"id":"A"}"#));
    assert_eq!(absent, Err(Skip::Absent));
}

#[test]
fn header_values_come_from_secret_sources_and_never_print() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "Bearer s3cret\n").unwrap();
    let text = format!(
        "{MINIMAL}\nunknown_hold = \"10m\"\n[route.probe]\nhandler_deadline = \"30s\"\npath = \"/p\"\nheaders = [\"Authorization: file:{}\", \"X-Api-Key: plain-key\"]\n",
        file.display()
    );
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{}", e.0.join("\n")));
    let probe = config.routes[0].probe.clone().unwrap();
    let values: Vec<_> = probe
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.expose().to_vec()))
        .collect();
    assert_eq!(
        values,
        [
            ("Authorization".to_owned(), b"Bearer s3cret".to_vec()),
            ("X-Api-Key".to_owned(), b"plain-key".to_vec())
        ]
    );
    let printed = config.to_toml();
    assert!(
        printed.contains(&format!("Authorization: file:{}", file.display())),
        "{printed}"
    );
    assert!(printed.contains("X-Api-Key: <redacted>"), "{printed}");
    assert!(
        !printed.contains("s3cret") && !printed.contains("plain-key"),
        "{printed}"
    );
}
