//! Generators of arbitrary payment requests for `payment_fuzz`: bodies
//! (raw bytes, form pairs, `<xml>` documents with CDATA, references and
//! DTDs, Adyen-shaped JSON) and values for every header a payment scheme
//! reads.

use super::*;

pub(super) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,16}",
        "[a-z_]{1,12}",
        "[A-Za-z0-9+/=%&]{0,24}",
        "\\PC{0,8}",
        Just(String::new()),
    ]
}

pub(super) fn form_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "sign", "sign_type", "notify_type", "trade_no", "out_trade_no", "trade_status",
            "out_biz_no", "app_id", "charset", "MessageStatus", "To", "Body",
        ])
        .prop_map(str::to_owned),
        2 => text(),
    ]
}

pub(super) fn form_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "RSA2",
            "RSA",
            "MD5",
            "HMAC-SHA256",
            "",
            "TRADE_SUCCESS"
        ])
        .prop_map(str::to_owned),
        "[A-Za-z0-9+/]{0,64}={0,2}",
        text(),
    ]
}

/// A form body; raw pieces are spliced in unencoded now and then.
pub(super) fn form_body() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((form_name(), form_value(), any::<bool>()), 0..10).prop_map(|pairs| {
        let mut out = String::new();
        for (name, value, raw) in pairs {
            if !out.is_empty() {
                out.push('&');
            }
            if raw {
                out.push_str(&format!("{name}={value}"));
            } else {
                out.push_str(
                    &form_urlencoded::Serializer::new(String::new())
                        .append_pair(&name, &value)
                        .finish(),
                );
            }
        }
        out.into_bytes()
    })
}

pub(super) fn xml_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "sign",
            "sign_type",
            "appid",
            "mch_id",
            "nonce_str",
            "transaction_id",
            "out_trade_no",
            "result_code",
            "req_info",
            "xml",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z_][a-zA-Z0-9_.:-]{0,10}",
    ]
}

pub(super) fn xml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        text().prop_map(|t| t.replace(['<', '&'], "")),
        text().prop_map(|t| format!("<![CDATA[{t}]]>")),
        prop::sample::select(vec![
            "&amp;",
            "&lt;",
            "&#49;",
            "&#x4E2D;",
            "&xxe;",
            "&",
            "<",
            "]]>",
            "<![CDATA[",
            "<a>1</a>",
            "<a/>",
            "<!-- c -->",
            "<?pi x?>",
        ])
        .prop_map(str::to_owned),
        "[0-9A-F]{32}|[0-9A-F]{64}",
    ]
}

/// An `<xml>` body: random elements, maybe a declaration or a DTD before
/// it, maybe unclosed.
pub(super) fn xml_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![
            "",
            "<?xml version=\"1.0\"?>",
            "<!DOCTYPE xml [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>",
            "<!DOCTYPE xml [<!ENTITY a \"aaaa\"><!ENTITY b \"&a;&a;&a;\">]>",
            "\u{feff}",
        ]),
        prop::sample::select(vec!["xml", "xml", "root", ""]),
        prop::collection::vec((xml_name(), xml_value(), 0..4u8), 0..10),
        any::<bool>(),
    )
        .prop_map(|(prolog, root, elements, close)| {
            let mut out = format!("{prolog}<{root}>");
            for (name, value, shape) in elements {
                match shape {
                    0 => out.push_str(&format!("<{name}/>")),
                    1 => out.push_str(&format!("<{name} a=\"{value}\">x</{name}>")),
                    _ => out.push_str(&format!("<{name}>{value}</{name}>")),
                }
            }
            if close {
                out.push_str(&format!("</{root}>"));
            }
            out.into_bytes()
        })
}

pub(super) fn json_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
    ]
}

/// One notification item, shaped like Adyen's with random fields.
pub(super) fn adyen_item() -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_map(
            prop::sample::select(vec![
                "pspReference",
                "originalReference",
                "merchantAccountCode",
                "merchantReference",
                "eventCode",
                "success",
                "reason",
            ]),
            json_scalar(),
            0..7,
        ),
        prop::option::of(json_scalar()),
        prop::option::of(json_scalar()),
        prop_oneof![
            json_scalar(),
            "[A-Za-z0-9+/]{43}=".prop_map(Value::from),
            Just(Value::from("")),
        ],
        0..4u8,
    )
        .prop_map(|(fields, value, currency, signature, shape)| {
            let mut item: serde_json::Map<String, Value> =
                fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            let mut amount = serde_json::Map::new();
            if let Some(value) = value {
                amount.insert("value".into(), value);
            }
            if let Some(currency) = currency {
                amount.insert("currency".into(), currency);
            }
            item.insert("amount".into(), Value::Object(amount));
            if shape != 0 {
                item.insert(
                    "additionalData".into(),
                    serde_json::json!({ "hmacSignature": signature }),
                );
            }
            match shape {
                3 => Value::Object(item),
                _ => serde_json::json!({ "NotificationRequestItem": item }),
            }
        })
}

pub(super) fn adyen_body() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(adyen_item(), 0..4),
        prop::option::of(json_scalar()),
    )
        .prop_map(|(items, live)| {
            let mut body = serde_json::json!({ "notificationItems": items });
            if let Some(live) = live {
                body["live"] = live;
            }
            body.to_string().into_bytes()
        })
}

pub(super) fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        form_body(),
        xml_body(),
        adyen_body(),
        "[ -~]{0,64}".prop_map(String::into_bytes),
    ]
}

/// A value for header `index` of [`HEADERS`].
pub(super) fn header_value(index: usize) -> BoxedStrategy<Vec<u8>> {
    let specific: BoxedStrategy<String> = match index {
        0 | 4 => "[A-Za-z0-9+/]{0,344}={0,2}".boxed(),
        1 => prop::sample::select(vec![
            "5157F09EFDC096DE15EBE81A47057A7232F1B8E1",
            "7E4B2C19A0D3F5E6B7C8D9E0F1A2B3C4D5E6F708",
            WECHATPAY_PUB_KEY_ID,
            "5157f09efdc096de15ebe81a47057a7232f1b8e1",
        ])
        .prop_map(str::to_owned)
        .boxed(),
        2 => (NOW_S - 400..NOW_S + 400)
            .prop_map(|t| t.to_string())
            .boxed(),
        5 => "(algorithm=HMAC_SHA(1|256)|[a-z]{0,6}=[A-Z_0-9]{0,8}|,| ){0,4}".boxed(),
        _ => "[ -~]{0,40}".boxed(),
    };
    prop_oneof![
        3 => specific.prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..48),
        1 => "[ -~]{0,48}".prop_map(String::into_bytes),
    ]
    .boxed()
}

/// Every header a payment scheme reads, each present or not, plus a
/// content type.
pub(super) fn headers_strategy() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let values: Vec<_> = (0..HEADERS.len())
        .map(|i| prop::option::of(header_value(i)))
        .collect();
    (
        values,
        prop::sample::select(vec![
            "application/x-www-form-urlencoded",
            "application/json",
            "text/xml",
            "",
        ]),
    )
        .prop_map(|(values, content_type)| {
            let mut headers: Vec<(String, Vec<u8>)> = HEADERS
                .iter()
                .zip(values)
                .filter_map(|(name, value)| value.map(|v| ((*name).to_owned(), v)))
                .collect();
            headers.push(("content-type".into(), content_type.as_bytes().to_vec()));
            headers
        })
}
