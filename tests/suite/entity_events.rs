//! `[route.entity] event` and `mode = "shadow"` end to end: the same state
//! with a new event (a second partial refund) is a change the handler
//! sees, the same event again a repeat; a machine in shadow mode forwards
//! everything and counts what it would have refused or repeated.

use crate::entity::MACHINE;
use crate::support::*;

/// A notice `id` saying order `order` is `status`, for refund `refund`
/// when given.
fn refund_notice(id: &str, order: &str, status: &str, refund: Option<&str>) -> String {
    match refund {
        Some(refund) => {
            format!(r#"{{"id":"{id}","order":"{order}","status":"{status}","refund":"{refund}"}}"#)
        }
        None => format!(r#"{{"id":"{id}","order":"{order}","status":"{status}"}}"#),
    }
}

async fn a_new_event_of_the_same_state_reaches_the_handler(kind: StoreKind) {
    let upstream = Upstream::start().await;
    let extra = format!("{MACHINE}event = \"json:/refund\"\n");
    let (store, _redis, _dir) = fresh_store(kind);
    let gate = Gate::start(&config_text(&store, &upstream.url(), &extra)).await;
    let url = gate.url("/notify");
    let send = |id: &'static str, refund: Option<&'static str>| {
        let url = url.clone();
        async move { deliver(&url, &refund_notice(id, "o1", "success", refund)).await }
    };
    let paid = send("n0", None).await;
    assert_eq!((paid.status, paid.replayed()), (200, Some("false")));
    // Each partial refund is another "success" with its own refund id.
    let first = send("n1", Some("rf-1")).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    // The same refund notified again under another notice id: a repeat.
    let again = send("n2", Some("rf-1")).await;
    assert_eq!((again.status, again.replayed()), (200, Some("true")));
    let second = send("n3", Some("rf-2")).await;
    assert_eq!((second.status, second.replayed()), (200, Some("false")));
    // Without an event, the same state is a repeat as before.
    let plain = send("n4", None).await;
    assert_eq!((plain.status, plain.replayed()), (200, Some("true")));
    assert_eq!(upstream.calls(), 3);
    // An empty event is refused like any bad field, and leaves nothing.
    let empty = deliver(&url, &refund_notice("n5", "o1", "success", Some(""))).await;
    assert_eq!(
        (empty.status, empty.reason().as_deref()),
        (400, Some("field_invalid"))
    );
    gate.stop().await;
}

#[tokio::test]
async fn a_new_event_of_the_same_state_reaches_the_handler_on_redis() {
    a_new_event_of_the_same_state_reaches_the_handler(StoreKind::Redis).await;
}

#[tokio::test]
async fn a_new_event_of_the_same_state_reaches_the_handler_on_the_embedded_store() {
    a_new_event_of_the_same_state_reaches_the_handler(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_in_shadow_mode_forwards_everything_and_counts_what_it_would_refuse() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let extra = format!("{MACHINE}mode = \"shadow\"\n");
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), &extra));
    let url = gate.url("/notify");
    for (id, status) in [("m1", "success"), ("m2", "failed"), ("m3", "success")] {
        let answer = deliver(&url, &refund_notice(id, "o2", status, None)).await;
        assert_eq!(
            (answer.status, answer.replayed()),
            (200, Some("false")),
            "{id}"
        );
    }
    assert_eq!(upstream.calls(), 3, "every notice reaches the handler");
    let refused =
        "idemgate_entity_discrepancies_total{route=\"pay\",from=\"success\",to=\"failed\"}";
    assert_eq!(metric(gate.admin, refused).await, Some(1.0));
    let repeats = "idemgate_entity_repeats_total{route=\"pay\",state=\"success\"}";
    assert_eq!(metric(gate.admin, repeats).await, Some(1.0));
}
