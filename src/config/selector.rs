//! Selectors (`header:NAME`, `query:NAME`, `json:/pointer`, `form:FIELD`)
//! and the `{…}` message template, parsed once at start-up.
//!
//! Parsing here only checks syntax; reading a selector's value out of a
//! request is `crate::extract`'s job. Keeping the two apart means the hot
//! path never re-parses configuration text.

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
}

impl Selector {
    /// Parses `kind:argument`. The error says which kinds exist.
    pub fn parse(text: &str) -> Result<Self, String> {
        const HINT: &str = "expected header:NAME, query:NAME, json:/pointer or form:FIELD";
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
            _ => Err(format!(
                "unknown selector kind {kind:?} in {text:?}; {HINT}"
            )),
        }
    }

    /// Whether reading this selector needs the body parsed.
    pub fn needs_body(&self) -> bool {
        matches!(self, Self::Json(_) | Self::Form(_))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => write!(f, "header:{name}"),
            Self::Query(name) => write!(f, "query:{name}"),
            Self::Json(pointer) => write!(f, "json:{pointer}"),
            Self::Form(field) => write!(f, "form:{field}"),
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
