//! Tests of the preset checks, read through whole configuration files.

use super::*;
use crate::config::{Config, ConfigError, KeyPart, Scheme, Selector, decode_whsec};

/// A literal secret as strong as `scheme` requires (what its sender issues).
fn secret_for(scheme: &str) -> &'static str {
    match scheme {
        "wechatpay-v2" => "literal:idemgateTestOnlyV2ApiKey20231114",
        "adyen" => "literal:F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186",
        _ => "literal:test-secret-0123456789abcdef",
    }
}

fn preset_route(signature: &str, idempotency: &str) -> Result<Config, ConfigError> {
    Config::parse(&format!(
        "[store]\nkind = \"embedded\"\npath = \"/tmp/x.redb\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"hook\"\npath_prefix = \"/hook\"\n[route.signature]\n{signature}\n[route.idempotency]\n{idempotency}\n"
    ))
}

/// The problems that refuse a route with these tables, one a line.
fn refusal(signature: &str, idempotency: &str) -> String {
    preset_route(signature, idempotency)
        .unwrap_err()
        .0
        .join("\n")
}

#[test]
fn presets_fix_their_own_parameters() {
    let config = preset_route(
        "scheme = \"stripe\"\nsecrets = [\"literal:whsec_x-secret-0123456789\"]",
        "",
    )
    .unwrap();
    let route = &config.routes[0];
    assert_eq!(
        route.idempotency.key,
        Some(vec![KeyPart::Value(Selector::Json("/id".into()))])
    );
    assert_eq!(route.scheme.tolerance(), Some(Duration::from_secs(300)));

    let err = refusal(
        "scheme = \"github\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]\nalgorithm = \"sha512\"\nmessage = \"{body}\"\ntolerance = \"1m\"",
        "",
    );
    assert!(
        err.contains("route[0].signature.algorithm: only for scheme = \"hmac\""),
        "{err}"
    );
    assert!(
        err.contains("route[0].signature.message: only for scheme = \"hmac\""),
        "{err}"
    );
    assert!(
        err.contains("route[0].signature.tolerance: scheme = \"github\" signs no timestamp"),
        "{err}"
    );

    let err = refusal(
        "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_***\"]",
        "",
    );
    assert!(err.starts_with("route[0].signature.secrets[0]"), "{err}");
    let err = preset_route(
        "scheme = \"paypal\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]",
        "",
    )
    .unwrap_err();
    assert!(
        err.0[0].contains("stripe"),
        "the error lists the presets: {err}"
    );
}

#[test]
fn preset_default_keys_can_be_overridden() {
    let config = preset_route(
        "scheme = \"shopify\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]",
        "key = [\"header:X-Shopify-Event-Id\"]\nunsigned_key = \"accept\"",
    )
    .expect("an unsigned header only with the opt-in");
    assert_eq!(
        config.routes[0].idempotency.key,
        Some(vec![KeyPart::Value(
            Selector::parse("header:x-shopify-event-id").unwrap()
        )])
    );
    let sw = preset_route(
        "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]",
        "",
    )
    .unwrap();
    assert_eq!(sw.routes[0].idempotency.key, Some(vec![KeyPart::SignedId]));
}

#[test]
fn presets_without_a_window_warn() {
    for scheme in ["github", "shopify"] {
        let config = preset_route(
            &format!("scheme = \"{scheme}\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]"),
            "",
        )
        .unwrap();
        let warnings = config.warnings().join("\n");
        assert!(
            warnings.contains("rests on retention"),
            "{scheme}: {warnings}"
        );
    }
    let slack = preset_route(
        "scheme = \"slack\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]",
        "",
    )
    .unwrap();
    assert!(slack.warnings().is_empty());
}

#[test]
fn secrets_with_and_without_prefix_are_the_same_key() {
    assert_eq!(
        decode_whsec(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        decode_whsec(b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    );
    assert_eq!(decode_whsec(b"whsec_!!!"), None);
    assert_eq!(decode_whsec(b"whsec_"), None);
}

fn keys_file(name: &str) -> String {
    format!(
        "file:{}/tests/vectors/keys/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn each_payment_preset_takes_only_its_own_credential() {
    let cert = keys_file("wechatpay-1.cert.pem");
    let ok = [
        format!("scheme = \"alipay\"\npublic_keys = [\"{}\"]\nallow_rsa1 = true", keys_file("alipay-1.pub.b64")),
        format!("scheme = \"wechatpay-v3\"\npublic_keys = [\"{cert}\"]\ntolerance = \"2m\""),
        "scheme = \"wechatpay-v2\"\nsecrets = [\"literal:idemgateTestOnlyV2ApiKey20231114\"]".to_owned(),
        "scheme = \"adyen\"\nsecrets = [\"literal:F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186\"]".to_owned(),
        "scheme = \"twilio\"\nsecrets = [\"literal:2613416aded31ff34d03ba7e6eb7f391\"]\npublic_url = \"https://hooks.example.com/\"".to_owned(),
    ];
    for text in &ok {
        let config = preset_route(text, "").unwrap_or_else(|e| panic!("{text}: {e}"));
        let Scheme::Preset(preset) = &config.routes[0].scheme else {
            panic!("a preset");
        };
        assert_eq!(preset.credential_count(), 1, "{text}");
    }
    let twilio = preset_route(&ok[4], "").unwrap();
    let Scheme::Preset(preset) = &twilio.routes[0].scheme else {
        panic!("a preset");
    };
    assert_eq!(
        preset.public_url.as_deref(),
        Some("https://hooks.example.com"),
        "the request path is appended after one slash"
    );

    for (text, expected) in [
        (
            "scheme = \"alipay\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]".to_owned(),
            vec![
                "route[0].signature.secrets: scheme = \"alipay\" verifies RSA signatures with public_keys",
                "route[0].signature.public_keys: at least one public key is required",
            ],
        ),
        (
            format!("scheme = \"adyen\"\nsecrets = [\"literal:zz\"]\npublic_keys = [\"{cert}\"]"),
            vec![
                "route[0].signature.public_keys: scheme = \"adyen\" verifies with secrets",
                "route[0].signature.secrets[0]: an adyen HMAC key is hex",
            ],
        ),
        (
            "scheme = \"twilio\"\nsecrets = [\"literal:2613416aded31ff34d03ba7e6eb7f391\"]".to_owned(),
            vec!["route[0].signature.public_url: required with scheme = \"twilio\""],
        ),
        (
            "scheme = \"twilio\"\nsecrets = [\"literal:2613416aded31ff34d03ba7e6eb7f391\"]\npublic_url = \"ftp://x/?a=1\"".to_owned(),
            vec!["route[0].signature.public_url: \"ftp://x/?a=1\" must be an http(s) URL"],
        ),
        (
            "scheme = \"wechatpay-v2\"\nsecrets = [\"literal:idemgateTestOnlyV2ApiKey20231114\"]\nallow_rsa1 = true\npublic_url = \"https://h\"\ntolerance = \"1m\"".to_owned(),
            vec![
                "route[0].signature.allow_rsa1: only for scheme = \"alipay\"",
                "route[0].signature.public_url: only for scheme = \"twilio\"",
                "route[0].signature.tolerance: scheme = \"wechatpay-v2\" signs no timestamp",
            ],
        ),
        (
            "scheme = \"wechatpay-v3\"\npublic_keys = [\"literal:AAAA\", { id = \"PUB_KEY_ID_1\", key = \"env:IDEMGATE_SURELY_UNSET\" }]".to_owned(),
            vec![
                "route[0].signature.public_keys[0]: literal: ",
                "route[0].signature.public_keys[1]: env:IDEMGATE_SURELY_UNSET: environment variable",
            ],
        ),
        (
            format!("scheme = \"hmac\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]\nsignature = \"header:x\"\npublic_keys = [\"{cert}\"]"),
            vec!["route[0].signature.public_keys: only for the presets that read it"],
        ),
        (
            "scheme = \"none\"\npublic_url = \"https://h\"".to_owned(),
            vec!["route[0].signature.public_url: has no effect with scheme = \"none\""],
        ),
    ] {
        let err = preset_route(&text, "").unwrap_err().0;
        for line in &expected {
            assert!(
                err.iter().any(|e| e.starts_with(line)),
                "{text}\nexpected {line:?} in {err:#?}"
            );
        }
        assert_eq!(err.len(), expected.len(), "{text}: {err:#?}");
    }
}

#[test]
fn payment_presets_key_on_signed_fields_and_ignore_what_retries_change() {
    let alipay = preset_route(
        &format!(
            "scheme = \"alipay\"\npublic_keys = [\"{}\"]",
            keys_file("alipay-1.pub.pem")
        ),
        "",
    )
    .unwrap();
    let policy = &alipay.routes[0].idempotency;
    assert_eq!(policy.key, Some(vec![KeyPart::SignedId]));
    assert_eq!(
        policy.fingerprint_ignore,
        ["notify_id", "notify_time", "sign"].map(|f| Selector::Form(f.into()))
    );
    let chosen = preset_route(
        &format!(
            "scheme = \"alipay\"\npublic_keys = [\"{}\"]",
            keys_file("alipay-1.pub.pem")
        ),
        "key = [\"form:out_trade_no\"]\nfingerprint_ignore = [\"form:notify_id\"]",
    )
    .unwrap();
    let policy = &chosen.routes[0].idempotency;
    assert_eq!(
        policy.key,
        Some(vec![KeyPart::Value(Selector::Form("out_trade_no".into()))])
    );
    assert_eq!(
        policy.fingerprint_ignore,
        [Selector::Form("notify_id".into())]
    );
    let no_body = preset_route(
        &format!(
            "scheme = \"alipay\"\npublic_keys = [\"{}\"]",
            keys_file("alipay-1.pub.pem")
        ),
        "fingerprint = [\"method\", \"path\"]",
    )
    .unwrap();
    assert!(no_body.routes[0].idempotency.fingerprint_ignore.is_empty());

    let v3 = preset_route(
        &format!(
            "scheme = \"wechatpay-v3\"\npublic_keys = [\"{}\"]",
            keys_file("wechatpay-1.cert.pem")
        ),
        "",
    )
    .unwrap();
    assert_eq!(
        v3.routes[0].idempotency.key,
        Some(vec![KeyPart::Value(Selector::Json("/id".into()))])
    );
    assert_eq!(
        v3.routes[0].scheme.tolerance(),
        Some(Duration::from_secs(300))
    );
    assert!(v3.warnings().is_empty(), "v3 signs a timestamp");
    for scheme in ["wechatpay-v2", "adyen", "twilio"] {
        let url = if scheme == "twilio" {
            "\npublic_url = \"https://h\""
        } else {
            ""
        };
        let text = format!(
            "scheme = \"{scheme}\"\nsecrets = [\"{}\"]{url}",
            secret_for(scheme)
        );
        let config = preset_route(&text, "").unwrap_or_else(|e| panic!("{scheme}: {e}"));
        assert_eq!(
            config.routes[0].idempotency.key,
            Some(vec![KeyPart::SignedId]),
            "{scheme}"
        );
        assert!(
            config.warnings().join("\n").contains("rests on retention"),
            "{scheme} signs no timestamp"
        );
    }
}

#[test]
fn payment_keys_read_signed_fields_only() {
    let twilio = "scheme = \"twilio\"\nsecrets = [\"literal:2613416aded31ff34d03ba7e6eb7f391\"]\npublic_url = \"https://h\"";
    let err = refusal(
        twilio,
        "key = [\"form:MessageSid\", \"header:I-Twilio-Idempotency-Token\"]",
    );
    assert!(
        err.contains("route[0].idempotency.key[1]: header:i-twilio-idempotency-token is not signed: scheme = \"twilio\" does not sign header:i-twilio-idempotency-token"),
        "{err}"
    );
    assert!(
        err.contains("route[0].idempotency.key[0]: form:MessageSid is not signed"),
        "a parameter boundary can move under Twilio's signature: {err}"
    );
    preset_route(twilio, "key = [\"query:tenant\"]").expect("Twilio signs the URL");
    let adyen = "scheme = \"adyen\"\nsecrets = [\"literal:F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186\"]";
    preset_route(
        adyen,
        "key = [\"json:/notificationItems/0/NotificationRequestItem/pspReference\", \"json:/notificationItems/0/NotificationRequestItem/amount/value\"]",
    )
    .expect("signed item fields");
    for unsigned in [
        "json:/notificationItems/0/NotificationRequestItem/eventDate",
        "json:/notificationItems/0/NotificationRequestItem/additionalData/hmacSignature",
        "json:/live",
        "query:id",
    ] {
        let err = preset_route(adyen, &format!("key = [\"{unsigned}\"]")).unwrap_err();
        assert!(
            err.to_string().contains("does not sign"),
            "{unsigned}: {err}"
        );
    }
    let alipay = format!(
        "scheme = \"alipay\"\npublic_keys = [\"{}\"]",
        keys_file("alipay-1.pub.pem")
    );
    preset_route(
        &alipay,
        "key = [\"form:out_trade_no\", \"form:out_biz_no\"]",
    )
    .unwrap();
    assert!(preset_route(&alipay, "key = [\"form:sign\"]").is_err());
    let v2 = "scheme = \"wechatpay-v2\"\nsecrets = [\"literal:idemgateTestOnlyV2ApiKey20231114\"]";
    preset_route(v2, "key = [\"xml:/xml/transaction_id\"]").unwrap();
    assert!(preset_route(v2, "key = [\"xml:/xml/a/b\"]").is_err());
    assert!(preset_route(v2, "key = [\"form:transaction_id\"]").is_err());
    let err = refusal(
        "scheme = \"github\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]",
        "key = [\"header:X-GitHub-Delivery\"]",
    );
    assert!(
        err.contains("scheme = \"github\" does not sign header:x-github-delivery"),
        "GitHub signs the body only: {err}"
    );
}

#[test]
fn retention_outlives_the_senders_retries() {
    let hours = |h: u64| Duration::from_secs(h * 3600);
    let alipay = format!(
        "scheme = \"alipay\"\npublic_keys = [\"{}\"]",
        keys_file("alipay-1.pub.pem")
    );
    for (signature, retention) in [
        (alipay.clone(), hours(49)),
        (
            "scheme = \"wechatpay-v2\"\nsecrets = [\"literal:idemgateTestOnlyV2ApiKey20231114\"]".to_owned(),
            hours(48) + Duration::from_secs(240),
        ),
        (
            "scheme = \"adyen\"\nsecrets = [\"literal:F54B4779C76059EFB49904F90CE851613F3266A7393791D6F8FAC55BA2C0C186\"]".to_owned(),
            hours(31 * 24),
        ),
        (
            "scheme = \"stripe\"\nsecrets = [\"literal:whsec_x-secret-0123456789\"]".to_owned(),
            hours(96),
        ),
        (
            "scheme = \"github\"\nsecrets = [\"literal:x-secret-0123456789abcdef\"]".to_owned(),
            hours(24),
        ),
        (
            "scheme = \"twilio\"\nsecrets = [\"literal:2613416aded31ff34d03ba7e6eb7f391\"]\npublic_url = \"https://h\"".to_owned(),
            hours(24),
        ),
    ] {
        let config = preset_route(&signature, "").unwrap();
        assert_eq!(
            config.routes[0].idempotency.retention, retention,
            "{signature}"
        );
        assert!(
            !config
                .warnings()
                .join("\n")
                .contains("shorter than how long"),
            "{signature}: the default covers the retries"
        );
    }
    let short = preset_route(&alipay, "retention = \"24h\"").unwrap();
    let warnings = short.warnings().join("\n");
    assert!(
        warnings.contains(
            "route[0].idempotency.retention: 86400s is shorter than how long alipay retries"
        ),
        "{warnings}"
    );
    let enough = preset_route(&alipay, "retention = \"25h\"").unwrap();
    assert!(
        !enough
            .warnings()
            .join("\n")
            .contains("shorter than how long")
    );
}
