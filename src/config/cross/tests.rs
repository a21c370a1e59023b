//! Tests of the checks between routes: shared scopes.

use crate::config::{FingerprintPart, Selector};

/// The minimal route "payments" with fingerprint `first`, and a second
/// route in its scope with fingerprint `second`.
fn scoped(first: &str, second: &str) -> Result<crate::config::Config, String> {
    let poller = ["name = \"poller\"", "path_prefix = \"/poll\""].join("\n");
    let text = format!(
        "{}\nfingerprint = {first}\n[[route]]\n{poller}\n[route.signature]\nscheme = \"none\"\n\
         [route.idempotency]\nscope = \"payments\"\nkey = [\"form:out_trade_no\"]\nfingerprint = {second}\n",
        crate::config::tests::MINIMAL
    );
    crate::config::Config::parse(&text).map_err(|e| e.0.join("\n"))
}

#[test]
fn routes_of_one_scope_fingerprint_the_same_values_in_order() {
    let config = scoped(
        r#"["json:/paymentNo", "json:/total_amount"]"#,
        r#"["form:out_trade_no", "form:total_fee"]"#,
    )
    .unwrap();
    assert!(
        config
            .routes
            .iter()
            .all(|r| r.idempotency.scope == "payments")
    );
    assert_eq!(
        config.routes[1].idempotency.fingerprint[1],
        FingerprintPart::Value(Selector::Form("total_fee".into()))
    );

    let by_route = scoped(r#"["json:/paymentNo", "body"]"#, r#"["form:a", "form:b"]"#);
    let by_route = by_route.unwrap_err();
    assert!(
        by_route.contains(
            "route[0].idempotency.fingerprint: route \"payments\" shares scope \"payments\""
        ),
        "the first route's problem is reported under its own index: {by_route}"
    );
    assert!(!by_route.contains("route[1].idempotency.fingerprint: route \"payments\""));
    let uneven = scoped(r#"["json:/paymentNo"]"#, r#"["form:a", "form:b"]"#).unwrap_err();
    assert!(
        uneven.contains("2 parts, but route \"payments\""),
        "{uneven}"
    );
    let defaults = scoped(
        r#"["json:/a"]"#,
        r#"["form:a"]"#.replace("form:a", "method").as_str(),
    );
    assert!(defaults.unwrap_err().contains("not \"method\""));
}
