//! The inbox operations on Redis: `swap.lua` and `take.lua` for the two
//! that read before they write, plain sorted-set commands for the rest.
//! Every call names one key, so each is atomic and Cluster safe.

use std::time::Duration;

use bytes::Bytes;
use fred::prelude::{ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand};

use super::{RedisStore, classify, millis, owner_arg};
use crate::record::{OwnerToken, Record};
use crate::store::inbox::{Book, Books, BooksKey, InboxOps, IndexKey};
use crate::store::{Call, StoreError, StoreKey};

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
    async fn keyed(
        &self,
        command: &'static str,
        key: &str,
        args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        let command = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let mut all = vec![Value::Bytes(Bytes::copy_from_slice(key.as_bytes()))];
        all.extend(args);
        self.pool
            .next_connected()
            .custom::<Value, Value>(command, all)
            .await
            .map_err(|e| classify(&e))
    }
}

impl InboxOps for RedisStore {
    fn swap<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
    ) -> Call<'a, bool> {
        Box::pin(async move {
            let args = vec![
                owner_arg(expected),
                Value::Bytes(record.encode()?),
                Value::Integer(millis(ttl)),
            ];
            self.eval_flag(&self.scripts.swap, key, args).await
        })
    }

    fn index_add<'a>(&'a self, index: &'a IndexKey, member: &'a str, at: u64) -> Call<'a, ()> {
        Box::pin(async move {
            let args = vec![score(at), Value::from(member)];
            self.zcommand("ZADD", index, args).await.map(|_| ())
        })
    }

    fn index_remove<'a>(&'a self, index: &'a IndexKey, member: &'a str) -> Call<'a, bool> {
        Box::pin(async move {
            let reply = self
                .zcommand("ZREM", index, vec![Value::from(member)])
                .await?;
            Ok(reply.as_i64().unwrap_or(0) > 0)
        })
    }

    fn index_take<'a>(
        &'a self,
        index: &'a IndexKey,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Call<'a, Vec<String>> {
        Box::pin(async move {
            let args = vec![score(now), count(limit), score(push_to)];
            let reply = self
                .scripts
                .take
                .evalsha_with_reload(self.pool.next_connected(), index.as_str(), args)
                .await
                .map_err(|e| classify(&e))?;
            members(reply)
        })
    }

    fn index_page<'a>(
        &'a self,
        index: &'a IndexKey,
        offset: usize,
        limit: usize,
    ) -> Call<'a, Vec<(String, u64)>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let last = offset.saturating_add(limit - 1);
            let args = vec![count(offset), count(last), Value::from("WITHSCORES")];
            scored(self.zcommand("ZRANGE", index, args).await?)
        })
    }

    fn index_stats<'a>(&'a self, index: &'a IndexKey) -> Call<'a, (u64, Option<u64>)> {
        Box::pin(async move {
            let total = self.zcommand("ZCARD", index, Vec::new()).await?;
            let first = self.index_page(index, 0, 1).await?;
            let total = u64::try_from(total.as_i64().unwrap_or(0)).unwrap_or(0);
            Ok((total, first.first().map(|(_, at)| *at)))
        })
    }

    fn index_prune<'a>(&'a self, index: &'a IndexKey, below: u64) -> Call<'a, u64> {
        Box::pin(async move {
            let args = vec![Value::from("-inf"), Value::from(format!("({below}"))];
            let removed = self.zcommand("ZREMRANGEBYSCORE", index, args).await?;
            Ok(u64::try_from(removed.as_i64().unwrap_or(0)).unwrap_or(0))
        })
    }

    fn books_add<'a>(&'a self, key: &'a BooksKey, line: Book) -> Call<'a, ()> {
        Box::pin(async move {
            let args = vec![Value::from(line.as_str()), Value::Integer(1)];
            self.keyed("HINCRBY", key.as_str(), args).await.map(|_| ())
        })
    }

    fn books_read<'a>(&'a self, key: &'a BooksKey) -> Call<'a, Books> {
        Box::pin(async move {
            let fields = Book::ALL
                .iter()
                .map(|line| Value::from(line.as_str()))
                .collect();
            let reply = self.keyed("HMGET", key.as_str(), fields).await?;
            let mut books = Books::default();
            for (line, value) in Book::ALL.into_iter().zip(reply.into_array()) {
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
