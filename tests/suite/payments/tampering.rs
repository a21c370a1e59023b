//! Tampering for `payments`: every variant of a vector with its signature
//! or one signed input changed, built from the parsed form, XML or JSON so
//! each change is to one field and the rest stays as signed.

use super::*;

/// A different character at `index` of `text` (same alphabet class).
pub(super) fn flip(text: &str, index: usize) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let at = index.min(chars.len() - 1);
    chars[at] = match chars[at] {
        'A' => 'B',
        'a' => 'b',
        '0' => '1',
        _ => 'A',
    };
    chars.into_iter().collect()
}

pub(super) fn form_pairs(body: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(super) fn form_body(pairs: &[(String, String)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        out.append_pair(k, v);
    }
    out.finish()
}

/// The `<name>value</name>` children of a flat `<xml>` body, CDATA kept.
pub(super) fn xml_fields(body: &str) -> Vec<(String, String)> {
    let inner = body
        .trim()
        .strip_prefix("<xml>")
        .and_then(|b| b.strip_suffix("</xml>"))
        .unwrap();
    let mut fields = Vec::new();
    let mut rest = inner;
    while let Some(start) = rest.find('<') {
        let name_end = rest[start..].find('>').unwrap() + start;
        let name = &rest[start + 1..name_end];
        let close = format!("</{name}>");
        let value_end = rest[name_end..].find(&close).unwrap() + name_end;
        fields.push((name.to_owned(), rest[name_end + 1..value_end].to_owned()));
        rest = &rest[value_end + close.len()..];
    }
    fields
}

pub(super) fn xml_body(fields: &[(String, String)]) -> String {
    let inner: String = fields
        .iter()
        .map(|(k, v)| format!("<{k}>{v}</{k}>"))
        .collect();
    format!("<xml>{inner}</xml>")
}

/// Appends `x` to a value, inside its CDATA section if it has one.
pub(super) fn changed_value(value: &str) -> String {
    match value.strip_suffix("]]>") {
        Some(open) => format!("{open}x]]>"),
        None => format!("{value}x"),
    }
}

/// Every variant of `vector` with its signature or one signed input
/// changed, named for the failure message.
pub(super) fn tampered(vector: &PaymentVector) -> Vec<(String, Delivery)> {
    let original = Delivery::of(vector);
    let mut out = Vec::new();
    match vector.scheme.as_str() {
        "alipay" => {
            let pairs = form_pairs(&vector.body);
            for (index, (name, value)) in pairs.iter().enumerate() {
                if name == "sign_type" {
                    continue;
                }
                let mut changed = pairs.clone();
                changed[index].1 = match name.as_str() {
                    "sign" => flip(value, 10),
                    // Another spelling of UTF-8 passes the charset check
                    // and must still break the signature.
                    "charset" => value.to_uppercase(),
                    _ => format!("{value}x"),
                };
                out.push((
                    format!("param {name}"),
                    original.with_body(form_body(&changed)),
                ));
            }
            let mut added = pairs;
            added.push(("extra".into(), "1".into()));
            out.push(("added param".into(), original.with_body(form_body(&added))));
        }
        "wechatpay-v2" => {
            let fields = xml_fields(&vector.body);
            for (index, (name, value)) in fields.iter().enumerate() {
                let mut changed = fields.clone();
                changed[index].1 = if name == "sign" {
                    flip(value, "<![CDATA[".len())
                } else {
                    changed_value(value)
                };
                out.push((
                    format!("element {name}"),
                    original.with_body(xml_body(&changed)),
                ));
            }
        }
        "wechatpay-v3" => {
            let signature = original.header("wechatpay-signature");
            let timestamp: u64 = original.header("wechatpay-timestamp").parse().unwrap();
            let nonce = original.header("wechatpay-nonce");
            out.push((
                "signature".into(),
                original.with_header("wechatpay-signature", flip(signature, 20)),
            ));
            out.push((
                "timestamp".into(),
                original.with_header("wechatpay-timestamp", (timestamp + 1).to_string()),
            ));
            out.push((
                "nonce".into(),
                original.with_header("wechatpay-nonce", format!("{nonce}x")),
            ));
            out.push((
                "body".into(),
                original.with_body(vector.body.replacen("SUCCESS", "SUCCESZ", 1)),
            ));
        }
        "adyen" => {
            let body: Value = serde_json::from_str(&vector.body).unwrap();
            let items = body["notificationItems"].as_array().unwrap().len();
            for item in 0..items {
                let base = format!("/notificationItems/{item}/NotificationRequestItem");
                for field in [
                    "/pspReference",
                    "/merchantAccountCode",
                    "/merchantReference",
                    "/amount/value",
                    "/amount/currency",
                    "/eventCode",
                    "/success",
                    "/additionalData/hmacSignature",
                ] {
                    let mut changed = body.clone();
                    let slot = changed.pointer_mut(&format!("{base}{field}")).unwrap();
                    *slot = match slot {
                        Value::Number(n) => Value::from(n.as_u64().unwrap() + 1),
                        Value::String(s) if field.ends_with("hmacSignature") => {
                            Value::from(flip(s, 5))
                        }
                        Value::String(s) => Value::from(format!("{s}x")),
                        other => panic!("{other}"),
                    };
                    out.push((
                        format!("item {item} {field}"),
                        original.with_body(changed.to_string()),
                    ));
                }
            }
        }
        "twilio" => {
            let signature = original.header("x-twilio-signature");
            out.push((
                "signature".into(),
                original.with_header("x-twilio-signature", flip(signature, 3)),
            ));
            let mut moved = original.clone();
            moved.path = moved.path.replacen("tenant=acme", "tenant=acmf", 1);
            out.push(("query".into(), moved));
            let mut longer = original.clone();
            longer.path = longer.path.replacen('?', "/x?", 1);
            out.push(("path".into(), longer));
            if vector.body.starts_with('{') {
                out.push((
                    "json body".into(),
                    original.with_body(vector.body.replacen("delivered", "deliverex", 1)),
                ));
            } else {
                let pairs = form_pairs(&vector.body);
                for index in 0..pairs.len() {
                    let mut changed = pairs.clone();
                    changed[index].1.push('x');
                    out.push((
                        format!("param {}", pairs[index].0),
                        original.with_body(form_body(&changed)),
                    ));
                }
            }
        }
        other => panic!("no tampering for {other}"),
    }
    out
}
