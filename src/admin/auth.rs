//! Who may use the admin API: the bearer token of a request, compared in
//! constant time with `[admin] token` (named `admin`, may act) and every
//! `[[admin.tokens]]` entry, and the scope it carries: a `read` token's
//! action (any method but `GET` and `HEAD`) is refused. Every endpoint
//! behind the token calls [`Admin::refuse_unauthorized`] first.

use http::{Method, Request, Response, header};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Admin;
use crate::body::ProxyBody;
use crate::config::{MAIN_TOKEN_NAME, TokenScope};
use crate::error::AdminReason;

impl Admin {
    /// Who presented the request's bearer token: `None` when no token is
    /// configured (the API is off), `Some(None)` when it matches none.
    fn authorized(&self, request: &Request<Incoming>) -> Option<Option<(&str, TokenScope)>> {
        let main = self
            .config
            .admin_token
            .as_ref()
            .map(|secret| (MAIN_TOKEN_NAME, secret, TokenScope::Act));
        let named = self
            .config
            .admin_tokens
            .iter()
            .map(|named| (named.name.as_str(), &named.secret, named.scope));
        let tokens: Vec<_> = main.into_iter().chain(named).collect();
        if tokens.is_empty() {
            return None;
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()))
            .unwrap_or_default();
        // Digests have one length whatever was presented, and every token
        // is compared, so the time taken tells nothing about any of them.
        let presented = Sha256::digest(presented);
        let mut caller = None;
        for (name, secret, scope) in tokens {
            let configured = Sha256::digest(&*secret.expose());
            if bool::from(presented.as_slice().ct_eq(configured.as_slice())) {
                caller.get_or_insert((name, scope));
            }
        }
        Some(caller)
    }

    /// The name and scope of the token `request` carries, if it matches
    /// one (for `/admin/info`, which tells the console what it may offer).
    pub(super) fn caller(&self, request: &Request<Incoming>) -> Option<(&str, TokenScope)> {
        self.authorized(request).flatten()
    }

    /// The answer to a record or inbox API request without the bearer
    /// token (or with the API disabled), or to an action (any method but
    /// `GET` and `HEAD`) with a read-only token; `None` lets it through,
    /// logging an action with the name of the token that asked for it.
    pub(super) fn refuse_unauthorized(
        &self,
        request: &Request<Incoming>,
    ) -> Option<Response<ProxyBody>> {
        let looks = matches!(*request.method(), Method::GET | Method::HEAD);
        match self.authorized(request) {
            None => Some(self.problem(
                AdminReason::AdminApiDisabled,
                "the record and inbox APIs are disabled: set [admin] token",
            )),
            Some(None) => {
                let mut denied = self.problem(
                    AdminReason::Unauthorized,
                    "send Authorization: Bearer <[admin] token, or a token of [[admin.tokens]]>",
                );
                denied.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer realm=\"idemgate admin\""),
                );
                Some(denied)
            }
            Some(Some((name, TokenScope::Read))) if !looks => {
                tracing::warn!(
                    target: "idemgate::admin",
                    token = name,
                    method = request.method().as_str(),
                    path = request.uri().path(),
                    "admin action refused: the token may only read"
                );
                Some(self.problem(
                    AdminReason::ReadOnlyToken,
                    &format!("token {name:?} may only read (GET); acting needs a token with scope = \"act\""),
                ))
            }
            Some(Some((name, _))) => {
                if !looks {
                    tracing::info!(
                        target: "idemgate::admin",
                        token = name,
                        method = request.method().as_str(),
                        path = request.uri().path(),
                        "admin action by token"
                    );
                }
                None
            }
        }
    }
}

/// The value of an `Authorization` header's `Bearer` credentials: the
/// scheme is case-insensitive (RFC 9110 §11.1), one or more spaces follow.
fn bearer_token(header: &[u8]) -> Option<&[u8]> {
    let space = header.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = header.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|b| *b != b' ')?;
    Some(&rest[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for header in ["Bearer t0k", "bearer t0k", "BEARER t0k", "bEaReR  t0k"] {
            assert_eq!(
                bearer_token(header.as_bytes()),
                Some(&b"t0k"[..]),
                "{header}"
            );
        }
        for header in ["Basic t0k", "Bearert0k", "Bearer", "Bearer ", "t0k"] {
            assert_eq!(bearer_token(header.as_bytes()), None, "{header}");
        }
    }
}
