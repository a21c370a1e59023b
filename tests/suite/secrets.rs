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
    assert_eq!(
        delivery("first-secret-0123456789", "p-r1".into()).await,
        200
    );
    assert_eq!(
        delivery("second-secret-0123456789", "p-r2".into()).await,
        401
    );

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

/// Adyen's test key from the payment vectors: 64 hex characters.
const ADYEN_KEY: &str = "F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186";

/// A one-item Adyen notification for `psp`, signed with the raw `key`
/// bytes as Adyen signs: base64 HMAC-SHA256 over eight `:`-joined fields.
fn adyen_notification(psp: &str, key: &[u8]) -> String {
    use base64::Engine;
    let content = format!("{psp}::AcmeCOM:order-{psp}:1130:EUR:AUTHORISATION:true");
    let mac = idemgate::signature::mac(
        idemgate::config::Algorithm::Sha256,
        key,
        &[content.as_bytes()],
    );
    let signature = base64::engine::general_purpose::STANDARD.encode(mac);
    serde_json::json!({
        "live": "false",
        "notificationItems": [{"NotificationRequestItem": {
            "pspReference": psp,
            "merchantAccountCode": "AcmeCOM",
            "merchantReference": format!("order-{psp}"),
            "amount": {"value": 1130, "currency": "EUR"},
            "eventCode": "AUTHORISATION",
            "success": "true",
            "additionalData": {"hmacSignature": signature}
        }}]
    })
    .to_string()
}

/// A weak secret on reload, reproduced on the real binary: the Adyen key
/// file becomes `00` (one key byte), then whitespace, then a truncated key,
/// each followed by SIGHUP. Every time the genuine key stays, a delivery
/// signed with the weak key is refused, the failure is logged at ERROR
/// naming the route and never the key, and counted by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weak_or_truncated_key_file_keeps_the_old_key_on_sighup() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("adyen-hmac-key");
    std::fs::write(&key_file, format!("{ADYEN_KEY}\n")).unwrap();
    let text = preset_config_text(
        &embedded_store(&dir.path().join("store.redb")),
        &upstream.url(),
        "adyen",
        &[],
    )
    .replace(
        "secrets = []",
        &format!("secrets = [\"file:{}\"]", key_file.display()),
    );
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(&text, &[], Some(&log));
    let url = gate.url("/hook");
    let genuine = hex::decode(ADYEN_KEY).unwrap();
    let deliver = |psp: String, key: Vec<u8>| {
        let url = url.clone();
        async move {
            let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
            send("POST", &url, &headers, adyen_notification(&psp, &key)).await
        }
    };
    assert_eq!(deliver("PSP-0".into(), genuine.clone()).await.status, 200);

    let weak: [(&str, &[u8]); 3] = [
        ("00\n", &[0x00]),
        (" \n", b" "),
        (&ADYEN_KEY[..62], &genuine[..31]),
    ];
    for (round, (content, weak_key)) in weak.into_iter().enumerate() {
        std::fs::write(&key_file, content).unwrap();
        let hup = std::process::Command::new("kill")
            .args(["-HUP", &gate.pid().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
        poll(
            "the refused reload to be logged",
            Duration::from_secs(5),
            Duration::from_millis(50),
            async || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                (text.matches("keeping the previous value").count() > round).then_some(())
            },
        )
        .await;
        let forged = deliver(format!("PSP-W{round}"), weak_key.to_vec()).await;
        assert_eq!(
            (forged.status, forged.reason().as_deref()),
            (401, Some("signature_invalid")),
            "{content:?}: signed with the weak key"
        );
        let kept = deliver(format!("PSP-{}", round + 1), genuine.clone()).await;
        assert_eq!(kept.status, 200, "{content:?}: the genuine key stays");
    }
    assert_eq!(upstream.calls(), 4, "only genuine deliveries got through");

    let series = "idemgate_secret_reload_failures_total{route=\"hook\",reason=\"weak\"}";
    assert_eq!(metric(gate.admin, series).await, Some(3.0));
    let unreadable = "idemgate_secret_reload_failures_total{route=\"hook\",reason=\"unreadable\"}";
    assert_eq!(metric(gate.admin, unreadable).await, Some(0.0));
    let logged = std::fs::read_to_string(&log).unwrap();
    let errors: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains("keeping the previous value"))
        .collect();
    assert_eq!(errors.len(), 3, "{logged}");
    for line in errors {
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains("route[0].signature.secrets[0]"), "{line}");
        assert!(
            line.contains("route=\"hook\"") || line.contains("route=hook"),
            "{line}"
        );
        assert!(line.contains("adyen-hmac-key"), "names the source: {line}");
    }
    assert!(
        logged.contains("exactly 32 needed: Adyen issues"),
        "{logged}"
    );
    assert!(logged.contains("only whitespace"), "{logged}");
    assert!(!logged.contains(&ADYEN_KEY[..16]), "the key was logged");
}

/// `check-config` (and so start-up) refuses a key weaker than its scheme
/// needs, naming the entry and what the sender issues; every genuine
/// secret shape of each sender, the published vectors' included, loads.
#[test]
fn check_config_refuses_weak_secrets_and_says_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("blank");
    std::fs::write(&blank, " \n").unwrap();
    let blank = format!("file:{}", blank.display());
    let store = "kind = \"embedded\"\npath = \"/tmp/unused.redb\"";
    let config = |scheme: &str, secret: &str| {
        let text = preset_config_text(store, "http://127.0.0.1:1", scheme, &[])
            .replace("secrets = []", &format!("secrets = [{secret:?}]"));
        if scheme == "twilio" {
            format!("{text}public_url = \"https://hooks.example.com\"\n")
        } else {
            text
        }
    };
    for (scheme, secret, advice) in [
        ("stripe", "literal:weak1", "at least 16 needed"),
        ("github", blank.as_str(), "only whitespace"),
        ("adyen", "literal:00", "Adyen issues 64 hex characters"),
        (
            "adyen",
            &format!("literal:{}", &ADYEN_KEY[..62]),
            "exactly 32",
        ),
        (
            "wechatpay-v2",
            "literal:idemgateTestOnlyV2ApiKey2023111",
            "exactly 32 characters",
        ),
        ("twilio", "literal:12345", "auth token"),
        ("standard-webhooks", "literal:whsec_AAAA", "whsec_"),
    ] {
        let (code, printed) = check_config(&config(scheme, secret));
        assert_eq!(code, Some(2), "{scheme} {secret}: {printed}");
        assert!(
            printed.contains("route[0].signature.secrets[0]") && printed.contains(advice),
            "{scheme} {secret}: {printed}"
        );
        assert!(!printed.contains("weak1"), "the value printed: {printed}");
    }
    let hmac = config_text(store, "http://127.0.0.1:1", "")
        .replace(&format!("\"literal:{SECRET}\""), "\"literal:short-secret\"");
    let (code, printed) = check_config(&hmac);
    assert_eq!(code, Some(2), "{printed}");
    assert!(printed.contains("openssl rand"), "{printed}");
    for (scheme, secret) in [
        ("adyen", format!("literal:{ADYEN_KEY}")),
        (
            "wechatpay-v2",
            "literal:idemgateTestOnlyV2ApiKey20231114".into(),
        ),
        ("twilio", "literal:2613416aded31ff34d03ba7e6eb7f391".into()),
        ("stripe", "literal:whsec_test_secret".into()),
        ("github", "literal:It's a Secret to Everybody".into()),
        ("slack", "literal:8f742231b10e8888abcd99yyyzzz85a5".into()),
        ("shopify", "literal:shpss_test_client_secret".into()),
        (
            "standard-webhooks",
            "literal:whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        ),
    ] {
        let (code, printed) = check_config(&config(scheme, &secret));
        assert_eq!(code, Some(0), "{scheme} {secret}: {printed}");
    }
}

/// The OTLP endpoint prints without its password, like the other URLs;
/// Twilio's `public_url` refuses credentials outright (it holds only
/// scheme, host and path), without echoing them.
#[test]
fn check_config_redacts_the_otlp_endpoint_and_refuses_credentials_in_public_url() {
    let store = "kind = \"embedded\"\npath = \"/tmp/unused.redb\"";
    let text = format!(
        "{}\n[tracing]\notlp_endpoint = \"http://otel:otel-pw@127.0.0.1:4318\"\n",
        config_text(store, "http://127.0.0.1:1", "")
    );
    let (code, printed) = check_config(&text);
    assert_eq!(code, Some(0), "{printed}");
    assert!(!printed.contains("otel-pw"), "{printed}");
    assert!(
        printed.contains("otlp_endpoint = \"http://otel:<redacted>@127.0.0.1:4318/\""),
        "{printed}"
    );

    let twilio = |url: &str| {
        format!(
            "{}public_url = \"{url}\"\n",
            preset_config_text(
                store,
                "http://127.0.0.1:1",
                "twilio",
                &["2613416aded31ff34d03ba7e6eb7f391"]
            )
        )
    };
    for url in [
        "https://tw:twilio-pw@hooks.example.com",
        "https://twilio-pw@hooks.example.com/sms",
    ] {
        let (code, printed) = check_config(&twilio(url));
        assert_eq!(code, Some(2), "{url}: {printed}");
        assert!(
            printed.contains("route[0].signature.public_url")
                && printed.contains("remove the user and password"),
            "{url}: {printed}"
        );
        assert!(!printed.contains("twilio-pw"), "{url}: {printed}");
    }
    let (code, printed) = check_config(&twilio("https://hooks.example.com/sms"));
    assert_eq!(code, Some(0), "{printed}");
}
