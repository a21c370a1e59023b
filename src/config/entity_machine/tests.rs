use crate::config::tests::MINIMAL;
use crate::config::{Config, OnRefused};

const ALIPAY: &str = r#"
[route.entity]
id = ["form:out_trade_no"]
state = "form:trade_status"
initial = ["WAIT_BUYER_PAY", "TRADE_SUCCESS", "TRADE_CLOSED"]
transitions = ["WAIT_BUYER_PAY -> TRADE_SUCCESS | TRADE_CLOSED", "TRADE_SUCCESS -> TRADE_FINISHED"]
terminal = ["TRADE_FINISHED", "TRADE_CLOSED"]
ack_status = 200
ack_body = "success"
"#;

fn parse(entity: &str) -> Result<Config, String> {
    Config::parse(&format!("{MINIMAL}\n{entity}\n")).map_err(|e| e.0.join("\n"))
}

#[test]
fn a_machine_judges_transitions_initial_states_and_terminals() {
    let config = parse(ALIPAY).unwrap();
    let entity = config.routes[0].entity.as_ref().unwrap();
    let m = &entity.machine;
    assert_eq!(entity.on_refused, OnRefused::Acknowledge);
    assert!(m.allows(None, "WAIT_BUYER_PAY"));
    assert!(!m.allows(None, "TRADE_FINISHED"), "not an initial state");
    assert!(m.allows(Some("WAIT_BUYER_PAY"), "TRADE_SUCCESS"));
    assert!(m.allows(Some("TRADE_SUCCESS"), "TRADE_FINISHED"));
    assert!(
        !m.allows(Some("TRADE_SUCCESS"), "WAIT_BUYER_PAY"),
        "a regression"
    );
    assert!(!m.allows(Some("TRADE_CLOSED"), "TRADE_SUCCESS"), "terminal");
    assert_eq!(m.state(b"TRADE_SUCCESS"), Some("TRADE_SUCCESS"));
    assert_eq!(m.state(b"trade_success"), None, "exact comparison");
    assert_eq!(entity.ack.body.as_ref(), b"success");
}

#[test]
fn without_initial_any_state_may_come_first() {
    let config = parse(
        "[route.entity]\nid = [\"json:/id\"]\nstate = \"json:/status\"\ntransitions = [\"pending -> success | failed\", \"failed -> success\"]\nack_status = 200\n",
    )
    .unwrap();
    let m = &config.routes[0].entity.as_ref().unwrap().machine;
    assert!(m.allows(None, "success"));
    assert!(m.allows(Some("failed"), "success"));
    assert!(!m.allows(Some("success"), "failed"));
}

#[test]
fn bad_tables_are_refused_with_their_key() {
    let cases = [
        (
            "transitions = [\"a -> a\"]",
            "route[0].entity.transitions[0]: \"a\" -> \"a\": the same state again",
        ),
        ("transitions = [\"a to b\"]", "is not \"from -> to\""),
        (
            "transitions = [\"a -> b\"]\nterminal = [\"a\"]",
            "\"a\" is terminal, but a transition leaves it",
        ),
        ("transitions = []", "must declare at least one state"),
        (
            "transitions = [\"a -> b\"]\nretention = \"1s\"",
            "route[0].entity.retention: 1s is shorter than the route's retention",
        ),
    ];
    for (table, expected) in cases {
        let text = format!(
            "[route.entity]\nid = [\"json:/id\"]\nstate = \"json:/status\"\nack_status = 200\n{table}\n"
        );
        let err = parse(&text).unwrap_err();
        assert!(err.contains(expected), "{table}: {err}");
    }
}

#[test]
fn an_acknowledgement_is_required_without_an_inbox() {
    let err = parse(
        "[route.entity]\nid = [\"json:/id\"]\nstate = \"json:/s\"\ntransitions = [\"a -> b\"]\n",
    )
    .unwrap_err();
    assert!(
        err.contains("route[0].entity.ack_status: a repeated or refused state"),
        "{err}"
    );
}

#[test]
fn check_config_prints_what_it_read() {
    let config = parse(ALIPAY).unwrap();
    let raw = config.routes[0].entity.as_ref().unwrap().to_raw();
    assert_eq!(
        raw.transitions,
        [
            "WAIT_BUYER_PAY -> TRADE_SUCCESS",
            "WAIT_BUYER_PAY -> TRADE_CLOSED",
            "TRADE_SUCCESS -> TRADE_FINISHED"
        ]
    );
    assert_eq!(raw.on_refused, Some(OnRefused::Acknowledge));
}

#[test]
fn an_unsigned_entity_selector_is_refused_unless_accepted() {
    let table = "[route.entity]\nid = [\"header:X-Order\"]\nstate = \"json:/status\"\ntransitions = [\"a -> b\"]\nack_status = 200\n";
    let err = parse(table).unwrap_err();
    assert!(
        err.contains("route[0].entity.id[0]: header:x-order is not signed"),
        "{err}"
    );
    let accepted =
        Config::parse(&format!("{MINIMAL}\nunsigned_key = \"accept\"\n{table}")).unwrap();
    let warned = &accepted.routes[0].idempotency.accepted_unsigned;
    assert!(
        warned
            .iter()
            .any(|w| w.starts_with("entity.id[0] header:x-order")),
        "{warned:?}"
    );
}
