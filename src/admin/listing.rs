//! The record listing: `GET /admin/records/{route}?state=unknown|in_flight
//! [&limit=N][&cursor=C]`, behind the same bearer token as the record API:
//! the records that need a person, found without a key copied out of a
//! log line.
//!
//! `state=unknown` lists the records observed unknown (an unknown outcome,
//! `unknown`, and an in-flight claim whose owner stopped renewing it,
//! `unknown_owner_lost`); `state=in_flight` the claims still within their
//! lease. Each item carries the key hash (for `?hash=`), the single-part
//! key value when the record kept one, age, remaining TTL and the first
//! delivery's trace id. The store walk behind it (`store::listing`) does
//! a bounded amount of work per page, so a page may hold fewer than
//! `limit` items while `next_cursor` says more follow; `next_cursor` is
//! `null` on the last page. The inbox's dead deliveries have their own
//! listing (`/admin/inbox/{route}?state=dead`).

use http::{Response, StatusCode};

use super::{Admin, json, query_pairs, state_word};
use crate::body::ProxyBody;
use crate::config::Route;
use crate::error::AdminReason;
use crate::record::{RecordState, now_ms};
use crate::store::listing::{BadCursor, Cursor, Filter, Wanted};
use crate::store::probe::PendingProbe;
use crate::store::{Existing, StoreKey};

/// Page size when `limit` is absent, and the largest allowed.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// Why a listing query is refused (a 400 whose detail is the message).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum ListingError {
    /// `state=` other than `unknown` or `in_flight`.
    #[error(
        "state must be unknown or in_flight (dead deliveries: /admin/inbox/{{route}}?state=dead)"
    )]
    BadState,
    /// `limit=` out of range or not a number.
    #[error("limit must be 1-{MAX_LIMIT}")]
    BadLimit,
    /// `cursor=` that no page gave.
    #[error(transparent)]
    BadCursor(#[from] BadCursor),
    /// A parameter given twice.
    #[error("{0}= is given more than once")]
    Repeated(String),
    /// `hash=` or `key=` (or a path key) beside `state=`.
    #[error("state= lists records; hash=, key= and a path key name one: use one or the other")]
    Combined,
    /// `limit=` or `cursor=` without `state=`.
    #[error("limit= and cursor= page a listing: add state=unknown or state=in_flight")]
    MissingState,
    /// Any other parameter.
    #[error("unknown query parameter {0:?}; expected state=, limit=, cursor=")]
    UnknownParameter(String),
}

/// A parsed listing query.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ListingQuery {
    wanted: Wanted,
    limit: usize,
    cursor: Cursor,
}

/// The walk a record listing's cursor resumes: the scope and the state.
fn records_listing(scope: &str, wanted: Wanted) -> String {
    format!("records/{scope}/{}", wanted_word(wanted))
}

fn wanted_word(wanted: Wanted) -> &'static str {
    match wanted {
        Wanted::Unknown => "unknown",
        Wanted::InFlight => "in_flight",
    }
}

/// Whether `query` asks for a listing (names `state=`, `limit=` or
/// `cursor=`): then the record API's other forms do not apply, and a
/// listing parameter beside a record's name is refused as such.
pub(super) fn is_listing(query: Option<&str>) -> bool {
    query_pairs(query).any(|(name, _)| matches!(name, "state" | "limit" | "cursor"))
}

/// Reads a listing query (one that [`is_listing`]) of `scope`'s records.
fn listing_query(query: Option<&str>, scope: &str) -> Result<ListingQuery, ListingError> {
    let mut wanted = None;
    let mut parsed = ListingQuery {
        wanted: Wanted::Unknown,
        limit: DEFAULT_LIMIT,
        cursor: Cursor::default(),
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut cursor = None;
    for (name, value) in query_pairs(query) {
        if seen.contains(&name) {
            return Err(ListingError::Repeated(name.to_owned()));
        }
        seen.push(name);
        match name {
            "state" => {
                wanted = Some(match value {
                    "unknown" => Wanted::Unknown,
                    "in_flight" => Wanted::InFlight,
                    _ => return Err(ListingError::BadState),
                });
            }
            "limit" => {
                parsed.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or(ListingError::BadLimit)?;
            }
            "cursor" => cursor = Some(value),
            "hash" | "key" => return Err(ListingError::Combined),
            other => return Err(ListingError::UnknownParameter(other.to_owned())),
        }
    }
    parsed.wanted = wanted.ok_or(ListingError::MissingState)?;
    if let Some(text) = cursor {
        parsed.cursor = Cursor::decode(text, &records_listing(scope, parsed.wanted))?;
    }
    Ok(parsed)
}

/// One listed record. `past_lease` only for a record still in flight
/// (true: its owner stopped renewing, so it reads as unknown).
fn item_view(route: &Route, key_hash: &str, existing: &Existing) -> serde_json::Value {
    let record = &existing.record;
    let mut item = serde_json::json!({
        "key_hash": key_hash,
        // A value that is not UTF-8 has no faithful JSON string: `?hash=`
        // names its record.
        "key": record.key.as_deref().and_then(|key| std::str::from_utf8(key).ok()),
        "state": state_word(route, existing),
        "age_ms": now_ms().saturating_sub(record.created_at_ms),
        "ttl_ms": existing.ttl.map(crate::time::millis),
        "status": match &record.state {
            RecordState::Completed(answer) => Some(answer.status),
            RecordState::Acknowledged(marker) => Some(marker.status()),
            _ => None,
        },
        "trace_id": record.trace.map(|trace| hex::encode(trace.trace_id)),
    });
    if matches!(record.state, RecordState::InFlight(_)) {
        item["past_lease"] = (state_word(route, existing) != "in_flight").into();
    }
    item
}

/// A pending probe as the record view and the listing show it.
pub(super) fn probe_view(pending: &PendingProbe) -> serde_json::Value {
    let plan = &pending.plan;
    serde_json::json!({
        "next_attempt_at_ms": (!plan.done).then_some(pending.next_at_ms),
        "attempts": plan.attempts,
        "spent": plan.done,
        "last": (!plan.last.is_empty()).then_some(plan.last.as_str()),
        "target": plan.target,
    })
}

impl Admin {
    /// Answers a listing request on `route` (authorized, `GET`, with
    /// `state=`); `path_key` is a key named in the path, refused here.
    pub(super) async fn record_listing(
        &self,
        route: &Route,
        path_key: Option<&str>,
        query: Option<&str>,
    ) -> Response<ProxyBody> {
        let parsed = match path_key.filter(|key| !key.is_empty()) {
            Some(_) => Err(ListingError::Combined),
            None => listing_query(query, &route.idempotency.scope),
        };
        let query = match parsed {
            Ok(query) => query,
            Err(problem) => return self.problem(AdminReason::BadRequest, &problem.to_string()),
        };
        let filter = Filter {
            wanted: query.wanted,
            unknown_hold: route.idempotency.unknown_hold,
            limit: query.limit,
        };
        let page = match self
            .store
            .list_records(
                &self.config.store.key_prefix,
                &route.idempotency.scope,
                filter,
                query.cursor,
            )
            .await
        {
            Ok(page) => page,
            Err(error) => return self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        };
        let mut items = Vec::with_capacity(page.records.len());
        for (hash, existing) in &page.records {
            let mut item = item_view(route, hash, existing);
            if route.probe.is_some() {
                let key = StoreKey::new(
                    &self.config.store.key_prefix,
                    &route.idempotency.scope,
                    hash,
                );
                if let Ok(Some(pending)) = self.store.pending_probe(&key).await {
                    item["probe"] = probe_view(&pending);
                }
            }
            items.push(item);
        }
        json(
            StatusCode::OK,
            &serde_json::json!({
                "route": route.name,
                "scope": route.idempotency.scope,
                "state": wanted_word(query.wanted),
                "items": items,
                "next_cursor": page.next.map(|cursor| {
                    cursor.encode(&records_listing(&route.idempotency.scope, query.wanted))
                }),
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_queries_are_checked() {
        assert!(is_listing(Some("limit=2&state=unknown")));
        assert!(!is_listing(Some("key=state")));
        assert!(is_listing(Some("limit=2")), "a page without its state");
        let parsed = listing_query(Some("state=in_flight&limit=7"), "pay").unwrap();
        assert_eq!((parsed.wanted, parsed.limit), (Wanted::InFlight, 7));
        let cursor = Cursor {
            node: 1,
            scan: 9,
            after: "ab".into(),
            pending: vec!["cd".into()],
        };
        let text = cursor.encode("records/pay/unknown");
        let parsed = listing_query(Some(&format!("state=unknown&cursor={text}")), "pay");
        assert_eq!(parsed.map(|q| q.cursor), Ok(cursor));
        // Another scope's or another state's cursor would skip records.
        let other_scope = listing_query(Some(&format!("state=unknown&cursor={text}")), "refunds");
        assert_eq!(
            other_scope.map(|q| q.cursor),
            Err(ListingError::BadCursor(BadCursor))
        );
        let other_state = listing_query(Some(&format!("state=in_flight&cursor={text}")), "pay");
        assert_eq!(
            other_state.map(|q| q.cursor),
            Err(ListingError::BadCursor(BadCursor))
        );
        assert_eq!(
            listing_query(Some("state=unknown"), "pay").map(|q| q.limit),
            Ok(DEFAULT_LIMIT)
        );
        for (bad, error) in [
            ("state=dead", ListingError::BadState),
            ("state=unknown&limit=0", ListingError::BadLimit),
            ("state=unknown&limit=501", ListingError::BadLimit),
            ("state=unknown&limit=x", ListingError::BadLimit),
            (
                "state=unknown&cursor=zz",
                ListingError::BadCursor(BadCursor),
            ),
            ("state=unknown&key=a", ListingError::Combined),
            ("limit=2", ListingError::MissingState),
            ("hash=a&cursor=x", ListingError::Combined),
            ("state=unknown&hash=a", ListingError::Combined),
            (
                "state=unknown&page=2",
                ListingError::UnknownParameter("page".into()),
            ),
            (
                "state=unknown&state=in_flight",
                ListingError::Repeated("state".into()),
            ),
        ] {
            assert_eq!(listing_query(Some(bad), "pay"), Err(error), "{bad}");
        }
    }
}
