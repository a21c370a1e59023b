//! `PUT` and `DELETE /admin/entities/{route}?…`: an operator's correction
//! of an entity (`store::entity::operator`), the one way to settle a
//! change idemgate could not: set the entity's state (the handler did
//! apply the pending change, or the books say otherwise) or clear it.
//!
//! The request carries what the operator saw, and is refused with 409
//! `entity_changed` (and the entity as it now is) when the entity changed
//! since: a correction judged against a stale view is never applied.
//!
//! | parameter | |
//! |---|---|
//! | `id=` or `hash=` | the entity, as `GET` names it |
//! | `state=` | `PUT` only: the new state, one the route's machine declares |
//! | `expect_state=` | the state the operator saw (empty: none) |
//! | `expect_pending=` | the pending delivery the operator saw, its key hash with the entity tag (empty: none) |
//! | `operator=` | optional: who, kept in the entity's history (1-64 of `A-Za-z0-9._@-`; default `admin`) |

use http::StatusCode;

use super::audit::Acted;
use super::entities::{entity_ref, entity_view};
use super::{Admin, json, query_pairs};
use crate::body::ProxyBody;
use crate::config::Route;
use crate::error::AdminReason;
use crate::store::EntityKey;
use crate::store::entity::{Correction, Seen};

/// Who a correction names when the request does not say.
const DEFAULT_OPERATOR: &str = "admin";
/// The longest operator name kept.
const MAX_OPERATOR: usize = 64;

/// A correction request, read from its query.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    /// The entity's hash and id, as `GET` names it.
    entity: (String, Option<String>),
    seen: Seen,
    /// `PUT`'s new state (`None` for `DELETE`).
    state: Option<String>,
    operator: String,
}

/// Reads a correction's query; the error is the 400's detail.
fn read(query: Option<&str>, set: bool) -> Result<Request, String> {
    let decode = |raw: &str| {
        percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| "parameters must be UTF-8".to_owned())
    };
    let mut naming = Vec::new();
    let (mut state, mut expect_state, mut expect_pending, mut operator) = (None, None, None, None);
    for (name, value) in query_pairs(query) {
        let slot = match name {
            "id" | "hash" => {
                naming.push(format!("{name}={value}"));
                continue;
            }
            "state" if set => &mut state,
            "expect_state" => &mut expect_state,
            "expect_pending" => &mut expect_pending,
            "operator" => &mut operator,
            other => return Err(format!("unknown query parameter {other:?}")),
        };
        if slot.replace(decode(value)?).is_some() {
            return Err(format!("{name}= is given more than once"));
        }
    }
    let entity = entity_ref(Some(&naming.join("&"))).map_err(|e| e.to_string())?;
    let (Some(expect_state), Some(expect_pending)) = (expect_state, expect_pending) else {
        return Err("say what you saw: expect_state= and expect_pending= (empty for none)".into());
    };
    if set && state.as_deref().is_none_or(str::is_empty) {
        return Err("state= names the new state".into());
    }
    let operator = operator.unwrap_or_else(|| DEFAULT_OPERATOR.to_owned());
    let named = !operator.is_empty()
        && operator.len() <= MAX_OPERATOR
        && operator
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_@".contains(&b));
    if !named {
        return Err(format!(
            "operator= is 1-{MAX_OPERATOR} of A-Z a-z 0-9 . _ @ -"
        ));
    }
    let none_if_empty = |text: String| (!text.is_empty()).then_some(text);
    Ok(Request {
        entity,
        seen: Seen {
            state: none_if_empty(expect_state),
            pending: none_if_empty(expect_pending).map(|hash| hash.to_ascii_lowercase()),
        },
        state,
        operator,
    })
}

impl Admin {
    /// `PUT` (`set`) or `DELETE /admin/entities/{route}?…` (token
    /// checked by the caller); the answer carries what it found for the
    /// audit trail.
    pub(super) async fn correct(
        &self,
        route_name: &str,
        query: Option<&str>,
        set: bool,
    ) -> http::Response<ProxyBody> {
        let mut acted = Acted::default();
        let answer = self
            .correct_judged(route_name, query, set, &mut acted)
            .await;
        acted.on(answer)
    }

    /// [`Admin::correct`]'s answer; `acted` learns the entity, what the
    /// operator saw and what the correction found and left.
    async fn correct_judged(
        &self,
        route_name: &str,
        query: Option<&str>,
        set: bool,
        acted: &mut Acted,
    ) -> http::Response<ProxyBody> {
        let Some(route) = self.config.routes.iter().find(|r| r.name == route_name) else {
            return self.problem(AdminReason::UnknownRoute, "no route has this name");
        };
        let request = match read(query, set) {
            Ok(request) => request,
            Err(detail) => return self.problem(AdminReason::BadRequest, &detail),
        };
        acted.target = Some(request.entity.0.clone());
        acted.expected = Some(state_name(request.seen.state.as_deref()));
        let Some(entity) = route.entity.as_ref() else {
            return self.problem(
                AdminReason::EntityNotConfigured,
                "the route has no [route.entity]",
            );
        };
        let correction = match &request.state {
            Some(state) => match entity.machine.state(state.as_bytes()) {
                Some(declared) => Correction::Set(declared.to_owned()),
                None => {
                    return self.problem(
                        AdminReason::BadRequest,
                        &format!("{state:?} is not a state the route's machine declares"),
                    );
                }
            },
            None => Correction::Clear,
        };
        let (hash, id) = &request.entity;
        let key = EntityKey::new(
            &self.config.store.key_prefix,
            &route.idempotency.scope,
            hash,
        );
        let by = (request.operator.as_str(), entity.retention);
        match self
            .store
            .correct_entity(&key, &request.seen, &correction, by)
            .await
        {
            Ok(true) => {
                tracing::warn!(
                    route = route.name,
                    entity = hash,
                    ?correction,
                    operator = request.operator,
                    "entity corrected by operator"
                );
                acted.done = true;
                acted.before.clone_from(&acted.expected);
                acted.after = Some(state_name(match &correction {
                    Correction::Set(state) => Some(state.as_str()),
                    Correction::Clear => None,
                }));
                self.entity_now(route, hash, id.as_deref(), &key).await
            }
            Ok(false) => {
                let (answer, now) = self.changed(route, hash, &key).await;
                acted.before.clone_from(&now);
                acted.after = now;
                answer
            }
            Err(error) => self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        }
    }

    /// The entity as it now is (200), or 404 when nothing is kept.
    async fn entity_now(
        &self,
        route: &Route,
        hash: &str,
        id: Option<&str>,
        key: &EntityKey,
    ) -> http::Response<ProxyBody> {
        match self.store.entity(key).await {
            Ok(Some((state, ttl))) => {
                json(StatusCode::OK, &entity_view(route, hash, id, &state, ttl))
            }
            Ok(None) => self.problem(AdminReason::EntityNotFound, "no state kept for this entity"),
            Err(error) => self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        }
    }

    /// 409 `entity_changed`, saying what the entity now is, and its
    /// state's name when it could be read.
    async fn changed(
        &self,
        route: &Route,
        hash: &str,
        key: &EntityKey,
    ) -> (http::Response<ProxyBody>, Option<String>) {
        let (now, state_now) = match self.store.entity(key).await {
            Ok(Some((state, _))) => (
                format!(
                    "state {}, pending {}",
                    state.state.as_deref().unwrap_or("(none)"),
                    state.pending.as_ref().map_or("(none)", |p| p.delivery())
                ),
                Some(state_name(state.state.as_deref())),
            ),
            Ok(None) => ("no state kept".to_owned(), Some(state_name(None))),
            Err(error) => (format!("unreadable: {error}"), None),
        };
        tracing::info!(
            route = route.name,
            entity = hash,
            now,
            "entity correction refused: it changed meanwhile"
        );
        let answer = self.problem(
            AdminReason::EntityChanged,
            &format!("the entity is not as you saw it; it now has {now}: look again"),
        );
        (answer, state_now)
    }
}

/// An entity's state as the audit trail names it: `none` before its first.
fn state_name(state: Option<&str>) -> String {
    state.unwrap_or("none").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correction_says_what_the_operator_saw() {
        let read_put = |q: &str| read(Some(q), true);
        let ok = read_put("id=o1&state=success&expect_state=pending&expect_pending=&operator=ana")
            .unwrap();
        assert_eq!(ok.entity.1.as_deref(), Some("o1"));
        assert_eq!(
            ok.seen,
            Seen {
                state: Some("pending".into()),
                pending: None
            }
        );
        assert_eq!(
            (ok.state.as_deref(), ok.operator.as_str()),
            (Some("success"), "ana")
        );
        let hash = format!("{}%7B{}%7D", "a".repeat(64), "b".repeat(32));
        let cleared = read(
            Some(&format!("id=o1&expect_state=&expect_pending={hash}")),
            false,
        )
        .unwrap();
        assert_eq!(
            cleared.seen.pending,
            Some(format!("{}{{{}}}", "a".repeat(64), "b".repeat(32)))
        );
        assert_eq!(cleared.operator, DEFAULT_OPERATOR);
        for bad in [
            "id=o1&state=success&expect_state=pending",
            "id=o1&expect_state=&expect_pending=",
            "id=o1&state=a&state=b&expect_state=&expect_pending=",
            "id=o1&state=a&expect_state=&expect_pending=&operator=a:b",
            "id=o1&state=a&expect_state=&expect_pending=&who=x",
            "state=a&expect_state=&expect_pending=",
        ] {
            assert!(read_put(bad).is_err(), "{bad}");
        }
        assert!(
            read(Some("id=o1&state=a&expect_state=&expect_pending="), false).is_err(),
            "DELETE takes no state"
        );
    }
}
