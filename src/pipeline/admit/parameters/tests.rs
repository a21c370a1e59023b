//! Unit tests of the parameter rules: form detection, `_method` values,
//! and which query parameters each scheme refuses beside a signed body.

use super::*;
use crate::config::Config;

/// A 32-character secret, as strong as any scheme asks.
const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn scheme(signature: &str) -> Scheme {
    let text = format!(
        "[store]\nkind = \"embedded\"\npath = \"/tmp/unused.redb\"\n\
         [upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"r\"\npath_prefix = \"/hooks\"\n\
         [route.signature]\n{signature}\n"
    );
    Config::parse(&text)
        .unwrap_or_else(|e| panic!("{signature}: {e}"))
        .routes
        .remove(0)
        .scheme
}

fn preset(name: &str) -> Scheme {
    let credentials = match name {
        "alipay" => format!(
            "public_keys = [\"file:{}/tests/vectors/keys/alipay-1.pub.pem\"]",
            env!("CARGO_MANIFEST_DIR")
        ),
        "adyen" => format!(
            "secrets = [\"literal:{}\"]",
            SECRET.repeat(2).to_ascii_uppercase()
        ),
        "twilio" => {
            format!("secrets = [\"literal:{SECRET}\"]\npublic_url = \"https://hooks.example.com\"")
        }
        _ => format!("secrets = [\"literal:{SECRET}\"]"),
    };
    scheme(&format!("scheme = \"{name}\"\n{credentials}"))
}

fn request(target: &str, content_type: Option<&str>) -> Inbound {
    let mut builder = http::Request::post(target);
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    let (parts, ()) = builder.body(()).unwrap().into_parts();
    Inbound::new(parts, bytes::Bytes::from_static(b"a=1"))
}

const FORM: Option<&str> = Some("application/x-www-form-urlencoded; charset=utf-8");
const JSON: Option<&str> = Some("application/json");

#[test]
fn form_content_is_read_from_the_media_type() {
    let headers = |value: &str| {
        let mut map = HeaderMap::new();
        map.insert("content-type", value.parse().unwrap());
        map
    };
    assert_eq!(
        form_content(&headers("Application/X-WWW-Form-URLEncoded ;charset=UTF-8")),
        Some(FormContent::UrlEncoded)
    );
    assert_eq!(
        form_content(&headers("multipart/form-data; boundary=x")),
        Some(FormContent::Multipart)
    );
    assert_eq!(form_content(&headers("application/json")), None);
    assert_eq!(form_content(&HeaderMap::new()), None);
}

#[test]
fn method_parameters_are_found_in_query_and_form() {
    assert_eq!(query_overrides(Some("_method=PUT")), ["PUT"]);
    assert_eq!(
        query_overrides(Some("a=1&%5Fmethod=+delete+&_METHOD=")),
        ["delete"]
    );
    assert!(query_overrides(Some("method=PUT")).is_empty());
    assert!(query_overrides(None).is_empty());
    let mut headers = HeaderMap::new();
    headers.insert(
        "content-type",
        "application/x-www-form-urlencoded".parse().unwrap(),
    );
    assert_eq!(
        body_overrides(&headers, b"a=1&_method=PUT"),
        BodyOverride::Methods(vec!["PUT".into()])
    );
    assert_eq!(body_overrides(&headers, b"a=1"), BodyOverride::None);
    headers.insert(
        "content-type",
        "multipart/form-data; boundary=b".parse().unwrap(),
    );
    let part = b"--b\r\ncontent-disposition: form-data; name=\"_method\"\r\n\r\nPUT\r\n--b--\r\n";
    assert_eq!(body_overrides(&headers, part), BodyOverride::Any);
    assert_eq!(body_overrides(&headers, b"--b--\r\n"), BodyOverride::None);
    headers.insert("content-type", "application/vnd.api+json".parse().unwrap());
    assert_eq!(
        body_overrides(&headers, br#"{"a":{"_method":"GET"},"_method":" PUT "}"#),
        BodyOverride::Methods(vec!["PUT".into()]),
        "Laravel reads a JSON body's top level as input"
    );
    assert_eq!(
        body_overrides(&headers, br#"{"a":{"_method":"GET"}}"#),
        BodyOverride::None
    );
    assert_eq!(
        body_overrides(&headers, br#"["_method"]"#),
        BodyOverride::None
    );
    assert_eq!(
        body_overrides(&headers, br#"{"_method":1}"#),
        BodyOverride::Any
    );
    assert_eq!(
        body_overrides(&headers, br#"{"_method":"PUT""#),
        BodyOverride::Any
    );
    headers.insert("content-type", "text/plain".parse().unwrap());
    assert_eq!(
        body_overrides(&headers, br#"{"_method":"PUT"}"#),
        BodyOverride::None
    );
}

#[test]
fn form_and_xml_signed_presets_take_no_query() {
    for name in ["alipay", "wechatpay-v2"] {
        let scheme = preset(name);
        assert_eq!(check_query(&scheme, &request("/hooks", FORM)), Ok(()));
        assert_eq!(check_query(&scheme, &request("/hooks?", FORM)), Ok(()));
        for target in [
            "/hooks?out_trade_no=ORDER-EVIL&total_amount=0.01",
            "/hooks?tenant=acme",
        ] {
            for content_type in [FORM, Some("text/xml"), None] {
                assert_eq!(
                    check_query(&scheme, &request(target, content_type)),
                    Err(Rejection::UnsignedParameters),
                    "{name} {target} {content_type:?}"
                );
            }
        }
    }
}

#[test]
fn twilio_signs_its_query() {
    let scheme = preset("twilio");
    assert_eq!(
        check_query(&scheme, &request("/hooks?tenant=acme", FORM)),
        Ok(())
    );
}

#[test]
fn body_signed_presets_refuse_a_query_beside_a_form_body() {
    for name in [
        "github",
        "slack",
        "stripe",
        "shopify",
        "standard-webhooks",
        "adyen",
    ] {
        let scheme = preset(name);
        assert_eq!(
            check_query(&scheme, &request("/hooks?payload=x", FORM)),
            Err(Rejection::UnsignedParameters),
            "{name}"
        );
        assert_eq!(
            check_query(
                &scheme,
                &request("/hooks?a=1", Some("multipart/form-data; boundary=b"))
            ),
            Err(Rejection::UnsignedParameters),
            "{name}"
        );
        assert_eq!(
            check_query(&scheme, &request("/hooks?a=1", JSON)),
            Ok(()),
            "{name}"
        );
        assert_eq!(
            check_query(&scheme, &request("/hooks", FORM)),
            Ok(()),
            "{name}"
        );
    }
}

#[test]
fn hmac_takes_the_query_parameters_its_message_signs() {
    let hmac = |message: &str| {
        scheme(&format!(
            "scheme = \"hmac\"\nsecrets = [\"literal:{SECRET}\"]\nsignature = \"header:X-Signature\"\nmessage = \"{message}\""
        ))
    };
    let covered = hmac("{query:tenant}.{body}");
    assert_eq!(
        check_query(&covered, &request("/hooks?tenant=a", FORM)),
        Ok(())
    );
    for target in ["/hooks?tenant=a&tenant=b", "/hooks?tenant=a&amount=1"] {
        assert_eq!(
            check_query(&covered, &request(target, FORM)),
            Err(Rejection::UnsignedParameters),
            "{target}"
        );
    }
    let body_only = hmac("{body}");
    assert_eq!(
        check_query(&body_only, &request("/hooks?tenant=a", FORM)),
        Err(Rejection::UnsignedParameters)
    );
    assert_eq!(
        check_query(&body_only, &request("/hooks?tenant=a", JSON)),
        Ok(())
    );
    assert_eq!(
        check_query(&Scheme::None, &request("/hooks?a=1", FORM)),
        Ok(())
    );
}

#[test]
fn a_body_mentions_method_in_any_case_anywhere_but_not_in_part() {
    let long = [&b"x"[..]; 60].concat();
    for (body, mentioned) in [
        (&b"_method"[..], true),
        (b"x_METHOD", true),
        (b"__MeThOd=", true),
        (b"a_b_c_method", true),
        (b"_metho_method", true),
        (b"", false),
        (b"_", false),
        (b"_metho", false),
        (b"method", false),
        (b"_ method", false),
        (&[&long[..], b"_metho"].concat(), false),
    ] {
        assert_eq!(
            mentions(body),
            mentioned,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}
