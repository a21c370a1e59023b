//! Selectors (`header:NAME`, `query:NAME`, `json:/pointer`, `form:FIELD`,
//! `xml:/path`) and the `{…}` message template, parsed once at start-up.
//!
//! Parsing here only checks syntax; reading a selector's value out of a
//! request is [`super::Inbound::value`]'s job. Keeping the two apart means
//! the hot path never re-parses configuration text. The configuration
//! (`crate::config`) parses them and the signature schemes
//! (`crate::signature`) render templates, so they sit below both.

use std::fmt;

use http::HeaderName;

/// Where one value comes from in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A request header (case-insensitive name).
    Header(HeaderName),
    /// A query-string parameter (first occurrence).
    Query(String),
    /// An RFC 6901 pointer into a JSON body.
    Json(String),
    /// A field of an `application/x-www-form-urlencoded` body (first occurrence).
    Form(String),
    /// The text of one leaf element of an XML body, named by its element
    /// path from the root (`/xml/out_trade_no`). Bodies with a DTD or an
    /// undeclared entity are refused (`crate::extract::xml`).
    Xml(String),
}

impl Selector {
    /// Parses `kind:argument`. The error says which kinds exist.
    pub fn parse(text: &str) -> Result<Self, String> {
        const HINT: &str =
            "expected header:NAME, query:NAME, json:/pointer, form:FIELD or xml:/path";
        let Some((kind, argument)) = text.split_once(':') else {
            return Err(format!("{text:?} is not a selector; {HINT}"));
        };
        if argument.is_empty() {
            return Err(format!("{text:?} names nothing after the colon; {HINT}"));
        }
        match kind {
            "header" => HeaderName::from_bytes(argument.as_bytes())
                .map(Self::Header)
                .map_err(|_| format!("{argument:?} is not a valid header name")),
            "query" => Ok(Self::Query(argument.to_owned())),
            "json" if argument.starts_with('/') => Ok(Self::Json(argument.to_owned())),
            "json" => Err(format!(
                "{text:?}: a JSON pointer starts with '/', e.g. json:/id"
            )),
            "form" => Ok(Self::Form(argument.to_owned())),
            "xml" => parse_xml_path(text, argument).map(Self::Xml),
            _ => Err(format!(
                "unknown selector kind {kind:?} in {text:?}; {HINT}"
            )),
        }
    }

    /// Whether reading this selector needs the body parsed.
    pub fn needs_body(&self) -> bool {
        matches!(self, Self::Json(_) | Self::Form(_) | Self::Xml(_))
    }
}

/// Checks an `xml:` element path: `/` then one or more XML names separated
/// by `/` (`/xml/out_trade_no`). A path that could never match a parsed
/// element is a start-up error rather than a key that is always missing.
fn parse_xml_path(text: &str, path: &str) -> Result<String, String> {
    let Some(names) = path.strip_prefix('/') else {
        return Err(format!(
            "{text:?}: an XML element path starts with '/', e.g. xml:/xml/out_trade_no"
        ));
    };
    for name in names.split('/') {
        if name.is_empty() {
            return Err(format!(
                "{text:?}: an XML element path has no empty steps ('//' or a trailing '/')"
            ));
        }
        if !is_xml_name(name) {
            return Err(format!(
                "{text:?}: {name:?} is not a valid XML element name"
            ));
        }
    }
    Ok(path.to_owned())
}

/// XML 1.0's `Name` production, simplified to: a letter, `_`, `:` or any
/// non-ASCII character first, then also digits, `-` and `.`.
fn is_xml_name(name: &str) -> bool {
    let mut chars = name.chars();
    let start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':' || !c.is_ascii();
    chars.next().is_some_and(start)
        && chars.all(|c| start(c) || c.is_ascii_digit() || c == '-' || c == '.')
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => write!(f, "header:{name}"),
            Self::Query(name) => write!(f, "query:{name}"),
            Self::Json(pointer) => write!(f, "json:{pointer}"),
            Self::Form(field) => write!(f, "form:{field}"),
            Self::Xml(path) => write!(f, "xml:{path}"),
        }
    }
}

/// One piece of a message template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Text copied as is.
    Literal(String),
    /// A selector's value.
    Value(Selector),
    /// The raw body bytes.
    Body,
    /// The request method.
    Method,
    /// The request path (without query).
    Path,
    /// The raw timestamp value as presented.
    Timestamp,
}

/// A parsed `message` template such as `"{json:/id}\n{timestamp}"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The pieces in order.
    pub segments: Vec<Segment>,
}

impl Template {
    /// Parses a template; `{{` and `}}` stand for literal braces.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|(_, n)| *n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|(_, n)| *n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let rest = &text[at + 1..];
                    let Some(end) = rest.find('}') else {
                        return Err(format!("unclosed '{{' at byte {at}"));
                    };
                    let inner = &rest[..end];
                    for _ in 0..inner.chars().count() + 1 {
                        chars.next();
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(match inner {
                        "body" => Segment::Body,
                        "method" => Segment::Method,
                        "path" => Segment::Path,
                        "timestamp" => Segment::Timestamp,
                        selector => Segment::Value(Selector::parse(selector).map_err(|e| {
                            format!("{e} (or one of {{body}}, {{method}}, {{path}}, {{timestamp}})")
                        })?),
                    });
                }
                '}' => return Err(format!("unmatched '}}' at byte {at}; write '}}}}'")),
                other => literal.push(other),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Self { segments })
    }

    /// The template `{body}`: the default signed content.
    pub fn body_only() -> Self {
        Self {
            segments: vec![Segment::Body],
        }
    }

    /// Whether rendering needs the parsed body.
    pub fn needs_body(&self) -> bool {
        self.segments
            .iter()
            .any(|s| matches!(s, Segment::Value(sel) if sel.needs_body()))
    }
}

impl fmt::Display for Template {
    /// The template as it is written in a file: `Template::parse` of the
    /// output gives the same template back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => {
                    f.write_str(&text.replace('{', "{{").replace('}', "}}"))?
                }
                Segment::Value(selector) => write!(f, "{{{selector}}}")?,
                Segment::Body => f.write_str("{body}")?,
                Segment::Method => f.write_str("{method}")?,
                Segment::Path => f.write_str("{path}")?,
                Segment::Timestamp => f.write_str("{timestamp}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn selectors() {
        assert_eq!(
            Selector::parse("header:X-Signature").unwrap(),
            Selector::Header(HeaderName::from_static("x-signature"))
        );
        assert_eq!(
            Selector::parse("json:/a/b").unwrap(),
            Selector::Json("/a/b".into())
        );
        assert_eq!(
            Selector::parse("form:sign").unwrap(),
            Selector::Form("sign".into())
        );
        assert_eq!(
            Selector::parse("query:t").unwrap(),
            Selector::Query("t".into())
        );
        for bad in [
            "",
            "header",
            "header:",
            "json:id",
            "cookie:x",
            "header:bad name",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn xml_selectors() {
        let selector = Selector::parse("xml:/xml/out_trade_no").unwrap();
        assert_eq!(selector, Selector::Xml("/xml/out_trade_no".into()));
        assert_eq!(selector.to_string(), "xml:/xml/out_trade_no");
        assert!(selector.needs_body());
        assert_eq!(
            Selector::parse("xml:/a:b/c-d.e/_f/\u{e9}").unwrap(),
            Selector::Xml("/a:b/c-d.e/_f/\u{e9}".into())
        );
        for (bad, says) in [
            ("xml:xml/a", "starts with '/'"),
            ("xml:/", "no empty steps"),
            ("xml:/xml//a", "no empty steps"),
            ("xml:/xml/a/", "no empty steps"),
            ("xml:/xml/1a", "not a valid XML element name"),
            ("xml:/xml/a b", "not a valid XML element name"),
            ("xml:/xml/a[1]", "not a valid XML element name"),
        ] {
            let error = Selector::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
        assert!(
            Selector::parse("cookie:x")
                .unwrap_err()
                .contains("xml:/path")
        );
        let template = Template::parse("{xml:/xml/a}.{body}").unwrap();
        assert!(template.needs_body());
        assert_eq!(template.to_string(), "{xml:/xml/a}.{body}");
    }

    #[test]
    fn templates() {
        let t = Template::parse("{json:/a}\n{timestamp}.{body}{{x}}").unwrap();
        assert_eq!(
            t.segments,
            vec![
                Segment::Value(Selector::Json("/a".into())),
                Segment::Literal("\n".into()),
                Segment::Timestamp,
                Segment::Literal(".".into()),
                Segment::Body,
                Segment::Literal("{x}".into()),
            ]
        );
        assert!(t.needs_body());
        assert!(!Template::parse("{method}{path}").unwrap().needs_body());
        for bad in ["{", "{json:x}", "}", "{nope}", "a{body"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn selector_parse_never_panics(text in ".{0,64}") {
            let _ = Selector::parse(&text);
        }

        #[test]
        fn template_parse_never_panics(text in "[{}a-z:/\\\\.\u{e9}\u{1F600}]{0,48}") {
            let _ = Template::parse(&text);
        }

        #[test]
        fn literal_only_templates_round_trip(text in "[a-zA-Z0-9 .:\n]{1,40}") {
            let parsed = Template::parse(&text).unwrap();
            prop_assert_eq!(parsed.segments, vec![Segment::Literal(text)]);
        }
    }
}
