//! Stage 4b: the entity a delivery is about (`[route.entity]`), read with
//! its key, and the answers to what the entity decided at the claim.
//!
//! The id and the announced state are read by the same selector reads as
//! keys and guards (`Inbound::value`), from the verified request, so only
//! signed bytes decide (contract §4 rule 12; `check-config` refuses an
//! unsigned selector). An id part is checked like a key part (present,
//! 1-255 bytes); the state must be one the machine declares, exactly, or
//! the delivery is 400 `field_invalid` and leaves no trace. A header or
//! query parameter sent twice is refused for the same reason as a guard's:
//! the check and the handler could each read a different copy.
//!
//! The claim (`store::entity`) then forwards the delivery, or decides:
//! a *repeat* is acknowledged as if replayed, a *refused* change is a
//! discrepancy — counted per route and from/to
//! (`idemgate_entity_discrepancies_total`), logged at WARN with the entity,
//! and answered with the acknowledgement or 409 `transition_refused` as
//! `on_refused` says.

use bytes::Bytes;
use metrics::counter;
use sha2::{Digest, Sha256};

use crate::config::{Choice as _, Entity, OnRefused, Selector};
use crate::error::{Reason, Rejection};
use crate::extract::Inbound;
use crate::metrics::{Description, at_zero};
use crate::pipeline::admit::guard::occurs_more_than_once;
use crate::pipeline::admit::key_join::{MAX_KEY_PART, hash_key_parts};
use crate::pipeline::runtime::{EntityRuntime, RouteRuntime};
use crate::pipeline::words::Ruling;
use crate::record::{StoredResponse, now_ms};
use crate::signature::lower_hex;
use crate::store::entity::{EntityStep, Judgement, decisions};
use crate::store::{ENTITY_HASH_LEN, EntityKey};

/// The entity a delivery is about, as stage 4 read it.
#[derive(Debug, Clone)]
pub struct EntityIdentity {
    /// Where its state is kept.
    pub key: EntityKey,
    /// Its hash: the tag every record of it carries.
    pub hash: String,
    /// The id, when it has one part: for the log line.
    pub id: Option<Bytes>,
    /// The declared state the delivery announces.
    pub to: String,
    /// The event it announces, hashed (`[route.entity] event`; `None`:
    /// the route names none, or the notice carries none).
    pub event: Option<String>,
}

/// Reads the entity of `request` under `entity` in scope `scope`.
pub(crate) fn identify(
    request: &Inbound,
    entity: &Entity,
    prefix: &str,
    scope: &str,
) -> Result<EntityIdentity, Rejection> {
    let mut parts = Vec::with_capacity(entity.id.len());
    for selector in &entity.id {
        let invalid = || Rejection::KeyInvalid(selector.to_string());
        let value = request
            .value(selector)?
            .ok_or_else(|| Rejection::KeyMissing(selector.to_string()))?;
        if value.is_empty()
            || value.len() > MAX_KEY_PART
            || occurs_more_than_once(request, selector)
        {
            return Err(invalid());
        }
        parts.push(value.into_owned());
    }
    let state = &entity.state;
    let announced = request.value(state)?;
    let to = announced
        .as_deref()
        .filter(|_| !occurs_more_than_once(request, state))
        .and_then(|value| entity.machine.state(value))
        .ok_or_else(|| Rejection::FieldInvalid(state.to_string()))?
        .to_owned();
    let event = match &entity.event {
        None => None,
        Some(selector) => event_hash(request, selector)?,
    };
    let hash = entity_hash(parts.iter().map(Vec::as_slice));
    let id = match parts.as_slice() {
        [only] => Some(Bytes::copy_from_slice(only)),
        _ => None,
    };
    Ok(EntityIdentity {
        key: EntityKey::new(prefix, scope, &hash),
        hash,
        id,
        to,
        event,
    })
}

/// The announced event's hash, if the notice carries one: absent is no
/// event (the notice is judged by its state alone); present, it is checked
/// like a key part (1-255 bytes, not sent twice) or the delivery is 400
/// `field_invalid`. Hashed so any value is a bounded, printable field.
fn event_hash(request: &Inbound, selector: &Selector) -> Result<Option<String>, Rejection> {
    let Some(value) = request.value(selector)? else {
        return Ok(None);
    };
    if value.is_empty() || value.len() > MAX_KEY_PART || occurs_more_than_once(request, selector) {
        return Err(Rejection::FieldInvalid(selector.to_string()));
    }
    let digest = Sha256::new()
        .chain_update(b"event")
        .chain_update(&value)
        .finalize();
    Ok(Some(lower_hex(&digest)[..EVENT_HASH_LEN].to_owned()))
}

/// Hex digits of an event hash: 128 bits, enough to tell a channel's
/// refund ids apart for an entity's life.
const EVENT_HASH_LEN: usize = 32;

/// The hash of an entity id's parts (joined like key parts): what its
/// records' tag and its key carry, and what the admin API computes from
/// an id an operator knows.
pub fn entity_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    let digest = hash_key_parts(parts);
    // A second hash keeps the tag unrelated to a key hash over the same
    // single value (an entity id is often also the key).
    let tag = Sha256::new()
        .chain_update(b"entity")
        .chain_update(digest)
        .finalize();
    lower_hex(&tag)[..ENTITY_HASH_LEN].to_owned()
}

/// A delivery to an entity route, as its claim is judged: the route's
/// machine, the entity the delivery is about, and what the claim asks of
/// it. Built only when both are there, so nothing after the claim has to
/// ask again whether they are.
#[derive(Debug)]
pub(in crate::pipeline) struct EntityClaim<'a> {
    /// The route's `[route.entity]` and its acknowledgement.
    pub(in crate::pipeline) runtime: &'a EntityRuntime,
    /// The entity the delivery is about.
    pub(in crate::pipeline) about: &'a EntityIdentity,
    /// What the claim asks of the entity.
    pub(in crate::pipeline) step: EntityStep,
}

impl<'a> EntityClaim<'a> {
    /// The entity claim of a delivery to `route` about the entity stage
    /// 4 read (`Identity::entity`); `None` off entity routes.
    pub(in crate::pipeline) fn of(
        route: &'a RouteRuntime,
        about: Option<&'a EntityIdentity>,
    ) -> Option<Self> {
        let runtime = route.entity.as_ref()?;
        let about = about?;
        Some(Self {
            runtime,
            about,
            step: step(about, &runtime.rules),
        })
    }
}

/// What the claim asks of the entity for `identity`.
fn step(identity: &EntityIdentity, entity: &Entity) -> EntityStep {
    EntityStep {
        key: identity.key.clone(),
        to: identity.to.clone(),
        sources: entity.machine.sources(&identity.to),
        retention: entity.retention,
        advance: entity.advance_status.clone(),
        event: identity.event.clone(),
    }
}

/// How a refused change is answered: the acknowledgement (the sender
/// stops) or 409 `transition_refused` (it retries).
pub(crate) fn refusal(
    entity: &Entity,
    ack: &StoredResponse,
    from: Option<&str>,
    to: &str,
) -> Result<StoredResponse, Rejection> {
    match entity.on_refused {
        OnRefused::Acknowledge => Ok(ack.clone()),
        OnRefused::Conflict => Err(Rejection::TransitionRefused {
            from: from.unwrap_or(NO_STATE).to_owned(),
            to: to.to_owned(),
        }),
    }
}

pub(crate) use crate::store::entity::decisions::{DISCREPANCIES_TOTAL, NO_STATE, REPEATS_TOTAL};

/// `idemgate_entity_held_total{route, result}`: notices for a busy entity
/// on a route with an inbox, `held` (acknowledged and queued behind it) or
/// `full` (`max_held_per_entity` wait already: not acknowledged).
pub(crate) const HELD_TOTAL: Description = Description::counter(
    "idemgate_entity_held_total",
    "Notices for a busy entity on an inbox route: held behind it (result=held) or not acknowledged because max_held_per_entity notices waited (result=full)",
);

/// The results `idemgate_entity_held_total` counts.
pub(crate) const HELD_RESULTS: [&str; 2] = ["held", "full"];

/// The entity metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[DISCREPANCIES_TOTAL, REPEATS_TOTAL, HELD_TOTAL];

/// Creates route `route`'s entity series at zero: a discrepancy series
/// for every change `entity`'s machine refuses (`from` = `none` too) and
/// a repeat series for every state, so rates and alerts read 0, not
/// nothing, before the first event (at most 32 states: 1,056 series).
pub(crate) fn register(route: &str, entity: &Entity) {
    let machine = &entity.machine;
    let states = machine.states();
    let froms = std::iter::once(None).chain(states.iter().map(|s| Some(s.as_str())));
    for from in froms {
        for to in states {
            if from != Some(to.as_str()) && !machine.allows(from, to) {
                let from = from.unwrap_or(NO_STATE).to_owned();
                let _ = at_zero(
                    counter!(DISCREPANCIES_TOTAL.name, "route" => route.to_owned(), "from" => from, "to" => to.clone()),
                );
            }
        }
    }
    for state in states {
        let _ = at_zero(
            counter!(REPEATS_TOTAL.name, "route" => route.to_owned(), "state" => state.clone()),
        );
    }
    for result in HELD_RESULTS {
        let _ = at_zero(counter!(HELD_TOTAL.name, "route" => route.to_owned(), "result" => result));
    }
}

/// Counts a notice for a busy entity: `held` or `full` ([`HELD_TOTAL`]).
pub(in crate::pipeline) fn count_hold(route: &RouteRuntime, result: &'static str) {
    counter!(HELD_TOTAL.name, "route" => route.name().to_owned(), "result" => result).increment(1);
}

/// The ruling for a delivery its entity judged at the claim: counted,
/// logged, and answered as the route says (module docs).
pub(in crate::pipeline) fn judged(
    route: &RouteRuntime,
    (entity, key_hash): (&EntityClaim<'_>, &str),
    judgement: &Judgement,
) -> Ruling {
    let about = entity.about;
    let name = route.name();
    let id = about.id.as_deref().map(String::from_utf8_lossy);
    decisions::count(name, judgement, &about.to);
    match judgement {
        Judgement::Refused { from } => {
            let from_label = from.as_deref().unwrap_or(NO_STATE);
            tracing::warn!(
                route = name,
                entity = about.hash,
                id = id.as_deref(),
                from = from_label,
                to = about.to,
                key = key_hash,
                on_refused = entity.runtime.rules.on_refused.name(),
                "entity state change refused (discrepancy): the delivery was not forwarded"
            );
            let rules = &entity.runtime.rules;
            match refusal(rules, &entity.runtime.ack, from.as_deref(), &about.to) {
                Ok(answer) => Ruling::Acknowledge {
                    answer,
                    noted: Reason::TransitionRefused,
                },
                Err(rejection) => Ruling::Refuse(rejection),
            }
        }
        Judgement::Repeat => {
            tracing::info!(
                route = name,
                entity = about.hash,
                id = id.as_deref(),
                state = about.to,
                key = key_hash,
                "entity already in the announced state: acknowledged without the handler"
            );
            Ruling::Replay {
                answer: entity.runtime.ack.clone(),
                answered_at_ms: now_ms(),
            }
        }
    }
}

/// Shadow mode (`[route.entity] mode = "shadow"`): what the machine would
/// have done with a delivery that is forwarded anyway, counted as in
/// enforce mode (a repeat, a discrepancy) and logged, so the machine can be
/// adopted beside a live handler. `None`: the entity is busy, which is
/// only logged.
pub(in crate::pipeline) fn shadowed(
    route: &RouteRuntime,
    (entity, key_hash): (&EntityClaim<'_>, &str),
    judgement: Option<&Judgement>,
) {
    let about = entity.about;
    let name = route.name();
    if let Some(judgement) = judgement {
        decisions::count(name, judgement, &about.to);
    }
    match judgement {
        Some(Judgement::Refused { from }) => {
            tracing::warn!(
                route = name,
                entity = about.hash,
                from = from.as_deref().unwrap_or(NO_STATE),
                to = about.to,
                key = key_hash,
                "shadow: the entity machine would refuse this change (discrepancy); forwarded"
            );
        }
        Some(Judgement::Repeat) => {
            tracing::info!(
                route = name,
                entity = about.hash,
                state = about.to,
                key = key_hash,
                "shadow: the entity already is in the announced state (a repeat); forwarded"
            );
        }
        None => tracing::info!(
            route = name,
            entity = about.hash,
            state = about.to,
            key = key_hash,
            "shadow: the entity is busy with another change; forwarded without waiting"
        ),
    }
}
