//! A buffered request, the selectors that name values in it, and the
//! reading of those values out of it.
//!
//! [`Selector`] and the message [`Template`] (`selector.rs`) are parsed
//! from the configuration once; they live here, below both `config` and
//! `signature`, because both name request values with them.
//!
//! [`Inbound`] owns the request head and body bytes and parses the body at
//! most once per format, only when a selector asks for it: a route that
//! needs nothing from the body never parses JSON. Values come back as bytes
//! borrowed from the request where possible.
//!
//! JSON values are read as follows: a string gives its unescaped text, a
//! number its literal text as sent (exact, thanks to `arbitrary_precision`),
//! `true`/`false` their words, an object or array its compact JSON, and
//! `null` counts as absent. A JSON body whose objects name a key twice is
//! refused ([`json`]), and so is a form field a selector reads that occurs
//! more than once: backends disagree on which value counts, so idemgate
//! must not key, fingerprint or verify one while the backend acts on the
//! other. For the same reason an XML body ([`xml`]) is refused when it has
//! a DTD, an undeclared entity or mixed content, and an `xml:/path`
//! selector whose path names two leaves is refused too; an XML value is the
//! leaf's text with references decoded, CDATA verbatim, and trimmed once
//! by [`xml::normalise`] (the WeChat Pay v2 verifier signs these very
//! values), an empty element reads as the empty value.
//!
//! A selector's field must also mean one thing to the handler's stack: a
//! JSON key with a rival that differs only in case (Go matches keys case
//! insensitively), or a form field with a rival PHP files under the same
//! name (`trade.status`, `trade_status[]`), is refused as
//! `field_ambiguous` (`ambiguity`). A form is read only from a body sent
//! as `application/x-www-form-urlencoded` (or with no `Content-Type`):
//! handlers parse a multipart or JSON body otherwise.

mod ambiguity;
pub mod json;
mod selector;
pub mod xml;

use std::borrow::Cow;
use std::sync::OnceLock;

use bytes::Bytes;
use http::request::Parts;

use crate::budget::Reserved;
use crate::error::Rejection;

pub use selector::{Segment, Selector, Template};

/// A request whose body has been read in full.
#[derive(Debug)]
pub struct Inbound {
    /// Method, URI, headers.
    pub parts: Parts,
    /// The raw body.
    pub body: Bytes,
    json: OnceLock<Result<serde_json::Value, json::JsonError>>,
    form: OnceLock<Vec<(String, String)>>,
    xml: OnceLock<Result<xml::XmlDocument, xml::XmlError>>,
    /// The share of `limits.max_buffered_bytes` the body holds, returned
    /// when the request is dropped.
    reserved: Reserved,
}

impl Inbound {
    /// Wraps a request head and its body.
    pub fn new(parts: Parts, body: Bytes) -> Self {
        Self {
            parts,
            body,
            json: OnceLock::new(),
            form: OnceLock::new(),
            xml: OnceLock::new(),
            reserved: Reserved::default(),
        }
    }

    /// The same request, holding `reserved` of the body budget for as long
    /// as it lives.
    pub(crate) fn holding(mut self, reserved: Reserved) -> Self {
        self.reserved = reserved;
        self
    }

    /// Gives up the head and body, for a forward that owns them (no clone
    /// of the header map).
    pub fn into_parts(self) -> (Parts, Bytes) {
        (self.parts, self.body)
    }

    /// The body parsed as JSON, or `bad_request_body` (also for an object
    /// that names a key twice).
    pub fn json(&self) -> Result<&serde_json::Value, Rejection> {
        match self.json.get_or_init(|| json::parse(&self.body)) {
            Ok(value) => Ok(value),
            Err(json::JsonError::Syntax) => Err(Rejection::BadRequestBody("json")),
            Err(json::JsonError::DuplicateKey) => {
                Err(Rejection::BadRequestBody("json that names each key once"))
            }
            Err(json::JsonError::NumberToken) => Err(Rejection::BadRequestBody(
                "json without serde_json's private number token",
            )),
        }
    }

    /// The body parsed as `application/x-www-form-urlencoded` pairs; a
    /// body declared as another type is refused (its handler would parse
    /// it as that type).
    pub fn form(&self) -> Result<&[(String, String)], Rejection> {
        let declared = self
            .parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|value| value.as_bytes().to_ascii_lowercase());
        let is_form = |media: &[u8]| {
            let essence = media.split(|b| *b == b';').next().unwrap_or_default();
            essence.trim_ascii() == b"application/x-www-form-urlencoded"
        };
        if declared.is_some_and(|media| !is_form(&media)) {
            return Err(Rejection::BadRequestBody(
                "form sent as application/x-www-form-urlencoded",
            ));
        }
        if std::str::from_utf8(&self.body).is_err() {
            return Err(Rejection::BadRequestBody("form"));
        }
        Ok(self.form.get_or_init(|| {
            form_urlencoded::parse(&self.body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        }))
    }

    /// The body parsed as XML leaves (at most once per request), or
    /// `bad_request_body` for any body [`xml::parse`] refuses: a DTD, an
    /// undeclared entity, mixed content, malformed markup, …
    pub fn xml(&self) -> Result<&xml::XmlDocument, Rejection> {
        self.xml
            .get_or_init(|| xml::parse(&self.body))
            .as_ref()
            .map_err(|_| Rejection::BadRequestBody("xml"))
    }

    /// Reads a selector. `Ok(None)`: the value is absent. `Err`: the body
    /// could not be parsed as the selector requires.
    pub fn value(&self, selector: &Selector) -> Result<Option<Cow<'_, [u8]>>, Rejection> {
        Ok(match selector {
            Selector::Header(name) => self
                .parts
                .headers
                .get(name)
                .map(|v| Cow::Borrowed(v.as_bytes())),
            Selector::Query(name) => self.parts.uri.query().and_then(|query| {
                form_urlencoded::parse(query.as_bytes())
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| Cow::Owned(v.into_owned().into_bytes()))
            }),
            Selector::Json(pointer) => ambiguity::json_pointer(self.json()?, pointer)
                .map_err(|_| Rejection::FieldAmbiguous(selector.to_string()))?
                .and_then(json_bytes),
            Selector::Form(field) => {
                let form = self.form()?;
                if form
                    .iter()
                    .any(|(k, _)| k != field && ambiguity::php_name(k) == *field)
                {
                    return Err(Rejection::FieldAmbiguous(selector.to_string()));
                }
                let mut values = form.iter().filter(|(k, _)| k == field);
                let first = values.next();
                if values.next().is_some() {
                    return Err(Rejection::BadRequestBody("form with the field once"));
                }
                first.map(|(_, v)| Cow::Borrowed(v.as_bytes()))
            }
            Selector::Xml(path) => self
                .xml()?
                .get(path)
                .map_err(|_| Rejection::BadRequestBody("xml with the element once"))?
                .map(|text| Cow::Borrowed(text.as_bytes())),
        })
    }
}

fn json_bytes(value: &serde_json::Value) -> Option<Cow<'_, [u8]>> {
    use serde_json::Value;
    match value {
        Value::Null => None,
        Value::String(s) => Some(Cow::Borrowed(s.as_bytes())),
        Value::Bool(true) => Some(Cow::Borrowed(b"true")),
        Value::Bool(false) => Some(Cow::Borrowed(b"false")),
        Value::Number(n) => Some(Cow::Owned(n.to_string().into_bytes())),
        Value::Array(_) | Value::Object(_) => Some(Cow::Owned(value.to_string().into_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(uri: &str, headers: &[(&str, &str)], body: &str) -> Inbound {
        let mut builder = http::Request::builder().method("POST").uri(uri);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        Inbound::new(parts, Bytes::from(body.to_owned()))
    }

    fn read(inbound: &Inbound, selector: &str) -> Result<Option<Vec<u8>>, Rejection> {
        inbound
            .value(&Selector::parse(selector).unwrap())
            .map(|v| v.map(Cow::into_owned))
    }

    #[test]
    fn reads_every_selector_kind() {
        let req = inbound(
            "/n?a=1&t=%2042",
            &[("X-Sig", "abc")],
            r#"{"id":"p-1","amount":10.50,"ok":true,"nil":null,"obj":{"b":1,"a":2}}"#,
        );
        assert_eq!(read(&req, "header:x-sig").unwrap(), Some(b"abc".to_vec()));
        assert_eq!(read(&req, "query:t").unwrap(), Some(b" 42".to_vec()));
        assert_eq!(read(&req, "query:zz").unwrap(), None);
        assert_eq!(read(&req, "json:/id").unwrap(), Some(b"p-1".to_vec()));
        assert_eq!(read(&req, "json:/amount").unwrap(), Some(b"10.50".to_vec()));
        assert_eq!(read(&req, "json:/ok").unwrap(), Some(b"true".to_vec()));
        assert_eq!(read(&req, "json:/nil").unwrap(), None);
        assert_eq!(read(&req, "json:/missing").unwrap(), None);
        assert_eq!(
            read(&req, "json:/obj").unwrap(),
            Some(br#"{"a":2,"b":1}"#.to_vec())
        );
        assert_eq!(read(&req, "form:x"), Ok(None));
    }

    #[test]
    fn form_and_unparsable_bodies() {
        let req = inbound("/n", &[], "sign=ab%2Bc&x=1&x=2");
        assert_eq!(read(&req, "form:sign").unwrap(), Some(b"ab+c".to_vec()));
        assert_eq!(
            read(&req, "form:x"),
            Err(Rejection::BadRequestBody("form with the field once")),
            "which x would the backend take?"
        );
        let twice = inbound("/n", &[], r#"{"a":1,"b":{"c":1,"c":2}}"#);
        assert_eq!(
            read(&twice, "json:/a"),
            Err(Rejection::BadRequestBody("json that names each key once"))
        );
        assert_eq!(
            read(&req, "json:/a"),
            Err(Rejection::BadRequestBody("json"))
        );
        let binary = Inbound::new(
            http::Request::new(()).into_parts().0,
            Bytes::from_static(&[0xff, 0xfe]),
        );
        assert_eq!(
            binary.value(&Selector::Form("a".into())).map(|_| ()),
            Err(Rejection::BadRequestBody("form"))
        );
    }

    #[test]
    fn xml_bodies() {
        let req = inbound(
            "/n",
            &[],
            "<xml><out_trade_no><![CDATA[T-1]]></out_trade_no><fee>1</fee><e/><d>1</d><d>2</d></xml>",
        );
        assert_eq!(
            read(&req, "xml:/xml/out_trade_no").unwrap(),
            Some(b"T-1".to_vec())
        );
        assert_eq!(read(&req, "xml:/xml/fee").unwrap(), Some(b"1".to_vec()));
        assert_eq!(read(&req, "xml:/xml/e").unwrap(), Some(Vec::new()));
        assert_eq!(read(&req, "xml:/xml/nope").unwrap(), None);
        assert_eq!(
            read(&req, "xml:/xml/d"),
            Err(Rejection::BadRequestBody("xml with the element once"))
        );
        assert!(
            std::ptr::eq(req.xml().unwrap(), req.xml().unwrap()),
            "parsed once"
        );
        let xxe = inbound(
            "/n",
            &[],
            "<!DOCTYPE x [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><xml><a>&e;</a></xml>",
        );
        assert_eq!(
            read(&xxe, "xml:/xml/a"),
            Err(Rejection::BadRequestBody("xml"))
        );
        let json = inbound("/n", &[], r#"{"a":1}"#);
        assert_eq!(read(&json, "xml:/a"), Err(Rejection::BadRequestBody("xml")));
    }
}
