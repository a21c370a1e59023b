//! `idemgate_requests_total`'s `status_class`: the class of the status the
//! sender was answered with, whoever produced it (the handler, a replay of
//! its stored answer, or idemgate's own refusal), with a bounded series set
//! that exists at 0 from start-up (docs/contract.md §7).

use std::collections::BTreeMap;

use crate::support::*;

const METRIC: &str = "idemgate_requests_total";

/// Series per route at start-up: 5 outcomes answered by the handler x 4
/// classes, plus `rejected` x {4xx, 5xx}.
const SERIES_PER_ROUTE: usize = 22;

/// Deliveries whose `id` starts with `fail` get a 500 from the handler;
/// every other one a 200.
async fn failing_upstream() -> Upstream {
    Upstream::scripted(|_, body| {
        let failing = String::from_utf8_lossy(body).contains("\"id\":\"fail");
        Reply::status(if failing { 500 } else { 200 })
    })
    .await
}

/// The (route, outcome, status_class) label set of one series.
fn series(route: &str, outcome: &str, class: &str) -> Labels {
    labels_of(&[
        ("route", route),
        ("outcome", outcome),
        ("status_class", class),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_class_is_the_class_the_sender_was_answered_with() {
    let mut redis = RedisServer::start();
    let upstream = failing_upstream().await;
    // A 500 is stored, so its duplicate is a replayed 5xx.
    let gate = GateProcess::start(&config_text(
        &redis_store(&redis),
        &upstream.url(),
        "cache_status = [\"2xx\", \"500\"]",
    ));
    let url = gate.url("/notify");

    let idle = scrape(gate.admin).await;
    let at_start = idle.series(METRIC);
    assert_eq!(at_start.len(), 2 * SERIES_PER_ROUTE, "{at_start:#?}");
    assert!(at_start.iter().all(|s| s.value == 0.0), "{at_start:#?}");
    for route in ["pay", "_unmatched"] {
        for class in ["4xx", "5xx"] {
            assert_eq!(
                idle.value(METRIC, &series_pairs(route, "rejected", class)),
                Some(0.0)
            );
        }
        for class in ["2xx", "3xx", "other"] {
            assert_eq!(
                idle.value(METRIC, &series_pairs(route, "rejected", class)),
                None,
                "a rejection is never answered {class}"
            );
        }
    }

    // A forwarded 2xx.
    let ok = deliver(&url, &payment("ok-1")).await;
    assert_eq!((ok.status, ok.replayed()), (200, Some("false")));
    // The handler's 500, then its replay.
    let failed = deliver(&url, &payment("fail-1")).await;
    assert_eq!((failed.status, failed.replayed()), (500, Some("false")));
    let replayed = deliver(&url, &payment("fail-1")).await;
    assert_eq!((replayed.status, replayed.replayed()), (500, Some("true")));
    // A rejection: 401 signature_invalid.
    let body = payment("forged-1");
    let forged = send("POST", &url, &signed_with("wrong", now_secs(), &body), body).await;
    assert_eq!(forged.reason().as_deref(), Some("signature_invalid"));
    assert_eq!(forged.status, 401);
    // The store down: 503 store_unavailable.
    redis.stop();
    let refused = deliver(&url, &payment("ok-2")).await;
    assert_eq!(refused.reason().as_deref(), Some("store_unavailable"));
    assert_eq!(refused.status, 503);

    let after = scrape(gate.admin).await;
    let expected: BTreeMap<Labels, f64> = [
        (series("pay", "forwarded", "2xx"), 1.0),
        (series("pay", "forwarded", "5xx"), 1.0),
        (series("pay", "replayed", "5xx"), 1.0),
        (series("pay", "rejected", "4xx"), 1.0),
        (series("pay", "rejected", "5xx"), 1.0),
    ]
    .into();
    after.assert_series(METRIC, &expected);
    assert_eq!(
        after.series(METRIC).len(),
        2 * SERIES_PER_ROUTE,
        "traffic adds no series"
    );
}

fn series_pairs<'a>(route: &'a str, outcome: &'a str, class: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("route", route),
        ("outcome", outcome),
        ("status_class", class),
    ]
}
