//! The one body type of every message idemgate sends or answers.
//!
//! It lives here, below every other module, because the server, the admin
//! listener, the error table and the pipeline stages all build responses:
//! none of them should have to import a pipeline stage to name a body.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

/// Body type of everything idemgate sends or answers: a boxed body, so
/// buffered (protected) and streamed (passthrough) messages share one type.
pub(crate) type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Wraps bytes as a [`ProxyBody`]: the one way to build a buffered body,
/// so every answer idemgate writes itself (problem documents, replays,
/// admin pages) is framed the same way.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}
