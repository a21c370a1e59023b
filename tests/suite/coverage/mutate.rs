//! The mutations of the differential test: every change a captured
//! delivery can undergo without its sender's key, whether or not the
//! route's scheme happens to cover it.

use proptest::prelude::*;

use super::Delivery;

/// Header names worth varying: the platforms' delivery ids, common key
/// headers, headers some schemes sign.
const HEADERS: [&str; 11] = [
    "x-github-delivery",
    "x-shopify-webhook-id",
    "idempotency-key",
    "x-id",
    "x-request-id",
    "webhook-id",
    "svix-id",
    "i-twilio-idempotency-token",
    "x-ts",
    "wechatpay-nonce",
    "x-forwarded-for",
];

/// Whitespace a sender's parser may or may not strip.
const SPACES: [&str; 6] = [" ", "\n", "\t", "\r\n", "\u{3000}", "  \n\t"];

/// One change to a delivery.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    /// A header set to a value (replacing it) or sent once more.
    Header {
        name: String,
        value: String,
        append: bool,
    },
    /// A query parameter added.
    Query(String, String),
    /// Text appended to the path, below the route's prefix.
    Below(String),
    /// Another method.
    Method(String),
    /// Whitespace on both sides of the n-th XML leaf's text (inside its
    /// CDATA section when it has one).
    Around(usize, String),
    /// The n-th XML leaf's plain text wrapped in CDATA.
    Cdata(usize),
    /// Whitespace after the n-th `{`, `,` or `:` of a JSON body.
    JsonSpace(usize, String),
    /// Form pairs n and n+1 swapped.
    FormSwap(usize),
    /// The n-th letter or digit of a form value percent-encoded.
    FormEscape(usize),
}

impl Mutation {
    /// `name: value`, replacing any such header.
    pub(super) fn header(name: &str, value: &str) -> Self {
        Self::Header {
            name: name.into(),
            value: value.into(),
            append: false,
        }
    }

    /// Applies the change; one that does not fit the body leaves it as is.
    pub(super) fn apply(&self, delivery: &mut Delivery) {
        match self {
            Self::Header {
                name,
                value,
                append,
            } => {
                if !append {
                    delivery
                        .headers
                        .retain(|(k, _)| !k.eq_ignore_ascii_case(name));
                }
                delivery.headers.push((name.clone(), value.clone()));
            }
            Self::Query(name, value) => {
                let joiner = if delivery.target.contains('?') {
                    '&'
                } else {
                    '?'
                };
                delivery.target = format!("{}{joiner}{name}={value}", delivery.target);
            }
            Self::Below(suffix) => {
                let at = delivery.target.find('?').unwrap_or(delivery.target.len());
                delivery.target.insert_str(at, suffix);
            }
            Self::Method(method) => delivery.method.clone_from(method),
            Self::Around(n, space) => {
                if let Some((start, end)) = xml_leaves(&delivery.body).get(*n).copied() {
                    delivery.body.insert_str(end, space);
                    delivery.body.insert_str(start, space);
                }
            }
            Self::Cdata(n) => {
                let plain: Vec<(usize, usize)> = xml_leaves(&delivery.body)
                    .into_iter()
                    .filter(|(s, _)| !delivery.body[..*s].ends_with("<![CDATA["))
                    .collect();
                if let Some((start, end)) = plain.get(*n).copied() {
                    delivery.body.insert_str(end, "]]>");
                    delivery.body.insert_str(start, "<![CDATA[");
                }
            }
            Self::JsonSpace(n, space) => {
                let structural: Vec<usize> = delivery
                    .body
                    .char_indices()
                    .filter(|(_, c)| matches!(c, '{' | ',' | ':'))
                    .map(|(i, _)| i + 1)
                    .collect();
                if delivery.body.starts_with('{') && !structural.is_empty() {
                    let at = structural[n % structural.len()];
                    delivery.body.insert_str(at, space);
                }
            }
            Self::FormSwap(n) => {
                if is_form(delivery) {
                    let mut pairs: Vec<&str> = delivery.body.split('&').collect();
                    if pairs.len() > 1 {
                        let i = n % (pairs.len() - 1);
                        pairs.swap(i, i + 1);
                        delivery.body = pairs.join("&");
                    }
                }
            }
            Self::FormEscape(n) => {
                if is_form(delivery) {
                    escape_nth_value_char(&mut delivery.body, *n);
                }
            }
        }
    }
}

fn is_form(delivery: &Delivery) -> bool {
    delivery
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v.contains("x-www-form-urlencoded"))
}

/// Percent-encodes the n-th (modulo) letter or digit inside a form value.
fn escape_nth_value_char(body: &mut String, n: usize) {
    let mut in_value = false;
    let mut spots = Vec::new();
    for (i, c) in body.char_indices() {
        match c {
            '=' => in_value = true,
            '&' => in_value = false,
            c if in_value && c.is_ascii_alphanumeric() => spots.push(i),
            _ => {}
        }
    }
    if let Some(&at) = spots.get(n % spots.len().max(1)) {
        let escaped = format!("%{:02X}", body.as_bytes()[at]);
        body.replace_range(at..=at, &escaped);
    }
}

/// Byte ranges of each XML leaf's text: inside its CDATA section if the
/// text is one, else between its start and end tags.
pub(super) fn xml_leaves(body: &str) -> Vec<(usize, usize)> {
    let mut leaves = Vec::new();
    let mut at = 0;
    while let Some(open) = body[at..].find('<').map(|i| i + at) {
        at = open + 1;
        let is_start = body[at..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let Some(close) = body[at..].find('>').map(|i| i + at) else {
            break;
        };
        if !is_start || body[..close].ends_with('/') {
            continue;
        }
        let content = close + 1;
        let Some(end) = body[content..].find("</").map(|i| i + content) else {
            break;
        };
        let inner = &body[content..end];
        if let Some(cdata) = inner.strip_prefix("<![CDATA[") {
            if let Some(stop) = cdata.find("]]>") {
                let start = content + "<![CDATA[".len();
                leaves.push((start, start + stop));
            }
        } else if !inner.contains('<') {
            leaves.push((content, end));
        }
    }
    leaves
}

/// Any one mutation.
pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
    let value = "[A-Za-z0-9-]{1,10}";
    let space = prop::sample::select(SPACES.to_vec()).prop_map(str::to_owned);
    prop_oneof![
        3 => (prop::sample::select(HEADERS.to_vec()), value, any::<bool>()).prop_map(
            |(name, value, append)| Mutation::Header {
                name: name.to_owned(),
                value,
                append,
            }
        ),
        2 => ("[a-z]{1,6}", value).prop_map(|(n, v)| Mutation::Query(n, v)),
        2 => prop_oneof![
            "/[a-z0-9]{1,8}",
            "/[a-z0-9]{1,4}/[a-z0-9]{1,4}",
            ";[a-z]{1,3}/[a-z]{1,4}",
            Just("/".to_owned()),
        ]
        .prop_map(Mutation::Below),
        1 => prop::sample::select(vec!["PUT", "PATCH", "post"])
            .prop_map(|m| Mutation::Method(m.to_owned())),
        3 => (0usize..40, space.clone()).prop_map(|(n, s)| Mutation::Around(n, s)),
        1 => (0usize..40).prop_map(Mutation::Cdata),
        2 => (0usize..64, space).prop_map(|(n, s)| Mutation::JsonSpace(n, s)),
        1 => (0usize..16).prop_map(Mutation::FormSwap),
        1 => (0usize..64).prop_map(Mutation::FormEscape),
    ]
}

#[test]
fn xml_leaf_ranges() {
    let body = "<xml><a><![CDATA[T-1]]></a><b>1</b><c/><d></d></xml>";
    let texts: Vec<&str> = xml_leaves(body).iter().map(|&(s, e)| &body[s..e]).collect();
    assert_eq!(texts, ["T-1", "1", ""]);
    let mut delivery = Delivery {
        method: "POST".into(),
        target: "/p?x=1".into(),
        headers: vec![],
        body: body.into(),
    };
    Mutation::Around(0, " ".into()).apply(&mut delivery);
    Mutation::Cdata(0).apply(&mut delivery);
    Mutation::Below("/y".into()).apply(&mut delivery);
    assert_eq!(
        delivery.body,
        "<xml><a><![CDATA[ T-1 ]]></a><b><![CDATA[1]]></b><c/><d></d></xml>"
    );
    assert_eq!(delivery.target, "/p/y?x=1");
}
