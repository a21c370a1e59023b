//! The Redis side of `store::listing`: `SCAN` every primary, read each
//! record key through the `lookup` script, keep what the filter wants.

use fred::interfaces::{ClientLike, KeysInterface};
use fred::prelude::Value;
use fred::types::config::Server;

use super::{RedisStore, classify};
use crate::store::entity::EntityState;
use crate::store::listing::{
    Cursor, EntityPage, Filter, MAX_PENDING, Page, entity_hash, glob_escape, record_hash,
};
use crate::store::{Call, EntityKey, Existing, Store, StoreError, StoreKey};

/// The largest `COUNT` hint of one `SCAN` batch (a batch asks for no more
/// than the page still has room for, and at most this).
const SCAN_COUNT: usize = 100;

impl RedisStore {
    /// One page of the records under `namespace` (`{prefix}:{scope}`) that
    /// `filter` keeps, from `cursor` (module docs of `store::listing`).
    pub(in crate::store) async fn list(
        &self,
        namespace: &str,
        filter: Filter,
        cursor: Cursor,
    ) -> Result<Page, StoreError> {
        let strip = format!("{namespace}:");
        let read = |suffix: String| -> Call<'_, Option<Existing>> {
            let key = StoreKey(format!("{strip}{suffix}"), false);
            Box::pin(async move {
                match self.lookup(&key).await {
                    Ok(Some(existing)) if filter.keeps(&existing) => Ok(Some(existing)),
                    Ok(_) => Ok(None),
                    Err(StoreError::Corrupt(error)) => {
                        tracing::warn!(key = suffix, %error, "listing skips a corrupt record");
                        Ok(None)
                    }
                    Err(error) => Err(error),
                }
            })
        };
        let budget = (filter.limit, filter.examined());
        let (records, next) = self
            .walk(namespace, cursor, budget, record_hash, read)
            .await?;
        Ok(Page { records, next })
    }

    /// One page of the entities under `namespace` that a change or held
    /// notices hold (`store::listing`, "Held entities").
    pub(in crate::store) async fn list_held(
        &self,
        namespace: &str,
        limit: usize,
        cursor: Cursor,
    ) -> Result<EntityPage, StoreError> {
        let strip = format!("{namespace}:");
        let read = |suffix: String| -> Call<'_, Option<EntityState>> {
            let key = EntityKey(format!("{strip}{suffix}"));
            Box::pin(async move {
                Ok(self
                    .read_entity(&key)
                    .await?
                    .map(|(state, _)| state)
                    .filter(EntityState::is_held))
            })
        };
        let budget = (limit, limit.saturating_mul(10));
        let (entities, next) = self
            .walk(namespace, cursor, budget, entity_hash, read)
            .await?;
        Ok(EntityPage { entities, next })
    }

    /// Walks the keys under `namespace` whose suffix `wanted` names (the
    /// name it returns), on every primary in turn, reading each with
    /// `read` and keeping what it returns, until `limit` are kept or the
    /// `SCAN` calls asked the server to examine `examined` keys: the items
    /// and where the next page starts.
    ///
    /// A page never cuts a `SCAN` batch: the cursor moves past a batch as
    /// soon as it is fetched, and the keys of it the page had no room for
    /// travel in the cursor (`pending`), read first by the next page. Each
    /// batch asks for no more keys than the page still has room for, so
    /// that remainder is at most the few keys of the batch's last bucket.
    async fn walk<'a, T>(
        &self,
        namespace: &str,
        cursor: Cursor,
        (limit, examined_at_most): (usize, usize),
        wanted: fn(&str) -> Option<&str>,
        read: impl Fn(String) -> Call<'a, Option<T>>,
    ) -> Result<(Vec<(String, T)>, Option<Cursor>), StoreError> {
        let client = self.client();
        // `None`: the one node a standalone or Sentinel client talks to.
        let primaries: Vec<Option<Server>> = if client.is_clustered() {
            super::primaries::cluster_primaries(client)?
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        let pattern = format!("{}:*", glob_escape(namespace));
        let strip = format!("{namespace}:");
        let mut items = Vec::new();
        let mut examined = 0;
        let mut at = cursor;
        let mut unread: Vec<String> = std::mem::take(&mut at.pending)
            .into_iter()
            .filter(|suffix| wanted(suffix).is_some())
            .collect();
        loop {
            let mut batch = std::mem::take(&mut unread).into_iter();
            // Past the limit only if the rest would not fit in a cursor.
            while items.len() < limit || batch.len() > MAX_PENDING {
                let Some(suffix) = batch.next() else { break };
                if let Some(item) = read(suffix.clone()).await? {
                    items.push((suffix, item));
                }
            }
            at.pending = batch.collect();
            let more = !at.pending.is_empty()
                || usize::try_from(at.node).is_ok_and(|node| node < primaries.len());
            if items.len() >= limit || examined >= examined_at_most || !more {
                return Ok((items, more.then_some(at)));
            }
            let Some(server) = usize::try_from(at.node)
                .ok()
                .and_then(|node| primaries.get(node))
            else {
                return Ok((items, None));
            };
            let count = (limit - items.len()).clamp(1, SCAN_COUNT);
            let (next_scan, keys) = self.scan(server.as_ref(), at.scan, &pattern, count).await?;
            examined += count;
            let mut suffixes: Vec<String> = keys
                .iter()
                .filter_map(|key| key.strip_prefix(&strip).and_then(wanted))
                .map(str::to_owned)
                .collect();
            suffixes.sort_unstable();
            suffixes.dedup();
            unread = suffixes;
            at = if next_scan == 0 {
                Cursor {
                    node: at.node + 1,
                    ..Cursor::default()
                }
            } else {
                Cursor {
                    node: at.node,
                    scan: next_scan,
                    ..Cursor::default()
                }
            };
        }
    }

    /// One `SCAN` batch of about `count` keys examined on `server` (or the
    /// one node): the next cursor and the keys that matched.
    async fn scan(
        &self,
        server: Option<&Server>,
        cursor: u64,
        pattern: &str,
        count: usize,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let client = self.client();
        let cursor = cursor.to_string();
        let pattern = pattern.to_owned();
        let reply: Value = match server {
            Some(server) => {
                client
                    .with_cluster_node(server.clone())
                    .scan_page(cursor, pattern, Some(count), None)
                    .await
            }
            None => client.scan_page(cursor, pattern, Some(count), None).await,
        }
        .map_err(|e| classify(&e))?;
        let unexpected = || StoreError::Backend("unexpected SCAN reply".into());
        let mut parts = reply.into_array().into_iter();
        let next = parts
            .next()
            .and_then(|cursor| cursor.as_string())
            .and_then(|cursor| cursor.parse().ok())
            .ok_or_else(unexpected)?;
        let keys = parts
            .next()
            .ok_or_else(unexpected)?
            .into_array()
            .into_iter()
            .filter_map(|key| key.into_string())
            .collect();
        Ok((next, keys))
    }
}

crate::store::listing::listing_by_inherent_methods!(RedisStore);
