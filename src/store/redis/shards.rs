//! Per-primary routing on a Redis Cluster: one fred pool per primary, so a
//! dying primary stalls only its own slots.
//!
//! fred's clustered client has one router task per connection, and while
//! any node of its slot map is unreachable that task loops in its
//! reconnect policy (`sync_cluster` connects to every node with
//! `try_join_all`), writing no command to any node: with one primary of
//! three dead, every key answered 503 until the promotion was seen
//! (`tests/system/fault/failover.rs`, 87–100% of healthy-slot requests for
//! 5 s). Here each primary gets a centralized pool of its own: a dead
//! primary's pool retries alone, its keys time out after `command_timeout`
//! (503 `store_unavailable`), and the other primaries' keys never notice.
//!
//! The slot map comes from `CLUSTER SLOTS`, asked of every known primary at
//! once (the first answer wins), at start-up and again after a `MOVED`
//! reply or an unreachable primary, at most once per [`REFRESH_EVERY`]; a
//! new primary (a promoted replica) gets a pool on the refresh that first
//! names it, and a primary that left the map is disconnected. Until a map
//! is known, [`Shards::pool_for`] says so and the caller uses the
//! clustered pool.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Duration;

use fred::interfaces::ClusterInterface;
use fred::prelude::{ClientLike, Config as FredConfig, Pool, Server, ServerConfig, Value};
use fred::types::cluster::ClusterRouting;
use tokio::time::Instant;

use super::connect::builder;

/// Fewest time between two slot-map refreshes: a burst of errors on a dead
/// primary's keys asks the cluster once, not once per key.
pub(super) const REFRESH_EVERY: Duration = Duration::from_millis(200);

/// The slot map and a pool per primary in it.
#[derive(Default)]
struct Map {
    routing: Option<ClusterRouting>,
    pools: HashMap<Server, Pool>,
}

/// Routes each key to its primary's own pool (module docs).
pub(super) struct Shards {
    config: FredConfig,
    command_timeout: Duration,
    connections: usize,
    /// The clustered pool's seed nodes: asked for the slot map when no
    /// primary is known yet.
    seeds: Vec<Server>,
    map: RwLock<Map>,
    /// When the last refresh started; one runs at a time.
    refreshing: Mutex<Option<Instant>>,
}

impl Shards {
    /// Routing for the Cluster `config` names; no pool until the first
    /// [`Shards::refresh`].
    pub(super) fn new(config: &FredConfig, command_timeout: Duration, connections: usize) -> Self {
        let seeds = match &config.server {
            ServerConfig::Clustered { hosts, .. } => hosts.clone(),
            _ => Vec::new(),
        };
        Self {
            config: config.clone(),
            command_timeout,
            connections: connections.max(1),
            seeds,
            map: RwLock::new(Map::default()),
            refreshing: Mutex::new(None),
        }
    }

    /// The pool of the primary that owns `slot`, if the map names one.
    pub(super) fn pool_for(&self, slot: u16) -> Option<Pool> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        let server = map.routing.as_ref()?.get_server(slot)?;
        map.pools.get(server).cloned()
    }

    /// The primary the map names for `slot`.
    pub(super) fn owner_of(&self, slot: u16) -> Option<Server> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.routing.as_ref()?.get_server(slot).cloned()
    }

    /// The pool of the primary at `server`, if it is one.
    pub(super) fn pool_at(&self, server: &Server) -> Option<Pool> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.pools.get(server).cloned()
    }

    /// Re-reads the slot map unless a refresh ran less than
    /// [`REFRESH_EVERY`] ago (or runs now); returns whether it read one.
    pub(super) async fn refresh(&self) -> bool {
        {
            let mut last = self
                .refreshing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let Some((routing, from)) = self.read_slots().await else {
            return false;
        };
        self.install(routing, &from).await;
        true
    }

    /// [`Shards::refresh`], waiting out the rate limit once if a refresh
    /// ran just before (it may have read the map before the change this
    /// caller saw): for a call that will be sent again on the new map.
    pub(super) async fn refresh_soon(&self) -> bool {
        if self.refresh().await {
            return true;
        }
        tokio::time::sleep(REFRESH_EVERY).await;
        self.refresh().await
    }

    /// `CLUSTER SLOTS` from every known primary (or the seeds) at once;
    /// the first answer wins, each ask bounded by `command_timeout`.
    async fn read_slots(&self) -> Option<(ClusterRouting, Server)> {
        let known: Vec<(Server, Option<Pool>)> = {
            let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
            if map.pools.is_empty() {
                self.seeds.iter().map(|s| (s.clone(), None)).collect()
            } else {
                map.pools
                    .iter()
                    .map(|(s, p)| (s.clone(), Some(p.clone())))
                    .collect()
            }
        };
        let asks = known.into_iter().map(|(server, pool)| {
            Box::pin(async move {
                let answer = match pool {
                    Some(pool) => self.ask(&pool).await,
                    None => {
                        let pool = self.connect(&server).ok()?;
                        let answer = self.ask(&pool).await;
                        drop(pool.quit().await);
                        answer
                    }
                }?;
                let routing = ClusterRouting::from_cluster_slots(answer, server.host.clone())
                    .ok()
                    .filter(|r| !r.slots().is_empty())?;
                Some((routing, server))
            })
        });
        let mut pending: Vec<_> = asks.collect();
        while !pending.is_empty() {
            let (found, _, rest) = futures_select_all(pending).await;
            if found.is_some() {
                return found;
            }
            pending = rest;
        }
        None
    }

    async fn ask(&self, pool: &Pool) -> Option<Value> {
        let client = pool.next_connected();
        tokio::time::timeout(self.command_timeout, client.cluster_slots::<Value>())
            .await
            .ok()?
            .ok()
    }

    /// Makes `routing` the map: pools for primaries new to it, old ones
    /// for the rest, and a `QUIT` for primaries it no longer names.
    async fn install(&self, routing: ClusterRouting, from: &Server) {
        let primaries = routing.unique_primary_nodes();
        let mut added = Vec::new();
        let removed = {
            let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
            for primary in &primaries {
                if !map.pools.contains_key(primary) {
                    match self.connect(primary) {
                        Ok(pool) => {
                            added.push(pool.clone());
                            map.pools.insert(primary.clone(), pool);
                        }
                        Err(error) => {
                            tracing::warn!(%primary, %error, "could not set up a pool for a cluster primary");
                        }
                    }
                }
            }
            let gone: Vec<Server> = map
                .pools
                .keys()
                .filter(|s| !primaries.contains(s))
                .cloned()
                .collect();
            map.routing = Some(routing);
            gone.iter()
                .filter_map(|s| map.pools.remove(s))
                .collect::<Vec<_>>()
        };
        if !added.is_empty() || !removed.is_empty() {
            tracing::info!(
                %from,
                primaries = primaries.len(),
                added = added.len(),
                removed = removed.len(),
                "cluster slot map changed"
            );
        }
        for pool in removed {
            tokio::spawn(async move { drop(pool.quit().await) });
        }
        // A new primary's first commands should not wait for its connect.
        for pool in added {
            drop(tokio::time::timeout(self.command_timeout, pool.wait_for_connect()).await);
        }
    }

    /// A centralized pool to one node, with the store's shared settings.
    fn connect(&self, server: &Server) -> Result<Pool, fred::error::Error> {
        let mut config = self.config.clone();
        config.server = ServerConfig::Centralized {
            server: server.clone(),
        };
        let pool = builder(config, self.command_timeout).build_pool(self.connections)?;
        pool.connect_pool();
        Ok(pool)
    }
}

/// The first of `futures` to finish, its index and the others (a small
/// `select_all`, for a handful of nodes).
async fn futures_select_all<F: std::future::Future + Unpin>(
    mut futures: Vec<F>,
) -> (F::Output, usize, Vec<F>) {
    let (output, index) = std::future::poll_fn(|cx| {
        for (i, future) in futures.iter_mut().enumerate() {
            if let std::task::Poll::Ready(output) = std::pin::Pin::new(future).poll(cx) {
                return std::task::Poll::Ready((output, i));
            }
        }
        std::task::Poll::Pending
    })
    .await;
    drop(futures.remove(index));
    (output, index, futures)
}

#[cfg(test)]
mod tests {
    use std::future::ready;

    use super::*;

    #[tokio::test]
    async fn select_all_returns_the_first_ready_and_keeps_the_rest() {
        let pending = std::future::pending::<u8>;
        let futures: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = u8> + Send>>> =
            vec![Box::pin(pending()), Box::pin(ready(7)), Box::pin(ready(9))];
        let (output, index, rest) = futures_select_all(futures).await;
        assert_eq!((output, index, rest.len()), (7, 1, 2));
        let (output, index, rest) = futures_select_all(rest).await;
        assert_eq!((output, index, rest.len()), (9, 1, 1));
    }
}
