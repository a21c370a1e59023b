//! Secrets: a `file:` secret or public key is re-read on SIGHUP (rotation
//! without a restart; an unreadable new key keeps the old one) and, with
//! no signal at all, when a Kubernetes-style `..data` symlink swap changes
//! it; `check-config` prints no credential of any URL.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_file_secrets() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("webhook-secret");
    std::fs::write(&secret_file, "first-secret-0123456789\n").unwrap();
    let text = config_text(&redis_store(&redis), &upstream.url(), "").replace(
        &format!("secrets = [\"literal:{SECRET}\", \"literal:previous-secret-0123456789\"]"),
        &format!("secrets = [\"file:{}\"]", secret_file.display()),
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let delivery = |secret: &str, id: String| {
        let (url, body) = (url.clone(), payment(&id));
        let headers = signed_with(secret, now_secs(), &body);
        async move { send("POST", &url, &headers, body).await.status }
    };
    assert_eq!(delivery("first-secret-0123456789", "p-r1".into()).await, 200);
    assert_eq!(delivery("second-secret-0123456789", "p-r2".into()).await, 401);

    std::fs::write(&secret_file, "second-secret-0123456789\n").unwrap();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &gate.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let mut rotated = false;
    for i in 0..50 {
        if delivery("second-secret-0123456789", format!("p-r3-{i}")).await == 200 {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rotated, "the new secret verifies after SIGHUP");
    assert_eq!(
        delivery("first-secret-0123456789", "p-r4".into()).await,
        401,
        "the old one no longer does"
    );
}

/// Swaps `dir/..data` to a new directory holding `secret`, as the kubelet
/// updates a Secret volume: new directory, new symlink, rename over.
fn kubelet_swap(dir: &std::path::Path, generation: u32, secret: &str) {
    let target = dir.join(format!("..2026_12_01_{generation}"));
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("webhook-secret"), secret).unwrap();
    let staged = dir.join("..data_tmp");
    std::os::unix::fs::symlink(&target, &staged).unwrap();
    std::fs::rename(&staged, dir.join("..data")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_secret_swap_is_seen_without_sighup() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    kubelet_swap(dir.path(), 1, "first-secret-0123456789\n");
    let secret_file = dir.path().join("webhook-secret");
    std::os::unix::fs::symlink("..data/webhook-secret", &secret_file).unwrap();
    let text = format!(
        "[secrets]\nwatch_interval = \"200ms\"\n{}",
        config_text(&redis_store(&redis), &upstream.url(), "").replace(
            &format!("secrets = [\"literal:{SECRET}\", \"literal:previous-secret-0123456789\"]"),
            &format!("secrets = [\"file:{}\"]", secret_file.display()),
        )
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let sequence = std::sync::atomic::AtomicU32::new(0);
    let delivery = |secret: &str| {
        let n = sequence.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (url, body) = (url.clone(), payment(&format!("p-k8s-{n}")));
        let headers = signed_with(secret, now_secs(), &body);
        async move { send("POST", &url, &headers, body).await.status }
    };
    assert_eq!(delivery("first-secret-0123456789").await, 200);
    assert_eq!(delivery("second-secret-0123456789").await, 401);

    kubelet_swap(dir.path(), 2, "second-secret-0123456789\n");
    let swapped = std::time::Instant::now();
    poll(
        "the swapped secret to verify without SIGHUP",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || (delivery("second-secret-0123456789").await == 200).then_some(()),
    )
    .await;
    eprintln!("rotation seen after {:?}", swapped.elapsed());
    assert_eq!(
        delivery("first-secret-0123456789").await,
        401,
        "the old one is refused"
    );
}

/// WeChat Pay v3 certificate rotation end to end: the route trusts the
/// certificate in a `file:` public key; a notification signed by the next
/// platform key is refused until the file holds the next certificate and
/// the process got SIGHUP, then accepted; a SIGHUP after the file became
/// garbage keeps the key loaded before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_file_public_keys() {
    const SERIAL_2: &str = "7E4B2C19A0D3F5E6B7C8D9E0F1A2B3C4D5E6F708";
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("platform.pem");
    let cert =
        |name: &str| std::fs::read(repo_path(&format!("tests/vectors/keys/{name}"))).unwrap();
    std::fs::write(&pem, cert("wechatpay-1.cert.pem")).unwrap();
    let routes = format!(
        "[[route]]\nname = \"wechatpay\"\npath_prefix = \"/hooks/wechatpay/v3\"\n\
         [route.signature]\nscheme = \"wechatpay-v3\"\npublic_keys = [{}]\n",
        serde_json::to_string(&format!("file:{}", pem.display())).unwrap()
    );
    let text = format!(
        "{}{routes}",
        base_sections(
            &embedded_store(&dir.path().join("store.redb")),
            &upstream.url()
        )
    );
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(&text, &[], Some(&log));
    let url = gate.url("/hooks/wechatpay/v3?tenant=acme");
    let sequence = std::sync::atomic::AtomicU32::new(0);
    let delivery = || {
        let n = sequence.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = format!("{{\"id\":\"EV-rotation-{n}\",\"event_type\":\"TRANSACTION.SUCCESS\"}}");
        let headers = wechatpay_v3_headers(
            "wechatpay-2",
            SERIAL_2,
            now_secs(),
            &format!("nonce-{n}"),
            &body,
        );
        let url = url.clone();
        async move { send("POST", &url, &headers, body).await }
    };
    let hup = || {
        let status = std::process::Command::new("kill")
            .args(["-HUP", &gate.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };

    let refused = delivery().await;
    assert_eq!(
        (refused.status, refused.reason().as_deref()),
        (401, Some("signature_invalid")),
        "{refused:?}"
    );

    std::fs::write(&pem, cert("wechatpay-2.cert.pem")).unwrap();
    hup();
    poll(
        "the new certificate to verify after SIGHUP",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || (delivery().await.status == 200).then_some(()),
    )
    .await;
    assert_eq!(delivery().await.status, 200);

    std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    hup();
    poll(
        "the failed reload to be logged",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || {
            std::fs::read_to_string(&log)
                .is_ok_and(|text| text.contains("keeping the previous value"))
                .then_some(())
        },
    )
    .await;
    let kept = delivery().await;
    assert_eq!(kept.status, 200, "the old key still verifies: {kept:?}");
    assert_eq!(upstream.calls(), 3, "every accepted event once");
}

#[test]
fn check_config_never_prints_url_credentials() {
    const PASSWORDS: [&str; 4] = ["upstream-pw", "route-pw", "redis-pw", "sentinel-pw"];
    let store = "kind = \"redis\"\nurl = \"redis-sentinel://app:redis-pw@127.0.0.1:26379/0?\
                 sentinelServiceName=mymaster&sentinelPassword=sentinel-pw&node=127.0.0.1:26380\"";
    let text = config_text(store, "http://user:upstream-pw@127.0.0.1:3000", "").replace(
        "path_prefix = \"/notify\"",
        "path_prefix = \"/notify\"\nupstream = \"http://route:route-pw@127.0.0.1:3001\"",
    );
    let (code, printed) = check_config(&text);
    assert_eq!(code, Some(0), "{printed}");
    for password in PASSWORDS {
        assert!(
            !printed.contains(password),
            "{password} printed:\n{printed}"
        );
    }
    for redacted in [
        "http://user:<redacted>@127.0.0.1:3000/",
        "http://route:<redacted>@127.0.0.1:3001/",
        "redis-sentinel://app:<redacted>@127.0.0.1:26379/0?",
        "sentinelPassword=<redacted>&node=127.0.0.1:26380",
    ] {
        assert!(printed.contains(redacted), "{redacted} missing:\n{printed}");
    }

    // Errors quoting a rejected URL redact it too.
    let wrong = text
        .replace(
            "http://user:upstream-pw@127.0.0.1:3000",
            "https://user:upstream-pw@127.0.0.1:3000",
        )
        .replace("redis-sentinel://", "memcached://");
    let (code, printed) = check_config(&wrong);
    assert_eq!(code, Some(2), "{printed}");
    assert!(
        printed.contains("upstream.url") && printed.contains("store.url"),
        "{printed}"
    );
    for password in PASSWORDS {
        assert!(
            !printed.contains(password),
            "{password} printed:\n{printed}"
        );
    }
}
