//! Connecting the store: the fred settings every client shares, the pool
//! (and a Cluster's per-primary pools), and the first wait for Redis.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config as FredConfig, ReconnectPolicy};

use super::{RedisAuth, RedisStore, Scripts, last_error, shards, span};
use crate::config::ReplicaAck;
use crate::store::StoreError;
use crate::store::durability::{Confirmation, WritePolicy};

/// How long start-up waits for the first connection before going on
/// degraded (requests then follow `on_unavailable` until Redis answers).
const INITIAL_CONNECT_WAIT: Duration = Duration::from_secs(3);
/// Reconnect backoff bounds in milliseconds: quick first retry, capped so
/// recovery is noticed within two seconds of Redis returning.
const RECONNECT_MIN_MS: u32 = 50;
const RECONNECT_MAX_MS: u32 = 2_000;

/// The settings every client of the store shares: timeouts, attempts,
/// `TCP_NODELAY` and the reconnect policy.
pub(super) fn builder(config: FredConfig, command_timeout: Duration) -> Builder {
    let mut builder = Builder::from_config(config);
    builder
        .with_performance_config(|perf| perf.default_command_timeout = command_timeout)
        .with_connection_config(|conn| {
            conn.connection_timeout = command_timeout.max(Duration::from_millis(500));
            conn.internal_command_timeout = command_timeout.max(Duration::from_millis(500));
            conn.max_command_attempts = 2;
            // Commands are small and latency-bound: never wait for an ACK.
            conn.tcp.nodelay = Some(true);
        })
        .set_policy(ReconnectPolicy::new_exponential(
            0,
            RECONNECT_MIN_MS,
            RECONNECT_MAX_MS,
            2,
        ));
    builder
}

impl RedisStore {
    /// [`RedisStore::connect_authenticated`] with only the URL's
    /// credentials, at durability `memory` (a throwaway Redis of a test
    /// or tool), `WAIT`ing for `replica_ack` replicas if given.
    pub async fn connect(
        url: &str,
        command_timeout: Duration,
        replica_ack: Option<ReplicaAck>,
        connections: usize,
    ) -> Result<Self, StoreError> {
        let policy = WritePolicy {
            replica_ack,
            ..WritePolicy::MEMORY
        };
        Self::connect_authenticated(
            url,
            RedisAuth::default(),
            command_timeout,
            policy,
            connections,
        )
        .await
    }

    /// Connects a small pool to `url` (fred URL syntax: `redis://`,
    /// `rediss://`, `redis-cluster://`, `redis-sentinel://`) and loads the
    /// scripts. An unreachable server is not fatal: the pool keeps
    /// reconnecting in the background.
    ///
    /// Every claim, stored answer and queued delivery is confirmed at
    /// `policy`'s level (`store::durability`: `WAITAOF`, and `WAIT` for
    /// its replicas) on the same connection; a claim that can not be
    /// confirmed is released again and reported as unavailable, so a
    /// crash right after it can not lose it.
    ///
    /// `auth` overrides the URL's user and password where set; fred sends
    /// them to every node (cluster nodes, sentinels and their primary).
    pub async fn connect_authenticated(
        url: &str,
        auth: RedisAuth,
        command_timeout: Duration,
        policy: WritePolicy,
        connections: usize,
    ) -> Result<Self, StoreError> {
        let mut config =
            FredConfig::from_url(url).map_err(|e| StoreError::Backend(e.to_string()))?;
        config.fail_fast = false;
        if let Some(username) = auth.username {
            config.username = Some(username);
        }
        if let Some(password) = auth.password {
            config.password = Some(password);
        }
        // Only a TLS URL has a connector to replace (validation refuses
        // `tls_*` keys with a plain URL).
        if let (Some(tls), Some(current)) = (auth.tls, config.tls.as_mut()) {
            current.connector = fred::types::config::TlsConnector::from((*tls).clone());
        }
        let pool = builder(config.clone(), command_timeout)
            .build_pool(connections.max(1))
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let last_error = last_error::LastError::follow(&pool);
        pool.connect_pool();
        let shards = config
            .server
            .is_clustered()
            .then(|| Arc::new(shards::Shards::new(&config, command_timeout, connections)));
        let store = Self {
            pool,
            scripts: Scripts::new(),
            confirmation: Arc::new(Confirmation::new(policy)),
            clustered: config.server.is_clustered(),
            spans: span::Spans::of(&config),
            config,
            command_timeout,
            tracking: None,
            shards,
            last_error,
            probe_slice: std::sync::atomic::AtomicUsize::new(0),
        };
        match tokio::time::timeout(INITIAL_CONNECT_WAIT, store.pool.wait_for_connect()).await {
            Ok(Ok(())) => {
                if let Err(error) = store.load_scripts().await {
                    tracing::warn!(%error, "could not load Lua scripts; they load on first use");
                }
            }
            _ => {
                let tls_hosts = if store.config.tls.is_some() {
                    store.config.server.hosts()
                } else {
                    Vec::new()
                };
                store.last_error.log_unreachable(&tls_hosts).await;
            }
        }
        if let Some(shards) = &store.shards {
            if !shards.refresh().await {
                tracing::warn!("cluster slot map not read yet; read again on first use");
            }
        }
        Ok(store)
    }
}
