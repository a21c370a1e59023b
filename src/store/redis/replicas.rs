//! `[store] min_replicas_ack`: after a write that must survive a failover
//! (a claim, a queued delivery, an inbox swap), `WAIT` on the node that
//! took it until enough replicas have it or the timeout passes.

use fred::interfaces::ClientLike;
use fred::prelude::{Client, Value};
use fred::types::{ClusterHash, CustomCommand};
use tracing::Instrument as _;

use super::{RedisStore, classify, millis, span};
use crate::store::{StoreError, StoreKey};

impl RedisStore {
    /// `WAIT` on the connection (and, in a cluster, the node) that just
    /// wrote `key`. Returns whether enough replicas acknowledged.
    pub(super) async fn replicated(
        &self,
        client: &Client,
        key: &StoreKey,
    ) -> Result<bool, StoreError> {
        let Some(ack) = self.replica_ack else {
            return Ok(true);
        };
        let slot = fred::util::redis_keyslot(key.as_str().as_bytes());
        let command = CustomCommand::new("WAIT", ClusterHash::Custom(slot), true);
        let args = vec![
            Value::Integer(i64::from(ack.replicas)),
            Value::Integer(millis(ack.timeout)),
        ];
        let span = self.spans.span("WAIT", None);
        let reply = client
            .custom::<Value, Value>(command, args)
            .instrument(span.clone())
            .await
            .map_err(|e| classify(&e));
        span::ended(&span, &reply);
        let acknowledged = reply?.as_i64().unwrap_or(0);
        Ok(acknowledged >= i64::from(ack.replicas))
    }
}
