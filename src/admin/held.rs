//! `GET /admin/entities/{route}?state=held[&limit=N][&cursor=C]`: the
//! entities of the route's scope that something holds (a change pending:
//! in flight, unknown, owed by the inbox or unresolved; or notices waiting
//! behind it), each with what holds it and what waits, so an operator
//! finds every entity that needs a look without an id from a log line.
//! Walked like the record listing (`store::listing`): a bounded amount of
//! work per page, so a page may hold fewer than `limit` while
//! `next_cursor` says more follow.

use http::{Response, StatusCode};

use super::entities::entity_view;
use super::{Admin, json, query_pairs};
use crate::body::ProxyBody;
use crate::config::Route;
use crate::error::AdminReason;
use crate::store::listing::Cursor;

/// Page size when `limit` is absent, and the largest allowed.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// Reads `state=held`, `limit=`, `cursor=` (each at most once); the error
/// is the 400's detail.
/// The walk a held-entity listing's cursor resumes.
fn held_listing(scope: &str) -> String {
    format!("entities/{scope}/held")
}

/// Reads a held-entity listing query of `scope`'s entities.
fn held_query(query: Option<&str>, scope: &str) -> Result<(usize, Cursor), String> {
    let (mut state, mut limit, mut cursor) = (None, DEFAULT_LIMIT, Cursor::default());
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in query_pairs(query) {
        if seen.contains(&name) {
            return Err(format!("{name}= is given more than once"));
        }
        seen.push(name);
        match name {
            "state" => state = Some(value),
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| format!("limit must be 1-{MAX_LIMIT}"))?;
            }
            "cursor" => {
                cursor = Cursor::decode(value, &held_listing(scope)).map_err(|e| e.to_string())?;
            }
            other => {
                return Err(format!(
                    "unknown query parameter {other:?}; a listing takes state=held, limit=, cursor="
                ));
            }
        }
    }
    match state {
        Some("held") => Ok((limit, cursor)),
        _ => Err("state must be held (one entity: id= or hash=)".into()),
    }
}

impl Admin {
    /// Answers the held-entity listing of `route` (authorized, `GET`,
    /// with `state=`, the route has `[route.entity]`).
    pub(super) async fn held_listing(
        &self,
        route: &Route,
        query: Option<&str>,
    ) -> Response<ProxyBody> {
        let (limit, cursor) = match held_query(query, &route.idempotency.scope) {
            Ok(parsed) => parsed,
            Err(detail) => return self.problem(AdminReason::BadRequest, &detail),
        };
        let page = match self
            .store
            .list_held_entities(
                &self.config.store.key_prefix,
                &route.idempotency.scope,
                limit,
                cursor,
            )
            .await
        {
            Ok(page) => page,
            Err(error) => return self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        };
        let items: Vec<_> = page
            .entities
            .iter()
            .map(|(suffix, state)| {
                let hash = suffix.trim_start_matches("entity:{").trim_end_matches('}');
                entity_view(route, hash, None, state, None)
            })
            .collect();
        json(
            StatusCode::OK,
            &serde_json::json!({
                "route": route.name,
                "scope": route.idempotency.scope,
                "state": "held",
                "items": items,
                "next_cursor": page
                    .next
                    .map(|cursor| cursor.encode(&held_listing(&route.idempotency.scope))),
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_listing_queries_are_checked() {
        assert_eq!(
            held_query(Some("state=held"), "pay"),
            Ok((DEFAULT_LIMIT, Cursor::default()))
        );
        assert_eq!(held_query(Some("state=held&limit=2"), "pay").unwrap().0, 2);
        let records = Cursor::default().encode("records/pay/unknown");
        assert!(
            held_query(Some(&format!("state=held&cursor={records}")), "pay").is_err(),
            "a record listing's cursor does not page the entities"
        );
        for bad in [
            "state=dead",
            "limit=2",
            "state=held&limit=0",
            "state=held&state=held",
            "state=held&id=x",
            "state=held&cursor=zz",
        ] {
            assert!(held_query(Some(bad), "pay").is_err(), "{bad}");
        }
    }
}
