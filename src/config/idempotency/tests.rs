//! Tests of `[route.idempotency]`'s own checks.

use super::*;

/// The minimal config with `lines` added to its route's idempotency.
fn idempotency(lines: &str) -> Result<crate::config::Config, String> {
    let text = format!("{}\n{lines}\n", crate::config::tests::MINIMAL);
    crate::config::Config::parse(&text).map_err(|e| e.0.join("\n"))
}

#[test]
fn fingerprint_ignore_names_fields_of_one_body_format() {
    let xml = idempotency(r#"fingerprint_ignore = ["xml:/xml/nonce_str", "xml:/xml/sign"]"#);
    assert_eq!(
        xml.unwrap().routes[0].idempotency.fingerprint_ignore[0],
        Selector::Xml("/xml/nonce_str".into())
    );
    let mixed = idempotency(r#"fingerprint_ignore = ["xml:/xml/nonce_str", "form:nonce_str"]"#)
        .unwrap_err();
    assert!(
        mixed.contains("fingerprint_ignore: mixes body formats"),
        "{mixed}"
    );
    let header = idempotency(r#"fingerprint_ignore = ["header:x-a"]"#).unwrap_err();
    assert!(
        header.contains("xml:/path selectors name body fields"),
        "{header}"
    );
}
