//! Payment-channel presets (alipay, wechatpay-v2, wechatpay-v3, adyen,
//! twilio) against the vectors their own SDKs made (tests/vectors/
//! payments.json): each verifies with its key only, any change to the
//! signature or to a signed field fails, rotation works, and end to end a
//! channel's genuine retry is a replay while each event executes once.

use crate::support::*;
use bytes::Bytes;
use idemgate::config::{Config, Scheme};
use idemgate::error::Rejection;
use idemgate::extract::Inbound;
use idemgate::signature::{self, Authenticity};
use serde_json::Value;

mod tampering;
use tampering::{form_body, form_pairs, tampered};

const SCHEMES: [&str; 5] = ["alipay", "wechatpay-v2", "wechatpay-v3", "adyen", "twilio"];

/// One request: path with query, headers, body.
#[derive(Debug, Clone)]
struct Delivery {
    path: String,
    headers: Headers,
    body: String,
}

impl Delivery {
    fn of(vector: &PaymentVector) -> Self {
        Self {
            path: vector.path.clone(),
            headers: vector.header_list(),
            body: vector.body.clone(),
        }
    }

    fn with_body(&self, body: String) -> Self {
        Self {
            body,
            ..self.clone()
        }
    }

    fn with_header(&self, name: &str, value: String) -> Self {
        let mut headers: Headers = self
            .headers
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case(name))
            .cloned()
            .collect();
        headers.push((name.to_owned(), value));
        Self {
            headers,
            ..self.clone()
        }
    }

    fn header(&self, name: &str) -> &str {
        &self.headers.iter().find(|(k, _)| k == name).unwrap().1
    }
}

fn route_text(prefix: &str, signature: &str) -> String {
    format!(
        "[[route]]\nname = \"{}\"\npath_prefix = \"{prefix}\"\n[route.signature]\n{signature}\n",
        prefix.trim_start_matches('/').replace('/', "-")
    )
}

/// The scheme of a one-route configuration with `signature` on `prefix`.
fn scheme_of_route(prefix: &str, signature: &str) -> Scheme {
    let store = "kind = \"embedded\"\npath = \"/tmp/unused.redb\"";
    let text = format!(
        "{}{}",
        base_sections(store, "http://127.0.0.1:1"),
        route_text(prefix, signature)
    );
    Config::parse(&text)
        .unwrap_or_else(|e| panic!("{prefix}: {e}"))
        .routes
        .remove(0)
        .scheme
}

fn scheme_with(vector: &PaymentVector, credentials: &[String], extra: &str) -> Scheme {
    scheme_of_route(
        vector.prefix(),
        &payment_signature(&vector.scheme, credentials, extra),
    )
}

fn options(vector: &PaymentVector) -> String {
    vector
        .options
        .iter()
        .map(|(k, v)| format!("{k} = {v}\n"))
        .collect()
}

fn check(scheme: &Scheme, delivery: &Delivery, now_s: u64) -> Result<Authenticity, Rejection> {
    let mut request = http::Request::post(delivery.path.as_str());
    for (name, value) in &delivery.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let (parts, ()) = request.body(()).unwrap().into_parts();
    let inbound = Inbound::new(parts, Bytes::from(delivery.body.clone()));
    signature::verify(scheme, &inbound, now_s * 1000)
}

fn now_of(vector: &PaymentVector) -> u64 {
    vector.now.unwrap_or(1_700_000_000)
}

#[test]
fn every_payment_vector_verifies_with_its_key_and_nothing_else() {
    let vectors = verifiable_payment_vectors();
    for scheme in SCHEMES {
        assert!(
            vectors.iter().filter(|v| v.scheme == scheme).count() >= 4,
            "{scheme}: vectors"
        );
    }
    for vector in &vectors {
        let now = now_of(vector);
        let delivery = Delivery::of(vector);
        let right = right_credential(vector);
        let wrong = wrong_credential(vector);
        let extra = options(vector);

        let scheme = scheme_with(vector, std::slice::from_ref(&right), &extra);
        let verified = check(&scheme, &delivery, now);
        assert_eq!(
            verified.as_ref().map(|a| a.secret_index),
            Ok(Some(0)),
            "{}",
            vector.name
        );

        let rotated = scheme_with(vector, &[wrong.clone(), right], &extra);
        assert_eq!(
            check(&rotated, &delivery, now).map(|a| a.secret_index),
            Ok(Some(1)),
            "{}: rotation",
            vector.name
        );

        let only_wrong = scheme_with(vector, &[wrong], &extra);
        assert_eq!(
            check(&only_wrong, &delivery, now),
            Err(Rejection::SignatureInvalid),
            "{}: wrong key",
            vector.name
        );

        for (what, variant) in tampered(vector) {
            assert_eq!(
                check(&scheme, &variant, now).map(|_| ()),
                Err(Rejection::SignatureInvalid),
                "{}: {what} changed",
                vector.name
            );
        }
    }
}

#[test]
fn alipay_rsa1_only_when_allowed() {
    let rsa1 = &payment_vector("alipay-paid-rsa1");
    let key = [right_credential(rsa1)];
    let strict = scheme_with(rsa1, &key, "");
    assert_eq!(
        check(&strict, &Delivery::of(rsa1), 0),
        Err(Rejection::SignatureInvalid),
        "SHA1withRSA is refused by default, stricter than the SDK"
    );
    let allowed = scheme_with(rsa1, &key, "allow_rsa1 = true\n");
    assert!(check(&allowed, &Delivery::of(rsa1), 0).is_ok());
    let paid = &payment_vector("alipay-paid");
    let unknown =
        Delivery::of(paid).with_body(paid.body.replacen("sign_type=RSA2", "sign_type=RSA3", 1));
    assert_eq!(
        check(&allowed, &unknown, 0),
        Err(Rejection::SignatureInvalid)
    );
    let gbk = Delivery::of(paid).with_body(paid.body.replacen("charset=utf-8", "charset=GBK", 1));
    assert_eq!(
        check(&allowed, &gbk, 0),
        Err(Rejection::BadRequestBody("form in utf-8 (charset=utf-8)"))
    );
    let twice = Delivery::of(paid).with_body(format!("{}&trade_status=TRADE_CLOSED", paid.body));
    assert_eq!(
        check(&allowed, &twice, 0),
        Err(Rejection::BadRequestBody("form with each parameter once")),
        "which trade_status would the handler read?"
    );
}

#[test]
fn wechatpay_v2_reads_only_utf8_like_alipay() {
    let paid = &payment_vector("wxv2-hmac");
    let scheme = scheme_with(paid, &[right_credential(paid)], "");
    let declared = |encoding: &str| {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"{encoding}\"?>\n{}",
            paid.body
        );
        Delivery::of(paid).with_body(body)
    };
    for utf8 in ["UTF-8", "utf-8"] {
        assert!(
            check(&scheme, &declared(utf8), 0).is_ok(),
            "{utf8}: the declaration is not signed, only the elements"
        );
    }
    for other in ["GBK", "UTF-16", "gb2312", "ISO-8859-1"] {
        assert_eq!(
            check(&scheme, &declared(other), 0),
            Err(Rejection::BadRequestBody(
                "xml in utf-8 (encoding=\"UTF-8\" or none)"
            )),
            "{other}: the backend would decode the values otherwise"
        );
    }
}

#[test]
fn wechatpay_v2_refund_notifications_are_out_of_scope() {
    let refund = &payment_vector("wxv2-refund");
    let scheme = scheme_with(refund, &[right_credential(refund)], "");
    assert_eq!(
        check(&scheme, &Delivery::of(refund), 0),
        Err(Rejection::SignatureMissing),
        "no sign: AES-ECB req_info authenticates nothing"
    );
}

#[test]
fn wechatpay_v3_window_and_serial() {
    let paid = &payment_vector("wxv3-paid");
    let scheme = scheme_with(paid, &[right_credential(paid)], "");
    let delivery = Delivery::of(paid);
    let stamped: u64 = delivery.header("wechatpay-timestamp").parse().unwrap();
    assert!(check(&scheme, &delivery, stamped - 300).is_ok());
    assert!(check(&scheme, &delivery, stamped + 300).is_ok());
    for now in [stamped - 301, stamped + 301] {
        assert_eq!(
            check(&scheme, &delivery, now),
            Err(Rejection::TimestampOutOfWindow)
        );
    }
    let lower = delivery.with_header(
        "wechatpay-serial",
        paid.serial.clone().unwrap().to_lowercase(),
    );
    assert!(check(&scheme, &lower, stamped).is_ok(), "a serial is hex");
    let unknown = delivery.with_header("wechatpay-serial", "ABCDEF".into());
    assert_eq!(
        check(&scheme, &unknown, stamped),
        Err(Rejection::SignatureInvalid)
    );
    for header in ["wechatpay-serial", "wechatpay-nonce"] {
        let mut without = delivery.clone();
        without.headers.retain(|(k, _)| k != header);
        assert_eq!(
            check(&scheme, &without, stamped),
            Err(Rejection::SignatureInvalid),
            "{header}"
        );
    }
    let mut unsigned = delivery;
    unsigned.headers.retain(|(k, _)| k != "wechatpay-signature");
    assert_eq!(
        check(&scheme, &unsigned, stamped),
        Err(Rejection::SignatureMissing)
    );
}

#[test]
fn adyen_unsigned_fields_are_not_authenticated() {
    let auth = &payment_vector("adyen-auth");
    let scheme = scheme_with(auth, &[right_credential(auth)], "");
    let mut body: Value = serde_json::from_str(&auth.body).unwrap();
    body["notificationItems"][0]["NotificationRequestItem"]["reason"] = "edited".into();
    body["live"] = "true".into();
    assert!(
        check(&scheme, &Delivery::of(auth).with_body(body.to_string()), 0).is_ok(),
        "only the eight fields are signed (docs/payments.md says so)"
    );
    let batch = &payment_vector("adyen-batch");
    assert_eq!(
        check(&scheme, &Delivery::of(batch), 0),
        Err(Rejection::BadRequestBody(
            "an adyen notification with one item"
        )),
        "each item verifies on its own, but a batch could splice captured items into a new delivery"
    );
    let empty = Delivery::of(auth).with_body(r#"{"live":"false","notificationItems":[]}"#.into());
    assert_eq!(check(&scheme, &empty, 0), Err(Rejection::SignatureMissing));
}

#[test]
fn twilio_accepts_the_port_forms_the_sdk_accepts() {
    let port = &payment_vector("twilio-port-443");
    let key = [right_credential(port)];
    let plain = scheme_with(port, &key, "");
    assert!(
        check(&plain, &Delivery::of(port), 0).is_ok(),
        "signed with :443"
    );
    let sent = &payment_vector("twilio-sent");
    let with_port = scheme_of_route(
        sent.prefix(),
        &payment_signature("twilio", &key, "")
            .replace("https://hooks.example.com", "https://hooks.example.com:443"),
    );
    assert!(
        check(&with_port, &Delivery::of(sent), 0).is_ok(),
        "signed without the port, configured with it"
    );
}

/// The key a vector's delivery gets: the preset's signed event id, or for
/// WeChat Pay v3 its notification `id`.
fn event_key(vector: &PaymentVector) -> Vec<u8> {
    if vector.scheme == "wechatpay-v3" {
        let body: Value = serde_json::from_str(&vector.body).unwrap();
        return body["id"].as_str().unwrap().as_bytes().to_vec();
    }
    let scheme = scheme_with(vector, &[right_credential(vector)], &options(vector));
    let delivery = Delivery::of(vector);
    check(&scheme, &delivery, now_of(vector))
        .unwrap()
        .signed_id(delivery.body.as_bytes())
        .unwrap_or_else(|| panic!("{}: a signed event id", vector.name))
        .to_vec()
}

#[test]
fn retries_share_an_event_key_and_other_events_do_not() {
    let vectors = verifiable_payment_vectors();
    for a in &vectors {
        for b in &vectors {
            if a.scheme == b.scheme && a.name < b.name {
                assert_eq!(
                    event_key(a) == event_key(b),
                    a.event == b.event,
                    "{} vs {}",
                    a.name,
                    b.name
                );
            }
        }
    }
}

/// One gate with a route per channel; the WeChat Pay v3 vectors re-signed
/// at the current time with the same body (the vectors' timestamps are
/// outside the live window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genuine_retries_are_replays_and_each_event_executes_once() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let vectors: Vec<PaymentVector> = verifiable_payment_vectors()
        .into_iter()
        .filter(|v| v.options.is_empty())
        .collect();
    let mut routes = String::new();
    for scheme in SCHEMES {
        let mine: Vec<&PaymentVector> = vectors.iter().filter(|v| v.scheme == scheme).collect();
        let mut credentials: Vec<String> = mine.iter().map(|v| right_credential(v)).collect();
        credentials.sort();
        credentials.dedup();
        let mut prefixes: Vec<&str> = mine.iter().map(|v| v.prefix()).collect();
        prefixes.sort();
        prefixes.dedup();
        for prefix in prefixes {
            routes.push_str(&route_text(
                prefix,
                &payment_signature(scheme, &credentials, ""),
            ));
        }
    }
    let text = format!(
        "{}{routes}",
        base_sections(&redis_store(&redis), &upstream.url())
    );
    let gate = Gate::start(&text).await;
    let now = now_secs();
    let mut seen = std::collections::BTreeSet::new();
    for (index, vector) in vectors.iter().enumerate() {
        let mut delivery = Delivery::of(vector);
        if vector.scheme == "wechatpay-v3" {
            delivery.headers = wechatpay_v3_headers(
                vector.key.as_deref().unwrap(),
                vector.serial.as_deref().unwrap(),
                now + index as u64,
                &format!("nonce-{index}"),
                &vector.body,
            );
        }
        let answer = send(
            "POST",
            &gate.url(&delivery.path),
            &delivery.headers,
            delivery.body.clone(),
        )
        .await;
        let first = seen.insert(vector.event.clone());
        assert_eq!(
            (answer.status, answer.replayed()),
            (200, Some(if first { "false" } else { "true" })),
            "{}: {answer:?}",
            vector.name
        );
        assert_eq!(
            upstream.calls(),
            seen.len(),
            "{}: each event once",
            vector.name
        );
    }

    // A captured Twilio callback with its parameters reordered and one
    // repeated still verifies (the signature sorts them): it is the same
    // delivery, never a second execution.
    let sent = &payment_vector("twilio-sent");
    let mut pairs = form_pairs(&sent.body);
    pairs.reverse();
    pairs.push(pairs[0].clone());
    let reordered = send(
        "POST",
        &gate.url(&sent.path),
        &sent.header_list(),
        form_body(&pairs),
    )
    .await;
    assert_eq!(
        reordered.status, 422,
        "same delivery, other bytes: {reordered:?}"
    );
    assert_eq!(upstream.calls(), seen.len(), "never executed twice");

    for vector in vectors.iter().filter(|v| v.scheme != "wechatpay-v3") {
        for (what, variant) in tampered(vector).into_iter().take(3) {
            let answer = send(
                "POST",
                &gate.url(&variant.path),
                &variant.headers,
                variant.body.clone(),
            )
            .await;
            assert_eq!(
                (answer.status, answer.reason().as_deref()),
                (401, Some("signature_invalid")),
                "{}: {what}",
                vector.name
            );
        }
    }
    // A WeChat Pay v2 route parses XML with no DTD and no entities: an
    // XXE or billion-laughs body is 400 before any signature check.
    let doctype =
        "<!DOCTYPE xml [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;\">]>";
    for body in [
        format!("<?xml version=\"1.0\"?>{doctype}<xml><sign>&b;</sign></xml>"),
        "<!DOCTYPE xml [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><xml><sign>&x;</sign></xml>"
            .to_owned(),
    ] {
        let xml = [("content-type".to_owned(), "text/xml".to_owned())];
        let answer = send("POST", &gate.url("/hooks/wechatpay/v2"), &xml, body).await;
        assert_eq!(
            (answer.status, answer.reason().as_deref()),
            (400, Some("bad_request_body")),
            "{answer:?}"
        );
    }
    assert_eq!(upstream.calls(), seen.len());
    gate.stop().await;
}
