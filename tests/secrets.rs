//! Secret rotation without a restart: a `file:` secret is re-read on SIGHUP.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_file_secrets() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("webhook-secret");
    std::fs::write(&secret_file, "first-secret\n").unwrap();
    let text = config_text(&redis_store(&redis), &upstream.url(), "").replace(
        &format!("secrets = [\"literal:{SECRET}\", \"literal:previous-secret\"]"),
        &format!("secrets = [\"file:{}\"]", secret_file.display()),
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let delivery = |secret: &str, id: String| {
        let (url, body) = (url.clone(), payment(&id));
        let headers = signed_with(secret, now_secs(), &body);
        async move { send("POST", &url, &headers, body).await.status }
    };
    assert_eq!(delivery("first-secret", "p-r1".into()).await, 200);
    assert_eq!(delivery("second-secret", "p-r2".into()).await, 401);

    std::fs::write(&secret_file, "second-secret\n").unwrap();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &gate.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let mut rotated = false;
    for i in 0..50 {
        if delivery("second-secret", format!("p-r3-{i}")).await == 200 {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rotated, "the new secret verifies after SIGHUP");
    assert_eq!(
        delivery("first-secret", "p-r4".into()).await,
        401,
        "the old one no longer does"
    );
}
