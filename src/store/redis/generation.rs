//! The generation markers on Redis (`store::generation`): read each, and
//! write a fresh one where none is.
//!
//! Read with `GETEX` and written with `SETNX`, commands no record script
//! uses, so a marker check is never mistaken for a delivery's store access
//! (the tests that assert "no store access" count commands by name).

use fred::interfaces::{ClientLike, ClusterInterface};
use fred::prelude::{Client, Value};
use fred::types::{ClusterHash, CustomCommand};

use super::{RedisStore, classify, slots};
use crate::store::StoreError;
use crate::store::generation::{GenerationWatch, Marker, fresh_value};

/// `name` routed by its first key.
fn command(name: &'static str) -> CustomCommand {
    CustomCommand::new_static(name, ClusterHash::FirstKey, false)
}

/// The marker's value, if any (`GETEX` without options: a plain read).
async fn read(client: &Client, key: &str) -> Result<Option<String>, StoreError> {
    client
        .custom::<Option<String>, Value>(command("GETEX"), vec![Value::from(key)])
        .await
        .map_err(|e| classify(&e))
}

impl RedisStore {
    /// The marker keys under `base`: `base` itself, or on a Cluster one per
    /// slot range of the client's slot map, tagged with its first slot
    /// (so a marker lives, and moves, with the slots it vouches for).
    fn generation_keys(&self, base: &str) -> Vec<String> {
        if !self.clustered {
            return vec![base.to_owned()];
        }
        let state = self.client().cached_cluster_state();
        let mut keys: Vec<String> = state
            .map(|state| {
                state
                    .slots()
                    .iter()
                    .map(|range| format!("{base}:{{{}}}", slots::tag(range.start)))
                    .collect()
            })
            .unwrap_or_default();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Reads every marker under `base` (writing a fresh generation where
    /// none is) and hands what it found to `watch`. `Err` when Redis could
    /// not be reached (the next check reads again).
    pub(in crate::store) async fn check_generation(
        &self,
        base: &str,
        watch: &GenerationWatch,
    ) -> Result<(), StoreError> {
        let client = self.client();
        for key in self.generation_keys(base) {
            let found = read(client, &key).await?;
            let marker = found.map_or(Marker::Absent, Marker::Present);
            watch.judge(&key, &marker);
            let now = match marker {
                Marker::Present(value) => Some(value),
                Marker::Absent => {
                    // Another instance may write first: what the key holds
                    // afterwards is the generation every instance learns.
                    let written: bool = client
                        .custom(command("SETNX"), vec![key.clone(), fresh_value()])
                        .await
                        .map_err(|e| classify(&e))?;
                    tracing::debug!(key, written, "generation marker written");
                    read(client, &key).await?
                }
            };
            if let Some(now) = now {
                watch.remember(&key, now);
            }
        }
        Ok(())
    }
}
