//! The Redis side of `store::listing`: `SCAN` every primary, read each
//! record key through the `lookup` script, keep what the filter wants.

use fred::interfaces::{ClientLike, KeysInterface};
use fred::prelude::Value;
use fred::types::config::Server;

use super::{RedisStore, classify};
use crate::store::entity::EntityState;
use crate::store::listing::{
    Cursor, EntityPage, Filter, Page, entity_hash, glob_escape, record_hash,
};
use crate::store::{Call, EntityKey, Existing, Store, StoreError, StoreKey};

/// The `COUNT` hint of one `SCAN` batch: small, so a page that fills up
/// inside a batch repeats little of it when it resumes.
const SCAN_COUNT: u32 = 100;

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
    /// `read` and keeping what it returns, until `limit` are kept or
    /// `examined` keys were read: the items and where the next page
    /// starts.
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
        loop {
            let Some(server) = usize::try_from(at.node)
                .ok()
                .and_then(|node| primaries.get(node))
            else {
                return Ok((items, None));
            };
            let (next_scan, batch) = self.scan(server.as_ref(), at.scan, &pattern).await?;
            let mut suffixes: Vec<&str> = batch
                .iter()
                .filter_map(|key| key.strip_prefix(&strip).and_then(wanted))
                .filter(|suffix| *suffix > at.after.as_str())
                .collect();
            suffixes.sort_unstable();
            suffixes.dedup();
            for (n, suffix) in suffixes.iter().enumerate() {
                examined += 1;
                if let Some(item) = read((*suffix).to_owned()).await? {
                    items.push(((*suffix).to_owned(), item));
                }
                let full = items.len() >= limit || examined >= examined_at_most;
                if full && n + 1 < suffixes.len() {
                    // Resume inside this batch, after the key just read.
                    let next = Cursor {
                        after: (*suffix).to_owned(),
                        ..at
                    };
                    return Ok((items, Some(next)));
                }
            }
            at = if next_scan == 0 {
                Cursor {
                    node: at.node + 1,
                    ..Cursor::default()
                }
            } else {
                Cursor {
                    node: at.node,
                    scan: next_scan,
                    after: String::new(),
                }
            };
            if items.len() >= limit || examined >= examined_at_most {
                let more = usize::try_from(at.node).is_ok_and(|node| node < primaries.len());
                return Ok((items, more.then_some(at)));
            }
        }
    }

    /// One `SCAN` batch on `server` (or the one node): the next cursor and
    /// the keys.
    async fn scan(
        &self,
        server: Option<&Server>,
        cursor: u64,
        pattern: &str,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let client = self.client();
        let cursor = cursor.to_string();
        let pattern = pattern.to_owned();
        let reply: Value = match server {
            Some(server) => {
                client
                    .with_cluster_node(server.clone())
                    .scan_page(cursor, pattern, Some(SCAN_COUNT), None)
                    .await
            }
            None => {
                client
                    .scan_page(cursor, pattern, Some(SCAN_COUNT), None)
                    .await
            }
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
