//! Bounded answers (docs/contract.md §4 rule 11): an upstream answer is
//! stored up to `[limits] max_stored_answer_bytes`; a larger one streams to
//! the sender, is not stored, and its key still never executes again.
//! Concurrent duplicates of a large stored answer share one store read, so
//! they do not starve unrelated deliveries. Real redis-server, real
//! upstream.

use std::time::Duration;

use crate::support::{
    GateProcess, RedisServer, Reply, Upstream, admin_get, config_text, deliver, payment,
    redis_store, sample,
};
use bytes::Bytes;

/// An answer body of `len` bytes whose content depends on the position.
fn answer_of(len: usize) -> Bytes {
    (0..len).map(|i| u8::try_from(i % 251).unwrap()).collect()
}

/// An upstream that answers each payment with the body size its id names
/// (`"p-<len>-…"`).
async fn sized_upstream() -> Upstream {
    Upstream::scripted(|_, body| {
        let text = String::from_utf8_lossy(body);
        let len = text
            .split("\"p-")
            .nth(1)
            .and_then(|rest| rest.split('-').next())
            .and_then(|len| len.parse().ok())
            .unwrap_or(2);
        Reply::with_body(answer_of(len))
    })
    .await
}

fn with_limit(text: &str, limit: usize) -> String {
    text.replace(
        "[limits]\n",
        &format!("[limits]\nmax_stored_answer_bytes = {limit}\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_the_limit_is_stored_and_a_larger_one_is_not() {
    let redis = RedisServer::start();
    let upstream = sized_upstream().await;
    let gate = GateProcess::start(&with_limit(
        &config_text(&redis_store(&redis), &upstream.url(), ""),
        1024,
    ));

    // Exactly the limit: stored and replayed byte for byte.
    let exact = payment("p-1024-exact");
    let first = deliver(&gate.url("/notify"), &exact).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    assert_eq!(first.body, answer_of(1024));
    let again = deliver(&gate.url("/notify"), &exact).await;
    assert_eq!((again.status, again.replayed()), (200, Some("true")));
    assert_eq!(again.body, answer_of(1024));

    // One byte more: the sender gets all of it, the store keeps none of it,
    // and duplicates are answered without running again.
    let over = payment("p-1025-over");
    let first = deliver(&gate.url("/notify"), &over).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    assert_eq!(first.body, answer_of(1025));
    for _ in 0..3 {
        let again = deliver(&gate.url("/notify"), &over).await;
        assert_eq!((again.status, again.replayed()), (200, Some("true")));
        assert_eq!(
            again.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(again.reason().as_deref(), Some("answer_not_stored"));
    }
    assert_eq!(upstream.calls(), 2);

    let (_, metrics) = admin_get(gate.admin, "/metrics").await;
    let series = |delivery: &str| {
        sample(
            &metrics,
            &format!("idemgate_answers_not_stored_total{{route=\"pay\",delivery=\"{delivery}\"}}"),
        )
    };
    assert_eq!((series("first"), series("replay")), (Some(1.0), Some(3.0)));
    assert_eq!(
        sample(
            &metrics,
            "idemgate_requests_total{route=\"pay\",outcome=\"replayed\",status_class=\"2xx\"}"
        ),
        Some(4.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_answer_streams_through_and_is_not_stored() {
    let redis = RedisServer::start();
    let upstream = sized_upstream().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let huge = payment("p-12582912-huge");
    let first = deliver(&gate.url("/notify"), &huge).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    assert!(
        first.body == answer_of(12 * 1024 * 1024),
        "the whole answer reached the sender"
    );
    let keys = redis.keys("idemgate:pay:*");
    let [key] = keys.as_slice() else {
        panic!("one record expected: {keys:?}")
    };
    let size: usize = redis.cli(&["STRLEN", key]).trim().parse().unwrap();
    assert!(size < 1024, "the record holds no body: {size} bytes");
    let again = deliver(&gate.url("/notify"), &huge).await;
    assert_eq!(again.reason().as_deref(), Some("answer_not_stored"));
    assert_eq!(upstream.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_duplicates_of_a_large_answer_leaves_other_keys_alone() {
    let redis = RedisServer::start();
    let upstream = sized_upstream().await;
    let gate = GateProcess::start(&config_text(&redis_store(&redis), &upstream.url(), ""));
    let large = payment("p-1048576-large");
    let first = deliver(&gate.url("/notify"), &large).await;
    assert_eq!((first.status, first.replayed()), (200, Some("false")));
    redis.reset_stats();

    let storm: Vec<_> = (0..64)
        .map(|_| {
            let (url, body) = (gate.url("/notify"), large.clone());
            tokio::spawn(async move { deliver(&url, &body).await })
        })
        .collect();
    let others: Vec<_> = (0..16)
        .map(|i| {
            let url = gate.url("/notify");
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5 * i)).await;
                deliver(&url, &payment(&format!("p-2-other{i}"))).await
            })
        })
        .collect();
    for duplicate in storm {
        let answer = duplicate.await.unwrap();
        assert_eq!(
            (answer.status, answer.replayed()),
            (200, Some("true")),
            "{:?}",
            answer.reason()
        );
        assert!(answer.body == answer_of(1024 * 1024));
    }
    for other in others {
        let answer = other.await.unwrap();
        assert_eq!(
            (answer.status, answer.replayed()),
            (200, Some("false")),
            "an unrelated delivery was held up: {:?}",
            answer.reason()
        );
    }
    assert_eq!(upstream.calls(), 1 + 16);
    // Each first delivery makes two calls (claim, complete); the rest are
    // the duplicates' reads.
    let calls = redis.command_counts().get("evalsha").copied().unwrap_or(0);
    let reads = calls.saturating_sub(2 * 16);
    println!("store reads for 64 concurrent duplicates: {reads}");
    assert!(reads <= 32, "duplicates share store reads: {reads} reads");
}
