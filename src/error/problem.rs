//! The RFC 9457 problem document, and the `type` URIs under the base the
//! operator configures (`problem_type_base`).
//!
//! Every answer idemgate writes itself (a proxy [`super::Rejection`], an
//! `answer_not_stored` replay, an admin API error) is one of these
//! documents. Its `type` is the configured base followed by the `reason`
//! word, so the default `urn:idemgate:problem:` names no web address the
//! project does not own, and an operator who hosts the problem docs can
//! point the types at them (`https://docs.example.com/problems/`).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, Uri, header};

use crate::body::{ProxyBody, full};

/// The media type of every problem document (RFC 9457 §3).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Why a `problem_type_base` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemBaseError {
    /// The base is empty.
    #[error("must not be empty; the default is {default:?}", default = ProblemTypes::DEFAULT_BASE)]
    Empty,
    /// Whitespace, a control character or a non-ASCII character.
    #[error("{0:?} contains whitespace, control or non-ASCII characters")]
    Characters(String),
    /// Neither `urn:`, `http://` nor `https://`.
    #[error(
        "{0:?} is neither a URN (\"urn:example:problem:\") nor an http(s) URL (\"https://docs.example.com/problems/\")"
    )]
    Scheme(String),
    /// A URN whose namespace identifier is not 1–32 letters, digits or
    /// hyphens (RFC 8141 §2).
    #[error(
        "{0:?} is not a URN: expected urn:<namespace>: with a namespace of letters, digits and hyphens"
    )]
    Urn(String),
    /// An http(s) base that does not parse, has no host, or carries a
    /// query (the reason word would land in it).
    #[error("{0:?} is not an http(s) URL with a host and without a query")]
    Url(String),
    /// An http(s) base with a user or password: every problem document
    /// would carry it. Not quoted, so the error does not print it either.
    #[error("must not carry a user or password: every problem document would show them")]
    Credentials,
    /// The base does not end in a separator, so the reason word would run
    /// into its last segment.
    #[error("{0:?} must end with \"/\", \":\" or \"#\" so the reason word is a segment of its own")]
    Ending(String),
}

/// The `type` URIs of problem documents: a validated base, to which the
/// reason word is appended. Cheap to clone (shared text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemTypes {
    base: Arc<str>,
}

impl Default for ProblemTypes {
    fn default() -> Self {
        Self {
            base: Arc::from(Self::DEFAULT_BASE),
        }
    }
}

impl ProblemTypes {
    /// The default base: a URN, so no type names a domain the project
    /// does not own (`urn:idemgate:problem:signature_invalid`).
    pub const DEFAULT_BASE: &'static str = "urn:idemgate:problem:";

    /// Checks a configured base: a URN ending in `:`, or an http(s) URL
    /// with a host and no query, ending in `/`, `:` or `#`.
    pub fn new(base: &str) -> Result<Self, ProblemBaseError> {
        if base.is_empty() {
            return Err(ProblemBaseError::Empty);
        }
        let authority = base.split_once("://").map_or("", |(_, rest)| {
            rest.split(['/', '?', '#']).next().unwrap_or("")
        });
        if authority.contains('@') {
            return Err(ProblemBaseError::Credentials);
        }
        if !base.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ProblemBaseError::Characters(base.to_owned()));
        }
        if !base.ends_with(['/', ':', '#']) {
            return Err(ProblemBaseError::Ending(base.to_owned()));
        }
        let lower = base.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("urn:") {
            let namespace = rest.split(':').next().unwrap_or_default();
            let namespace_ok = (1..=32).contains(&namespace.len())
                && namespace
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !namespace.starts_with('-');
            // A namespace and at least its closing colon.
            if !namespace_ok || rest.len() == namespace.len() || !base.ends_with(':') {
                return Err(ProblemBaseError::Urn(base.to_owned()));
            }
        } else if lower.starts_with("http://") || lower.starts_with("https://") {
            // The fragment is no part of `Uri`: check the rest.
            let (before_fragment, _) = base.split_once('#').unwrap_or((base, ""));
            let valid = before_fragment
                .parse::<Uri>()
                .ok()
                .filter(|uri| {
                    uri.authority()
                        .is_some_and(|authority| !authority.host().is_empty())
                        && uri.query().is_none()
                })
                .is_some();
            if !valid || base.matches('#').count() > 1 {
                return Err(ProblemBaseError::Url(base.to_owned()));
            }
        } else {
            return Err(ProblemBaseError::Scheme(base.to_owned()));
        }
        Ok(Self {
            base: Arc::from(base),
        })
    }

    /// The configured base, as written.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The `type` URI of the problem named by `reason`.
    pub fn uri(&self, reason: &str) -> String {
        format!("{}{reason}", self.base)
    }

    /// An RFC 9457 problem document: the one shape of every answer
    /// idemgate writes itself.
    pub(crate) fn document(
        &self,
        status: StatusCode,
        reason: &str,
        title: &str,
        detail: &str,
    ) -> Bytes {
        let body = serde_json::json!({
            "type": self.uri(reason),
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
            "reason": reason,
        });
        Bytes::from(body.to_string())
    }

    /// The document as a whole answer, with its status and media type.
    pub(crate) fn response(
        &self,
        status: StatusCode,
        reason: &str,
        title: &str,
        detail: &str,
    ) -> Response<ProxyBody> {
        let mut response = Response::new(full(self.document(status, reason, title, detail)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_base_is_a_urn() {
        let types = ProblemTypes::default();
        assert_eq!(
            types.uri("signature_invalid"),
            "urn:idemgate:problem:signature_invalid"
        );
        assert_eq!(ProblemTypes::new(ProblemTypes::DEFAULT_BASE), Ok(types));
    }

    #[test]
    fn urn_and_http_bases_are_taken_as_written() {
        for base in [
            "urn:example:problem:",
            "urn:ietf:params:acme:error:",
            "URN:Example-1:",
            "https://docs.example.com/problems/",
            "http://127.0.0.1:8000/p/",
            "https://docs.example.com/problems.html#",
            "https://docs.example.com/problems:",
        ] {
            let types = ProblemTypes::new(base).unwrap_or_else(|e| panic!("{base}: {e}"));
            assert_eq!(types.base(), base);
            assert_eq!(types.uri("key_missing"), format!("{base}key_missing"));
        }
    }

    #[test]
    fn bad_bases_are_refused_with_the_reason() {
        use ProblemBaseError as E;
        type Expected = fn(String) -> E;
        let cases: [(&str, Expected); 10] = [
            ("https://docs.example.com/problems", E::Ending),
            ("urn:example:problem", E::Ending),
            ("urn:example:problem/", E::Urn),
            ("urn::", E::Urn),
            ("urn:-bad:", E::Urn),
            ("ftp://example.com/", E::Scheme),
            ("example.com/", E::Scheme),
            ("https:///problems/", E::Url),
            ("https://example.com/?type=/", E::Url),
            ("https://example.com/a b/", E::Characters),
        ];
        for (base, expected) in cases {
            assert_eq!(
                ProblemTypes::new(base),
                Err(expected(base.into())),
                "{base}"
            );
        }
        assert_eq!(ProblemTypes::new(""), Err(E::Empty));
        for base in [
            "https://u:pw@docs.example.com/p/",
            "https://tok@docs.example.com/p",
        ] {
            let error = ProblemTypes::new(base).unwrap_err();
            assert_eq!(error, E::Credentials, "{base}");
            assert!(!error.to_string().contains("pw") && !error.to_string().contains("tok"));
        }
        assert_eq!(
            ProblemTypes::new("urn:é:"),
            Err(E::Characters("urn:é:".into()))
        );
        assert_eq!(
            ProblemTypes::new("https://example.com/a#b#"),
            Err(E::Url("https://example.com/a#b#".into()))
        );
    }

    #[test]
    fn the_document_carries_the_configured_type() {
        let types = ProblemTypes::new("https://docs.example.com/problems/").unwrap();
        let body = types.document(StatusCode::UNAUTHORIZED, "unauthorized", "T", "d");
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            doc["type"],
            "https://docs.example.com/problems/unauthorized"
        );
        assert_eq!(doc["status"], 401);
        assert_eq!(doc["title"], "T");
        assert_eq!(doc["detail"], "d");
        assert_eq!(doc["reason"], "unauthorized");
    }
}
