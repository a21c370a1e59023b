//! The Redis side of entity state (`store::entity`): the arguments of
//! `claim_entity.lua`, its verdicts, the entity part of `complete.lua`'s
//! and `swap.lua`'s arguments, and reading an entity for the admin API.

use std::collections::HashMap;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use fred::prelude::Value;

use super::RedisStore;
use super::replies::millis;
use super::scripts::Named;
use crate::record::ClaimHold;
use crate::store::entity::{
    Blocker, Correction, EntityEffect, EntityState, EntityStep, EntityVerdict, Judgement, KeptBack,
    Seen,
};
use crate::store::{EntityKey, StoreError, StoreKey};

/// How long a busy entity's pending record is said to last when its TTL
/// can not be read (no expiry, or gone meanwhile).
const UNKNOWN_REMAINING: Duration = Duration::from_secs(1);

/// How many times a claim or a hold is retried when the script finds the
/// entity's pending change is not the one declared, before giving up:
/// the first try declares none, the second the one the first was told of;
/// more means the change moved each time (a storm of notices for one
/// entity), and the sender retries.
pub(super) const DECLARATIONS: usize = 8;

/// `claim_entity.lua`'s keys and its arguments after the record and TTL;
/// `pending`, the entity's pending change as the caller believes it
/// ([`declared`]); `probe`, on a probe route: the scope's probe keys, the
/// plan and when a lost owner's record is first due.
pub(super) fn claim_keys_and_args(
    key: &StoreKey,
    step: &EntityStep,
    pending: Option<&str>,
    probe: Option<([String; 2], Value, Value)>,
) -> (Vec<String>, Vec<Value>) {
    let mut keys = vec![
        key.as_str().to_owned(),
        step.key.as_str().to_owned(),
        declared(step, pending),
    ];
    let mut args = step_args(step);
    // claim_entity.lua takes the announced state first, then retention.
    args.swap(0, 1);
    // Then the plan (or ''), before the variable list of sources.
    let (plan, first) = match probe {
        Some((probe_keys, plan, first)) => {
            keys.extend(probe_keys);
            (plan, first)
        }
        None => (Value::from(""), Value::from("")),
    };
    args.splice(4..4, [plan, first]);
    (keys, args)
}

/// The KEYS entry naming the pending change `pending` of `step`'s entity
/// (`entity.lua`, `entity_declared`): its record key, or the entity key
/// itself for none.
pub(super) fn declared(step: &EntityStep, pending: Option<&str>) -> String {
    pending.unwrap_or(step.key.as_str()).to_owned()
}

/// The pending change a `claim_entity.lua` (`{ 0, 'moved', pk }`) or
/// `hold.lua` (`{ 'moved', pk }`) reply says to declare instead (`Some(None)`:
/// none), or `None` for any other reply: the script did its work.
pub(super) fn moved(reply: &Value) -> Option<Option<String>> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let at = parts
        .iter()
        .position(|part| part.as_str().as_deref() == Some("moved"))?;
    if at + 2 != parts.len() {
        return None;
    }
    let pending = parts[at + 1].as_string().unwrap_or_default();
    Some((!pending.is_empty()).then_some(pending))
}

impl RedisStore {
    /// Runs `claim_entity.lua` for `key` with the record and TTL `args`,
    /// declaring no pending change first and, told it moved, the one the
    /// reply names (up to [`DECLARATIONS`] times).
    pub(super) async fn claim_entity(
        &self,
        client: &mut fred::prelude::Client,
        key: &StoreKey,
        step: &EntityStep,
        args: Vec<Value>,
        probe: Option<([String; 2], Value, Value)>,
    ) -> Result<Value, StoreError> {
        let mut pending = None;
        for _ in 0..DECLARATIONS {
            let (keys, more) = claim_keys_and_args(key, step, pending.as_deref(), probe.clone());
            let mut args = args.clone();
            args.extend(more);
            let reply = self
                .eval_keys(client, &self.scripts.claim_entity, key, keys, args)
                .await?;
            match moved(&reply) {
                Some(now) => pending = now,
                None => return Ok(reply),
            }
        }
        Err(moving())
    }
}

/// The error of a claim or hold whose entity's pending change moved at
/// each of its [`DECLARATIONS`]: transient, the sender retries.
pub(super) fn moving() -> StoreError {
    StoreError::Unavailable(format!(
        "the entity's pending change moved at each of {DECLARATIONS} tries"
    ))
}

/// A step as `claim_entity.lua` (after the announced state) and
/// `hold.lua` (after `max_held_per_entity`) take it: retention, then the
/// announced state, whether it may be initial, its event ('' none) and
/// its sources.
pub(super) fn step_args(step: &EntityStep) -> Vec<Value> {
    let mut args = vec![
        Value::Integer(millis(step.retention)),
        Value::from(step.to.as_str()),
        Value::from(if step.sources.initial { "1" } else { "0" }),
        Value::from(step.event.as_deref().unwrap_or_default()),
    ];
    args.extend(step.sources.from.iter().map(|s| Value::from(s.as_str())));
    args
}

/// A worker's gated `swap.lua` reply when the entity kept the delivery
/// back: `{ 0, 'wait' }`, `{ 0, 'repeat', to }` or
/// `{ 0, 'refused', from, to }` (`None`: any other reply).
pub(super) fn taking_from(reply: &Value) -> Result<Option<KeptBack>, StoreError> {
    let Value::Array(parts) = reply else {
        return Ok(None);
    };
    let text = |i: usize| parts.get(i).and_then(Value::as_string).unwrap_or_default();
    Ok(Some(match text(1).as_str() {
        "wait" => KeptBack::Wait,
        "repeat" => KeptBack::Decided(Judgement::Repeat, text(2)),
        "refused" => {
            let from = text(2);
            let from = (!from.is_empty()).then_some(from);
            KeptBack::Decided(Judgement::Refused { from }, text(3))
        }
        other => {
            return Err(StoreError::Backend(format!(
                "unexpected swap.lua verdict {other:?}"
            )));
        }
    }))
}

/// The entity's verdict in a `claim_entity.lua` reply (`{ 0, kind, … }`),
/// or the reply back for `existing_from` (nil, or a record).
pub(super) fn verdict_from(reply: Value) -> Result<Result<EntityVerdict, Value>, StoreError> {
    let Value::Array(parts) = &reply else {
        return Ok(Err(reply));
    };
    if parts.first().and_then(Value::as_i64) != Some(0) || parts.len() < 2 {
        return Ok(Err(reply));
    }
    let text = |i: usize| parts.get(i).and_then(Value::as_string).unwrap_or_default();
    Ok(Ok(match text(1).as_str() {
        "busy" => {
            let remaining = parts
                .get(2)
                .and_then(Value::as_i64)
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or(UNKNOWN_REMAINING, Duration::from_millis);
            let blocker = match text(3).as_str() {
                "flight" => Blocker::InFlight {
                    remaining,
                    hold: ClaimHold(
                        parts
                            .get(4)
                            .and_then(Value::as_i64)
                            .and_then(|ms| u64::try_from(ms).ok())
                            .map(Duration::from_millis),
                    ),
                },
                "unknown" => Blocker::Unknown { remaining },
                "inbox" => Blocker::Inbox,
                "unresolved" => Blocker::Unresolved,
                "queue" => Blocker::Queue,
                other => {
                    return Err(StoreError::Backend(format!(
                        "unexpected busy entity kind {other:?}"
                    )));
                }
            };
            EntityVerdict::Busy { blocker }
        }
        "repeat" => EntityVerdict::Judged(Judgement::Repeat),
        "refused" => {
            let from = text(2);
            EntityVerdict::Judged(Judgement::Refused {
                from: (!from.is_empty()).then_some(from),
            })
        }
        other => {
            return Err(StoreError::Backend(format!(
                "unexpected entity verdict {other:?}"
            )));
        }
    }))
}

/// The entity key to append to a record write's keys, and the effect
/// argument, when `key` belongs to an entity route.
pub(super) fn settle_part(key: &StoreKey, effect: EntityEffect) -> Option<(String, Value)> {
    key.entity()
        .map(|entity| (entity.as_str().to_owned(), Value::from(effect.code())))
}

impl RedisStore {
    /// Runs a script that deletes `key`'s record (`release.lua`,
    /// `purge.lua`, with `args`) and, on an entity route, drops the
    /// entity's pending change in the same step if the record was it: a
    /// released or purged change never happened. Whether it deleted (or
    /// dropped) anything.
    pub(super) async fn delete_dropping(
        &self,
        script: &Named,
        key: &StoreKey,
        args: Vec<Value>,
    ) -> Result<bool, StoreError> {
        let reply = self.delete_dropping_reply(script, key, args).await?;
        Ok(reply.as_i64() == Some(1))
    }

    /// [`RedisStore::delete_dropping`] with the script's own reply.
    pub(super) async fn delete_dropping_reply(
        &self,
        script: &Named,
        key: &StoreKey,
        mut args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        let mut keys = vec![key.as_str().to_owned()];
        let entity = settle_part(key, EntityEffect::Drop);
        args.push(
            entity
                .as_ref()
                .map_or(Value::from(""), |(_, effect)| effect.clone()),
        );
        // A route with a probe: the record's plan goes in the same step.
        args.push(Value::from(if key.has_probe() { "1" } else { "" }));
        if key.has_probe() {
            keys.extend(self.probe_keys(key));
        }
        if let Some((entity, _)) = entity {
            keys.push(entity);
        }
        let client = &mut self.routed(key.as_str());
        self.eval_keys(client, script, key, keys, args).await
    }

    /// `entity_set.lua` (see [`crate::store::Store::correct_entity`]).
    pub(super) async fn correct(
        &self,
        key: &EntityKey,
        seen: &Seen,
        correction: &Correction,
        (by, retention): (&str, Duration),
    ) -> Result<bool, StoreError> {
        let (op, to) = match correction {
            Correction::Set(to) => ("set", to.as_str()),
            Correction::Clear => ("clear", ""),
        };
        let args = vec![
            Value::from(seen.state.as_deref().unwrap_or_default()),
            Value::from(seen.pending.as_deref().unwrap_or_default()),
            Value::from(op),
            Value::from(to),
            Value::from(by),
            Value::Integer(millis(retention)),
        ];
        let client = &mut self.routed(key.as_str());
        // The script's one key is the entity's; it routes (and re-routes
        // after a MOVED) like a record key of the same slot.
        let routing = StoreKey(key.as_str().to_owned(), false);
        let keys = vec![key.as_str().to_owned()];
        let reply = self
            .eval_keys(client, &self.scripts.entity_set, &routing, keys, args)
            .await?;
        Ok(reply.as_i64() == Some(1))
    }

    /// Reads entity `key` and its remaining TTL.
    pub(super) async fn read_entity(
        &self,
        key: &EntityKey,
    ) -> Result<Option<(EntityState, Option<Duration>)>, StoreError> {
        let client = self.routed(key.as_str());
        let fields: HashMap<String, String> = client
            .hgetall(key.as_str())
            .await
            .map_err(|e| self.classify_following(&e))?;
        if fields.is_empty() {
            return Ok(None);
        }
        let pttl: i64 = client
            .pttl(key.as_str())
            .await
            .map_err(|e| self.classify_following(&e))?;
        let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
        let state = EntityState::from_fields(fields.iter().map(|(f, v)| (f.as_str(), v.as_str())));
        Ok(Some((state, ttl)))
    }
}
