use super::*;
use crate::config::{Config, ConfigError, decode_whsec};

fn preset_route(signature: &str, idempotency: &str) -> Result<Config, ConfigError> {
    Config::parse(&format!(
        "[store]\nkind = \"embedded\"\npath = \"/tmp/x.redb\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"hook\"\npath_prefix = \"/hook\"\n[route.signature]\n{signature}\n[route.idempotency]\n{idempotency}\n"
    ))
}

#[test]
fn presets_fix_their_own_parameters() {
    let config =
        preset_route("scheme = \"stripe\"\nsecrets = [\"literal:whsec_x\"]", "").unwrap();
    let route = &config.routes[0];
    assert_eq!(
        route.idempotency.key,
        Some(vec![KeyPart::Value(Selector::Json("/id".into()))])
    );
    assert_eq!(route.scheme.tolerance(), Some(Duration::from_secs(300)));

    let err = preset_route(
        "scheme = \"github\"\nsecrets = [\"literal:x\"]\nalgorithm = \"sha512\"\nmessage = \"{body}\"\ntolerance = \"1m\"",
        "",
    )
    .unwrap_err()
    .0
    .join("\n");
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

    let err = preset_route(
        "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_***\"]",
        "",
    )
    .unwrap_err();
    assert!(
        err.0[0].starts_with("route[0].signature.secrets[0]"),
        "{err}"
    );
    let err = preset_route("scheme = \"paypal\"\nsecrets = [\"literal:x\"]", "").unwrap_err();
    assert!(
        err.0[0].contains("stripe"),
        "the error lists the presets: {err}"
    );
}

#[test]
fn preset_default_keys_can_be_overridden() {
    let config = preset_route(
        "scheme = \"shopify\"\nsecrets = [\"literal:x\"]",
        "key = [\"header:X-Shopify-Event-Id\"]",
    )
    .unwrap();
    assert_eq!(
        config.routes[0].idempotency.key,
        Some(vec![KeyPart::Value(
            Selector::parse("header:x-shopify-event-id").unwrap()
        )])
    );
    let sw = preset_route(
        "scheme = \"standard-webhooks\"\nsecrets = [\"literal:whsec_AAAA\"]",
        "",
    )
    .unwrap();
    assert_eq!(sw.routes[0].idempotency.key, Some(vec![KeyPart::SignedId]));
}

#[test]
fn presets_without_a_window_warn() {
    for scheme in ["github", "shopify"] {
        let config = preset_route(
            &format!("scheme = \"{scheme}\"\nsecrets = [\"literal:x\"]"),
            "",
        )
        .unwrap();
        let warnings = config.warnings().join("\n");
        assert!(
            warnings.contains("rests on retention"),
            "{scheme}: {warnings}"
        );
    }
    let slack = preset_route("scheme = \"slack\"\nsecrets = [\"literal:x\"]", "").unwrap();
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
