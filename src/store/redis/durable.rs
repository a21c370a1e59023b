//! Confirms that a write an acknowledgement rests on (a claim, a stored
//! answer, a queued delivery, an inbox swap) reached the declared `[store]
//! durability` (`store::durability`): `WAITAOF 1 0` where the server has
//! it, then `WAIT` for `min_replicas_ack` replicas, both on the connection
//! (and, in a cluster, the node) that took the write.

use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::prelude::{Client, Value};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};
use tracing::Instrument as _;

use super::{RedisStore, classify, millis, span};
use crate::store::durability::Confirm;
use crate::store::{StoreError, StoreKey};

/// The longest `WAITAOF` waits for the fsync: `everysec` fsyncs at least
/// once a second, so a write not on disk by then is on a failing disk.
const FSYNC_TIMEOUT: Duration = Duration::from_secs(1);

impl RedisStore {
    /// Whether the write to `key` just made over `client` is as durable as
    /// the declared level: `Ok(Err(why))` when it is not (or can not be
    /// confirmed), `Err` when the store could not be asked.
    pub(super) async fn durable(
        &self,
        client: &Client,
        key: &StoreKey,
    ) -> Result<Result<(), String>, StoreError> {
        // Only a WAIT or WAITAOF needs the slot: the common reply-only
        // write does not hash its key.
        let slot = || fred::util::redis_keyslot(key.as_str().as_bytes());
        match self.confirmation.confirm() {
            Confirm::Reply | Confirm::FsyncedReply => {}
            Confirm::WaitAof => {
                let reply = self
                    .wait_command(client, "WAITAOF", slot(), [1, 0], FSYNC_TIMEOUT)
                    .await?;
                let local = reply.into_array().first().and_then(Value::as_i64);
                if local.unwrap_or(0) < 1 {
                    return Ok(Err(format!(
                        "WAITAOF: the primary did not fsync it within {FSYNC_TIMEOUT:?}"
                    )));
                }
            }
            Confirm::Impossible => {
                let level = crate::config::Choice::name(self.confirmation.policy().level);
                return Ok(Err(format!(
                    "the store can not give durability {level} (see /readyz)"
                )));
            }
        }
        let Some(ack) = self.confirmation.policy().replica_ack else {
            return Ok(Ok(()));
        };
        let replicas = i64::from(ack.replicas);
        let reply = self
            .wait_command(client, "WAIT", slot(), [replicas], ack.timeout)
            .await?;
        let acknowledged = reply.as_i64().unwrap_or(0);
        if acknowledged < replicas {
            return Ok(Err(format!(
                "{acknowledged} of {replicas} replica(s) acknowledged it within {:?}",
                ack.timeout
            )));
        }
        Ok(Ok(()))
    }

    /// `WAIT`/`WAITAOF` with `counts` then the timeout, on `slot`'s node.
    async fn wait_command<const N: usize>(
        &self,
        client: &Client,
        name: &'static str,
        slot: u16,
        counts: [i64; N],
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let command = CustomCommand::new_static(name, ClusterHash::Custom(slot), true);
        let mut args: Vec<Value> = counts.into_iter().map(Value::Integer).collect();
        args.push(Value::Integer(millis(timeout)));
        // The command waits up to `timeout` by design: fred's own timeout
        // must not cut it short.
        let options = Options {
            timeout: Some(timeout + self.command_timeout),
            ..Options::default()
        };
        let span = self.spans.span(name, None);
        let reply = client
            .with_options(&options)
            .custom::<Value, Value>(command, args)
            .instrument(span.clone())
            .await
            .map_err(|e| classify(&e));
        span::ended(&span, &reply);
        reply
    }
}
