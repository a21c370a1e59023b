//! `GET /admin/openapi.json`: the admin API described as OpenAPI 3.1.
//!
//! The document is `docs/admin-openapi.json`, compiled in, so what is
//! served is byte for byte what the repository holds. A suite test
//! (`tests/suite/admin/openapi.rs`) walks every path and method of it
//! against the running router, and every path literal of this module
//! tree against it, so the two cannot drift apart silently. It is served
//! without the token: it describes the API and holds no data.

use http::{Response, StatusCode};

use super::reply;
use crate::body::ProxyBody;

/// The document, as the repository keeps it.
const DOCUMENT: &str = include_str!("../../docs/admin-openapi.json");

/// The document as an `application/json` answer.
pub(super) fn document() -> Response<ProxyBody> {
    reply(StatusCode::OK, "application/json", DOCUMENT.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1_and_describes_itself() {
        let document: serde_json::Value = serde_json::from_str(DOCUMENT).expect("valid JSON");
        assert_eq!(document["openapi"], "3.1.0");
        assert!(document["paths"]["/admin/openapi.json"]["get"].is_object());
    }
}
