//! The methods an admin path serves, and the 405 that names them.
//!
//! RFC 9110 §15.5.6: a 405 must carry `Allow` listing what the target
//! resource does serve, so a client (or the console, or `idemgate admin`)
//! can tell a wrong method from a wrong path. Each path's handler names
//! its set once, as one of these values, and both the check and the
//! header come from it.

use http::{HeaderValue, Method, Response, header};

use super::Admin;
use crate::body::ProxyBody;
use crate::error::AdminReason;

/// The method set of one admin path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allow {
    /// Read-only views: probes, metrics, listings, config, info.
    Get,
    /// A record: show it or purge it.
    GetDelete,
    /// An inbox action (retry, drop).
    Post,
    /// An entity: show it, set its state, clear it.
    GetPutDelete,
}

impl Allow {
    /// The `Allow` header value.
    pub(crate) fn header(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::GetDelete => "GET, DELETE",
            Self::Post => "POST",
            Self::GetPutDelete => "GET, PUT, DELETE",
        }
    }

    /// Whether `method` is one of the set: read from [`Allow::header`], so
    /// what is admitted and what a 405 lists can not disagree.
    pub(crate) fn admits(self, method: &Method) -> bool {
        self.header()
            .split(", ")
            .any(|name| name == method.as_str())
    }

    /// Adds the `Allow` header to a 405 answer.
    pub(crate) fn stamp(self, response: &mut Response<ProxyBody>) {
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(self.header()));
    }
}

impl Admin {
    /// The 405 problem for a path that serves `allow`, with its `Allow`.
    pub(crate) fn method_not_allowed(&self, allow: Allow) -> Response<ProxyBody> {
        let mut refused = self.problem(
            AdminReason::MethodNotAllowed,
            &format!("this path serves {}", allow.header()),
        );
        allow.stamp(&mut refused);
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_set_admits_its_methods_and_nothing_else() {
        let methods = [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::PATCH,
        ];
        for (allow, admitted) in [
            (Allow::Get, &[Method::GET][..]),
            (Allow::GetDelete, &[Method::GET, Method::DELETE][..]),
            (Allow::Post, &[Method::POST][..]),
        ] {
            for method in &methods {
                assert_eq!(
                    allow.admits(method),
                    admitted.contains(method),
                    "{allow:?} {method}"
                );
            }
        }
    }
}
