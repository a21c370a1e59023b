//! Readiness of the Redis store (`/readyz`): answering `PING` is not
//! enough, the node must take the writes a claim needs.

use fred::prelude::{ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand};

use super::RedisStore;
use super::replies::classify;
use crate::store::StoreError;

impl RedisStore {
    /// Whether the node answers as a primary: `ROLE` must say `master`. A
    /// replica (read-only: every claim would fail) or a node still loading
    /// its data set (`LOADING`) is not ready, though it answers `PING`.
    pub(super) async fn is_primary(&self) -> Result<(), StoreError> {
        let command = CustomCommand::new_static("ROLE", ClusterHash::Random, false);
        let reply = self
            .pool
            .next_connected()
            .custom::<Value, Value>(command, Vec::new())
            .await
            .map_err(|e| self.last_error.explain(classify(&e)))?;
        let role = reply
            .into_array()
            .into_iter()
            .next()
            .and_then(|role| role.into_string())
            .unwrap_or_default();
        if role == "master" {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "the store is a {role:?}, not a primary: it refuses the writes a claim needs"
            )))
        }
    }
}
