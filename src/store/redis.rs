//! Redis (standalone, Cluster or Sentinel) through fred and the Lua scripts
//! in `lua/`.
//!
//! Each operation is one `EVALSHA` on one key, so every call is atomic and
//! Redis Cluster safe. Scripts are embedded at build time, loaded once at
//! start-up (on every primary) and called by SHA; `evalsha_with_reload`
//! re-loads a script after `NOSCRIPT` (a restarted or failed-over server)
//! and retries once. fred reconnects with bounded exponential backoff while
//! every command is bounded by `command_timeout`, so an outage surfaces as
//! [`StoreError::Unavailable`] within that time.
//!
//! The pool has one connection per worker thread (`StoreConfig::connections`),
//! so a worker's commands never wait for another thread's connection task.
//! fred flushes the socket after every `EVALSHA`, so each call is its own
//! write (counted in `bench/RESULTS.md`, Profile); `TCP_NODELAY` is set
//! because fred leaves Nagle's algorithm on, which would hold a small
//! command back until the previous one was acknowledged.
//!
//! On a Cluster the request path's calls go over a pool per primary
//! (`shards.rs`), so a dying primary stalls only its own slots; the pool
//! above (fred's clustered client) carries the rest: script loading, the
//! eviction watch, listings, `/readyz` and the inbox's repair pass.
//!
//! With a replay cache, the store also reads records over a RESP3 client of
//! its own with `CLIENT TRACKING` on, and `tracking.rs` keeps the cache
//! coherent with what Redis says changed. The fred clients never leave
//! `store/`: the eviction watcher (`store::eviction`) and the store's
//! upkeep reach them through `pub(super)` methods.

mod audit;
mod auth;
mod connect;
mod durable;
mod entity_ops;
mod generation;
mod inbox_ops;
mod last_error;
mod listing;
mod migrating;
pub(in crate::store) mod primaries;
mod probe;
mod ready;
mod replies;
mod scripts;
pub(in crate::store) mod settings;
mod shards;
pub(crate) mod slots;
mod span;
mod tracking;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fred::prelude::{
    Client, ClientLike, Config as FredConfig, Error as FredError, Pool, Server, Value,
};
use fred::types::RespVersion;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use self::auth::RedisAuth;
use self::connect::builder;
pub(super) use self::replies::classify;
use self::replies::{existing_from, is_moved, millis};
use self::scripts::{Named, Scripts};
use super::durability::Confirmation;
use super::entity::{Correction, EntityEffect, EntityState, EntityStep, Seen};
use super::probe::ProbePlan;
use super::{
    ClaimOutcome, Completion, EntityKey, Existing, Lease, Purged, Releasing, SeenRecord, Store,
    StoreError, StoreKey,
};
use crate::record::{OWNER_RANGE, OwnerToken, Record};
use crate::replay_cache::ReplayCache;

/// The Redis-backed store.
pub struct RedisStore {
    pool: Pool,
    scripts: Scripts,
    /// How a write an acknowledgement rests on is confirmed durable
    /// (`store::durability`), shared with the durability check.
    confirmation: Arc<Confirmation>,
    /// Whether the deployment is a Cluster: then a scope's owed set is
    /// split by hash slot (`store::inbox`, "Owed sets").
    clustered: bool,
    /// What the pool was built from, for the tracking client.
    config: FredConfig,
    command_timeout: Duration,
    /// The RESP3 client the replay cache reads over, once enabled.
    tracking: Option<Client>,
    /// The spans of the calls a traced delivery makes.
    spans: span::Spans,
    /// On a Cluster, a pool per primary for the request path's calls, so
    /// a dying primary stalls only its own slots (`shards.rs`).
    shards: Option<Arc<shards::Shards>>,
    /// Why the pool last failed to connect, for start-up and `/readyz`.
    last_error: last_error::LastError,
    /// The quarter of a Cluster's slots the next look reads (`probe.rs`).
    probe_slice: std::sync::atomic::AtomicUsize,
}

/// Capacity of the tracking client's event streams: a burst of
/// invalidations (a mass purge) larger than this flushes the replay cache
/// instead of being applied one by one.
const TRACKING_EVENTS: usize = 4096;
/// A tracking connection with a command unanswered this long is closed
/// and reconnected (fred's unresponsive check): with the health `PING`
/// it bounds how long a black-holed connection goes unnoticed.
const TRACKING_UNRESPONSIVE: Duration = Duration::from_secs(2);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").finish_non_exhaustive()
    }
}

impl RedisStore {
    /// How this store's writes are confirmed durable, for the durability
    /// check that keeps it current (`store::durability`).
    pub(in crate::store) fn confirmation(&self) -> Arc<Confirmation> {
        Arc::clone(&self.confirmation)
    }

    /// A connected client of the pool (for checks outside the scripts,
    /// such as the eviction watcher's `CONFIG GET` and `INFO`).
    pub(super) fn client(&self) -> &Client {
        self.pool.next_connected()
    }

    /// Starts the RESP3 client the replay cache fills over, with
    /// `CLIENT TRACKING` left to [`RedisStore::keep_coherent`]. Its
    /// connections are its own: tracking follows a connection, and the
    /// pool's carry every claim, whose keys must not be tracked (each
    /// would cost an invalidation when completed).
    pub(super) fn enable_tracking(&mut self) -> Result<(), StoreError> {
        let mut config = self.config.clone();
        config.version = RespVersion::RESP3;
        let client = builder(config, self.command_timeout)
            .with_performance_config(|perf| perf.broadcast_channel_capacity = TRACKING_EVENTS)
            .with_connection_config(|conn| {
                conn.unresponsive.max_timeout = Some(TRACKING_UNRESPONSIVE);
                conn.unresponsive.interval = TRACKING_UNRESPONSIVE / 4;
            })
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        client.connect();
        self.tracking = Some(client);
        Ok(())
    }

    /// The task that keeps `cache` coherent over the tracking client until
    /// `shutdown` ([`tracking`]; `marker` names the epoch marker), or
    /// `None` if [`RedisStore::enable_tracking`] was not called.
    pub(super) fn keep_coherent(
        &self,
        cache: Arc<ReplayCache>,
        marker: String,
        shutdown: CancellationToken,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let client = self.tracking.clone()?;
        Some(tracking::keep_coherent(client, cache, marker, shutdown))
    }

    /// Reads a record over the tracking client, so Redis tells the replay
    /// cache when it changes; the pool's `lookup` without one.
    pub(super) async fn lookup_tracked(
        &self,
        key: &StoreKey,
    ) -> Result<Option<Existing>, StoreError> {
        let Some(client) = &self.tracking else {
            return Store::lookup(self, key).await;
        };
        let reply = self
            .eval(&mut client.clone(), &self.scripts.lookup, key, Vec::new())
            .await?;
        existing_from(reply)
    }

    /// Reconnect events of the pool's first client (fred also sends one
    /// on the first connection).
    pub(super) fn reconnects(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<fred::types::config::Server>> {
        use fred::interfaces::EventInterface;
        self.pool
            .clients()
            .first()
            .map(EventInterface::reconnect_rx)
    }

    /// The client for `key`'s calls: its primary's own pool on a Cluster
    /// whose slot map is known (`shards.rs`), else the store's pool.
    /// A slot no primary is known for (the map was not read yet: the
    /// Cluster was unreachable at start-up) starts a refresh.
    fn routed(&self, key: &str) -> Client {
        if let Some(shards) = &self.shards {
            match shards.pool_for(slots::slot_of(key)) {
                Some(pool) => return pool.next_connected().clone(),
                None => self.refresh_in_background(shards),
            }
        }
        self.pool.next_connected().clone()
    }

    fn refresh_in_background(&self, shards: &Arc<shards::Shards>) {
        let shards = Arc::clone(shards);
        tokio::spawn(async move {
            shards.refresh().await;
        });
    }

    /// After a failed call on a Cluster: an unreachable primary or a
    /// `MOVED` may mean a failover, so the slot map is read again in the
    /// background (rate-limited in `shards.rs`).
    /// Classifies `error` after following a topology change it shows.
    fn classify_following(&self, error: &FredError) -> StoreError {
        self.follow_topology(error);
        classify(error)
    }

    fn follow_topology(&self, error: &FredError) {
        let Some(shards) = &self.shards else {
            return;
        };
        if matches!(classify(error), StoreError::Unavailable(_)) || is_moved(error) {
            self.refresh_in_background(shards);
        }
    }

    /// Where to run `script` again after `error` on a Cluster: the key's
    /// new primary after a `MOVED`; after an unreachable primary, the
    /// primary a fresh slot map names instead (a failover's promoted
    /// replica), if the script may run twice ([`Named::repeatable`]).
    /// `None`: the error stands, and later calls follow a refresh started
    /// in the background.
    async fn new_home(
        &self,
        script: &Named,
        key: &str,
        sent_to: Option<Server>,
        error: &FredError,
    ) -> Option<Client> {
        let shards = self.shards.as_ref()?;
        let unreachable = matches!(classify(error), StoreError::Unavailable(_));
        let redirected = is_moved(error);
        let worth_again = redirected || (unreachable && script.repeatable());
        if !worth_again {
            self.follow_topology(error);
            return None;
        }
        let slot = slots::slot_of(key);
        let moved = |shards: &shards::Shards| {
            let now = shards.owner_of(slot);
            now.is_some() && now != sent_to
        };
        if !moved(shards) {
            shards.refresh_soon().await;
        }
        (redirected || moved(shards)).then(|| self.routed(key))
    }

    async fn load_scripts(&self) -> Result<(), StoreError> {
        let client = self.pool.next_connected();
        for script in self.scripts.all() {
            script.load(client).await.map_err(|e| classify(&e))?;
        }
        Ok(())
    }

    /// Runs `script` on `key` over `client`; on a Cluster, a `MOVED`
    /// reply re-reads the slot map and retries once on the new owner
    /// (`client` then names it, for a `WAIT` that must follow the write),
    /// and a slot being migrated is followed (`migrating`).
    async fn eval(
        &self,
        client: &mut Client,
        script: &Named,
        key: &StoreKey,
        args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        self.eval_keys(client, script, key, vec![key.as_str().to_owned()], args)
            .await
    }

    /// [`RedisStore::eval`] with more keys than `key` (all in its slot).
    async fn eval_keys(
        &self,
        client: &mut Client,
        script: &Named,
        key: &StoreKey,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, StoreError> {
        let span = self.spans.span("EVALSHA", Some(script.name));
        let result = match self.shards.as_deref() {
            // A single server: no redirect or slot migration to follow, so
            // nothing is kept for a second try.
            None => {
                script
                    .evalsha_with_reload::<Value, _, _>(client, keys, args)
                    .instrument(span.clone())
                    .await
            }
            Some(shards) => {
                self.eval_on_cluster(shards, client, (script, key), (keys, args))
                    .instrument(span.clone())
                    .await
            }
        };
        let result = result.map_err(|e| classify(&e));
        span::ended(&span, &result);
        result
    }

    /// `script` on a Cluster: a `MOVED` reply re-reads the slot map and
    /// retries once on the new owner, and a slot being migrated is
    /// followed (`migrating`); `client` then names who took the write.
    async fn eval_on_cluster(
        &self,
        shards: &shards::Shards,
        client: &mut Client,
        (script, key): (&Named, &StoreKey),
        (keys, args): (Vec<String>, Vec<Value>),
    ) -> Result<Value, FredError> {
        let sent_to = shards.owner_of(slots::slot_of(key.as_str()));
        let mut result = script
            .evalsha_with_reload::<Value, _, _>(client, keys.clone(), args.clone())
            .await;
        if let Err(error) = &result
            && let Some(home) = self.new_home(script, key.as_str(), sent_to, error).await
        {
            *client = home;
            result = script
                .evalsha_with_reload(client, keys.clone(), args.clone())
                .await;
        }
        match result {
            Err(error) if migrating::is_migrating(&error) => {
                migrating::follow(shards, client, script, (keys, args), error).await
            }
            done => done,
        }
    }

    async fn eval_flag(
        &self,
        script: &Named,
        key: &StoreKey,
        args: Vec<Value>,
    ) -> Result<bool, StoreError> {
        let reply = self
            .eval(&mut self.routed(key.as_str()), script, key, args)
            .await?;
        Ok(reply.as_i64() == Some(1))
    }
}

fn owner_arg(owner: OwnerToken) -> Value {
    Value::Bytes(Bytes::copy_from_slice(&owner.0))
}

impl Store for RedisStore {
    async fn claim(
        &self,
        key: &StoreKey,
        record: Record,
        ttl: Duration,
        (entity, probe): (Option<&EntityStep>, Option<&ProbePlan>),
    ) -> Result<ClaimOutcome, StoreError> {
        let client = &mut self.routed(key.as_str());
        let encoded = record.encode().map_err(StoreError::from)?;
        let mut args = vec![Value::Bytes(encoded.clone()), Value::Integer(millis(ttl))];
        // On a probe route the claim keeps the plan (store::probe).
        let probe = probe.map(|plan| self.claim_probe(key, ttl, plan));
        let reply = match entity {
            None => {
                let mut keys = vec![key.as_str().to_owned()];
                if let Some((probe_keys, plan, first)) = probe {
                    keys.extend(probe_keys);
                    args.extend([plan, first]);
                }
                let claim = &self.scripts.claim;
                self.eval_keys(client, claim, key, keys, args).await?
            }
            Some(step) => {
                let reply = self.claim_entity(client, key, step, args, probe).await?;
                match entity_ops::verdict_from(reply)? {
                    Ok(verdict) => {
                        // A decided notice may be acknowledged (a late or a
                        // held one, stored for its copies): that answer
                        // rests on the write just made, like a claim.
                        if let Err(shortfall) = self.durable(client, key).await? {
                            return Err(StoreError::Unavailable(format!(
                                "the entity's decision is not confirmed durable: {shortfall}"
                            )));
                        }
                        return Ok(ClaimOutcome::Decided(verdict));
                    }
                    Err(reply) => reply,
                }
            }
        };
        // A retried claim (fred resends a command whose connection dropped)
        // can find its own record: that is still our claim.
        if let Some(existing) = existing_from(reply)? {
            if existing.record.owner.0[..] != encoded[OWNER_RANGE] {
                return Ok(ClaimOutcome::Existing(existing));
            }
        }
        let advance = entity.map(|step| step.advance.clone());
        let lease = Lease::claimed(key.clone(), record, ttl, advance);
        if let Err(shortfall) = self.durable(client, key).await? {
            // Best effort: a claim left behind turns unknown when its lease
            // runs out, and the caller hears the store is unavailable anyway.
            if let Err(error) = self.release(key, lease.owner(), Releasing::Owned).await {
                tracing::debug!(key = key.hash(), %error, "releasing an unreplicated claim failed");
            }
            return Err(StoreError::Unavailable(format!(
                "the claim is not confirmed durable: {shortfall}"
            )));
        }
        Ok(ClaimOutcome::Claimed(lease))
    }

    async fn complete(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        record: &Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> Result<Completion, StoreError> {
        let client = &mut self.routed(key.as_str());
        let mut args = vec![
            owner_arg(owner),
            Value::Bytes(record.encode().map_err(StoreError::from)?),
            Value::Integer(millis(ttl)),
        ];
        let owes = record.owed() == Some(true);
        let mut keys = vec![key.as_str().to_owned()];
        // A delivery the inbox now owes: its owed-set entry in the same
        // step (store::inbox, "Owed sets").
        if owes {
            keys.push(self.owed_set(key));
        }
        args.push(Value::from(if owes { key.hash() } else { "" }));
        // An entity route's record: its entity settles in the same step.
        let entity = entity_ops::settle_part(key, effect);
        args.push(
            entity
                .as_ref()
                .map_or(Value::from(""), |(_, effect)| effect.clone()),
        );
        // A probe route's record settles its plan in the same step.
        if key.has_probe() {
            keys.extend(self.probe_keys(key));
            args.push(probe::jitter());
        }
        if let Some((entity, _)) = entity {
            keys.push(entity);
        }
        let reply = self
            .eval_keys(client, &self.scripts.complete, key, keys, args)
            .await?;
        let completion = match reply.as_i64() {
            Some(1) => Completion::Stored,
            Some(2) => Completion::StoredInFreeKey,
            _ => Completion::TakenOver,
        };
        if completion.stored() {
            // The sender of an owed delivery is acknowledged only for what
            // the declared durability keeps; an answer in hand is stored
            // again until it is (`pipeline::persist` retries this error).
            if let Err(shortfall) = self.durable(client, key).await? {
                let what = if owes {
                    "the queued delivery"
                } else {
                    "the stored answer"
                };
                return Err(StoreError::Unavailable(format!(
                    "{what} is not confirmed durable: {shortfall}"
                )));
            }
        }
        Ok(completion)
    }

    async fn release(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        what: Releasing,
    ) -> Result<bool, StoreError> {
        let claim_only = if what == Releasing::ClaimOnly {
            "1"
        } else {
            "0"
        };
        let args = vec![owner_arg(owner), Value::from(claim_only)];
        self.delete_dropping(&self.scripts.release, key, args).await
    }

    async fn renew(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let args = vec![owner_arg(owner), Value::Integer(millis(ttl))];
        self.eval_flag(&self.scripts.renew, key, args).await
    }

    async fn lookup(&self, key: &StoreKey) -> Result<Option<Existing>, StoreError> {
        let reply = self
            .eval(
                &mut self.routed(key.as_str()),
                &self.scripts.lookup,
                key,
                Vec::new(),
            )
            .await?;
        existing_from(reply)
    }

    async fn purge(&self, key: &StoreKey, seen: Option<SeenRecord>) -> Result<Purged, StoreError> {
        let seen = seen.map_or_else(Vec::new, |seen| seen.bytes().to_vec());
        let reply = self
            .delete_dropping_reply(&self.scripts.purge, key, vec![Value::Bytes(seen.into())])
            .await?;
        Ok(match reply.as_i64() {
            Some(1) => Purged::Deleted,
            Some(-1) => Purged::Changed,
            _ => Purged::Absent,
        })
    }

    async fn entity(
        &self,
        key: &EntityKey,
    ) -> Result<Option<(EntityState, Option<Duration>)>, StoreError> {
        self.read_entity(key).await
    }

    async fn correct_entity(
        &self,
        key: &EntityKey,
        seen: &Seen,
        correction: &Correction,
        by: (&str, Duration),
    ) -> Result<bool, StoreError> {
        self.correct(key, seen, correction, by).await
    }

    /// Ready means able to claim ([`RedisStore::is_primary`]).
    async fn ping(&self) -> Result<(), StoreError> {
        self.is_primary().await
    }
}
