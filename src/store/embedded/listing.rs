//! The embedded side of `store::listing`: a range read of the `records`
//! table (or of `entities`, for held entities), resumed after the last key
//! a page examined.

use std::ops::Bound;
use std::time::Duration;

use bytes::Bytes;

use super::entities::{ENTITIES, decode};
use super::{EmbeddedStore, RECORDS, backend, expiry_of};
use crate::record::{Record, now_ms};
use crate::store::listing::{Cursor, EntityPage, Filter, Page, entity_hash, record_hash};
use crate::store::{Existing, StoreError};

impl EmbeddedStore {
    /// One page of the records under `namespace` (`{prefix}:{scope}`) that
    /// `filter` keeps, from `cursor` (module docs of `store::listing`). A
    /// cursor naming another node than the first is past the end: the
    /// embedded store is one node.
    pub(in crate::store) async fn list(
        &self,
        namespace: &str,
        filter: Filter,
        cursor: Cursor,
    ) -> Result<Page, StoreError> {
        if cursor.node != 0 {
            return Ok(Page {
                records: Vec::new(),
                next: None,
            });
        }
        let prefix = format!("{namespace}:");
        self.read(RECORDS, move |table| {
            let now = now_ms();
            let start = format!("{prefix}{}", cursor.after);
            let range = table
                .range::<&str>((Bound::Excluded(start.as_str()), Bound::Unbounded))
                .map_err(backend)?;
            let mut records = Vec::new();
            let mut last = String::new();
            for (examined, entry) in range.enumerate() {
                let (key, value) = entry.map_err(backend)?;
                let Some(suffix) = key.value().strip_prefix(&prefix) else {
                    // Past the scope: keys sort by namespace first.
                    break;
                };
                if records.len() >= filter.limit || examined >= filter.examined() {
                    let next = Cursor {
                        after: last,
                        ..Cursor::default()
                    };
                    return Ok(Page {
                        records,
                        next: Some(next),
                    });
                }
                last = suffix.to_owned();
                let Some(hash) = record_hash(suffix) else {
                    continue;
                };
                let raw = value.value();
                let Some(expires_at_ms) = expiry_of(raw).filter(|at| *at > now) else {
                    continue;
                };
                match Record::decode(&Bytes::copy_from_slice(&raw[8..])) {
                    Ok(record) => {
                        let existing = Existing {
                            ttl: Some(Duration::from_millis(expires_at_ms - now)),
                            record,
                        };
                        if filter.keeps(&existing) {
                            records.push((hash.to_owned(), existing));
                        }
                    }
                    Err(error) => {
                        tracing::warn!(key = hash, %error, "listing skips a corrupt record");
                    }
                }
            }
            Ok(Page {
                records,
                next: None,
            })
        })
        .await
    }
}

impl EmbeddedStore {
    /// One page of the held entities under `namespace` (`store::listing`,
    /// [`crate::store::entity::EntityState::is_held`]): a range read of the `entities` table
    /// from `cursor`.
    pub(in crate::store) async fn list_held(
        &self,
        namespace: &str,
        limit: usize,
        cursor: Cursor,
    ) -> Result<EntityPage, StoreError> {
        if cursor.node != 0 {
            return Ok(EntityPage {
                entities: Vec::new(),
                next: None,
            });
        }
        let prefix = format!("{namespace}:");
        self.read(ENTITIES, move |table| {
            let now = now_ms();
            let start = format!("{prefix}{}", cursor.after);
            let range = table
                .range::<&str>((Bound::Excluded(start.as_str()), Bound::Unbounded))
                .map_err(backend)?;
            let mut entities = Vec::new();
            let mut last = String::new();
            for (examined, entry) in range.enumerate() {
                let (key, value) = entry.map_err(backend)?;
                let Some(suffix) = key.value().strip_prefix(&prefix) else {
                    break;
                };
                if entities.len() >= limit || examined >= limit.saturating_mul(10) {
                    let next = Cursor {
                        after: last,
                        ..Cursor::default()
                    };
                    return Ok(EntityPage {
                        entities,
                        next: Some(next),
                    });
                }
                last = suffix.to_owned();
                if entity_hash(suffix).is_none() {
                    continue;
                }
                if let Some((state, _)) = decode(value.value(), now)? {
                    if state.is_held() {
                        entities.push((suffix.to_owned(), state));
                    }
                }
            }
            Ok(EntityPage {
                entities,
                next: None,
            })
        })
        .await
    }
}

crate::store::listing::listing_by_inherent_methods!(EmbeddedStore);
