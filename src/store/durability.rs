//! What an acknowledged write survives (`[store] durability`), stated,
//! checked against the server, and waited for on every write.
//!
//! idemgate acknowledges a sender, and replays an answer, on the strength
//! of writes: the claim before forwarding, the completed record before
//! answering, the inbox's queued delivery before its acknowledgement. What
//! those writes survive is decided by the server's settings, so the level
//! is declared in the configuration and judged against them:
//!
//! | level | the write is … before idemgate acts on it | Redis needs |
//! |---|---|---|
//! | `memory` | in the primary's memory | nothing (chosen explicitly) |
//! | `fsync` | on the primary's disk | `appendonly yes` and `appendfsync always`, or `everysec` on a server with `WAITAOF` (Redis 7.2+, Valkey) |
//! | `replicated` | on the primary's disk and on `min_replicas_ack` replicas | the above, and that many online replicas per primary |
//!
//! **Per write** ([`Confirmation`]): on a server with `WAITAOF` every such
//! write is followed by `WAITAOF 1 0` on its connection, so the server
//! itself says the write reached the disk; elsewhere the last check must
//! have found `appendfsync always` on every primary (the server then
//! fsyncs before it replies). `replicated` adds `WAIT` for the replicas.
//! A write that can not be confirmed is an unavailable store: a claim is
//! released and answered 503, a completed answer is kept in hand and
//! stored again until it is confirmed (`pipeline::persist`).
//!
//! **Per check** (with the eviction check: start-up, reconnect, every
//! minute, every `/readyz`): each primary's server, `appendonly`,
//! `appendfsync`, `save`, online replicas and, on a Cluster,
//! `cluster-require-full-coverage` ([`Persistence`]). A shortfall is an
//! ERROR line naming the node and what to set, `/readyz` 503 with the
//! same words, and `idemgate_store_durability_met` 0. The level is logged
//! at start-up, shown in `/admin/info` and exported as
//! `idemgate_store_durability{level}`.
//!
//! The embedded store commits every write with fsync before it answers:
//! it is always `fsync`, and nothing here applies to it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use super::server::Server;
use crate::config::{Choice as _, Durability, ReplicaAck};

/// What every write an acknowledgement rests on must survive, and the
/// replicas it waits for: `[store] durability` and `min_replicas_ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePolicy {
    /// The declared level.
    pub level: Durability,
    /// `WAIT` after each such write (`replicated` always has it; `memory`
    /// and `fsync` may, as before the level existed).
    pub replica_ack: Option<ReplicaAck>,
}

impl WritePolicy {
    /// Kept in memory, no replicas waited for: the store helpers of tests
    /// and tools that run a throwaway Redis.
    pub const MEMORY: Self = Self {
        level: Durability::Memory,
        replica_ack: None,
    };

    /// Replicas every write needs to be confirmed: 0 without `WAIT`.
    fn replicas(self) -> u32 {
        self.replica_ack.map_or(0, |ack| ack.replicas)
    }
}

/// One primary's persistence, as far as it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Persistence {
    /// `host:port`.
    pub node: String,
    /// Its server and version; `None` when `INFO server` did not say.
    pub server: Option<Server>,
    /// `appendonly`; `None`: unreadable.
    pub appendonly: Option<bool>,
    /// `appendfsync` (`always`, `everysec`, `no`); `None`: unreadable.
    pub appendfsync: Option<String>,
    /// `save` (the RDB schedule, empty when off); `None`: unreadable.
    pub save: Option<String>,
    /// Replicas `INFO replication` lists as online.
    pub replicas: u32,
    /// `cluster-require-full-coverage` on a Cluster node.
    pub full_coverage: Option<bool>,
}

impl Persistence {
    fn waitaof(&self) -> bool {
        self.server.as_ref().is_some_and(Server::has_waitaof)
    }

    /// Why this primary can not give `policy`'s level, in the words an
    /// operator acts on; `None` when it can.
    fn shortfall(&self, policy: WritePolicy) -> Option<String> {
        let mut missing = Vec::new();
        if policy.level >= Durability::Fsync {
            match (self.appendonly, self.appendfsync.as_deref()) {
                (Some(false), _) => {
                    let snapshots = match self.save.as_deref() {
                        Some("") | None => "no snapshots either: a restart loses everything",
                        Some(_) => {
                            "only RDB snapshots: a restart loses what came after the last one"
                        }
                    };
                    missing.push(format!("appendonly no ({snapshots}); set appendonly yes"));
                }
                (_, Some("no")) => missing.push(
                    "appendfsync no (the kernel decides when the AOF reaches the disk); \
                     set appendfsync always"
                        .to_owned(),
                ),
                // Either fsyncs before replying, or `WAITAOF` confirms it.
                (_, Some("always")) => {}
                _ if self.waitaof() => {}
                (_, Some(other)) => missing.push(format!(
                    "appendfsync {other} on {} without WAITAOF (a power cut loses up to a \
                     second of acknowledged writes); set appendfsync always, or run Redis \
                     7.2+ or Valkey",
                    self.server_name()
                )),
                _ => missing.push(
                    "its AOF settings can not be read (CONFIG GET refused) and it has no \
                     WAITAOF, so the level can not be checked"
                        .to_owned(),
                ),
            }
        }
        if policy.level == Durability::Replicated && self.replicas < policy.replicas() {
            missing.push(format!(
                "{} online replica(s), min_replicas_ack = {}",
                self.replicas,
                policy.replicas()
            ));
        }
        (!missing.is_empty()).then(|| missing.join("; "))
    }

    fn server_name(&self) -> String {
        self.server.as_ref().map_or_else(
            || "a server of unknown version".to_owned(),
            ToString::to_string,
        )
    }
}

/// How a write is confirmed to have reached the declared level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Confirm {
    /// Level `memory`: the primary's reply is all there is.
    Reply = 0,
    /// Every primary fsyncs before replying (`appendfsync always`, no
    /// `WAITAOF`): the reply confirms it.
    FsyncedReply = 1,
    /// `WAITAOF 1 0` after the write: the server confirms the fsync.
    WaitAof = 2,
    /// Not known yet (no check has read the server) or not possible: no
    /// write can be confirmed.
    Impossible = 3,
}

impl Confirm {
    fn from_u8(value: u8) -> Self {
        match value {
            0 => Self::Reply,
            1 => Self::FsyncedReply,
            2 => Self::WaitAof,
            _ => Self::Impossible,
        }
    }
}

/// How writes are confirmed now: set by every check, read by every write.
#[derive(Debug)]
pub(crate) struct Confirmation {
    policy: WritePolicy,
    confirm: AtomicU8,
}

impl Confirmation {
    /// Before the first check: `memory` confirms by the reply, any other
    /// level by nothing until the server has been read.
    pub(crate) fn new(policy: WritePolicy) -> Self {
        let first = match policy.level {
            Durability::Memory => Confirm::Reply,
            _ => Confirm::Impossible,
        };
        Self {
            policy,
            confirm: AtomicU8::new(first as u8),
        }
    }

    /// The declared level and replicas.
    pub(crate) fn policy(&self) -> WritePolicy {
        self.policy
    }

    /// How the next write is confirmed.
    pub(crate) fn confirm(&self) -> Confirm {
        Confirm::from_u8(self.confirm.load(Ordering::Relaxed))
    }

    fn set(&self, confirm: Confirm) {
        self.confirm.store(confirm as u8, Ordering::Relaxed);
    }
}

/// How writes can be confirmed on these primaries: the weakest of them,
/// and not at all while any of them can not keep a write on disk. Too few
/// replicas is a shortfall too (`/readyz`, the log), but not this one's:
/// `WAIT` confirms each write on the node that took it, so a primary left
/// without its replica (a Cluster failover's promoted one) refuses the
/// claims of its own slots, not every slot's.
fn confirm_for(policy: WritePolicy, nodes: &[Persistence]) -> Confirm {
    if policy.level == Durability::Memory {
        return Confirm::Reply;
    }
    let on_disk = WritePolicy {
        level: Durability::Fsync,
        ..policy
    };
    if nodes.is_empty() || nodes.iter().any(|n| n.shortfall(on_disk).is_some()) {
        return Confirm::Impossible;
    }
    if nodes.iter().all(Persistence::waitaof) {
        return Confirm::WaitAof;
    }
    let always = |node: &Persistence| {
        node.appendonly == Some(true) && node.appendfsync.as_deref() == Some("always")
    };
    if nodes.iter().all(always) {
        Confirm::FsyncedReply
    } else {
        Confirm::Impossible
    }
}

/// What the last check found, for `/readyz` and `/admin/info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Findings {
    /// `node: why` for every primary that can not give the level.
    pub shortfalls: Vec<String>,
    /// Risks that do not stop the level (a Cluster refusing every slot
    /// when one is down).
    pub warnings: Vec<String>,
    /// Each primary's server, `node server`.
    pub servers: Vec<String>,
    /// `node: why` for every primary whose server idemgate does not run
    /// on (`store::server`), whatever the level.
    pub unsupported: Vec<String>,
}

/// The durability check shared by the background upkeep and `/readyz`.
#[derive(Debug)]
pub(crate) struct DurabilityWatch {
    confirmation: std::sync::Arc<Confirmation>,
    last: Mutex<Option<Findings>>,
}

impl DurabilityWatch {
    /// A watch over the writes `confirmation` confirms. Logs the level.
    pub(crate) fn new(confirmation: std::sync::Arc<Confirmation>) -> Self {
        let policy = confirmation.policy();
        crate::store::metrics::durability_level(policy.level.name());
        Self {
            confirmation,
            last: Mutex::new(None),
        }
    }

    /// Takes one check's reading of every primary: sets how writes are
    /// confirmed, the gauge, and logs what changed (everything when
    /// `scheduled`).
    pub(crate) fn record(&self, nodes: &[Persistence], scheduled: bool) {
        let policy = self.confirmation.policy();
        self.confirmation.set(confirm_for(policy, nodes));
        let findings = Findings {
            shortfalls: nodes
                .iter()
                .filter_map(|n| Some(format!("{}: {}", n.node, n.shortfall(policy)?)))
                .collect(),
            warnings: nodes
                .iter()
                .filter(|n| n.full_coverage == Some(true))
                .map(|n| {
                    format!(
                        "{}: cluster-require-full-coverage yes (a primary down stops every \
                         slot, not just its own); set it to no",
                        n.node
                    )
                })
                .collect(),
            servers: nodes
                .iter()
                .map(|n| format!("{} {}", n.node, n.server_name()))
                .collect(),
            unsupported: nodes
                .iter()
                .filter_map(|n| {
                    let why = super::server::unsupported(n.server.as_ref()?)?;
                    Some(format!("{}: {why}", n.node))
                })
                .collect(),
        };
        crate::store::metrics::durability_met(findings.shortfalls.is_empty());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let changed = last.as_ref() != Some(&findings);
        if changed || scheduled {
            self.log(policy, &findings, last.is_none());
        }
        *last = Some(findings);
    }

    fn log(&self, policy: WritePolicy, findings: &Findings, first: bool) {
        let level = policy.level.name();
        for unsupported in &findings.unsupported {
            tracing::error!(
                "the store runs a server idemgate does not support: {unsupported}; readyz \
                 answers 503"
            );
        }
        for shortfall in &findings.shortfalls {
            tracing::error!(
                durability = level,
                "the store can not keep what idemgate acknowledges at durability {level}: \
                 {shortfall}; readyz answers 503 and first deliveries whose write it can \
                 not confirm are refused"
            );
        }
        for warning in &findings.warnings {
            tracing::warn!("{warning}");
        }
        if first && findings.shortfalls.is_empty() {
            match policy.level {
                Durability::Memory => tracing::warn!(
                    durability = level,
                    servers = findings.servers.join(", "),
                    "store durability is memory ([store] durability = \"memory\"): a Redis \
                     restart or power cut loses acknowledged deliveries and stored answers"
                ),
                _ => tracing::info!(
                    durability = level,
                    servers = findings.servers.join(", "),
                    "store durability checked"
                ),
            }
        }
    }

    /// Why `/readyz` must fail: the level can not be given (or has not
    /// been checked yet, for any level above `memory`).
    pub(crate) fn not_ready(&self) -> Option<String> {
        let level = self.confirmation.policy().level;
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.as_ref() {
            None if level > Durability::Memory => Some(format!(
                "the store's durability ({}) has not been checked yet",
                level.name()
            )),
            None => None,
            Some(findings) => {
                let unsupported = (!findings.unsupported.is_empty()).then(|| {
                    format!(
                        "the store runs a server idemgate does not support: {}",
                        findings.unsupported.join("; ")
                    )
                });
                let shortfall = (!findings.shortfalls.is_empty()).then(|| {
                    format!(
                        "the store can not give durability {}: {}",
                        level.name(),
                        findings.shortfalls.join("; ")
                    )
                });
                let why: Vec<String> = unsupported.into_iter().chain(shortfall).collect();
                (!why.is_empty()).then(|| why.join("; "))
            }
        }
    }

    /// The servers the last check found idemgate does not run on (`node:
    /// why`), for the start-up refusal.
    pub(crate) fn unsupported(&self) -> Vec<String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .map_or_else(Vec::new, |findings| findings.unsupported.clone())
    }

    /// The last findings, for `/admin/info`.
    pub(crate) fn findings(&self) -> Option<Findings> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The declared level.
    pub(crate) fn level(&self) -> Durability {
        self.confirmation.policy().level
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(server: &str, appendonly: bool, appendfsync: &str) -> Persistence {
        let info = match server {
            "valkey" => "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
            "redis72" => "redis_version:7.2.5\r\n",
            "redis60" => "redis_version:6.0.16\r\n",
            _ => "redis_version:7.0.15\r\n",
        };
        Persistence {
            node: "h:1".into(),
            server: Server::from_info(info),
            appendonly: Some(appendonly),
            appendfsync: Some(appendfsync.into()),
            save: Some(String::new()),
            replicas: 0,
            full_coverage: None,
        }
    }

    fn policy(level: Durability, replicas: u32) -> WritePolicy {
        WritePolicy {
            level,
            replica_ack: (replicas > 0).then_some(ReplicaAck {
                replicas,
                timeout: Duration::from_millis(100),
            }),
        }
    }

    #[test]
    fn servers_are_read_from_info() {
        let valkey = node("valkey", true, "always").server.unwrap();
        assert_eq!(valkey.to_string(), "valkey 9.1.2");
        assert!(valkey.has_waitaof());
        let redis = node("redis70", true, "always").server.unwrap();
        assert_eq!(redis.to_string(), "redis 7.0.15");
        assert!(!redis.has_waitaof());
        assert!(node("redis72", true, "always").waitaof());
        assert_eq!(Server::from_info("uptime:3\r\n"), None);
    }

    #[test]
    fn fsync_needs_an_aof_that_reaches_the_disk_per_write() {
        let fsync = policy(Durability::Fsync, 0);
        assert_eq!(node("redis70", true, "always").shortfall(fsync), None);
        assert_eq!(node("valkey", true, "everysec").shortfall(fsync), None);
        let everysec = node("redis70", true, "everysec").shortfall(fsync).unwrap();
        assert!(everysec.contains("without WAITAOF"), "{everysec}");
        let off = node("valkey", false, "always").shortfall(fsync).unwrap();
        assert!(off.contains("appendonly no (no snapshots"), "{off}");
        let rdb = Persistence {
            save: Some("3600 1".into()),
            ..node("redis70", false, "everysec")
        };
        assert!(rdb.shortfall(fsync).unwrap().contains("only RDB snapshots"));
        let no = node("valkey", true, "no").shortfall(fsync).unwrap();
        assert!(no.contains("appendfsync no"), "{no}");
        let memory = policy(Durability::Memory, 0);
        assert_eq!(node("redis70", false, "no").shortfall(memory), None);
    }

    #[test]
    fn replicated_also_counts_online_replicas() {
        let replicated = policy(Durability::Replicated, 2);
        let one = Persistence {
            replicas: 1,
            ..node("redis70", true, "always")
        };
        let why = one.shortfall(replicated).unwrap();
        assert!(
            why.contains("1 online replica(s), min_replicas_ack = 2"),
            "{why}"
        );
        let two = Persistence { replicas: 2, ..one };
        assert_eq!(two.shortfall(replicated), None);
    }

    #[test]
    fn writes_are_confirmed_by_the_weakest_primary() {
        let valkey = node("valkey", true, "everysec");
        let always = node("redis70", true, "always");
        let everysec = node("redis70", true, "everysec");
        let fsync = policy(Durability::Fsync, 0);
        assert_eq!(
            confirm_for(fsync, std::slice::from_ref(&valkey)),
            Confirm::WaitAof
        );
        let valkey_always = node("valkey", true, "always");
        assert_eq!(
            confirm_for(fsync, &[valkey_always, always.clone()]),
            Confirm::FsyncedReply,
            "a mixed Cluster: every primary fsyncs before replying"
        );
        assert_eq!(
            confirm_for(fsync, &[valkey.clone(), always]),
            Confirm::Impossible,
            "everysec needs WAITAOF, which the older primary lacks"
        );
        assert_eq!(confirm_for(fsync, &[valkey, everysec]), Confirm::Impossible);
        assert_eq!(confirm_for(fsync, &[]), Confirm::Impossible);
        assert_eq!(confirm_for(WritePolicy::MEMORY, &[]), Confirm::Reply);
        // A primary without its replica is a shortfall of `replicated`,
        // but its writes are still confirmed, one `WAIT` each: the other
        // primaries' slots keep taking deliveries.
        let replicated = policy(Durability::Replicated, 1);
        let alone = node("redis70", true, "always");
        assert!(alone.shortfall(replicated).is_some());
        assert_eq!(
            confirm_for(replicated, &[alone.clone(), alone]),
            Confirm::FsyncedReply
        );
    }

    #[test]
    fn readiness_waits_for_the_first_check_and_names_the_shortfall() {
        let confirmation = std::sync::Arc::new(Confirmation::new(policy(Durability::Fsync, 0)));
        assert_eq!(confirmation.confirm(), Confirm::Impossible);
        let watch = DurabilityWatch::new(confirmation.clone());
        assert!(watch.not_ready().unwrap().contains("not been checked yet"));
        watch.record(&[node("redis70", false, "everysec")], true);
        let why = watch.not_ready().unwrap();
        assert!(
            why.contains("can not give durability fsync: h:1: appendonly no"),
            "{why}"
        );
        watch.record(&[node("redis70", true, "always")], false);
        assert_eq!(watch.not_ready(), None);
        assert_eq!(confirmation.confirm(), Confirm::FsyncedReply);
        let memory =
            DurabilityWatch::new(std::sync::Arc::new(Confirmation::new(WritePolicy::MEMORY)));
        assert_eq!(memory.not_ready(), None, "memory needs no check");
    }

    #[test]
    fn an_unsupported_server_fails_readiness_at_every_level_and_is_named() {
        for level in [Durability::Memory, Durability::Fsync] {
            let policy = WritePolicy {
                level,
                replica_ack: None,
            };
            let watch = DurabilityWatch::new(std::sync::Arc::new(Confirmation::new(policy)));
            watch.record(&[node("redis60", true, "always")], false);
            let why = watch.not_ready().expect("not ready");
            assert!(
                why.contains("does not support: h:1: runs redis 6.0.16; idemgate needs Redis 6.2"),
                "{why}"
            );
            assert_eq!(watch.unsupported().len(), 1);
            watch.record(&[node("redis", true, "always")], false);
            assert_eq!(watch.not_ready(), None, "{level:?}");
            assert!(watch.unsupported().is_empty());
        }
    }
}
