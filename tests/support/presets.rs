//! Routes, signed headers and bodies for each preset scheme
//! (standard-webhooks, stripe, github, slack, shopify, …).

use idemgate::config::Algorithm;

use super::{Headers, base_sections};

/// A route for a preset `scheme` on `/hook` with `secrets` (plain text, as
/// the sender's dashboard shows them).
pub fn preset_config_text(store: &str, upstream: &str, scheme: &str, secrets: &[&str]) -> String {
    let secrets: Vec<String> = secrets
        .iter()
        .map(|s| serde_json::to_string(&format!("literal:{s}")).unwrap())
        .collect();
    format!(
        r#"{}
[[route]]
name = "hook"
path_prefix = "/hook"

[route.signature]
scheme = "{scheme}"
secrets = [{}]
"#,
        base_sections(store, upstream),
        secrets.join(", ")
    )
}

/// The headers a preset's sender puts on a delivery of `body`, signed with
/// `secret` at `timestamp` (seconds) for message/delivery `id`. Written from
/// the published algorithms (tests/vectors/ALGORITHMS.md), independently of
/// idemgate's verifier.
pub fn preset_headers(scheme: &str, secret: &str, timestamp: u64, id: &str, body: &str) -> Headers {
    use base64::Engine;
    let b64 = |bytes: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let hmac =
        |key: &[u8], parts: &[&[u8]]| idemgate::signature::mac(Algorithm::Sha256, key, parts);
    let ts = timestamp.to_string();
    let pairs: Vec<(&str, String)> = match scheme {
        "standard-webhooks" | "svix" => {
            let key = base64::engine::general_purpose::STANDARD
                .decode(secret.trim_start_matches("whsec_"))
                .expect("whsec_ secret");
            let signature = b64(hmac(
                &key,
                &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()],
            ));
            let prefix = if scheme == "svix" { "svix" } else { "webhook" };
            return vec![
                (format!("{prefix}-id"), id.to_owned()),
                (format!("{prefix}-timestamp"), ts),
                (format!("{prefix}-signature"), format!("v1,{signature}")),
            ];
        }
        "stripe" => vec![(
            "stripe-signature",
            format!(
                "t={ts},v1={}",
                hex::encode(hmac(
                    secret.as_bytes(),
                    &[ts.as_bytes(), b".", body.as_bytes()]
                ))
            ),
        )],
        "github" => vec![
            (
                "x-hub-signature-256",
                format!(
                    "sha256={}",
                    hex::encode(hmac(secret.as_bytes(), &[body.as_bytes()]))
                ),
            ),
            ("x-github-delivery", id.to_owned()),
            ("x-github-event", "push".to_owned()),
        ],
        "slack" => vec![
            (
                "x-slack-signature",
                format!(
                    "v0={}",
                    hex::encode(hmac(
                        secret.as_bytes(),
                        &[b"v0:", ts.as_bytes(), b":", body.as_bytes()]
                    ))
                ),
            ),
            ("x-slack-request-timestamp", ts),
        ],
        "shopify" => vec![
            (
                "x-shopify-hmac-sha256",
                b64(hmac(secret.as_bytes(), &[body.as_bytes()])),
            ),
            ("x-shopify-topic", "orders/paid".to_owned()),
            ("x-shopify-shop-domain", "example.myshopify.com".to_owned()),
            ("x-shopify-api-version", "2025-07".to_owned()),
            ("x-shopify-webhook-id", id.to_owned()),
        ],
        other => panic!("no signer for {other}"),
    };
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A body carrying the ids the preset's default key reads.
pub fn preset_body(scheme: &str, id: &str) -> String {
    match scheme {
        "stripe" => format!(r#"{{"id":"{id}","type":"payment_intent.succeeded"}}"#),
        "slack" => format!(r#"{{"event_id":"{id}","type":"event_callback"}}"#),
        _ => format!(r#"{{"order":"{id}","status":"paid"}}"#),
    }
}
