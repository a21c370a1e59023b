//! The inbox API: `/admin/inbox/{route}…`, behind the same bearer token as
//! the record API, naming a delivery the same unambiguous way (`?hash=` or
//! `?key=`).
//!
//! | request | does |
//! |---|---|
//! | `GET /admin/inbox/{route}?state=queued\|dead&limit=&cursor=` | one page of the scope's queued (oldest first) or held deliveries; `next_cursor` (`inbox_cursor`: after the last shown, a keyset walk) is `null` on the last page |
//! | `GET /admin/inbox/{route}/delivery?key=…` | stage, attempts, next due, last error, the handler's last answer |
//! | `POST /admin/inbox/{route}/retry?key=…` | a dead or unknown delivery: queued for one attempt now |
//! | `POST /admin/inbox/{route}/drop?key=…` | resolved without sending; the record stays, so copies still get the ack |
//!
//! A route without an inbox is a 404; an action on a delivery in the wrong
//! stage, or one a worker changed meanwhile, is a 409 that says which.

use http::{Response, StatusCode};

use super::audit::Acted;
use super::routes::InboxPath;
use super::{Admin, inbox_cursor, json, query_pairs};
use crate::body::ProxyBody;
use crate::error::AdminReason;
use crate::inbox::{Action, Listing, RouteInbox};
use crate::record::{InboxEntry, Record, RecordState, StoredBody, StoredResponse, now_ms};
use crate::store::StoreKey;
use crate::store::inbox::IndexPosition;

/// Page size when `limit` is absent, and the largest allowed.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// The longest text body shown of a handler's answer.
const ANSWER_PREVIEW: usize = 2_048;

/// A listing's query: `state`, `limit`, `cursor` (after which delivery,
/// checked against the listing of `scope` and that state).
fn listing_query(
    query: Option<&str>,
    scope: &str,
) -> Result<(Listing, usize, Option<IndexPosition>), String> {
    let mut listing = Listing::Queued;
    let mut limit = DEFAULT_LIMIT;
    let mut cursor = None;
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in query_pairs(query) {
        if seen.contains(&name) {
            return Err(format!("{name}= is given more than once"));
        }
        seen.push(name);
        match name {
            "state" => {
                listing = match value {
                    "queued" => Listing::Queued,
                    "dead" => Listing::Dead,
                    _ => return Err("state must be queued or dead".into()),
                };
            }
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| format!("limit must be 1-{MAX_LIMIT}"))?;
            }
            "cursor" => cursor = Some(value),
            other => {
                return Err(format!(
                    "unknown query parameter {other:?}; expected state=, limit=, cursor="
                ));
            }
        }
    }
    // Read last: the cursor belongs to the state named anywhere in the query.
    let cursor = cursor
        .map(|text| inbox_cursor::decode(text, &walk_name(scope, listing)))
        .transpose()
        .map_err(|_| {
            "cursor must be the next_cursor of a previous page of this listing (same scope and state)"
                .to_owned()
        })?;
    Ok((listing, limit, cursor))
}

/// The name a cursor of this listing carries.
fn walk_name(scope: &str, listing: Listing) -> String {
    let state = match listing {
        Listing::Queued => "queued",
        Listing::Dead => "dead",
    };
    format!("inbox/{scope}/{state}")
}

fn answer_view(answer: &StoredResponse) -> serde_json::Value {
    let body = match &answer.body {
        StoredBody::Kept(bytes) => {
            let shown = &bytes[..bytes.len().min(ANSWER_PREVIEW)];
            serde_json::json!({
                "body_bytes": bytes.len(),
                "body": String::from_utf8_lossy(shown),
            })
        }
        StoredBody::TooLarge => serde_json::json!({ "body_stored": false }),
    };
    let mut view = serde_json::json!({ "status": answer.status });
    if let (Some(view), Some(body)) = (view.as_object_mut(), body.as_object()) {
        view.extend(body.clone());
    }
    view
}

/// The JSON view of an inbox delivery: no request body content.
fn delivery_view(
    route: &str,
    hash: &str,
    record: &Record,
    entry: &InboxEntry,
) -> serde_json::Value {
    let due = |stage_pending: bool| stage_pending.then_some(entry.due_ms);
    serde_json::json!({
        "route": route,
        "arrived_on": entry.route,
        "key_hash": hash,
        "state": entry.stage.as_str(),
        "attempts": entry.attempts,
        "attempt_limit": entry.limit,
        "next_due_ms": due(entry.stage == crate::record::Stage::Queued),
        "visible_again_ms": due(entry.stage == crate::record::Stage::Delivering),
        "changed_ms": due(!entry.stage.is_pending()),
        "age_ms": now_ms().saturating_sub(record.created_at_ms),
        "last_error": (!entry.last_error.is_empty()).then_some(&entry.last_error),
        "last_answer": entry.last_answer.as_ref().map(answer_view),
        "ack_status": entry.ack.status,
        "request": {
            "method": String::from_utf8_lossy(&entry.request.method),
            "target": String::from_utf8_lossy(&entry.request.target),
            "body_bytes": entry.request.body.len(),
        },
    })
}

impl Admin {
    /// Answers one `/admin/inbox/{route_name}…` request naming `part` of
    /// the route's inbox (token and method already checked: `routes`).
    pub(super) async fn inbox(
        &self,
        part: InboxPath,
        route_name: &str,
        query: Option<&str>,
    ) -> Response<ProxyBody> {
        if !self.config.routes.iter().any(|r| r.name == route_name) {
            return self.problem(AdminReason::UnknownRoute, "no route has this name");
        }
        let Some(inbox) = self.inboxes.route(route_name) else {
            return self.problem(
                AdminReason::InboxNotConfigured,
                "this route has no [route.inbox]",
            );
        };
        let route = &inbox.settings;
        let action = match part {
            InboxPath::Listing => return self.inbox_page(inbox, query).await,
            InboxPath::Delivery => "delivery",
            InboxPath::Retry => "retry",
            InboxPath::Drop => "drop",
        };
        // An action says which state it saw (as the delivery view shows
        // it); the rest names the delivery.
        let (seen, query) = if action == "delivery" {
            (None, query.map(str::to_owned))
        } else {
            match super::purge::expected_state(query) {
                Ok((Some(seen), rest)) => (Some(seen), rest),
                Ok((None, _)) => {
                    return self.problem(
                        AdminReason::BadRequest,
                        &format!(
                            "say which state you saw with expect_state= (the delivery view's state: {}); the {action} is refused if it changed",
                            if action == "retry" { "dead or unknown" } else { "queued, dead or unknown" }
                        ),
                    );
                }
                Err(problem) => return self.problem(AdminReason::BadRequest, problem),
            }
        };
        let (hash, key) = match self.record_key(route, None, query.as_deref()) {
            Ok(named) => named,
            Err(problem) => return *problem,
        };
        let seen = seen.unwrap_or_default();
        let result = match action {
            "delivery" => self.store.lookup(&key).await.map(|found| match found {
                Some(existing) => Action::Done(existing.record),
                None => Action::NotFound,
            }),
            "retry" => self.inboxes.retry(inbox, &key, &seen).await,
            _ => self.inboxes.drop_delivery(inbox, &key, &seen).await,
        };
        let done = matches!(result, Ok(Action::Done(_)));
        let (answer, before, after) = self.delivery_answer(&route.name, &hash, &seen, result);
        if action == "delivery" {
            return answer;
        }
        Acted {
            target: Some(hash),
            expected: Some(seen),
            before,
            after: after.map(str::to_owned),
            done,
        }
        .on(answer)
    }

    /// The answer to a look at, retry or drop of delivery `hash` on
    /// `route` that found `result`, with the stage it found and the stage
    /// it left (for the audit trail; `seen` is what the operator saw).
    fn delivery_answer(
        &self,
        route: &str,
        hash: &str,
        seen: &str,
        result: Result<Action, crate::store::StoreError>,
    ) -> (Response<ProxyBody>, Option<String>, Option<&'static str>) {
        let not_found = || {
            self.problem(
                AdminReason::DeliveryNotFound,
                "no inbox delivery under that key",
            )
        };
        match result {
            Ok(Action::Done(record)) => match &record.state {
                RecordState::Inbox(entry) => (
                    json(StatusCode::OK, &delivery_view(route, hash, &record, entry)),
                    Some(seen.to_owned()),
                    Some(entry.stage.as_str()),
                ),
                _ => (not_found(), None, None),
            },
            Ok(Action::NotFound) => (not_found(), Some("absent".into()), Some("absent")),
            Ok(Action::WrongStage(stage)) => (
                self.problem(
                    AdminReason::WrongStage,
                    &format!(
                        "the delivery is {}: retry takes dead or unknown ones, drop any not delivering or delivered",
                        stage.as_str()
                    ),
                ),
                Some(stage.as_str().to_owned()),
                Some(stage.as_str()),
            ),
            Ok(Action::Raced) => (
                self.problem(
                    AdminReason::DeliveryChanged,
                    "a worker changed the delivery meanwhile; look again",
                ),
                None,
                None,
            ),
            Ok(Action::Changed(stage)) => (
                self.problem(
                    AdminReason::DeliveryChanged,
                    &format!(
                        "the delivery is {} now, not {seen}: nothing was done; look again",
                        stage.as_str()
                    ),
                ),
                Some(stage.as_str().to_owned()),
                Some(stage.as_str()),
            ),
            Err(error) => (
                self.problem(AdminReason::StoreUnavailable, &error.to_string()),
                None,
                None,
            ),
        }
    }

    async fn inbox_page(&self, inbox: &RouteInbox, query: Option<&str>) -> Response<ProxyBody> {
        let route = &inbox.settings;
        let scope = &route.idempotency.scope;
        let (listing, limit, cursor) = match listing_query(query, scope) {
            Ok(parsed) => parsed,
            Err(problem) => return self.problem(AdminReason::BadRequest, &problem),
        };
        // One more than the page, to know whether another page follows.
        let listed = self
            .inboxes
            .list(inbox, listing, cursor.as_ref(), limit + 1)
            .await;
        let mut page = match listed {
            Ok(page) => page,
            Err(error) => {
                return self.problem(AdminReason::StoreUnavailable, &error.to_string());
            }
        };
        let more = page.len() > limit;
        page.truncate(limit);
        let mut items = Vec::with_capacity(page.len());
        for (hash, at_ms) in &page {
            let key = StoreKey::new(
                &self.config.store.key_prefix,
                &route.idempotency.scope,
                hash,
            );
            let item = match self.store.lookup(&key).await {
                Ok(Some(existing)) => match &existing.record.state {
                    RecordState::Inbox(entry) => {
                        delivery_view(&route.name, hash, &existing.record, entry)
                    }
                    _ => serde_json::json!({ "key_hash": hash, "state": "settled" }),
                },
                Ok(None) => serde_json::json!({ "key_hash": hash, "state": "expired" }),
                Err(error) => {
                    return self.problem(AdminReason::StoreUnavailable, &error.to_string());
                }
            };
            let mut item = item;
            item["listed_at_ms"] = (*at_ms).into();
            items.push(item);
        }
        let next_cursor = page.last().filter(|_| more).map(|(hash, at_ms)| {
            let at = IndexPosition {
                score: *at_ms,
                member: hash.clone(),
            };
            inbox_cursor::encode(&at, &walk_name(scope, listing))
        });
        json(
            StatusCode::OK,
            &serde_json::json!({
                "route": route.name,
                "scope": route.idempotency.scope,
                "state": match listing { Listing::Queued => "queued", Listing::Dead => "dead" },
                "items": items,
                "next_cursor": next_cursor,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_queries_are_checked() {
        assert_eq!(listing_query(None, "pay").map(|q| q.1), Ok(DEFAULT_LIMIT));
        let at = IndexPosition {
            score: 14,
            member: "ab".repeat(32),
        };
        let text = inbox_cursor::encode(&at, "inbox/pay/dead");
        let query = format!("cursor={text}&limit=7&state=dead");
        let (listing, limit, cursor) = listing_query(Some(&query), "pay").unwrap();
        assert_eq!((listing, limit, cursor), (Listing::Dead, 7, Some(at)));
        let other_state = format!("state=queued&cursor={text}");
        let other_scope = format!("state=dead&cursor={text}");
        for (bad, scope) in [
            ("state=gone", "pay"),
            ("limit=0", "pay"),
            ("limit=501", "pay"),
            ("cursor=x", "pay"),
            ("cursor=14", "pay"),
            ("page=2", "pay"),
            ("state=dead&state=queued", "pay"),
            ("limit=5&limit=6", "pay"),
            ("cursor=0&cursor=0", "pay"),
            (other_state.as_str(), "pay"),
            (other_scope.as_str(), "refunds"),
        ] {
            assert!(listing_query(Some(bad), scope).is_err(), "{bad}");
        }
    }
}
