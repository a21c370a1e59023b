//! The audit trail of operator actions: what is recorded, and
//! `GET /admin/audit`, which lists it.
//!
//! Every action a known token asks for — a purge (`DELETE
//! /admin/records/…`), an inbox retry or drop (`POST
//! /admin/inbox/{route}/retry|drop`), an entity correction (`PUT` /
//! `DELETE /admin/entities/{route}`) — is recorded once its answer is
//! decided, done or refused (a read-only token's refusal included), in
//! the store (`store::audit`) and in
//! `idemgate_admin_actions_total{action,outcome}`. A request with no known
//! token is not an operator's action and is not recorded (it is logged,
//! and refused with 401, as before).
//!
//! The handlers say what they found through the answer's extensions
//! ([`Acted`]: the target, the state the operator expected, the state
//! found and the state left); the outcome is the refusal's
//! [`AdminReason`], which every problem answer carries, or `done`. So no
//! handler records anything itself, and an action added later is recorded
//! by naming it in `routes::Endpoint::action`.
//!
//! The entry is written after the action: if the store fails then, the
//! action stands, an ERROR log line says what was not recorded, and
//! `idemgate_admin_audit_failures_total` counts it.

use http::{Response, StatusCode};
use metrics::counter;

use super::{Admin, json, query_pairs};
use crate::body::ProxyBody;
use crate::error::AdminReason;
use crate::metrics::Description;
use crate::store::audit::{AuditEntry, AuditId};

/// Entries per page when `limit` is absent, and the most allowed.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// The most characters an entry keeps of a value the request chose (the
/// route named in the path, the state the operator said they saw): a
/// read-only token's refusals are recorded too, and must not be a way to
/// write large values into the store.
const MAX_ECHOED: usize = 64;

/// The version tag of a listing cursor (`a1.{ms}-{seq}`).
const CURSOR_TAG: &str = "a1.";

/// `idemgate_admin_actions_total{action,outcome}`.
pub(crate) const ACTIONS_TOTAL: Description = Description::counter(
    "idemgate_admin_actions_total",
    "Operator actions asked for by an admin token, by action and outcome (done or the refusal's reason)",
);
/// `idemgate_admin_audit_failures_total`.
pub(crate) const AUDIT_FAILURES_TOTAL: Description = Description::counter(
    "idemgate_admin_audit_failures_total",
    "Operator actions the store did not confirm keeping in the audit trail",
);
/// The metrics of this module, described at start-up.
pub(crate) const DESCRIPTIONS: &[Description] = &[ACTIONS_TOTAL, AUDIT_FAILURES_TOTAL];

/// An operator action, as the trail and the counter name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Purge,
    Retry,
    Drop,
    EntitySet,
    EntityClear,
}

impl Action {
    /// Every action, for the series created at start-up.
    const ALL: [Self; 5] = [
        Self::Purge,
        Self::Retry,
        Self::Drop,
        Self::EntitySet,
        Self::EntityClear,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Purge => "purge",
            Self::Retry => "retry",
            Self::Drop => "drop",
            Self::EntitySet => "entity_set",
            Self::EntityClear => "entity_clear",
        }
    }
}

/// What an action's handler found, carried in its answer's extensions
/// (module docs): `None` where it did not get that far.
#[derive(Debug, Clone, Default)]
pub(super) struct Acted {
    /// The record's key hash or the entity's hash.
    pub target: Option<String>,
    /// The state the operator said they saw.
    pub expected: Option<String>,
    /// The state the action found.
    pub before: Option<String>,
    /// The state it left (`before` again when refused).
    pub after: Option<String>,
    /// Whether the store applied the action: its outcome is `done` even
    /// when what the handler read afterwards failed.
    pub done: bool,
}

impl Acted {
    /// `answer`, carrying this account of the action.
    pub(super) fn on(self, mut answer: Response<ProxyBody>) -> Response<ProxyBody> {
        answer.extensions_mut().insert(self);
        answer
    }
}

/// Creates the trail's series at zero (`outcome="done"` of every
/// action), so a dashboard sees 0 before the first action rather than an
/// absent series.
pub(super) fn metrics_at_zero() {
    for action in Action::ALL {
        counter!(ACTIONS_TOTAL.name, "action" => action.as_str(), "outcome" => "done").increment(0);
    }
    counter!(AUDIT_FAILURES_TOTAL.name).increment(0);
}

impl Admin {
    /// Records `action` on `route`, asked for by token `token`, as its
    /// `answer` tells (module docs).
    pub(super) async fn record_action(
        &self,
        (action, route): (Action, &str),
        token: &str,
        answer: &Response<ProxyBody>,
    ) {
        let acted = answer
            .extensions()
            .get::<Acted>()
            .cloned()
            .unwrap_or_default();
        let outcome = match answer.extensions().get::<AdminReason>() {
            _ if acted.done => "done",
            Some(reason) => reason.as_str(),
            None if answer.status().is_success() => "done",
            None => "error",
        };
        counter!(ACTIONS_TOTAL.name, "action" => action.as_str(), "outcome" => outcome)
            .increment(1);
        let entry = AuditEntry {
            token: token.to_owned(),
            action: action.as_str().to_owned(),
            route: echoed(route),
            target: acted.target,
            expected: acted.expected.as_deref().map(echoed),
            before: acted.before,
            after: acted.after,
            outcome: outcome.to_owned(),
            status: answer.status().as_u16(),
        };
        let kept = self
            .store
            .append_audit(
                &self.config.store.key_prefix,
                &entry,
                self.config.audit_retention,
            )
            .await;
        if let Err(error) = kept {
            counter!(AUDIT_FAILURES_TOTAL.name).increment(1);
            tracing::error!(
                target: "idemgate::admin",
                %error,
                token,
                action = entry.action,
                route,
                target = entry.target.as_deref().unwrap_or("-"),
                outcome,
                "operator action not recorded in the audit trail"
            );
        }
    }

    /// `GET /admin/audit?limit=&cursor=`: one page of the trail, newest
    /// first; `next_cursor` is `null` on the last page.
    pub(super) async fn audit_trail(&self, query: Option<&str>) -> Response<ProxyBody> {
        let (limit, before) = match page_query(query) {
            Ok(page) => page,
            Err(problem) => return self.problem(AdminReason::BadRequest, &problem),
        };
        // One more than shown: whether another page follows.
        let page = self
            .store
            .audit_page(
                &self.config.store.key_prefix,
                before,
                self.config.audit_retention,
                limit + 1,
            )
            .await;
        let mut page = match page {
            Ok(page) => page,
            Err(error) => return self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        };
        let more = page.len() > limit;
        page.truncate(limit);
        let next = more
            .then(|| page.last().map(|(id, _)| format!("{CURSOR_TAG}{id}")))
            .flatten();
        let items: Vec<_> = page
            .iter()
            .map(|(id, entry)| {
                let mut view = serde_json::to_value(entry).unwrap_or_default();
                view["id"] = id.to_string().into();
                view["at_ms"] = id.ms.into();
                view
            })
            .collect();
        json(
            StatusCode::OK,
            &serde_json::json!({ "items": items, "next_cursor": next }),
        )
    }
}

/// A value the request chose, as an entry keeps it: at most
/// [`MAX_ECHOED`] characters, `…` marking a cut.
fn echoed(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHOED) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// A listing's `limit` and the entry its `cursor` continues after.
fn page_query(query: Option<&str>) -> Result<(usize, Option<AuditId>), String> {
    let mut limit = None;
    let mut cursor = None;
    for (name, value) in query_pairs(query) {
        let slot = match name {
            "limit" => &mut limit,
            "cursor" => &mut cursor,
            other => {
                return Err(format!(
                    "unknown query parameter {other:?}; expected limit=, cursor="
                ));
            }
        };
        if slot.replace(value).is_some() {
            return Err(format!("{name}= is given more than once"));
        }
    }
    let limit = match limit {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| format!("limit must be 1-{MAX_LIMIT}"))?,
    };
    let before = cursor
        .map(|text| {
            text.strip_prefix(CURSOR_TAG)
                .and_then(|id| id.parse().ok())
                .ok_or_else(|| "cursor must be the next_cursor of a previous page".to_owned())
        })
        .transpose()?;
    Ok((limit, before))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_the_request_chose_are_kept_short() {
        assert_eq!(echoed("pay"), "pay");
        let long = "é".repeat(MAX_ECHOED + 10);
        let kept = echoed(&long);
        assert_eq!(kept.chars().count(), MAX_ECHOED + 1);
        assert!(kept.ends_with('…'));
        assert_eq!(echoed(&"a".repeat(MAX_ECHOED)), "a".repeat(MAX_ECHOED));
    }

    #[test]
    fn a_page_query_is_checked() {
        assert_eq!(page_query(None), Ok((DEFAULT_LIMIT, None)));
        assert_eq!(
            page_query(Some("limit=2&cursor=a1.17-3")),
            Ok((2, Some(AuditId { ms: 17, seq: 3 })))
        );
        for bad in [
            "limit=0",
            "limit=501",
            "limit=x",
            "cursor=17-3",
            "cursor=a1.x",
            "cursor=a1.1-1&cursor=a1.1-1",
            "state=dead",
        ] {
            assert!(page_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
