//! The inbox operations on Redis: `swap.lua`, `take.lua` and `prune.lua`
//! for the ones that read before they write, plain commands for the rest.
//! Every call names one key, or a record and the owed set of its own hash
//! slot, so each is atomic and Cluster safe. On a Cluster a scope's owed
//! set is one set per hash slot (`slots.rs`); reading them all is 16,384
//! `SMEMBERS`, pipelined, once per repair pass.
//!
//! On a Cluster every call on one key goes over its primary's own pool
//! (`shards.rs`), so a dying primary pauses only the inboxes whose index
//! it holds; the repair pass's read of every slot's owed set goes over the
//! clustered pool and waits out a failover like any read of every primary.

use std::time::Duration;

use bytes::Bytes;
use fred::prelude::{ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand};

use super::{RedisStore, classify, millis, owner_arg, slots};
use crate::record::inbox_entry::UNRESOLVED_KEPT;
use crate::record::{OwnerToken, Record};
use crate::store::entity::{EntityEffect, EntityStep, HoldVerdict, KeptBack};
use crate::store::inbox::{
    Backlog, BookLine, Books, InboxKeys, InboxOps, Index, IndexKey, IndexPosition, OwedKey, Place,
    Swapped,
};
use crate::store::{Call, StoreError, StoreKey};

/// Owed-set reads sent in one pipeline while a repair pass reads every
/// slot's set: bounded, so a pass never queues 16,384 replies at once.
const OWED_PIPELINE: usize = 1_024;

/// A score as Redis takes it: unix milliseconds are exact in a double.
fn score(ms: u64) -> Value {
    Value::Integer(i64::try_from(ms).unwrap_or(i64::MAX))
}

fn count(value: usize) -> Value {
    Value::Integer(i64::try_from(value).unwrap_or(i64::MAX))
}

/// A reply's text members (`ZRANGE…`), each a key hash.
fn members(reply: Value) -> Result<Vec<String>, StoreError> {
    reply
        .into_array()
        .into_iter()
        .map(|member| {
            member
                .into_string()
                .ok_or_else(|| StoreError::Backend("unexpected index member".into()))
        })
        .collect()
}

/// A `WITHSCORES` reply: flat `member, score, …` (RESP2) or pairs (RESP3).
#[expect(
    clippy::cast_possible_truncation,
    reason = "scores are unix milliseconds idemgate wrote: whole numbers far below 2^53"
)]
fn scored(reply: Value) -> Result<Vec<(String, u64)>, StoreError> {
    let mut flat = Vec::new();
    for item in reply.into_array() {
        match item {
            Value::Array(pair) => flat.extend(pair),
            other => flat.push(other),
        }
    }
    flat.chunks(2)
        .map(|pair| {
            let member = pair[0].as_string();
            let score = pair.get(1).and_then(Value::as_f64);
            match (member, score) {
                (Some(member), Some(score)) if score >= 0.0 => Ok((member, score as u64)),
                _ => Err(StoreError::Backend("unexpected index entry".into())),
            }
        })
        .collect()
}

impl RedisStore {
    /// The owed set `key`'s entry lives in: the scope's one set, or on a
    /// Cluster the set named by the tag of `key`'s own hash slot, so a
    /// script can change both (`store::inbox`, "Owed sets").
    pub(super) fn owed_set(&self, key: &StoreKey) -> String {
        let set = OwedKey::of(key);
        if self.clustered {
            let tag = slots::tag(slots::slot_of(key.as_str()));
            format!("{}:{{{tag}}}", set.as_str())
        } else {
            set.as_str().to_owned()
        }
    }

    /// Every slot's part of the owed set `set` on a Cluster, read in
    /// pipelines of [`OWED_PIPELINE`].
    async fn owed_by_slot(&self, set: &OwedKey) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        let slots: Vec<u16> = (0..slots::SLOTS).collect();
        for chunk in slots.chunks(OWED_PIPELINE) {
            let pipeline = self.pool.next_connected().pipeline();
            for slot in chunk {
                let key = format!("{}:{{{}}}", set.as_str(), slots::tag(*slot));
                let command = CustomCommand::new_static("SMEMBERS", ClusterHash::FirstKey, false);
                let _: Value = pipeline
                    .custom(command, vec![Value::from(key)])
                    .await
                    .map_err(|e| classify(&e))?;
            }
            let replies: Vec<Value> = pipeline.all().await.map_err(|e| classify(&e))?;
            for reply in replies {
                found.extend(members(reply)?);
            }
        }
        Ok(found)
    }

    /// Up to `limit` members of `index` in (score, member) order after
    /// `after` (`AnyStore::page`).
    async fn index_page(
        &self,
        index: &IndexKey,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Some(after) = after else {
            let args = vec![count(0), count(limit - 1), Value::from("WITHSCORES")];
            return scored(self.zcommand("ZRANGE", index, args).await?);
        };
        // From the last score listed on: the members sharing it up to
        // the last member listed are skipped here (a sorted set
        // orders equal scores by member bytes, as `str` compares).
        let mut page = Vec::new();
        let mut offset = 0;
        let fetch = limit.saturating_add(16);
        loop {
            let args = vec![
                Value::from(after.score.to_string()),
                Value::from("+inf"),
                Value::from("BYSCORE"),
                Value::from("LIMIT"),
                count(offset),
                count(fetch),
                Value::from("WITHSCORES"),
            ];
            let batch = scored(self.zcommand("ZRANGE", index, args).await?)?;
            let fetched = batch.len();
            page.extend(batch.into_iter().filter(|(member, score)| {
                (*score, member.as_str()) > (after.score, after.member.as_str())
            }));
            if page.len() >= limit || fetched < fetch {
                page.truncate(limit);
                return Ok(page);
            }
            offset += fetched;
        }
    }

    /// How many members `index` has.
    async fn index_count(&self, index: &IndexKey) -> Result<u64, StoreError> {
        let total = self.zcommand("ZCARD", index, Vec::new()).await?;
        Ok(u64::try_from(total.as_i64().unwrap_or(0)).unwrap_or(0))
    }

    /// One sorted-set command on `index`.
    async fn zcommand(
        &self,
        command: &'static str,
        index: &IndexKey,
        args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        self.keyed(command, index.as_str(), args).await
    }

    /// One command on the single key `key` (routed by it on a Cluster).
    pub(super) async fn keyed(
        &self,
        command: &'static str,
        key: &str,
        args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        let command = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let mut all = vec![Value::Bytes(Bytes::copy_from_slice(key.as_bytes()))];
        all.extend(args);
        self.routed(key)
            .custom::<Value, Value>(command, all)
            .await
            .map_err(|e| {
                self.follow_topology(&e);
                classify(&e)
            })
    }
}

impl RedisStore {
    /// `swap.lua`, and with `take` its worker's claim that the entity
    /// decides first (`Err`: wait, or decided without the handler).
    async fn swap_with(
        &self,
        key: &StoreKey,
        expected: OwnerToken,
        record: &Record,
        (ttl, effect): (Duration, EntityEffect),
        take: bool,
    ) -> Result<Result<Swapped, KeptBack>, StoreError> {
        let owed = record.owed().unwrap_or(false);
        let mut args = vec![
            owner_arg(expected),
            Value::Bytes(record.encode()?),
            Value::Integer(millis(ttl)),
            Value::from(key.hash()),
            Value::from(if owed { "1" } else { "0" }),
        ];
        let mut keys = vec![key.as_str().to_owned(), self.owed_set(key)];
        if let Some((entity, effect)) = super::entity_ops::settle_part(key, effect) {
            keys.push(entity);
            args.push(effect);
            if take {
                args.push(Value::from("take"));
            }
        }
        let client = &mut self.routed(key.as_str());
        let reply = self
            .eval_keys(client, &self.scripts.swap, key, keys, args)
            .await?;
        if let Some(taking) = super::entity_ops::taking_from(&reply)? {
            return Ok(Err(taking));
        }
        if reply.as_i64() != Some(1) {
            return Ok(Ok(Swapped::Refused));
        }
        Ok(Ok(if self.durable(client, key).await?.is_ok() {
            Swapped::Written
        } else {
            Swapped::Unreplicated
        }))
    }
}

impl InboxOps for RedisStore {
    fn swap<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> Call<'a, Swapped> {
        Box::pin(async move {
            let swapped = self
                .swap_with(key, expected, record, (ttl, effect), false)
                .await?;
            Ok(swapped.unwrap_or(Swapped::Refused))
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
    ) -> Call<'a, Result<Swapped, KeptBack>> {
        Box::pin(self.swap_with(key, expected, record, (ttl, EntityEffect::Keep), true))
    }

    fn hold<'a>(
        &'a self,
        key: &'a StoreKey,
        record: &'a Record,
        step: &'a EntityStep,
        max: usize,
    ) -> Call<'a, HoldVerdict> {
        Box::pin(async move {
            let mut args = vec![
                Value::Bytes(record.encode()?),
                Value::Integer(millis(UNRESOLVED_KEPT)),
                Value::from(key.hash()),
                Value::Integer(i64::try_from(max).unwrap_or(i64::MAX)),
            ];
            args.extend(super::entity_ops::step_args(step));
            let client = &mut self.routed(key.as_str());
            // No pending change declared first, then the one the script
            // names while it finds another (`entity::claim_entity`).
            let mut pending = None;
            let mut reply = Value::Null;
            for _ in 0..super::entity_ops::DECLARATIONS {
                let keys = vec![
                    key.as_str().to_owned(),
                    step.key.as_str().to_owned(),
                    self.owed_set(key),
                    super::entity_ops::declared(step, pending.as_deref()),
                ];
                reply = self
                    .eval_keys(client, &self.scripts.hold, key, keys, args.clone())
                    .await?;
                match super::entity_ops::moved(&reply) {
                    Some(now) => pending = now,
                    None => break,
                }
            }
            if super::entity_ops::moved(&reply).is_some() {
                return Err(super::entity_ops::moving());
            }
            match reply.as_string().as_deref() {
                Some("held") => Ok(HoldVerdict::Held),
                Some("free") => Ok(HoldVerdict::Free),
                Some("full") => Ok(HoldVerdict::Full),
                Some("exists") => Ok(HoldVerdict::Exists),
                Some("itself") => Ok(HoldVerdict::Itself),
                _ => Err(StoreError::Backend(format!(
                    "unexpected hold.lua reply {reply:?}"
                ))),
            }
        })
    }

    fn place<'a>(&'a self, keys: &'a InboxKeys, hash: &'a str, place: Place) -> Call<'a, ()> {
        Box::pin(async move {
            for (index, at) in place.entered() {
                let args = vec![score(*at), Value::from(hash)];
                self.zcommand("ZADD", keys.of(*index), args).await?;
            }
            let mut outcome = Ok(());
            for index in place.left() {
                let removed = self
                    .zcommand("ZREM", keys.of(*index), vec![Value::from(hash)])
                    .await;
                if let (Ok(()), Err(error)) = (&outcome, removed) {
                    outcome = Err(error);
                }
            }
            outcome
        })
    }

    fn take_due<'a>(
        &'a self,
        keys: &'a InboxKeys,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Call<'a, Vec<String>> {
        Box::pin(async move {
            let due = keys.of(Index::Due).as_str();
            let args = vec![score(now), count(limit), score(push_to)];
            let reply = self
                .scripts
                .take
                .evalsha_with_reload(&self.routed(due), due, args)
                .await
                .map_err(|e| {
                    self.follow_topology(&e);
                    classify(&e)
                })?;
            members(reply)
        })
    }

    fn page<'a>(
        &'a self,
        keys: &'a InboxKeys,
        index: Index,
        after: Option<&'a IndexPosition>,
        limit: usize,
    ) -> Call<'a, Vec<(String, u64)>> {
        Box::pin(self.index_page(keys.of(index), after, limit))
    }

    fn backlog<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Backlog> {
        Box::pin(async move {
            let since = keys.of(Index::Since);
            let oldest = self.index_page(since, None, 1).await?;
            Ok(Backlog {
                pending: self.index_count(since).await?,
                oldest_ms: oldest.first().map(|(_, at)| *at),
                held: self.index_count(keys.of(Index::Dead)).await?,
            })
        })
    }

    fn owed<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Vec<String>> {
        Box::pin(async move {
            let set = keys.owed();
            if self.clustered {
                return self.owed_by_slot(set).await;
            }
            members(self.keyed("SMEMBERS", set.as_str(), Vec::new()).await?)
        })
    }

    fn owed_prune<'a>(&'a self, key: &'a StoreKey, read: Option<OwnerToken>) -> Call<'a, bool> {
        Box::pin(async move {
            let read = read.map_or_else(|| Value::from(""), owner_arg);
            let args = vec![Value::from(key.hash()), read];
            let keys = vec![key.as_str().to_owned(), self.owed_set(key)];
            let reply: Value = self
                .scripts
                .prune
                .evalsha_with_reload(&self.routed(key.as_str()), keys, args)
                .await
                .map_err(|e| {
                    self.follow_topology(&e);
                    classify(&e)
                })?;
            Ok(reply.as_i64() == Some(1))
        })
    }

    fn book<'a>(&'a self, keys: &'a InboxKeys, line: BookLine) -> Call<'a, ()> {
        Box::pin(async move {
            let args = vec![Value::from(line.as_str()), Value::Integer(1)];
            self.keyed("HINCRBY", keys.books().as_str(), args)
                .await
                .map(|_| ())
        })
    }

    fn books<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Books> {
        Box::pin(async move {
            let fields = BookLine::ALL
                .iter()
                .map(|line| Value::from(line.as_str()))
                .collect();
            let reply = self.keyed("HMGET", keys.books().as_str(), fields).await?;
            let mut books = Books::default();
            for (line, value) in BookLine::ALL.into_iter().zip(reply.into_array()) {
                let count = match value {
                    Value::Null => 0,
                    other => other
                        .as_str()
                        .and_then(|text| text.parse().ok())
                        .or_else(|| other.as_u64())
                        .ok_or_else(|| StoreError::Backend("unexpected books value".into()))?,
                };
                books.set(line, count);
            }
            Ok(books)
        })
    }
}
