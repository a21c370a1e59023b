//! `GET /admin/hot-keys[?route=NAME]`: each route's top `k` keys by
//! deliveries in the hot-key window, behind the same bearer token as the
//! record API.
//!
//! ```json
//! { "window_seconds": 60,
//!   "routes": [ { "route": "pay",
//!                 "keys": [ { "rank": 1, "key": "<64 hex>", "deliveries": 20,
//!                             "duplicates": 19, "last_outcome": "replayed",
//!                             "last_reason": null, "last_seen_unix_ms": 1764576000000 } ] } ] }
//! ```
//!
//! `key` is the hash every log line prints as `key=…`, so it feeds
//! `/admin/records/{route}?hash=` directly. A route that does not exist
//! (or hot keys turned off) is a 404; any parameter but `route` a 400.

use http::{Response, StatusCode};

use crate::error::AdminReason;

use super::{Admin, json, query_pairs};
use crate::body::ProxyBody;
use crate::hot_keys::{HotKey, RouteHotKeys};

/// Why a hot-keys query names nothing.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum QueryError {
    /// A parameter other than `route`.
    #[error("unknown query parameter {0:?}; expected route=")]
    UnknownParameter(String),
}

/// The route a query names, percent-decoded; `None` for every route.
fn route_filter(query: Option<&str>) -> Result<Option<String>, QueryError> {
    let mut route = None;
    for (name, value) in query_pairs(query) {
        match name {
            "route" => {
                route = Some(
                    percent_encoding::percent_decode_str(value)
                        .decode_utf8_lossy()
                        .into_owned(),
                );
            }
            other => return Err(QueryError::UnknownParameter(other.to_owned())),
        }
    }
    Ok(route)
}

fn key_view(key: &HotKey) -> serde_json::Value {
    serde_json::json!({
        "rank": key.rank,
        "key": key.digest.to_string(),
        "deliveries": key.deliveries,
        "duplicates": key.duplicates,
        "last_outcome": key.last_outcome,
        "last_reason": key.last_reason,
        "last_seen_unix_ms": key.last_seen_unix_ms,
    })
}

impl Admin {
    /// Answers `GET /admin/hot-keys` (the caller checked the token and
    /// the method).
    pub(super) fn hot_keys(&self, query: Option<&str>) -> Response<ProxyBody> {
        let filter = match route_filter(query) {
            Ok(filter) => filter,
            Err(problem) => return self.problem(AdminReason::BadRequest, &problem.to_string()),
        };
        if !self.hot_keys.enabled() {
            return self.problem(
                AdminReason::HotKeysDisabled,
                "set [hot_keys] enabled = true to keep hot keys",
            );
        }
        let routes: Vec<&RouteHotKeys> = match &filter {
            None => self.hot_keys.routes().iter().map(AsRef::as_ref).collect(),
            Some(name) => match self.hot_keys.named(name) {
                Some(route) => vec![route],
                None => {
                    return self.problem(AdminReason::UnknownRoute, "no route has this name");
                }
            },
        };
        let routes: Vec<serde_json::Value> = routes
            .into_iter()
            .map(|route| {
                let keys: Vec<serde_json::Value> =
                    self.hot_keys.top(route).iter().map(key_view).collect();
                serde_json::json!({ "route": route.name(), "keys": keys })
            })
            .collect();
        let window = self.hot_keys.window();
        let window_seconds = if window.subsec_nanos() == 0 {
            serde_json::Value::from(window.as_secs())
        } else {
            serde_json::Value::from(window.as_secs_f64())
        };
        json(
            StatusCode::OK,
            &serde_json::json!({
                "window_seconds": window_seconds,
                "routes": routes,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_route_is_a_parameter() {
        assert_eq!(route_filter(None), Ok(None));
        assert_eq!(route_filter(Some("")), Ok(None));
        assert_eq!(route_filter(Some("route=p%20ay")), Ok(Some("p ay".into())));
        assert_eq!(
            route_filter(Some("route=pay&rank=1")),
            Err(QueryError::UnknownParameter("rank".into()))
        );
    }
}
