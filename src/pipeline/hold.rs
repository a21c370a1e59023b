//! Stage 5 on a route whose inbox holds notices behind a busy entity
//! (`store::entity::held`): the claim, and when the entity is busy, the
//! hold instead of a 409. A hold that finds the entity free again (its
//! change settled meanwhile), or the key taken by a copy, claims again, a
//! few times at most; a full queue is refused with the truthful 409 the
//! route would give without an inbox.

use std::net::SocketAddr;

use tracing::Instrument as _;

use super::claim::{Decision, busy_answer};
use super::deliver::kept_request;
use super::identify::Identity;
use super::runtime::RouteRuntime;
use super::verify::Verified;
use super::{Pipeline, shadow, trace};
use crate::config::{EntityMode, Mode};
use crate::inbox::Holding;
use crate::record::{StoredResponse, TraceContext};
use crate::store::StoreError;
use crate::store::entity::{EntityStep, HoldVerdict};

/// Claims a hold may be followed by, when the entity turned free or a
/// copy took the key meanwhile: each such turn needs a change to settle
/// between two store steps, so a few are plenty.
const HOLD_TRIES: usize = 3;

/// What the claim stage ended with.
pub(super) enum Claimed {
    /// The claim's decision (never [`Decision::Behind`]).
    Decided(Result<Decision, StoreError>),
    /// Held behind the entity: the sender gets this acknowledgement.
    Held(StoredResponse),
}

impl Pipeline {
    /// Claims `identity`, holding it behind its busy entity on a route
    /// whose inbox holds notices (module docs).
    pub(super) async fn claim_or_hold(
        &self,
        runtime: &RouteRuntime,
        verified: &Verified,
        identity: &Identity,
        (entity, context, peer): (
            Option<&EntityStep>,
            Option<TraceContext>,
            Option<SocketAddr>,
        ),
    ) -> Claimed {
        let rules = &runtime.settings.idempotency;
        let watching = runtime
            .settings
            .entity
            .as_ref()
            .is_some_and(|e| e.mode == EntityMode::Shadow);
        let holds = watching || (runtime.inbox.is_some() && rules.mode == Mode::Enforce);
        let claim = async |entity: Option<&EntityStep>| {
            self.claimer
                .claim(
                    identity,
                    rules,
                    (runtime.ack.as_ref(), entity, holds && entity.is_some()),
                    shadow::patience(rules),
                    context,
                )
                .instrument(trace::claim(self.tracing))
                .await
        };
        let mut decision = claim(entity).await;
        if watching {
            // The machine only watches: whatever it decided, the delivery
            // is claimed by its key alone and forwarded.
            let verdict = match &decision {
                Ok(Decision::Judged(verdict)) => Some(Some(verdict.clone())),
                Ok(Decision::Behind(_)) => Some(None),
                _ => None,
            };
            if let Some(verdict) = verdict {
                super::entity::shadowed(runtime, identity.who(), verdict.as_ref());
                decision = claim(None).await;
            }
            return Claimed::Decided(decision);
        }
        for _ in 0..HOLD_TRIES {
            let (Ok(Decision::Behind(blocker)), Some(step), Some(inbox)) =
                (&decision, entity, runtime.inbox.as_ref())
            else {
                break;
            };
            let blocker = *blocker;
            let inbound = verified.inbound();
            let request = kept_request(&inbound.parts, &inbound.body, peer);
            let about = (identity.fingerprint, identity.key_value.as_deref());
            let held = self
                .inboxes
                .hold(inbox, &identity.key, about, request, step)
                .await;
            decision = match held {
                Ok(Holding::Held(ack)) => {
                    super::entity::count_hold(runtime, "held");
                    return Claimed::Held(ack);
                }
                Ok(Holding::Not(HoldVerdict::Full)) => {
                    super::entity::count_hold(runtime, "full");
                    tracing::warn!(
                        route = runtime.name(),
                        key = identity.key_hash,
                        entity = step.key.hash(),
                        "entity busy and max_held_per_entity notices wait already: not acknowledged; the sender keeps its own retries"
                    );
                    Ok(Decision::Refuse(busy_answer(blocker, rules), None))
                }
                // A copy of the unresolved change itself: told the truth.
                Ok(Holding::Not(HoldVerdict::Itself)) => {
                    Ok(Decision::Refuse(busy_answer(blocker, rules), None))
                }
                Ok(Holding::Not(_)) => claim(entity).await,
                Err(error) => Err(error),
            };
        }
        Claimed::Decided(match decision {
            // Still busy after every try: the answer without an inbox.
            Ok(Decision::Behind(blocker)) => {
                Ok(Decision::Refuse(busy_answer(blocker, rules), None))
            }
            other => other,
        })
    }
}
