//! The embedded store end to end: no Redis, and records survive a restart.

use crate::support::*;

#[tokio::test]
async fn a_record_survives_an_idemgate_restart() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let text = config_text(&store, &upstream.url(), "");
    let body = payment("p-embedded");

    let gate = Gate::start(&text).await;
    let first = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(first.replayed(), Some("false"));
    gate.stop().await;

    let gate = Gate::start(&text).await;
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.replayed(), Some("true"));
    assert_eq!(retry.body, first.body);
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_deduplicates_concurrent_copies() {
    let dir = tempfile::tempdir().unwrap();
    let upstream =
        Upstream::scripted(|_, _| Reply::slow(std::time::Duration::from_millis(300))).await;
    let gate = Gate::start(&config_text(
        &embedded_store(&dir.path().join("c.redb")),
        &upstream.url(),
        "",
    ))
    .await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let url = gate.url("/notify");
            tokio::spawn(async move { deliver(&url, &payment("p-embedded-burst")).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().status, 200);
    }
    assert_eq!(upstream.calls(), 1);
    gate.stop().await;
}
