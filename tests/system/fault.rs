//! Fault injection: several idemgate processes on one Redis, a
//! real Redis Cluster and a real Sentinel setup whose primary is SIGKILLed
//! mid-run, an idemgate instance SIGKILLed with 50 upstream calls in flight,
//! upstream faults, and a Redis restart without persistence.
//!
//! Every process listens on 127.0.0.1 only and is stopped by PID through a
//! Drop guard (also when a test panics); every loop is bounded in count and
//! time. The tests take turns in two lanes (a lock each): the Redis
//! Cluster tests in one, the rest (one Redis, Sentinel, the embedded store,
//! upstream faults) in the other, so that no more than two failovers or
//! throughput runs compete for the machine's cores. The lanes are about
//! even: 144 s and 96 s of test time on an idle two-core machine.
//!
//! Run: `cargo test --features system-tests --test system fault:: -- --include-ignored --nocapture` (figures from a run are in
//! `tests/fault/RESULTS.md`).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The lane of the tests that run a Redis Cluster: one at a time.
static CLUSTER_LANE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The lane of every other fault test: one at a time.
static SINGLE_LANE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Key prefix of the test route's records.
const RECORDS: &str = "idemgate:pay:*";

mod cache_failover;
mod cluster;
mod embedded_kills;
mod entity_cluster;
mod entity_model_faults;
mod failover;
mod failover_lag;
mod failover_ops;
mod full_disk;
mod inbox_failover;
mod instances;
mod killed_instance;
mod migration;
mod probe_cluster;
mod restart;
mod sentinel;
mod upstream_faults;

use sentinel::SentinelSetup;

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

/// Working directory, dump file name and log file of a node in `dir`
/// (replicas write the RDB of a full sync there). A full sync starts at
/// once instead of after Redis's default 5 s `repl-diskless-sync-delay`.
fn data_args(dir: &Path, port: u16) -> Vec<String> {
    vec![
        "--repl-diskless-sync-delay".into(),
        "0".into(),
        "--dir".into(),
        dir.display().to_string(),
        "--dbfilename".into(),
        format!("dump-{port}.rdb"),
        "--logfile".into(),
        dir.join(format!("redis-{port}.log")).display().to_string(),
    ]
}

/// The record keys one node holds (`--scan` is per node).
fn scan_records(port: u16) -> HashSet<String> {
    cli(port, &["--scan", "--pattern", RECORDS])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------
// Redis Cluster
// ---------------------------------------------------------------------------

struct ClusterNode {
    port: u16,
    bus: u16,
    proc: Proc,
}

/// A 6-node Redis Cluster (3 primaries, 3 replicas) on loopback.
struct Cluster {
    // Declared before `dir`: the processes stop before the directory goes.
    nodes: Vec<ClusterNode>,
    dir: tempfile::TempDir,
    /// Every node keeps an AOF (`spawn_cluster_node`).
    aof: bool,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeInfo {
    port: u16,
    primary: bool,
    primary_id: Option<String>,
    slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
    }
}

/// A cluster node on `port` (bus port `bus`); with `aof`, every write is
/// fsynced to its append-only file before the reply (`appendfsync
/// always`), as `[store] durability = "fsync"` or `"replicated"` needs.
fn spawn_cluster_node(dir: &Path, port: u16, bus: u16, aof: bool) -> Proc {
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-node-timeout",
        "2000",
        // Healthy primaries keep serving their slots while one is down
        // (Redis's default `yes` refuses every slot from the failed
        // node's FAIL until its promotion): what a deployment that wants
        // failover isolation sets, and what failover.rs measures.
        "--cluster-require-full-coverage",
        "no",
        "--cluster-port",
    ]
    .map(String::from)
    .to_vec();
    args.push(bus.to_string());
    args.push("--cluster-config-file".into());
    args.push(dir.join(format!("nodes-{port}.conf")).display().to_string());
    args.extend(data_args(dir, port));
    if aof {
        args.extend(
            ["--appendonly", "yes", "--appendfsync", "always"]
                .map(String::from)
                .to_vec(),
        );
        args.push("--appendfilename".into());
        args.push(format!("appendonly-{port}.aof"));
        args.push("--appenddirname".into());
        args.push(format!("aof-{port}"));
    }
    spawn_redis(&format!("cluster node {port}"), port, &args)
}

impl Cluster {
    fn start() -> Self {
        Self::launch(false)
    }

    /// A Cluster whose nodes fsync every write (`spawn_cluster_node`).
    fn start_with_aof() -> Self {
        Self::launch(true)
    }

    fn launch(aof: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(12);
        let nodes: Vec<ClusterNode> = ports
            .chunks(2)
            .map(|pair| ClusterNode {
                port: pair[0],
                bus: pair[1],
                proc: spawn_cluster_node(dir.path(), pair[0], pair[1], aof),
            })
            .collect();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        let cluster = Self { nodes, dir, aof };
        let out = run_bounded("redis-cli", &args, Duration::from_secs(60));
        assert!(out.contains("All 16384 slots covered"), "{out}");
        wait_until(Duration::from_secs(30), "cluster ready", || cluster.ready());
        cluster
    }

    /// cluster_state:ok everywhere, every replica in sync, and every node
    /// sees the same three primaries with one replica each (primaries vote
    /// in a failover only for a node they know as the failed one's replica).
    fn ready(&self) -> bool {
        self.nodes.iter().all(|node| {
            let info = cli(node.port, &["CLUSTER", "INFO"]);
            let view = topology_at(node.port);
            info.contains("cluster_state:ok")
                && info.contains("cluster_known_nodes:6")
                && view
                    .iter()
                    .filter(|n| n.primary && !n.slots.is_empty())
                    .count()
                    == 3
                && view.iter().filter(|n| n.primary_id.is_some()).count() == 3
                && match role(node.port).as_str() {
                    "master" => has_online_replica(node.port),
                    _ => cli(node.port, &["INFO", "replication"]).contains("master_link_status:up"),
                }
        })
    }

    /// The topology as a live node sees it.
    fn topology(&self) -> Vec<NodeInfo> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.proc.is_running())
            .expect("a live node");
        topology_at(live.port)
    }

    fn primaries(&self) -> Vec<NodeInfo> {
        let mut primaries: Vec<NodeInfo> = self
            .topology()
            .into_iter()
            .filter(|n| n.primary && !n.slots.is_empty())
            .collect();
        primaries.sort_by_key(|n| n.slots[0].0);
        assert_eq!(primaries.len(), 3, "three primaries");
        primaries
    }

    /// The replica the primary itself reports (`INFO replication`).
    fn replica_of(primary: &NodeInfo) -> u16 {
        cli(primary.port, &["INFO", "replication"])
            .lines()
            .find_map(|line| {
                let rest = line.strip_prefix("slave0:")?;
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix("port="))?
                    .parse()
                    .ok()
            })
            .expect("every primary has a replica")
    }

    /// The `redis-cluster://` URL naming the three primaries.
    fn url(&self) -> String {
        let ports: Vec<u16> = self.primaries().iter().map(|n| n.port).collect();
        format!(
            "redis-cluster://127.0.0.1:{}?node=127.0.0.1:{}&node=127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    }

    /// The `[store]` body for this Cluster (nodes without an AOF, so
    /// `memory` durability) with the store timeout `timeout`: the
    /// harness's [`TEST_STORE_TIMEOUT`] where the test is not about how
    /// fast a lost primary is noticed, so a loaded machine's slow reply is
    /// not a 503.
    fn store(&self, timeout: &str) -> String {
        format!(
            "kind = \"redis\"\nurl = \"{}\"\ncommand_timeout = \"{timeout}\"\ndurability = \"memory\"",
            self.url()
        )
    }

    fn node_mut(&mut self, port: u16) -> &mut ClusterNode {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("cluster node")
    }

    fn kill(&mut self, port: u16) {
        self.node_mut(port).proc.kill();
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the node on `port`.
    fn signal(&mut self, port: u16, signal: &str) {
        let pid = self.node_mut(port).proc.pid();
        send_signal(pid, signal);
    }

    /// Starts a killed node again with its nodes.conf (and no data, unless
    /// the Cluster keeps AOFs).
    fn restart(&mut self, port: u16) {
        let (dir, aof) = (self.dir.path().to_owned(), self.aof);
        let node = self.node_mut(port);
        node.proc = spawn_cluster_node(&dir, node.port, node.bus, aof);
    }
}

/// Sends `signal` (`-STOP` freezes a node: it keeps its connections but
/// answers nothing, as a node lagging behind would; `-CONT` thaws it).
fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// `CLUSTER NODES` as the node on `port` sees it.
fn topology_at(port: u16) -> Vec<NodeInfo> {
    cli(port, &["CLUSTER", "NODES"])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|one| (one, one)),
                })
                .collect();
            Some(NodeInfo {
                port,
                primary: fields[2].contains("master"),
                primary_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

/// The record key of docs/contract.md §5 for payment `id`, computed
/// independently of idemgate: `idemgate:pay:` + hex SHA-256 of the 4-byte
/// big-endian length of the one key part followed by the part.
fn store_key(id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(u32::try_from(id.len()).unwrap().to_be_bytes());
    hasher.update(id.as_bytes());
    let digest: [u8; 32] = hasher.finalize().into();
    format!("idemgate:pay:{}", hex::encode(digest))
}

fn slot(id: &str) -> u16 {
    fred::util::redis_keyslot(store_key(id).as_bytes())
}

// ---------------------------------------------------------------------------
// Senders and upstreams
// ---------------------------------------------------------------------------

/// One delivery's outcome as the sender saw it.
#[derive(Debug, Clone)]
struct Attempt {
    sent: Instant,
    done: Instant,
    status: u16,
    live: bool,
    reason: Option<String>,
    retry_after: bool,
    error: Option<String>,
}

impl Attempt {
    /// A 2xx answer straight from the upstream: this delivery executed.
    fn executed(&self) -> bool {
        (200..300).contains(&self.status) && self.live
    }
}

async fn attempt(sender: &Sender, url: &str, id: &str) -> Attempt {
    let sent = Instant::now();
    let result = sender.deliver(url, &payment(id)).await;
    let done = Instant::now();
    match result {
        Ok(answer) => Attempt {
            sent,
            done,
            status: answer.status,
            live: is_live(&answer),
            reason: answer.reason(),
            retry_after: answer.header("retry-after").is_some(),
            error: None,
        },
        Err(error) => Attempt {
            sent,
            done,
            status: 0,
            live: false,
            reason: None,
            retry_after: false,
            error: Some(error),
        },
    }
}

fn is_live(answer: &Answer) -> bool {
    answer.replayed() == Some("false")
}

/// Delivers every id `copies` times, copy `c` of key `k` to gate
/// `(k + c) % gates`, at most `in_flight` requests at a time (the
/// semaphore is fair, so the copies of a key run side by side).
async fn hammer(
    sender: &Sender,
    urls: &[String],
    ids: &[String],
    copies: usize,
    in_flight: usize,
) -> (HashMap<String, Vec<Answer>>, Duration) {
    let permits = Arc::new(Semaphore::new(in_flight));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(ids.len() * copies);
    for (k, id) in ids.iter().enumerate() {
        for c in 0..copies {
            let url = urls[(k + c) % urls.len()].clone();
            let (sender, permits, id) = (sender.clone(), Arc::clone(&permits), id.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = permits.acquire_owned().await.expect("semaphore");
                let answer = sender.deliver(&url, &payment(&id)).await;
                (id, answer)
            }));
        }
    }
    let mut answers: HashMap<String, Vec<Answer>> = HashMap::new();
    for task in tasks {
        let (id, answer) = task.await.expect("delivery task");
        let answer = answer.unwrap_or_else(|e| panic!("delivery of {id} failed: {e}"));
        answers.entry(id).or_default().push(answer);
    }
    (answers, started.elapsed())
}

/// Every copy of a key got the same status and body; exactly one was live.
fn assert_identical_answers(answers: &HashMap<String, Vec<Answer>>, copies: usize) {
    for (id, list) in answers {
        assert_eq!(list.len(), copies, "{id}");
        let first = &list[0];
        for answer in list {
            assert_eq!(answer.status, 200, "{id}: {answer:?}");
            assert_eq!(answer.body, first.body, "{id}: every copy gets one answer");
        }
        let live = list.iter().filter(|a| is_live(a)).count();
        assert_eq!(live, 1, "{id}: one live answer, {} replays", copies - 1);
    }
}

/// Asserts exactly one execution per id and no execution of anything else.
fn assert_exactly_once(upstream: &Upstream, ids: &[String]) {
    assert_executed_times(upstream, ids, 1);
}

/// Each of `ids` reached the upstream exactly `times` times, and nothing
/// else did.
fn assert_executed_times(upstream: &Upstream, ids: &[String], times: usize) {
    let executed = executions(upstream);
    assert_eq!(executed.len(), ids.len(), "distinct ids executed");
    for id in ids {
        assert_eq!(
            executed.get(id),
            Some(&times),
            "{id} executed {times} times"
        );
    }
    assert_eq!(upstream.calls(), times * ids.len(), "upstream calls");
}

/// Prints a test's wall time (only reached when it passed).
fn report_time(name: &str, started: Instant) {
    println!(
        "[fault] {name}: passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Replays `id` through `gate` until its replay cache answers it (a hit:
/// no store read), bounded at 5 s.
async fn until_cached(gate: &GateProcess, id: &str) {
    let hits = "idemgate_replay_cache_hits_total";
    poll(
        "the instance answering from its cache",
        Duration::from_secs(5),
        Duration::from_millis(20),
        async || {
            let before = metric(gate.admin, hits).await.unwrap_or(0.0);
            let replay = deliver(&gate.url("/notify"), &payment(id)).await;
            assert_eq!(replay.replayed(), Some("true"), "{replay:?}");
            (metric(gate.admin, hits).await.unwrap_or(0.0) > before).then_some(())
        },
    )
    .await;
}

/// Delivers `id` through `gate` every `every` until a copy is forwarded
/// rather than replayed (a purge reached the gate's replay cache): the
/// time since `purged`; panics after 2 s.
async fn until_forwarded(
    gate: &GateProcess,
    id: &str,
    purged: Instant,
    every: Duration,
) -> Duration {
    poll(
        "the instance forwarding after the purge",
        Duration::from_secs(2),
        every,
        async || {
            let answer = deliver(&gate.url("/notify"), &payment(id)).await;
            (answer.replayed() == Some("false")).then(|| purged.elapsed())
        },
    )
    .await
}
