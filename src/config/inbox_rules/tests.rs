//! Tests of `[route.inbox]`, read through whole configuration files.

use std::time::Duration;

use crate::config::Config;
use crate::config::tests::MINIMAL;

use super::*;

/// The minimal config with `[route.inbox]` holding `inbox`, and
/// `idempotency` appended to its `[route.idempotency]`.
fn with_inbox(idempotency: &str, inbox: &str) -> Result<Config, String> {
    let text = format!("{MINIMAL}\n{idempotency}\n[route.inbox]\n{inbox}\n");
    Config::parse(&text).map_err(|e| e.0.join("\n"))
}

fn parsed(idempotency: &str, inbox: &str) -> Inbox {
    let config = with_inbox(idempotency, inbox).unwrap();
    config.routes[0].inbox.clone().expect("an inbox")
}

fn problems(idempotency: &str, inbox: &str) -> String {
    with_inbox(idempotency, inbox).unwrap_err()
}

/// The minimal config with these tables is refused, one problem reading
/// `expected`.
fn assert_problem(idempotency: &str, inbox: &str, expected: &str) {
    let err = problems(idempotency, inbox);
    assert!(err.contains(expected), "{inbox}: {err}");
}

#[test]
fn absent_or_disabled_tables_give_no_inbox() {
    let config = Config::parse(MINIMAL).unwrap();
    assert!(config.routes[0].inbox.is_none());
    let disabled = with_inbox("", "enabled = false\nconcurrency = 0").unwrap();
    assert!(disabled.routes[0].inbox.is_none());
}

#[test]
fn defaults() {
    let inbox = parsed("", "");
    assert_eq!(inbox.on.names(), ["5xx", "429", "refused"]);
    assert!(inbox.on.refused && !inbox.on.timeout);
    assert_eq!(inbox.ack.status, 200);
    assert!(inbox.ack.body.is_empty());
    assert_eq!(inbox.ack.content_type, None, "no type without a body");
    assert_eq!(inbox.max_attempts, 12);
    assert_eq!(inbox.backoff, Duration::from_secs(30));
    assert_eq!(inbox.max_backoff, Duration::from_secs(3600));
    assert_eq!(inbox.concurrency, 4);
    assert_eq!(inbox.visibility_timeout, Duration::from_secs(60));
    let explicit = parsed("", "enabled = true\nack_body = \"success\"");
    assert_eq!(&explicit.ack.body[..], b"success");
    assert_eq!(explicit.ack.content_type.as_deref(), Some("text/plain"));
}

#[test]
fn triggers_match_statuses_refusals_and_timeouts() {
    let inbox = parsed("", "on = [\"5xx\", \"429\", \"timeout\", \"1xx\"]");
    for queued in [500, 503, 599, 429, 100] {
        assert!(inbox.on.status(queued), "{queued}");
    }
    for not in [200, 404, 428, 430, 499, 600] {
        assert!(!inbox.on.status(not), "{not}");
    }
    assert!(inbox.on.timeout && !inbox.on.refused);
    let refused = parsed("", "on = [\"refused\"]");
    assert!(refused.on.refused && !refused.on.timeout && !refused.on.status(500));
}

#[test]
fn names_round_trip() {
    for on in [
        "[\"5xx\", \"429\", \"refused\"]",
        "[\"503\", \"timeout\"]",
        "[\"refused\", \"timeout\"]",
        "[\"1xx\", \"5xx\", \"408\", \"refused\", \"timeout\"]",
    ] {
        let first = parsed("", &format!("on = {on}")).on.names();
        let quoted: Vec<String> = first.iter().map(|n| format!("{n:?}")).collect();
        let again = parsed("", &format!("on = [{}]", quoted.join(", ")));
        assert_eq!(again.on.names(), first, "{on}");
    }
}

#[test]
fn on_must_name_known_failures() {
    let empty = problems("", "on = []");
    assert!(
        empty.contains("route[0].inbox.on: must list at least one failure"),
        "{empty}"
    );
    for bad in ["6xx", "600", "99", "5XX", "reset", ""] {
        let err = problems("", &format!("on = [\"429\", {bad:?}]"));
        assert!(
            err.contains(&format!("route[0].inbox.on[1]: {bad:?} is not valid; expected a status class \"1xx\"…\"5xx\", a code 100-599, \"refused\" or \"timeout\"")),
            "{err}"
        );
    }
}

#[test]
fn a_status_is_either_stored_or_queued() {
    assert_problem(
        "cache_status = [\"2xx\", \"4xx\"]",
        "on = [\"5xx\", \"429\"]",
        "route[0].inbox.on: \"429\" overlaps idempotency.cache_status \"4xx\": an answer can not be both stored and queued",
    );
    assert_problem(
        "cache_status = [\"2xx\", \"503\"]",
        "on = [\"5xx\"]",
        "\"5xx\" overlaps idempotency.cache_status \"503\"",
    );
    let fine = with_inbox(
        "cache_status = [\"2xx\", \"404\"]",
        "on = [\"5xx\", \"429\"]",
    );
    assert!(fine.is_ok(), "{fine:?}");
}

#[test]
fn a_default_cache_status_leaves_out_what_is_queued() {
    let config = with_inbox("", "").unwrap();
    let cached = &config.routes[0].idempotency.cache_status;
    for stored in [200, 299, 400, 428, 430, 499] {
        assert!(cached.contains(stored), "{stored}");
    }
    assert!(!cached.contains(429) && !cached.contains(500));
    let names = cached.names();
    assert_eq!(names.len(), 1 + 99, "{names:?}");
    assert_eq!(names[..3], ["2xx", "400", "401"]);
    // The effective view lists the codes, and loads back to itself.
    let printed = config.to_toml();
    let again =
        Config::parse(&printed.replace("literal:<redacted>", "literal:k-secret-0123456789abcdef"))
            .unwrap();
    assert_eq!(again.to_toml(), printed);
    // Without an inbox the default is untouched.
    let plain = Config::parse(MINIMAL).unwrap();
    assert_eq!(
        plain.routes[0].idempotency.cache_status.names(),
        ["2xx", "4xx"]
    );
}

#[test]
fn acks_are_2xx_with_a_body_only_where_one_is_allowed() {
    assert_problem(
        "",
        "ack_status = 500",
        "route[0].inbox.ack_status: 500 must be 200-299: a sender retries any other status anyway",
    );
    for status in [204, 304] {
        assert_problem(
            "",
            &format!("ack_status = {status}\nack_body = \"success\""),
            &format!("route[0].inbox.ack_body: must be empty with ack_status = {status}"),
        );
    }
    let wechat = parsed("", "ack_status = 204");
    assert_eq!((wechat.ack.status, wechat.ack.content_type), (204, None));
    assert_problem(
        "",
        "ack_content_type = \"text/plain\\n\"",
        "route[0].inbox.ack_content_type: \"text/plain\\n\" is not a valid header value",
    );
    let json = parsed(
        "",
        "ack_body = '{\"code\":\"SUCCESS\"}'\nack_content_type = \"application/json\"",
    );
    assert_eq!(json.ack.content_type.as_deref(), Some("application/json"));
}

#[test]
fn schedule_limits() {
    for (setting, expected) in [
        (
            "max_attempts = 0",
            "route[0].inbox.max_attempts: must be 1-1000",
        ),
        (
            "max_attempts = 1001",
            "route[0].inbox.max_attempts: must be 1-1000",
        ),
        (
            "concurrency = 0",
            "route[0].inbox.concurrency: must be 1-256",
        ),
        (
            "concurrency = 257",
            "route[0].inbox.concurrency: must be 1-256",
        ),
        (
            "backoff = \"99ms\"",
            "route[0].inbox.backoff: must be at least 100ms",
        ),
        (
            "backoff = \"soon\"",
            "route[0].inbox.backoff: \"soon\" is not a duration",
        ),
        (
            "backoff = \"2m\"\nmax_backoff = \"1m\"",
            "route[0].inbox.max_backoff: must be at least backoff (2m)",
        ),
    ] {
        assert_problem("", setting, expected);
    }
    let edges = parsed(
        "",
        "max_attempts = 1000\nconcurrency = 256\nbackoff = \"100ms\"\nmax_backoff = \"100ms\"",
    );
    assert_eq!((edges.max_attempts, edges.concurrency), (1000, 256));
    assert_eq!(parsed("", "max_attempts = 1").max_attempts, 1);
}

#[test]
fn visibility_timeout_exceeds_the_upstream_timeout() {
    assert_problem(
        "",
        "visibility_timeout = \"30s\"",
        "route[0].inbox.visibility_timeout: must be at least the upstream timeout (30s) plus 1s (31s)",
    );
    let err = problems("", "visibility_timeout = \"30001ms\"");
    assert!(
        err.contains("plus 1s (31s)"),
        "1 ms above is not enough: {err}"
    );
    let slow = MINIMAL.replace("[upstream]", "[upstream]\ntimeout = \"2m\"");
    let err = Config::parse(&format!("{slow}\n[route.inbox]\n")).unwrap_err();
    assert!(err.0.join("\n").contains("upstream timeout (2m)"), "{err}");
    assert!(with_inbox("", "visibility_timeout = \"31s\"").is_ok());
}

#[test]
fn retention_need_not_outlast_the_schedule() {
    // Queued records are kept until resolved: a retention shorter than
    // one backoff (1 h at most here) loses nothing, so it is not refused.
    let parsed = with_inbox("retention = \"10m\"", "");
    assert!(parsed.is_ok(), "{:?}", parsed.err());
}

#[test]
fn shadow_mode_queues_nothing() {
    assert_problem(
        "mode = \"shadow\"",
        "",
        "route[0].idempotency.mode: \"shadow\" claims nothing, so nothing can be queued",
    );
    let off = with_inbox("mode = \"shadow\"", "enabled = false").unwrap();
    assert!(off.routes[0].inbox.is_none());
}

#[test]
fn a_good_table_has_no_problems_and_unknown_keys_are_errors() {
    let good = parsed(
        "",
        "on = [\"5xx\", \"429\", \"refused\", \"timeout\"]\nack_status = 200\nack_body = \"success\"\n\
         ack_content_type = \"text/plain\"\nmax_attempts = 12\nbackoff = \"30s\"\nmax_backoff = \"1h\"\n\
         concurrency = 4\nvisibility_timeout = \"60s\"",
    );
    assert!(good.on.timeout && good.on.refused);
    assert_problem("", "retries = 3", "retries");
}

#[test]
fn delivered_statuses_default_to_2xx_and_never_overlap_what_is_queued() {
    let inbox = parsed("", "");
    assert!(inbox.delivered.contains(200) && inbox.delivered.contains(299));
    for not in [401, 403, 404, 409, 500] {
        assert!(!inbox.delivered.contains(not), "{not}");
    }
    let custom = parsed("", "delivered_status = [\"2xx\", \"409\"]");
    assert!(custom.delivered.contains(409));
    assert_problem(
        "",
        "delivered_status = [\"2xx\", \"5xx\"]",
        "route[0].inbox.delivered_status: 500 is also in inbox.on",
    );
    assert_problem(
        "",
        "delivered_status = []",
        "route[0].inbox.delivered_status: must list at least one status",
    );
}

#[test]
fn the_backlog_bound_defaults_high_and_is_never_zero() {
    assert_eq!(parsed("", "").max_queued, 100_000);
    assert_eq!(parsed("", "max_queued = 3").max_queued, 3);
    assert_problem(
        "",
        "max_queued = 0",
        "route[0].inbox.max_queued: must be at least 1",
    );
}
