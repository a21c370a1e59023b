//! Stage 5 on a route whose inbox holds notices behind a busy entity
//! (`store::entity::held`): the claim, and when the entity is busy, the
//! hold instead of a 409. A hold that finds the entity free again (its
//! change settled meanwhile), or the key taken by a copy, claims again, a
//! few times at most; a full queue is refused with the truthful 409 the
//! route would give without an inbox.

use std::net::SocketAddr;

use tracing::Instrument as _;

use crate::config::{EntityMode, Mode};
use crate::inbox::Holding;
use crate::pipeline::admit::entity::EntityClaim;
use crate::pipeline::admit::identify::Identity;
use crate::pipeline::admit::verify::Verified;
use crate::pipeline::claim::{Decision, EntityDecision, busy_answer, patience};
use crate::pipeline::first_delivery::deliver::kept_request;
use crate::pipeline::first_delivery::forwarder::Forwarder;
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::trace;
use crate::pipeline::words::Ruling;
use crate::record::{StoredResponse, TraceContext};
use crate::store::StoreError;
use crate::store::entity::HoldVerdict;

/// Claims a hold may be followed by, when the entity turned free or a
/// copy took the key meanwhile: each such turn needs a change to settle
/// between two store steps, so a few are plenty.
const HOLD_TRIES: usize = 3;

/// What the claim stage ended with.
pub(in crate::pipeline) enum Claimed {
    /// The claim's decision by key.
    Decided(Result<Decision, StoreError>),
    /// The delivery's entity decided against forwarding it: answered so.
    Judged(Ruling),
    /// Held behind the entity: the sender gets this acknowledgement.
    Held(StoredResponse),
}

/// Claims `identity` through `forwarder`'s claimer, judged by its entity
/// on an entity route, and held behind its busy entity in `forwarder`'s
/// inboxes on a route whose inbox holds notices (module docs).
pub(in crate::pipeline) async fn claim_or_hold(
    forwarder: &Forwarder,
    runtime: &RouteRuntime,
    verified: &Verified,
    identity: &Identity,
    (entity, context, peer): (
        Option<&EntityClaim<'_>>,
        Option<TraceContext>,
        Option<SocketAddr>,
    ),
) -> Claimed {
    let rules = &runtime.settings.idempotency;
    let ack = runtime.inbox_ack();
    let patience = patience(rules);
    let by_key = async || {
        forwarder
            .claimer
            .claim(identity, rules, ack, patience, context)
            .instrument(trace::claim(forwarder.tracing))
            .await
    };
    let Some(entity) = entity else {
        return Claimed::Decided(by_key().await);
    };
    let watching = entity.runtime.rules.mode == EntityMode::Shadow;
    let holds = watching || (runtime.inbox.is_some() && rules.mode == Mode::Enforce);
    let claim = async || {
        forwarder
            .claimer
            .claim_entity(
                identity,
                rules,
                (ack, &entity.step, holds),
                patience,
                context,
            )
            .instrument(trace::claim(forwarder.tracing))
            .await
    };
    let who = (entity, identity.key_hash.as_str());
    let mut decision = claim().await;
    if watching {
        // The machine only watches: whatever it decided, the delivery
        // is claimed by its key alone and forwarded.
        let judgement = match &decision {
            Ok(EntityDecision::Judged(judgement)) => Some(judgement),
            // Busy: only logged.
            Ok(EntityDecision::Behind(_)) => None,
            _ => return decided(runtime, who, rules, decision),
        };
        crate::pipeline::admit::entity::shadowed(runtime, who, judgement);
        return Claimed::Decided(by_key().await);
    }
    for _ in 0..HOLD_TRIES {
        let (Ok(EntityDecision::Behind(blocker)), Some(inbox)) =
            (&decision, runtime.inbox.as_ref())
        else {
            break;
        };
        let blocker = *blocker;
        let inbound = verified.inbound();
        let request = kept_request(&inbound.parts, &inbound.body, peer);
        let about = (identity.fingerprint, identity.key_value.as_deref());
        let held = forwarder
            .inboxes
            .hold(&inbox.queue, &identity.key, about, request, &entity.step)
            .await;
        let refused = || {
            Ok(EntityDecision::Decided(Decision::Refuse(
                busy_answer(blocker, rules),
                None,
            )))
        };
        decision = match held {
            Ok(Holding::Held(ack)) => {
                crate::pipeline::admit::entity::count_hold(runtime, "held");
                return Claimed::Held(ack);
            }
            Ok(Holding::Not(HoldVerdict::Full)) => {
                crate::pipeline::admit::entity::count_hold(runtime, "full");
                tracing::warn!(
                    route = runtime.name(),
                    key = identity.key_hash,
                    entity = entity.step.key.hash(),
                    "entity busy and max_held_per_entity notices wait already: not acknowledged; the sender keeps its own retries"
                );
                refused()
            }
            // A copy of the unresolved change itself: told the truth.
            Ok(Holding::Not(HoldVerdict::Itself)) => refused(),
            Ok(Holding::Not(_)) => claim().await,
            Err(error) => Err(error),
        };
    }
    decided(runtime, who, rules, decision)
}

/// The end of an entity route's claim: a judgement answered as the route
/// says, a busy entity still busy after every hold refused with the answer
/// a route without an inbox gives, a decision by key as it is.
fn decided(
    runtime: &RouteRuntime,
    who: (&EntityClaim<'_>, &str),
    rules: &crate::config::Idempotency,
    decision: Result<EntityDecision, StoreError>,
) -> Claimed {
    match decision {
        Ok(EntityDecision::Decided(decision)) => Claimed::Decided(Ok(decision)),
        Ok(EntityDecision::Judged(judgement)) => Claimed::Judged(
            crate::pipeline::admit::entity::judged(runtime, who, &judgement),
        ),
        Ok(EntityDecision::Behind(blocker)) => {
            Claimed::Decided(Ok(Decision::Refuse(busy_answer(blocker, rules), None)))
        }
        Err(error) => Claimed::Decided(Err(error)),
    }
}
