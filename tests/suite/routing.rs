//! No side door (docs/contract.md §4 rule 9): every spelling of a protected
//! path or method that a backend would plausibly route to the protected
//! handler is either handled as that route (verified: a forged signature
//! gets 401 and nothing reaches the upstream) or refused with 400
//! `path_ambiguous` — never passed through. Requests go over raw TCP, so no
//! client library normalises the method or the target on the way. Real
//! Redis, real upstream.

use crate::support::*;

/// What stage 1 must make of a variant of `POST /notify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Handled as the route: verified, claimed, forwarded once.
    Route,
    /// Refused by idemgate: 400 `path_ambiguous`.
    Refused,
    /// Refused by hyper before idemgate sees it (400 without a reason, or
    /// the connection closed): not forwarded either.
    Hyper,
    /// Not the protected endpoint: unmatched rules apply.
    Elsewhere,
}

use Expect::{Elsewhere, Hyper, Refused, Route};

/// Variants of the route `POST /notify` (`methods = ["POST"]`, not case
/// sensitive), as an attacker would spell them: (method, raw target,
/// extra header, expectation).
/// One row: method, raw target, an extra header, what it must get.
type Variant = (
    &'static str,
    Vec<u8>,
    Option<(&'static str, &'static str)>,
    Expect,
);

fn variants() -> Vec<Variant> {
    let plain = |m: &'static str, t: &str, e| (m, t.as_bytes().to_vec(), None, e);
    let mut table = vec![
        // the route itself, and what the canonical form settles
        plain("POST", "/notify", Route),
        plain("POST", "/notify?a=1", Route),
        plain("POST", "/notify/sub", Route),
        plain("POST", "/NOTIFY", Route),
        plain("POST", "/Notify", Route),
        plain("POST", "/nOtIfY/Sub", Route),
        plain("POST", "/notify/", Route),
        plain("POST", "/notify//", Route),
        plain("POST", "//notify", Route),
        plain("POST", "///notify///", Route),
        plain("POST", "/./notify", Route),
        plain("POST", "/notify/.", Route),
        plain("POST", "/notify/./", Route),
        plain("POST", "/other/../notify", Route),
        plain("POST", "/a/b/../../notify", Route),
        plain("POST", "/../notify", Route),
        plain("POST", "/other/%2e%2e/notify", Route),
        plain("POST", "/other/.%2E/notify", Route),
        plain("POST", "/other/..;/notify", Route),
        plain("POST", "/notify;jsessionid=1", Route),
        plain("POST", "/notify;a=b/x", Route),
        plain("POST", "/;x/notify", Route),
        plain("POST", "/NOTIFY;JSESSIONID=1", Route),
        plain("POST", "/%6Eotify", Route),
        plain("POST", "/%6e%6F%74%69%66%79", Route),
        plain("POST", "/n%6fTIFY", Route),
        plain("POST", "/notif%79", Route),
        plain("POST", "/notify/%7Euser", Route),
        plain("POST", "/notify/%2D%5F%2E%7E", Route),
        plain("POST", "http://example.com/notify", Route),
        plain("POST", "http://example.com/NOTIFY;x=1", Route),
        plain("POST", "/notify#fragment", Route),
        plain("post", "/notify", Route),
        plain("Post", "/notify", Route),
        plain("pOST", "/NOTIFY", Route),
        // what the canonical form can not settle: refused
        plain("POST", "/notify.json", Refused),
        plain("POST", "/notify.xml", Refused),
        plain("POST", "/NOTIFY.json", Refused),
        plain("POST", "/notify.", Refused),
        plain("POST", "/notify..", Refused),
        plain("POST", "/notify%2e", Refused),
        plain("POST", "/notify%20", Refused),
        plain("POST", "/notify%20/x", Refused),
        plain("POST", "/%20notify", Refused),
        plain("POST", "/notify%09", Refused),
        plain("POST", "/notify%0a", Refused),
        plain("POST", "/notify%0D%0A", Refused),
        plain("POST", "/notify%00", Refused),
        plain("POST", "/notify%00.html", Refused),
        plain("POST", "/notify%3Bjsessionid=1", Refused),
        plain("POST", "/notify%2F", Refused),
        plain("POST", "/notify%2fx", Refused),
        plain("POST", "/%2Fnotify", Refused),
        plain("POST", "/other%2F..%2Fnotify", Refused),
        plain("POST", "/notify%5C", Refused),
        plain("POST", "/notify\\", Refused),
        plain("POST", "/notify\\x", Refused),
        plain("POST", "/x\\..\\notify", Refused),
        plain("POST", "/notify%c0%af", Refused),
        plain("POST", "/%c0%afnotify", Refused),
        plain("POST", "/x/..%c0%af..%c0%afnotify", Refused),
        plain("POST", "/notify%zz", Refused),
        plain("POST", "/notify%2", Refused),
        plain("POST", "/notify%", Refused),
        plain("POST", "/notify%252e", Refused),
        plain("POST", "/%256Eotify", Refused),
        plain("POST", "/notify/../other", Refused),
        plain("POST", "/notify/%2e%2e/other", Refused),
        plain("POST", "/notify::$DATA", Refused),
        plain("POST", "/notify~1", Refused),
        plain("POST", "/notify%3Fa=1", Refused),
        plain("POST", "/notify%23x", Refused),
        plain("POST", "/%EF%BD%8Eotify", Refused),
        plain("POST", "/not%C4%B0fy", Refused),
        plain("POST", "http://example.com/notify.json", Refused),
        ("POST", b"/\xef\xbd\x8eotify".to_vec(), None, Refused),
        // IIS %u escapes, %25 stacked four times, compatibility forms and
        // default-ignorable code points, and a `_method` parameter
        plain("POST", "/%u006Eotify", Refused),
        plain("POST", "/no%u0074ify", Refused),
        plain("POST", "/%252525256Eotify", Refused),
        plain("POST", "/%EF%BC%8Fnotify", Refused),
        plain("POST", "/other%EF%BC%8F..%EF%BC%8Fnotify", Refused),
        plain("POST", "/no%E2%80%8Btify", Refused),
        plain("POST", "/noti%C2%ADfy", Refused),
        plain("GET", "/notify?_method=POST", Refused),
        plain("PUT", "/notify?%5Fmethod=post", Refused),
        (
            "GET",
            b"/notify".to_vec(),
            Some(("x-http-method-override", "POST")),
            Refused,
        ),
        (
            "PUT",
            b"/notify".to_vec(),
            Some(("x-method-override", "post")),
            Refused,
        ),
        // hyper refuses these itself
        plain("POST ", "/notify", Hyper),
        plain("POST", "/notify /x", Hyper),
        plain("POST", "/notify\t", Hyper),
        ("POST", b"/notify\0".to_vec(), None, Hyper),
        ("POST", b"/notify\xff".to_vec(), None, Hyper),
        ("POST", b"/notify\xc0\xaf".to_vec(), None, Hyper),
        // other endpoints: not this route
        plain("POST", "/notifyx", Elsewhere),
        plain("POST", "/notify-v2", Elsewhere),
        plain("POST", "/notify_old", Elsewhere),
        plain("POST", "/notif", Elsewhere),
        plain("POST", "/other", Elsewhere),
        plain("POST", "/other/notify", Elsewhere),
        plain("POST", "/static/my%20file.pdf", Elsewhere),
        plain("POST", "/other%2Fx", Elsewhere),
        plain("POST", "/%6Eotify%2Dv2", Elsewhere),
        plain("GET", "/notify", Elsewhere),
        plain("PUT", "/NOTIFY", Elsewhere),
    ];
    // `;` parameters on any segment of a deeper path
    table.push(plain("POST", "/notify;x=1/sub;y=2", Route));
    table
}

fn forged(body: &str) -> Headers {
    signed_with("not-the-secret", now_secs(), body)
}

/// A forged delivery under every variant: nothing that reaches the
/// protected handler gets through unverified.
#[tokio::test]
async fn forged_variants_never_reach_the_protected_handler() {
    let (redis, upstream, gate) = redis_gate("").await;
    let body = payment("forged");
    let mut failures = Vec::new();
    for (method, target, extra, expect) in variants() {
        let mut headers = forged(&body);
        if let Some((name, value)) = extra {
            headers.push((name.to_owned(), value.to_owned()));
        }
        let before = upstream.calls();
        let answer = send_raw(gate.addr, method, &target, &headers, &body).await;
        let reached = upstream.calls() - before;
        let shown = format!("{method:?} {:?}", String::from_utf8_lossy(&target));
        // the table of what each variant gets (shown with --nocapture)
        println!(
            "{shown}: {} {}, upstream reached {reached}",
            answer.status,
            answer.reason().unwrap_or_default()
        );
        let ok = match expect {
            Route => {
                answer.status == 401
                    && answer.reason().as_deref() == Some("signature_invalid")
                    && reached == 0
            }
            Refused => {
                answer.status == 400
                    && answer.reason().as_deref() == Some("path_ambiguous")
                    && reached == 0
            }
            Hyper => (answer.status == 400 || answer.status == 0) && reached == 0,
            // unmatched = "forward": passed through untouched
            Elsewhere => answer.status == 200 && reached == 1,
        };
        if !ok {
            failures.push(format!(
                "{shown}: expected {expect:?}, got {} {:?}, upstream reached {reached} time(s)",
                answer.status,
                answer.reason()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} variant(s) misrouted:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The replay cache's epoch marker is written by the health check, and
    // the generation marker by the settings check, on their own clocks:
    // not a request's doing.
    let touched: Vec<String> = redis
        .keys("idemgate:*")
        .into_iter()
        .filter(|key| !key.contains("replay-cache-epoch") && key != "idemgate:generation")
        .collect();
    assert_eq!(
        touched,
        Vec::<String>::new(),
        "no forged request touched the store"
    );
    gate.stop().await;
}

/// The reported reproduction: one validly signed body sent under seven
/// spellings executes once.
#[tokio::test]
async fn a_signed_body_under_seven_variants_executes_once() {
    let (_redis, upstream, gate) = redis_gate("").await;
    let body = payment("seven");
    let attempts: [(&str, &str); 7] = [
        ("POST", "/notify"),
        ("POST", "/NOTIFY"),
        ("POST", "/Notify"),
        ("POST", "/notify;jsessionid=1"),
        ("POST", "/notify.json"),
        ("POST", "/notify%20"),
        ("post", "/notify"),
    ];
    let mut statuses = Vec::new();
    for (method, target) in attempts {
        let answer = send_raw(gate.addr, method, target.as_bytes(), &signed(&body), &body).await;
        statuses.push((method, target, answer.status, answer.reason()));
    }
    assert_eq!(upstream.calls(), 1, "executed once: {statuses:?}");
    for (method, target, status, reason) in &statuses {
        assert!(
            *status == 200 || (*status == 400 && reason.as_deref() == Some("path_ambiguous")),
            "{method} {target}: {status} {reason:?}"
        );
    }
    gate.stop().await;
}

/// A captured variant reaches the upstream exactly as sent: method and
/// target byte for byte, nothing rewritten to the canonical form.
#[tokio::test]
async fn captured_variants_are_forwarded_as_sent() {
    let (redis, upstream, gate) = redis_gate("").await;
    let sent = [
        ("post", "/NOTIFY;jsessionid=1?x=%41"),
        ("POST", "/other/../NoTiFy//sub/%2e/"),
        ("Post", "/%6Eotify"),
    ];
    for (n, (method, target)) in sent.iter().enumerate() {
        let body = payment(&format!("as-sent-{n}"));
        let answer = send_raw(gate.addr, method, target.as_bytes(), &signed(&body), &body).await;
        assert_eq!(answer.status, 200, "{method} {target}");
    }
    let received = upstream.targets();
    let expected: Vec<(String, String)> = sent
        .iter()
        .map(|(m, t)| ((*m).to_owned(), (*t).to_owned()))
        .collect();
    assert_eq!(received, expected);
    assert_eq!(redis.keys("idemgate:pay:*").len(), 3, "each was claimed");
    gate.stop().await;
}

/// `unmatched = "reject"`: the same variants are captured or refused, and
/// only requests for other endpoints get 404.
#[tokio::test]
async fn unmatched_reject_treats_variants_the_same_way() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = format!(
        "unmatched = \"reject\"\n{}",
        config_text(&redis_store(&redis), &upstream.url(), "")
    );
    let gate = Gate::start(&text).await;
    let body = payment("reject-mode");
    let mut failures = Vec::new();
    for (method, target, extra, expect) in variants() {
        let mut headers = forged(&body);
        if let Some((name, value)) = extra {
            headers.push((name.to_owned(), value.to_owned()));
        }
        let answer = send_raw(gate.addr, method, &target, &headers, &body).await;
        let (status, reason) = (answer.status, answer.reason());
        let ok = match expect {
            Route => status == 401,
            Refused => status == 400 && reason.as_deref() == Some("path_ambiguous"),
            Hyper => status == 400 || status == 0,
            Elsewhere => status == 404 && reason.as_deref() == Some("route_not_found"),
        };
        if !ok {
            failures.push(format!(
                "{method:?} {:?}: expected {expect:?}, got {status} {reason:?}",
                String::from_utf8_lossy(&target)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(upstream.calls(), 0, "nothing reached the upstream");
    gate.stop().await;
}

/// `case_sensitive = true`: the operator states the backend tells `/NOTIFY`
/// from `/notify`, so only the exact case is the route; the other tricks
/// are still settled or refused.
#[tokio::test]
async fn a_case_sensitive_route_matches_its_own_case_only() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "").replace(
        "path_prefix = \"/notify\"",
        "path_prefix = \"/notify\"\ncase_sensitive = true",
    );
    let gate = Gate::start(&text).await;
    let body = payment("case");
    let cases: [(&str, &str, u16); 6] = [
        ("POST", "/notify", 401),
        ("post", "/notify", 401),
        ("POST", "//notify;x=1/", 401),
        ("POST", "/notify.json", 400),
        ("POST", "/NOTIFY", 200),
        ("POST", "/Notify.json", 200),
    ];
    for (method, target, status) in cases {
        let answer = send_raw(gate.addr, method, target.as_bytes(), &forged(&body), &body).await;
        assert_eq!(answer.status, status, "{method} {target}");
    }
    assert_eq!(
        upstream.calls(),
        2,
        "only the other-case paths passed through"
    );
    gate.stop().await;
}

/// Shadow mode forwards everything and counts what enforce would have
/// refused: an ambiguous spelling is forwarded as sent, like a forged one.
#[tokio::test]
async fn shadow_mode_forwards_ambiguous_spellings() {
    let (_redis, upstream, gate) = redis_gate("mode = \"shadow\"").await;
    let body = payment("shadow");
    let answer = send_raw(gate.addr, "POST", b"/notify.json", &forged(&body), &body).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        upstream.targets(),
        vec![("POST".to_owned(), "/notify.json".to_owned())]
    );
    gate.stop().await;
}

/// Without a configured key the fingerprint is the key, and its path part
/// is the canonical path: spellings of one path are one delivery.
#[tokio::test]
async fn without_a_key_path_spellings_are_one_delivery() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "")
        .replace("key = [\"json:/id\"]\n", "");
    assert!(!text.contains("key = "), "the route has no key");
    let gate = Gate::start(&text).await;
    let body = payment("no-key");
    let spellings = [
        ("POST", "/notify"),
        ("POST", "/notify/"),
        ("POST", "//notify"),
        ("POST", "/./notify"),
        ("POST", "/%6Eotify"),
        ("POST", "/NOTIFY"),
        ("POST", "/Notify/"),
        ("POST", "/notify;jsessionid=9"),
        ("post", "/notify"),
    ];
    let mut answers = Vec::new();
    for (method, target) in spellings {
        let answer = send_raw(gate.addr, method, target.as_bytes(), &signed(&body), &body).await;
        answers.push((method, target, answer.status));
    }
    assert_eq!(upstream.calls(), 1, "{answers:?}");
    assert!(answers.iter().all(|(_, _, s)| *s == 200), "{answers:?}");
    assert_eq!(redis.keys("idemgate:pay:*").len(), 1);
    gate.stop().await;
}

/// `check-config` lists what each protected route captures and refuses,
/// and warns about `unmatched = "forward"` with a case-sensitive route.
#[test]
fn check_config_prints_the_captured_variants() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    let text = config_text(
        "kind = \"embedded\"\npath = \"/tmp/unused.redb\"",
        "http://127.0.0.1:3000",
        "",
    );
    std::fs::write(&path, &text).unwrap();
    let run = |path: &std::path::Path| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["check-config", "--config"])
            .arg(path)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let printed = run(&path);
    for expected in [
        "route[0] \"pay\" (POST /notify)",
        "handled as the route: ",
        "/NOTIFY",
        "/notify;jsessionid=1",
        "/other/../notify",
        "refused with 400 path_ambiguous: ",
        "/notify.json",
        "/notify%20",
        "/notify%2F",
    ] {
        assert!(printed.contains(expected), "{expected:?} in:\n{printed}");
    }
    assert!(!printed.contains("warning: route[0].case_sensitive"));

    let sensitive = text.replace(
        "path_prefix = \"/notify\"",
        "path_prefix = \"/notify\"\ncase_sensitive = true",
    );
    std::fs::write(&path, sensitive).unwrap();
    let printed = run(&path);
    assert!(
        printed.contains("warning: route[0].case_sensitive: "),
        "{printed}"
    );
    assert!(printed.contains("passed through: /NOTIFY"), "{printed}");
}
