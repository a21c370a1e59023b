//! Secrets: a `file:` secret is re-read on SIGHUP (rotation without a
//! restart), and `check-config` prints no credential of any URL.

use std::time::Duration;

use crate::support::*;

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

/// `idemgate check-config` on `text`: (exit code, stdout + stderr).
fn check_config(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run check-config");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), printed)
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
