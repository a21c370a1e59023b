//! The Redis side of `store::probe`: the scripts `probe_take.lua` and
//! `probe_note.lua` (a claim keeps the plan in `claim.lua`), the scope's due set and plans
//! hash (one per hash slot on a Cluster, named by the slot's tag, so a
//! record and its plan share the slot), and the read of due entries.

use std::time::Duration;

use bytes::Bytes;
use fred::interfaces::ClientLike;
use fred::prelude::Value;
use fred::types::{ClusterHash, CustomCommand};

use super::replies::{classify, millis};
use super::{RedisStore, owner_arg, slots};
use crate::record::{OwnerToken, Record};
use crate::store::probe::{ProbeOps, ProbePlan};
use crate::store::{Call, StoreError, StoreKey};

/// Slots whose due sets one pipeline reads on a Cluster.
const DUE_PIPELINE: usize = 1_024;
/// On a Cluster one look reads the due sets of a quarter of the slots, the
/// next quarter at the next look: every slot once in four looks, at a
/// quarter of the commands.
const DUE_SLICES: usize = 4;

/// `complete.lua`'s jitter argument: up to a second, at random, added to
/// the first attempt of an unknown outcome, so outcomes that turned
/// unknown together (a stalled handler) are not all probed at one instant.
pub(super) fn jitter() -> Value {
    let mut byte = [0u8; 2];
    getrandom::fill(&mut byte).unwrap_or_default();
    Value::Integer(i64::from(u16::from_be_bytes(byte) % 1_000))
}

impl RedisStore {
    /// The due set and plans hash of `key`'s scope: the scope's own on a
    /// single server, the ones of `key`'s hash slot on a Cluster.
    pub(super) fn probe_keys(&self, key: &StoreKey) -> [String; 2] {
        let suffix = if self.clustered {
            format!(":{{{}}}", slots::tag(slots::slot_of(key.as_str())))
        } else {
            String::new()
        };
        let namespace = key.namespace();
        [
            format!("{namespace}:probe:due{suffix}"),
            format!("{namespace}:probe:plans{suffix}"),
        ]
    }

    /// What a claim of `key` for `ttl` adds to keep `plan`
    /// (`claim.lua`, `claim_entity.lua`): the probe keys, the plan and
    /// when it is first due.
    pub(super) fn claim_probe(
        &self,
        key: &StoreKey,
        ttl: Duration,
        plan: &ProbePlan,
    ) -> ([String; 2], Value, Value) {
        let first = Value::Integer(millis(plan.first_due(ttl)));
        (self.probe_keys(key), Value::from(plan.encode()), first)
    }

    /// Runs a probe script on `key` with its probe keys.
    async fn probe_script(
        &self,
        script: &super::scripts::Named,
        key: &StoreKey,
        args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        let mut keys = vec![key.as_str().to_owned()];
        keys.extend(self.probe_keys(key));
        let client = &mut self.routed(key.as_str());
        self.eval_keys(client, script, key, keys, args).await
    }

    /// One due set's entries due by `now_ms`, at most `limit`.
    fn due_command(set: String, now_ms: u64, limit: usize) -> (CustomCommand, Vec<Value>) {
        let command = CustomCommand::new_static("ZRANGEBYSCORE", ClusterHash::FirstKey, false);
        let args = vec![
            Value::from(set),
            Value::from("-inf"),
            Value::Integer(i64::try_from(now_ms).unwrap_or(i64::MAX)),
            Value::from("LIMIT"),
            Value::Integer(0),
            Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)),
        ];
        (command, args)
    }

    async fn due(
        &self,
        namespace: &str,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let set = format!("{namespace}:probe:due");
        if !self.clustered {
            let (command, args) = Self::due_command(set, now_ms, limit);
            let reply: Value = self
                .pool
                .next_connected()
                .custom(command, args)
                .await
                .map_err(|e| classify(&e))?;
            return Ok(strings(reply));
        }
        let mut found = Vec::new();
        let slice = self
            .probe_slice
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % DUE_SLICES;
        let per_slice = usize::from(slots::SLOTS) / DUE_SLICES;
        let slots: Vec<u16> = (0..slots::SLOTS)
            .skip(slice * per_slice)
            .take(per_slice)
            .collect();
        for chunk in slots.chunks(DUE_PIPELINE) {
            let pipeline = self.pool.next_connected().pipeline();
            for slot in chunk {
                let (command, args) =
                    Self::due_command(format!("{set}:{{{}}}", slots::tag(*slot)), now_ms, limit);
                let _: Value = pipeline
                    .custom(command, args)
                    .await
                    .map_err(|e| classify(&e))?;
            }
            let replies: Vec<Value> = pipeline.all().await.map_err(|e| classify(&e))?;
            for reply in replies {
                found.extend(strings(reply));
                if found.len() >= limit {
                    found.truncate(limit);
                    return Ok(found);
                }
            }
        }
        Ok(found)
    }
}

/// The members of an array reply.
fn strings(reply: Value) -> Vec<String> {
    reply
        .into_array()
        .into_iter()
        .filter_map(|member| member.as_string())
        .collect()
}

fn bytes_of(value: &Value) -> Option<Bytes> {
    match value {
        Value::Bytes(bytes) => Some(bytes.clone()),
        Value::String(text) => Some(text.inner().clone()),
        _ => None,
    }
}

impl ProbeOps for RedisStore {
    fn probe_due<'a>(
        &'a self,
        namespace: &'a str,
        now_ms: u64,
        limit: usize,
    ) -> Call<'a, Vec<String>> {
        Box::pin(self.due(namespace, now_ms, limit))
    }

    fn probe_take<'a>(
        &'a self,
        key: &'a StoreKey,
        owner: OwnerToken,
        lease: Duration,
    ) -> Call<'a, Option<(Record, Duration, String)>> {
        Box::pin(async move {
            let args = vec![owner_arg(owner), Value::Integer(millis(lease))];
            let reply = self
                .probe_script(&self.scripts.probe_take, key, args)
                .await?;
            let parts = reply.into_array();
            if parts.first().and_then(Value::as_i64) != Some(2) {
                return Ok(None);
            }
            let unexpected = || StoreError::Backend("unexpected probe_take.lua reply".into());
            let record = parts.get(1).and_then(bytes_of).ok_or_else(unexpected)?;
            let ttl = parts
                .get(2)
                .and_then(Value::as_i64)
                .and_then(|ms| u64::try_from(ms).ok())
                .ok_or_else(unexpected)?;
            let plan = parts
                .get(3)
                .and_then(Value::as_string)
                .ok_or_else(unexpected)?;
            Ok(Some((
                Record::decode(&record)?,
                Duration::from_millis(ttl),
                plan,
            )))
        })
    }

    fn probe_note<'a>(
        &'a self,
        key: &'a StoreKey,
        owner: OwnerToken,
        plan: &'a str,
        next: Option<Duration>,
    ) -> Call<'a, bool> {
        Box::pin(async move {
            let next = next.map_or(Value::from(""), |next| Value::Integer(millis(next)));
            let args = vec![owner_arg(owner), Value::from(plan), next];
            let reply = self
                .probe_script(&self.scripts.probe_note, key, args)
                .await?;
            Ok(reply.as_i64() == Some(1))
        })
    }

    fn probe_pending<'a>(&'a self, key: &'a StoreKey) -> Call<'a, Option<(String, u64)>> {
        Box::pin(async move {
            let [due, plans] = self.probe_keys(key);
            let plan: Value = self
                .keyed("HGET", &plans, vec![Value::from(key.as_str())])
                .await?;
            let Some(plan) = plan.as_string() else {
                return Ok(None);
            };
            let score: Value = self
                .keyed("ZSCORE", &due, vec![Value::from(key.as_str())])
                .await?;
            // Scores are whole milliseconds, written by the scripts.
            let at = score
                .as_string()
                .and_then(|score| score.parse::<u64>().ok())
                .unwrap_or(0);
            Ok(Some((plan, at)))
        })
    }
}
