//! Watches whether Redis may evict idemgate's keys (contract §4 rule 10).
//!
//! A Redis with `maxmemory` set and any `maxmemory-policy` but
//! `noeviction` deletes keys when it fills up: an evicted completed record
//! lets its duplicate execute again, an evicted in-flight claim lets a
//! duplicate run concurrently with the first delivery. Under the
//! `volatile-*` policies idemgate's keys (often the only ones with a TTL)
//! go first. Nothing in the protocol can notice that afterwards, so the
//! settings themselves are checked:
//!
//! * **what** — on every primary (every cluster primary from fred's cached
//!   cluster state; the connected primary for standalone and Sentinel):
//!   `CONFIG GET maxmemory*`, falling back to `INFO memory` (which reports
//!   `maxmemory` and `maxmemory_policy`) where managed Redis disables
//!   `CONFIG`; and `evicted_keys` from `INFO stats`. A node whose settings
//!   can be read by neither command counts as a risk: the guarantee can not
//!   be checked there.
//! * **when** — at start-up, on every reconnect (fred's reconnect event of
//!   the pool's first client; it also fires on the first connection), every
//!   [`CHECK_EVERY`], [`RETRY_AFTER_FAILURE`] after a check that could not
//!   reach a node, and whenever `/readyz` is asked (two round trips per
//!   primary), so readiness follows a `CONFIG SET` at once.
//! * **what then** — an ERROR line per risky node naming node, policy and
//!   `maxmemory` (on every periodic check and whenever the findings change),
//!   `idemgate_store_eviction_risk` 1, `idemgate_store_evicted_keys_total`
//!   counting what the primaries newly evicted (restarts and promotions
//!   handled in `store::metrics`), and `/readyz` 503 unless `[store]
//!   allow_eviction = true`. A check that can not reach Redis keeps the
//!   previous findings (an unreachable store already fails `/readyz`).
//!
//! The embedded store never evicts: both metrics stay 0.
//!
//! The watcher belongs to [`AnyStore`](super::AnyStore), which runs it
//! with the rest of its upkeep and answers `/readyz` from it
//! (`store/upkeep.rs`), so nothing outside the store sees Redis.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use fred::interfaces::ServerInterface;
use fred::prelude::{ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand, InfoKind};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::StoreError;
use super::durability::Persistence;
use super::metrics::EvictionMetrics;
use super::redis::primaries::cluster_primaries;
use super::redis::{RedisStore, classify, settings};
use super::server::info_field;

/// Time between two checks while Redis answers: once a minute (contract §4 rule 10).
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(60);
/// Time before the next check after one that could not reach a node, so a
/// store that comes back is assessed soon even if no reconnect is seen.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A primary's memory settings, as far as they could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Memory {
    /// `maxmemory` in bytes (0: unlimited) and `maxmemory-policy`.
    Known {
        /// Bytes; 0 means no limit, so nothing is ever evicted.
        maxmemory: u64,
        /// `noeviction`, `allkeys-lru`, `volatile-ttl`, …
        policy: String,
    },
    /// Neither `CONFIG GET` nor `INFO memory` told; the reason.
    Unreadable(String),
}

/// What one check found on one primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeReport {
    /// `host:port` of the primary.
    pub node: String,
    /// Its eviction settings.
    pub memory: Memory,
    /// Its `evicted_keys` counter, if `INFO stats` answered.
    pub evicted_keys: Option<u64>,
    /// What it keeps of a write, for the durability check read in the
    /// same pass (`store::durability`).
    pub persistence: Persistence,
}

impl NodeReport {
    /// Whether this node may delete idemgate's keys on its own.
    pub(crate) fn may_evict(&self) -> bool {
        match &self.memory {
            Memory::Known { maxmemory, policy } => *maxmemory > 0 && policy != "noeviction",
            Memory::Unreadable(_) => true,
        }
    }
}

/// Why a check runs; decides whether unchanged findings are logged again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Start-up, reconnect or the periodic timer: log every risk.
    Scheduled,
    /// A `/readyz` probe: log only what changed (probes come every few
    /// seconds).
    Probe,
}

/// The eviction watcher shared by the background task and `/readyz`.
#[derive(Debug)]
pub(crate) struct EvictionWatch {
    allow_eviction: bool,
    metrics: EvictionMetrics,
    /// The risky nodes of the last check that reached Redis.
    risky: Mutex<Vec<NodeReport>>,
}

impl EvictionWatch {
    /// A watcher; `allow_eviction` is `[store] allow_eviction`. Sets both
    /// gauges to 0 until the first check.
    pub(crate) fn new(allow_eviction: bool) -> Self {
        Self {
            allow_eviction,
            metrics: EvictionMetrics::new(),
            risky: Mutex::new(Vec::new()),
        }
    }

    /// Takes one reading of every primary ([`read_primaries`]): updates
    /// the gauges and logs (module docs).
    pub(crate) fn record(&self, reports: &[NodeReport], trigger: Trigger) {
        let risky: Vec<NodeReport> = reports.iter().filter(|r| r.may_evict()).cloned().collect();
        let evicted = reports
            .iter()
            .filter_map(|r| Some((r.node.as_str(), r.evicted_keys?)));
        self.metrics.set(!risky.is_empty(), evicted);
        let mut last = self.risky.lock().unwrap_or_else(|e| e.into_inner());
        let same = |a: &NodeReport, b: &NodeReport| a.node == b.node && a.memory == b.memory;
        let changed =
            last.len() != risky.len() || last.iter().zip(&risky).any(|(a, b)| !same(a, b));
        if changed || trigger == Trigger::Scheduled {
            for report in &risky {
                self.log_risk(report);
            }
        }
        if changed && risky.is_empty() {
            tracing::info!("redis no longer evicts keys on any primary");
        }
        *last = risky;
    }

    fn log_risk(&self, report: &NodeReport) {
        let consequence = if self.allow_eviction {
            "readyz stays 200 because [store] allow_eviction = true"
        } else {
            "readyz answers 503"
        };
        match &report.memory {
            Memory::Known { maxmemory, policy } => tracing::error!(
                node = report.node,
                policy = policy.as_str(),
                maxmemory,
                "redis may evict keys: an evicted record or claim lets a duplicate execute again; \
                 set maxmemory-policy noeviction (or maxmemory 0), or give idemgate a dedicated \
                 database; {consequence}"
            ),
            Memory::Unreadable(error) => tracing::error!(
                node = report.node,
                policy = "unknown",
                %error,
                "cannot read the eviction settings of redis (CONFIG GET and INFO memory failed), \
                 so at-most-once can not be checked; grant the commands or set \
                 [store] allow_eviction = true after checking by hand; {consequence}"
            ),
        }
    }

    /// Why `/readyz` must fail, from the last check: `None` when no
    /// primary may evict, or when `allow_eviction` accepts that.
    pub(crate) fn not_ready(&self) -> Option<String> {
        if self.allow_eviction {
            return None;
        }
        let risky = self.risky.lock().unwrap_or_else(|e| e.into_inner());
        let nodes: Vec<String> = risky
            .iter()
            .map(|r| match &r.memory {
                Memory::Known { maxmemory, policy } => {
                    format!(
                        "{} (maxmemory {maxmemory}, maxmemory-policy {policy})",
                        r.node
                    )
                }
                Memory::Unreadable(_) => format!("{} (eviction settings unreadable)", r.node),
            })
            .collect();
        (!nodes.is_empty()).then(|| {
            format!(
                "redis may evict keys on {}: set maxmemory-policy noeviction, or [store] allow_eviction = true",
                nodes.join(", ")
            )
        })
    }
}

/// Runs `check` at once, then [`CHECK_EVERY`] after a check that returned
/// `true`, [`RETRY_AFTER_FAILURE`] after one that returned `false`, and at
/// once on every event of `reconnects`, until `shutdown`.
pub(crate) async fn schedule<F, Fut, T>(
    mut check: F,
    mut reconnects: Option<broadcast::Receiver<T>>,
    shutdown: CancellationToken,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
    T: Clone,
{
    let mut next = Instant::now();
    loop {
        let reconnected = async {
            match reconnects.as_mut() {
                Some(events) => events.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
            event = reconnected => {
                if let Err(broadcast::error::RecvError::Closed) = event {
                    reconnects = None;
                    continue;
                }
            }
        }
        let ok = check().await;
        next = Instant::now() + if ok { CHECK_EVERY } else { RETRY_AFTER_FAILURE };
    }
}

/// Reads every primary of `redis` now: its eviction settings and what it
/// keeps of a write. `Err` when Redis could not be reached.
pub(crate) async fn read_primaries(redis: &RedisStore) -> Result<Vec<NodeReport>, StoreError> {
    let client = redis.client();
    if !client.is_clustered() {
        let node = client
            .active_connections()
            .first()
            .map_or_else(|| "redis".to_owned(), ToString::to_string);
        return Ok(vec![read_node(client, node, false).await?]);
    }
    let primaries = cluster_primaries(client)?;
    let mut reports = Vec::with_capacity(primaries.len());
    for server in primaries {
        let node = server.to_string();
        reports.push(read_node(&client.with_cluster_node(server), node, true).await?);
    }
    Ok(reports)
}

/// One node's report. Only "unreachable" is an error; a node that refuses
/// the commands is reported as [`Memory::Unreadable`].
async fn read_node<C: ClientLike + ServerInterface>(
    client: &C,
    node: String,
    clustered: bool,
) -> Result<NodeReport, StoreError> {
    let memory = match config_get(client).await {
        Ok(memory) => memory,
        Err(StoreError::Unavailable(error)) => return Err(StoreError::Unavailable(error)),
        Err(config_error) => match info(client, InfoKind::Memory).await {
            Ok(text) => memory_from_info(&text).unwrap_or_else(|| {
                Memory::Unreadable(format!(
                    "CONFIG GET: {config_error}; INFO memory: no maxmemory fields"
                ))
            }),
            Err(StoreError::Unavailable(error)) => return Err(StoreError::Unavailable(error)),
            Err(info_error) => Memory::Unreadable(format!(
                "CONFIG GET: {config_error}; INFO memory: {info_error}"
            )),
        },
    };
    let evicted_keys = match info(client, InfoKind::Stats).await {
        Ok(text) => info_field(&text, "evicted_keys").and_then(|v| v.parse().ok()),
        Err(StoreError::Unavailable(error)) => return Err(StoreError::Unavailable(error)),
        Err(_) => None,
    };
    let persistence = settings::persistence(client, node.clone(), clustered).await?;
    Ok(NodeReport {
        node,
        memory,
        evicted_keys,
        persistence,
    })
}

/// `CONFIG GET maxmemory*` (one pattern: Redis before 7 takes only one).
async fn config_get<C: ClientLike>(client: &C) -> Result<Memory, StoreError> {
    let command = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let args = vec![Value::from("GET"), Value::from("maxmemory*")];
    let settings: HashMap<String, String> = client
        .custom(command, args)
        .await
        .map_err(|e| classify(&e))?;
    memory_from_config(&settings)
        .ok_or_else(|| StoreError::Backend("CONFIG GET returned no maxmemory settings".into()))
}

async fn info<C: ServerInterface>(client: &C, section: InfoKind) -> Result<String, StoreError> {
    client
        .info::<String>(Some(section))
        .await
        .map_err(|e| classify(&e))
}

fn memory_from_config(settings: &HashMap<String, String>) -> Option<Memory> {
    Some(Memory::Known {
        maxmemory: settings.get("maxmemory")?.trim().parse().ok()?,
        policy: settings.get("maxmemory-policy")?.trim().to_owned(),
    })
}

fn memory_from_info(text: &str) -> Option<Memory> {
    Some(Memory::Known {
        maxmemory: info_field(text, "maxmemory")?.parse().ok()?,
        policy: info_field(text, "maxmemory_policy")?.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn known(maxmemory: u64, policy: &str) -> NodeReport {
        NodeReport {
            node: "h:1".into(),
            memory: Memory::Known {
                maxmemory,
                policy: policy.into(),
            },
            evicted_keys: None,
            persistence: Persistence {
                node: "h:1".into(),
                server: None,
                appendonly: None,
                appendfsync: None,
                save: None,
                replicas: 0,
                full_coverage: None,
            },
        }
    }

    #[test]
    fn only_a_limit_with_an_evicting_policy_is_a_risk() {
        assert!(known(10 << 20, "allkeys-lru").may_evict());
        assert!(known(10 << 20, "volatile-ttl").may_evict());
        assert!(!known(10 << 20, "noeviction").may_evict());
        assert!(
            !known(0, "allkeys-lru").may_evict(),
            "maxmemory 0: no limit"
        );
        let unreadable = NodeReport {
            memory: Memory::Unreadable("NOPERM".into()),
            ..known(0, "")
        };
        assert!(unreadable.may_evict(), "unverifiable counts as a risk");
    }

    #[test]
    fn settings_parse_from_config_get_and_info() {
        let settings: HashMap<String, String> = [
            ("maxmemory", "10485760"),
            ("maxmemory-policy", "allkeys-lru"),
            ("maxmemory-samples", "5"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            memory_from_config(&settings),
            Some(Memory::Known {
                maxmemory: 10_485_760,
                policy: "allkeys-lru".into()
            })
        );
        assert_eq!(memory_from_config(&HashMap::new()), None);
        let info = "# Memory\r\nused_memory:1000\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:volatile-lru\r\n";
        assert_eq!(
            memory_from_info(info),
            Some(Memory::Known {
                maxmemory: 0,
                policy: "volatile-lru".into()
            })
        );
        assert_eq!(
            info_field("# Stats\r\nevicted_keys:42\r\n", "evicted_keys"),
            Some("42")
        );
        assert_eq!(info_field("evicted_keys_x:1", "evicted_keys"), None);
    }

    /// Runs `schedule` with a check that records the (paused) clock and
    /// answers from `results`; returns the offsets of the checks.
    async fn run_schedule(
        results: Vec<bool>,
        reconnect_at: Option<Duration>,
        until: Duration,
    ) -> Vec<Duration> {
        let start = Instant::now();
        let times = Arc::new(Mutex::new(Vec::new()));
        let calls = Arc::new(AtomicUsize::new(0));
        let (events, receiver) = broadcast::channel::<()>(4);
        let shutdown = CancellationToken::new();
        let task = {
            let (times, calls, shutdown) = (times.clone(), calls.clone(), shutdown.clone());
            tokio::spawn(schedule(
                move || {
                    let (times, calls, results) = (times.clone(), calls.clone(), results.clone());
                    async move {
                        times.lock().unwrap().push(start.elapsed());
                        let n = calls.fetch_add(1, Ordering::SeqCst);
                        results.get(n).copied().unwrap_or(true)
                    }
                },
                Some(receiver),
                shutdown,
            ))
        };
        if let Some(at) = reconnect_at {
            tokio::time::sleep(at).await;
            events.send(()).unwrap();
            tokio::time::sleep(until - at).await;
        } else {
            tokio::time::sleep(until).await;
        }
        shutdown.cancel();
        task.await.unwrap();
        times.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn checks_at_start_then_every_minute() {
        let times = run_schedule(vec![], None, Duration::from_secs(150)).await;
        assert_eq!(
            times,
            [0, 60, 120].map(Duration::from_secs).to_vec(),
            "{times:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_check_is_retried_soon() {
        let times = run_schedule(vec![false, false, true], None, Duration::from_secs(80)).await;
        assert_eq!(
            times,
            [0, 5, 10, 70].map(Duration::from_secs).to_vec(),
            "{times:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconnect_checks_at_once_and_restarts_the_minute() {
        let times = run_schedule(
            vec![],
            Some(Duration::from_secs(30)),
            Duration::from_secs(100),
        )
        .await;
        assert_eq!(
            times,
            [0, 30, 90].map(Duration::from_secs).to_vec(),
            "{times:?}"
        );
    }
}
