//! The Redis side of `store::listing`: `SCAN` every primary, read each
//! record key through the `lookup` script, keep what the filter wants.

use fred::interfaces::{ClientLike, KeysInterface};
use fred::prelude::Value;
use fred::types::config::Server;

use super::{RedisStore, classify};
use crate::store::listing::{Cursor, Filter, Page, glob_escape, record_hash};
use crate::store::{Store, StoreError, StoreKey};

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
        let mut records = Vec::new();
        let mut examined = 0;
        let mut at = cursor;
        loop {
            let Some(server) = usize::try_from(at.node)
                .ok()
                .and_then(|node| primaries.get(node))
            else {
                return Ok(Page {
                    records,
                    next: None,
                });
            };
            let (next_scan, batch) = self.scan(server.as_ref(), at.scan, &pattern).await?;
            let mut suffixes: Vec<&str> = batch
                .iter()
                .filter_map(|key| key.strip_prefix(&strip).and_then(record_hash))
                .filter(|suffix| *suffix > at.after.as_str())
                .collect();
            suffixes.sort_unstable();
            suffixes.dedup();
            for (n, suffix) in suffixes.iter().enumerate() {
                examined += 1;
                let key = StoreKey(format!("{strip}{suffix}"));
                match self.lookup(&key).await {
                    Ok(Some(existing)) if filter.keeps(&existing) => {
                        records.push(((*suffix).to_owned(), existing));
                    }
                    Ok(_) => {}
                    Err(StoreError::Corrupt(error)) => {
                        tracing::warn!(key = suffix, %error, "listing skips a corrupt record");
                    }
                    Err(error) => return Err(error),
                }
                let full = records.len() >= filter.limit || examined >= filter.examined();
                if full && n + 1 < suffixes.len() {
                    // Resume inside this batch, after the key just read.
                    let next = Cursor {
                        after: (*suffix).to_owned(),
                        ..at
                    };
                    return Ok(Page {
                        records,
                        next: Some(next),
                    });
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
            if records.len() >= filter.limit || examined >= filter.examined() {
                let more = usize::try_from(at.node).is_ok_and(|node| node < primaries.len());
                return Ok(Page {
                    records,
                    next: more.then_some(at),
                });
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
