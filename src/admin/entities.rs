//! `GET /admin/entities/{route}?id=<value>|hash=<32 hex>`: an entity's
//! current state, its pending change and its last transitions with the
//! deliveries that made them, so an operator can see why a
//! notice was refused or acknowledged without forwarding. Every
//! `delivery` is the key hash `GET /admin/records/{route}?hash=` takes.
//!
//! `id=` is a single-part id value, percent-decoded strictly like the
//! record API's `key=` (`+` stays a plus sign) and hashed as the pipeline
//! hashes it ([`entity_hash`]); `hash=` is the entity hash logs print.

use http::StatusCode;

use super::{Admin, json, query_pairs};
use crate::body::ProxyBody;
use crate::config::Route;
use crate::error::AdminReason;
use crate::pipeline::admit::entity::entity_hash;
use crate::store::entity::{EntityState, Transition};
use crate::store::{ENTITY_HASH_LEN, EntityKey};

/// Why an entity URL names no entity.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum EntityRefError {
    /// Neither `id=` nor `hash=`, or both.
    #[error("name the entity one way: /admin/entities/{{route}}?id=<value> or ?hash=<32 hex>")]
    NotOneWay,
    /// `hash=` that is not 32 hex digits.
    #[error("hash must be the entity hash: 32 hex digits")]
    BadHash,
    /// An empty `id=`.
    #[error("the entity id is empty")]
    EmptyId,
    /// A parameter other than `id` and `hash`.
    #[error("unknown query parameter {0:?}; expected id= or hash=")]
    UnknownParameter(String),
}

/// The entity a URL names: its hash and the id value when one was given.
pub(super) fn entity_ref(query: Option<&str>) -> Result<(String, Option<String>), EntityRefError> {
    let decode = |raw: &str| -> Vec<u8> { percent_encoding::percent_decode_str(raw).collect() };
    let mut named = Vec::new();
    for (name, value) in query_pairs(query) {
        match name {
            "id" if value.is_empty() => return Err(EntityRefError::EmptyId),
            "id" => {
                let id = decode(value);
                let hash = entity_hash([id.as_slice()]);
                named.push((hash, Some(String::from_utf8_lossy(&id).into_owned())));
            }
            "hash" => {
                let hash = String::from_utf8_lossy(&decode(value)).to_ascii_lowercase();
                let hex =
                    hash.len() == ENTITY_HASH_LEN && hash.bytes().all(|b| b.is_ascii_hexdigit());
                if !hex {
                    return Err(EntityRefError::BadHash);
                }
                named.push((hash, None));
            }
            other => return Err(EntityRefError::UnknownParameter(other.to_owned())),
        }
    }
    match named.len() {
        1 => Ok(named.remove(0)),
        _ => Err(EntityRefError::NotOneWay),
    }
}

impl Admin {
    /// `GET /admin/entities/{route}?…` (token and method checked by the
    /// caller).
    pub(super) async fn entity(
        &self,
        route_name: &str,
        query: Option<&str>,
    ) -> http::Response<ProxyBody> {
        let Some(route) = self.config.routes.iter().find(|r| r.name == route_name) else {
            return self.problem(AdminReason::UnknownRoute, "no route has this name");
        };
        if super::listing::is_listing(query) {
            if route.entity.is_none() {
                return self.problem(
                    AdminReason::EntityNotConfigured,
                    "the route has no [route.entity]",
                );
            }
            return self.held_listing(route, query).await;
        }
        // A malformed URL is a 400 on every route, as on the record API.
        let (hash, id) = match entity_ref(query) {
            Ok(named) => named,
            Err(error) => return self.problem(AdminReason::BadRequest, &error.to_string()),
        };
        if route.entity.is_none() {
            return self.problem(
                AdminReason::EntityNotConfigured,
                "the route has no [route.entity]",
            );
        }
        let key = EntityKey::new(
            &self.config.store.key_prefix,
            &route.idempotency.scope,
            &hash,
        );
        match self.store.entity(&key).await {
            Ok(Some((state, ttl))) => json(
                StatusCode::OK,
                &entity_view(route, &hash, id.as_deref(), &state, ttl),
            ),
            Ok(None) => self.problem(AdminReason::EntityNotFound, "no state kept for this entity"),
            Err(error) => self.problem(AdminReason::StoreUnavailable, &error.to_string()),
        }
    }
}

fn transition_view(transition: &Transition) -> serde_json::Value {
    serde_json::json!({
        "kind": transition.kind,
        "from": transition.from,
        "to": transition.to,
        "delivery": transition.delivery,
        "at_ms": transition.at_ms,
    })
}

/// The JSON view of an entity; `history` newest first, as kept.
pub(super) fn entity_view(
    route: &Route,
    hash: &str,
    id: Option<&str>,
    state: &EntityState,
    ttl: Option<std::time::Duration>,
) -> serde_json::Value {
    serde_json::json!({
        "route": route.name,
        "scope": route.idempotency.scope,
        "entity": hash,
        "id": id,
        "state": state.state,
        // Unix ms like the other admin views; null before any change.
        "since_ms": (state.since_ms != 0).then_some(state.since_ms),
        "pending": state.pending.as_ref().map(|p| serde_json::json!({
            "delivery": p.delivery(),
            "from": p.from,
            "to": p.to,
        })),
        "held": state.held.iter().map(|h| serde_json::json!({
            "delivery": h.delivery(),
            "to": h.to,
        })).collect::<Vec<_>>(),
        "counts": {
            "applied": state.applied,
            "refused": state.refused,
            "repeats": state.repeats,
        },
        "ttl_ms": ttl.map(crate::time::millis),
        "history": state.history.iter().map(transition_view).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entity_is_named_one_way_only() {
        let (hash, id) = entity_ref(Some("id=o%201+x")).unwrap();
        assert_eq!(hash, entity_hash([&b"o 1+x"[..]]));
        assert_eq!(id.as_deref(), Some("o 1+x"));
        let upper = hash.to_uppercase();
        assert_eq!(
            entity_ref(Some(&format!("hash={upper}"))),
            Ok((hash.clone(), None))
        );
        assert_eq!(entity_ref(None), Err(EntityRefError::NotOneWay));
        assert_eq!(
            entity_ref(Some(&format!("id=a&hash={hash}"))),
            Err(EntityRefError::NotOneWay)
        );
        assert_eq!(entity_ref(Some("hash=abc")), Err(EntityRefError::BadHash));
        assert_eq!(entity_ref(Some("id=")), Err(EntityRefError::EmptyId));
        assert_eq!(
            entity_ref(Some("key=a")),
            Err(EntityRefError::UnknownParameter("key".into()))
        );
    }
}
