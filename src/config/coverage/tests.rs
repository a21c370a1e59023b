//! The signed-coverage rule on whole configurations: what is refused,
//! what the opt-in lets through, what the defaults become.

use super::*;
use crate::config::{Config, KeyPart, Selector};

/// One route on `/hook` with `signature` and `idempotency` lines (and
/// `route` lines such as `methods`).
fn parse(route: &str, signature: &str, idempotency: &str) -> Result<Config, String> {
    Config::parse(&format!(
        "[store]\nkind = \"embedded\"\npath = \"/tmp/x.redb\"\n[upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"hook\"\npath_prefix = \"/hook\"\n{route}\n[route.signature]\n{signature}\n\
         [route.idempotency]\n{idempotency}\n"
    ))
    .map_err(|e| e.0.join("\n"))
}

const HMAC_BODY: &str =
    "scheme = \"hmac\"\nsecrets = [\"literal:s-0123456789abcdef\"]\nsignature = \"header:X-Sig\"";

fn fingerprint(config: &Config) -> Vec<String> {
    config.routes[0]
        .idempotency
        .fingerprint
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_body_only_hmac_without_key_fingerprints_no_path() {
    let config = parse("", HMAC_BODY, "").unwrap();
    assert_eq!(fingerprint(&config), ["method", "body"]);
    let two_methods = parse("methods = [\"POST\", \"PUT\"]", HMAC_BODY, "").unwrap();
    assert_eq!(fingerprint(&two_methods), ["body"]);
    let signed_path = format!("{HMAC_BODY}\nmessage = \"{{method}} {{path}}\\n{{body}}\"");
    let config = parse("methods = [\"POST\", \"PUT\"]", &signed_path, "").unwrap();
    assert_eq!(fingerprint(&config), ["method", "path", "body"]);
    // With a signed key the fingerprint is not the key: unchanged.
    let keyed = parse("", HMAC_BODY, "key = [\"json:/id\"]").unwrap();
    assert_eq!(fingerprint(&keyed), ["method", "path", "body"]);
    let optional = parse("", HMAC_BODY, "key = [\"json:/id\"]\nrequire_key = false").unwrap();
    assert_eq!(fingerprint(&optional), ["method", "body"]);
}

#[test]
fn an_unsigned_part_of_a_key_is_refused_naming_it_and_the_fix() {
    let err = parse(
        "",
        HMAC_BODY,
        "fingerprint = [\"method\", \"path\", \"body\"]",
    )
    .unwrap_err();
    assert!(
        err.contains("route[0].idempotency.fingerprint[1]: path is not signed")
            && err.contains("{path} is not in message")
            && err.contains("unsigned_key = \"accept\""),
        "{err}"
    );
    for (idempotency, part) in [
        (
            "key = [\"header:X-Id\"]",
            "key[0]: header:x-id is not signed",
        ),
        ("key = [\"query:id\"]", "key[0]: query:id is not signed"),
        (
            "fingerprint = [\"query\", \"body\"]",
            "fingerprint[0]: query is not signed",
        ),
        (
            "fingerprint = [\"header:X-A\"]",
            "fingerprint[0]: header:x-a is not signed",
        ),
    ] {
        let err = parse("methods = [\"POST\", \"PUT\"]", HMAC_BODY, idempotency).unwrap_err();
        assert!(err.contains(part), "{idempotency}: {err}");
    }
    let err = parse(
        "methods = [\"POST\", \"PUT\"]",
        HMAC_BODY,
        "fingerprint = [\"method\", \"body\"]",
    )
    .unwrap_err();
    assert!(err.contains("method is not signed"), "{err}");
    // Named in the template: signed.
    let covered = format!("{HMAC_BODY}\nmessage = \"{{header:X-Id}}.{{body}}\"");
    parse("", &covered, "key = [\"header:X-Id\"]").unwrap();
    parse("", &covered, "fingerprint = [\"header:X-Id\", \"body\"]").unwrap();
}

#[test]
fn the_opt_in_accepts_and_start_up_warns() {
    let config = parse(
        "",
        HMAC_BODY,
        "key = [\"header:X-Id\"]\nunsigned_key = \"accept\"",
    )
    .unwrap();
    let route = &config.routes[0];
    assert_eq!(route.idempotency.unsigned_key, UnsignedKey::Accept);
    let warnings = config.warnings().join("\n");
    assert!(
        warnings.contains("route[0].idempotency.unsigned_key: \"accept\"")
            && warnings.contains("key[0] header:x-id"),
        "{warnings}"
    );
    let signed = parse("", HMAC_BODY, "unsigned_key = \"accept\"").unwrap();
    assert!(!signed.warnings().join("\n").contains("unsigned_key"));
    let err = parse("", HMAC_BODY, "unsigned_key = \"maybe\"").unwrap_err();
    assert!(err.contains("route[0].idempotency.unsigned_key"), "{err}");
}

#[test]
fn webhook_platform_delivery_headers_are_unsigned() {
    for (scheme, header) in [
        ("github", "X-GitHub-Delivery"),
        ("shopify", "X-Shopify-Webhook-Id"),
        ("stripe", "Stripe-Signature"),
        ("standard-webhooks", "webhook-id"),
    ] {
        let secret = if scheme == "standard-webhooks" {
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        } else {
            "x-0123456789abcdef"
        };
        let signature = format!("scheme = \"{scheme}\"\nsecrets = [\"literal:{secret}\"]");
        let default = parse("", &signature, "").unwrap();
        assert_eq!(
            default.routes[0].idempotency.key.as_deref().unwrap()[0],
            if matches!(scheme, "stripe") {
                KeyPart::Value(Selector::Json("/id".into()))
            } else {
                KeyPart::SignedId
            },
            "{scheme}"
        );
        let err = parse("", &signature, &format!("key = [\"header:{header}\"]")).unwrap_err();
        assert!(
            err.contains(&format!(
                "scheme = \"{scheme}\" does not sign header:{}",
                header.to_lowercase()
            )),
            "{scheme}: {err}"
        );
        parse(
            "",
            &signature,
            &format!("key = [\"header:{header}\"]\nunsigned_key = \"accept\""),
        )
        .unwrap();
        parse("", &signature, "key = [\"json:/id\"]").expect("the body is signed whole");
    }
    let slack = "scheme = \"slack\"\nsecrets = [\"literal:x-0123456789abcdef\"]";
    parse(
        "",
        slack,
        "key = [\"header:X-Slack-Request-Timestamp\", \"json:/event_id\"]",
    )
    .unwrap();
}

#[test]
fn a_template_without_body_must_cover_every_part() {
    let stamped = format!("{HMAC_BODY}\ntimestamp = \"header:X-Ts\"");
    let only_time = format!("{stamped}\nmessage = \"{{timestamp}}\"");
    for idempotency in [
        "",
        "unsigned_key = \"accept\"",
        "key = [\"json:/id\"]\nunsigned_key = \"accept\"",
    ] {
        let err = parse("", &only_time, idempotency).unwrap_err();
        assert!(
            err.contains(
                "route[0].signature.message: \"{timestamp}\" covers neither {body} nor any value"
            ),
            "{idempotency}: {err}"
        );
    }
    let where_only = format!("{stamped}\nmessage = \"{{method}} {{path}} {{timestamp}}\"");
    let err = parse("", &where_only, "").unwrap_err();
    assert!(err.contains("covers neither {body} nor any value"), "{err}");
    let fields =
        format!("{stamped}\nmessage = \"{{json:/id}}\\n{{json:/amount}}\\n{{timestamp}}\"");
    let config = parse("", &fields, "key = [\"json:/id\"]").unwrap();
    assert_eq!(fingerprint(&config), ["method", "json:/id", "json:/amount"]);
    // {timestamp} signs the trimmed text: a key on it is exact only from a header.
    let body_stamp =
        format!("{HMAC_BODY}\ntimestamp = \"json:/ts\"\nmessage = \"{{json:/id}}.{{timestamp}}\"");
    let err = parse("", &body_stamp, "key = [\"json:/id\", \"json:/ts\"]").unwrap_err();
    assert!(err.contains("key[1]: json:/ts is not signed"), "{err}");
    let header_stamp = format!("{stamped}\nmessage = \"{{json:/id}}.{{timestamp}}\"");
    parse("", &header_stamp, "key = [\"json:/id\", \"header:X-Ts\"]").unwrap();
    for (idempotency, says) in [
        (
            "key = [\"json:/other\"]",
            "key[0]: json:/other is not signed",
        ),
        (
            "key = [\"json:/id\"]\nfingerprint = [\"body\"]\nunsigned_key = \"accept\"",
            "fingerprint[0]: body is not signed",
        ),
    ] {
        let err = parse("", &fields, idempotency).unwrap_err();
        assert!(
            err.contains(says) && err.contains("must cover every key"),
            "{err}"
        );
    }
}

#[test]
fn payment_channels_and_none() {
    let twilio = "scheme = \"twilio\"\nsecrets = [\"literal:t-0123456789abcdef\"]\npublic_url = \"https://h\"";
    let err = parse("", twilio, "key = [\"form:MessageSid\"]").unwrap_err();
    assert!(err.contains("no separator"), "{err}");
    parse(
        "",
        twilio,
        "key = [\"query:tenant\"]\nfingerprint = [\"path\", \"query\"]",
    )
    .unwrap();
    let v2 = "scheme = \"wechatpay-v2\"\nsecrets = [\"literal:idemgateTestOnlyV2ApiKey20231114\"]";
    parse("", v2, "key = [\"xml:/xml/out_trade_no\"]").unwrap();
    let err = parse("", v2, "key = [\"xml:/xml/sign\"]").unwrap_err();
    assert!(err.contains("does not sign xml:/xml/sign"), "{err}");
    let none = "scheme = \"none\"";
    let config = parse(
        "",
        none,
        "key = [\"header:X-Id\"]\nfingerprint = [\"query\"]",
    )
    .unwrap();
    assert!(config.routes[0].idempotency.accepted_unsigned.is_empty());
    assert_eq!(
        fingerprint(&parse("", none, "").unwrap()),
        ["method", "path", "body"]
    );
}
