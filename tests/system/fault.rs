//! Fault injection: several idemgate processes on one Redis, a
//! real Redis Cluster and a real Sentinel setup whose primary is SIGKILLed
//! mid-run, an idemgate instance SIGKILLed with 50 upstream calls in flight,
//! upstream faults, and a Redis restart without persistence.
//!
//! Every process listens on 127.0.0.1 only and is stopped by PID through a
//! Drop guard (also when a test panics); every loop is bounded in count and
//! time. The tests take turns (one lock for the file) so that throughput
//! and failover timings do not compete for the machine's cores.
//!
//! Run: `cargo test --test system fault -- --include-ignored --nocapture` (figures from a run are in
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

/// One test at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Key prefix of the test route's records.
const RECORDS: &str = "idemgate:pay:*";

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

fn spawn_cluster_node(dir: &Path, port: u16, bus: u16) -> Proc {
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-node-timeout",
        "2000",
        "--cluster-port",
    ]
    .map(String::from)
    .to_vec();
    args.push(bus.to_string());
    args.push("--cluster-config-file".into());
    args.push(dir.join(format!("nodes-{port}.conf")).display().to_string());
    args.extend(data_args(dir, port));
    spawn_redis(&format!("cluster node {port}"), port, &args)
}

impl Cluster {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(12);
        let nodes: Vec<ClusterNode> = ports
            .chunks(2)
            .map(|pair| ClusterNode {
                port: pair[0],
                bus: pair[1],
                proc: spawn_cluster_node(dir.path(), pair[0], pair[1]),
            })
            .collect();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        let cluster = Self { nodes, dir };
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

    fn node_mut(&mut self, port: u16) -> &mut ClusterNode {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("cluster node")
    }

    fn kill(&mut self, port: u16) {
        self.node_mut(port).proc.kill();
    }

    /// Starts a killed node again with its nodes.conf (and no data).
    fn restart(&mut self, port: u16) {
        let dir = self.dir.path().to_owned();
        let node = self.node_mut(port);
        node.proc = spawn_cluster_node(&dir, node.port, node.bus);
    }
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

/// The record key of SPEC §5 for payment `id`, computed independently of
/// idemgate: `idemgate:pay:` + hex SHA-256 of the 4-byte big-endian length
/// of the one key part followed by the part.
fn store_key(id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update((id.len() as u32).to_be_bytes());
    hasher.update(id.as_bytes());
    let digest: [u8; 32] = hasher.finalize().into();
    format!("idemgate:pay:{}", hex::encode(digest))
}

fn slot(id: &str) -> u16 {
    fred::util::redis_keyslot(store_key(id).as_bytes())
}

// ---------------------------------------------------------------------------
// Sentinel
// ---------------------------------------------------------------------------

/// One primary, one replica and three sentinels monitoring `mymaster`.
struct SentinelSetup {
    sentinels: Vec<(u16, Proc)>,
    primary: Proc,
    _replica: Proc,
    primary_port: u16,
    replica_port: u16,
    dir: tempfile::TempDir,
}

impl SentinelSetup {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(5);
        let (primary_port, replica_port) = (ports[0], ports[1]);
        let primary = spawn_redis(
            "primary",
            primary_port,
            &data_args(dir.path(), primary_port),
        );
        let mut args = data_args(dir.path(), replica_port);
        args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary_port.to_string(),
        ]);
        let replica = spawn_redis("replica", replica_port, &args);
        wait_until(Duration::from_secs(15), "replica in sync", || {
            has_online_replica(primary_port)
        });
        let sentinels = ports[2..]
            .iter()
            .map(|&port| {
                let path = dir.path().join(format!("sentinel-{port}.conf"));
                let conf = format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir \"{dir}\"\nlogfile \"{dir}/sentinel-{port}.log\"\n\
                     sentinel monitor mymaster 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds mymaster 1000\n\
                     sentinel failover-timeout mymaster 3000\n",
                    dir = dir.path().display()
                );
                std::fs::write(&path, conf).expect("sentinel config");
                let mut command = Command::new("redis-server");
                command.arg(&path).arg("--sentinel");
                let proc = Proc::spawn(&format!("sentinel {port}"), &mut command);
                wait_until(Duration::from_secs(10), "sentinel answers PING", || {
                    cli(port, &["PING"]).trim() == "PONG"
                });
                (port, proc)
            })
            .collect();
        let setup = Self {
            sentinels,
            primary,
            _replica: replica,
            primary_port,
            replica_port,
            dir,
        };
        // Hello messages every 2 s: wait until each sentinel knows the two
        // others (or no majority could authorise a failover) and the replica.
        wait_until(Duration::from_secs(20), "sentinels ready", || {
            setup.sentinels.iter().all(|(port, _)| {
                let info = sentinel_master(*port);
                info.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && info.get("num-slaves").map(String::as_str) == Some("1")
                    && info.get("flags").map(String::as_str) == Some("master")
            })
        });
        setup
    }

    fn url(&self) -> String {
        let ports: Vec<u16> = self.sentinels.iter().map(|(p, _)| *p).collect();
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName=mymaster&node=127.0.0.1:{}&node=127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    }

    /// The primary's port as the first sentinel reports it.
    fn reported_primary(&self) -> Option<u16> {
        cli(
            self.sentinels[0].0,
            &["SENTINEL", "get-master-addr-by-name", "mymaster"],
        )
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
    }
}

/// `SENTINEL master mymaster` as field → value.
fn sentinel_master(port: u16) -> HashMap<String, String> {
    let out = cli(port, &["SENTINEL", "master", "mymaster"]);
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------
// Senders and upstreams
// ---------------------------------------------------------------------------

fn is_live(answer: &Answer) -> bool {
    answer.replayed() == Some("false")
}

/// The payment id in a delivery body.
fn id_of(body: &[u8]) -> String {
    let doc: serde_json::Value = serde_json::from_slice(body).expect("delivery body is JSON");
    doc["id"].as_str().expect("delivery id").to_owned()
}

/// How many times the upstream executed each id.
fn executions(upstream: &Upstream) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for body in upstream.bodies() {
        *counts.entry(id_of(&body)).or_insert(0) += 1;
    }
    counts
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
    let executed = executions(upstream);
    assert_eq!(executed.len(), ids.len(), "distinct ids executed");
    for id in ids {
        assert_eq!(executed.get(id), Some(&1), "{id} executed exactly once");
    }
    assert_eq!(upstream.calls(), ids.len(), "upstream calls");
}

/// A bare TCP upstream: reads one request per connection, then either
/// answers 200 properly or writes the head of a 200 and resets the
/// connection mid-body.
struct RawUpstream {
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl RawUpstream {
    async fn bind(addr: SocketAddr, cut: bool) -> Self {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind raw upstream");
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    break;
                };
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    if !read_request(&mut stream).await {
                        return;
                    }
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    if cut {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{\"partial\":";
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.flush().await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        // RST instead of FIN: the answer is cut, not finished.
                        let _ = stream.set_zero_linger();
                        drop(stream);
                    } else {
                        let body = format!("{{\"raw\":{n}}}");
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(answer.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    }
                });
            }
        });
        Self { requests, task }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads a request head and its `content-length` body (bounded in size
/// and time). Returns whether a whole request arrived.
async fn read_request(stream: &mut tokio::net::TcpStream) -> bool {
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while buf.len() < 1 << 20 {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Some(());
            }
        }
        None
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), read).await,
        Ok(Some(()))
    )
}

/// Prints a test's wall time (only reached when it passed).
fn report_time(name: &str, started: Instant) {
    println!(
        "[fault] {name}: passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// 1. Many instances, one Redis
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_one_redis() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(20))).await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "");
    let gates: Vec<GateProcess> = (0..3).map(|_| GateProcess::start(&text)).collect();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    let ids: Vec<String> = (0..500).map(|i| format!("multi-{i}")).collect();

    let (answers, elapsed) = hammer(&Sender::new(), &urls, &ids, 8, 64).await;

    assert_identical_answers(&answers, 8);
    assert_exactly_once(&upstream, &ids);
    assert_eq!(redis.keys(RECORDS).len(), 500, "one record per key");
    let requests = ids.len() * 8;
    println!(
        "[fault] many_instances_one_redis: {requests} requests ({} keys x 8) over 3 instances, \
         64 in flight, in {:.2} s = {:.0} requests/s; upstream executed {} (distinct ids {}), \
         {} replays",
        ids.len(),
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64(),
        upstream.calls(),
        executions(&upstream).len(),
        requests - upstream.calls()
    );
    report_time("many_instances_one_redis", started);
}

// ---------------------------------------------------------------------------
// 2. Redis Cluster: keys spread over the primaries, still exactly once
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_spreads_keys_and_deduplicates() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let setup = started.elapsed();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(20))).await;
    let store = format!(
        "kind = \"redis\"\nurl = \"{}\"\ncommand_timeout = \"250ms\"",
        cluster.url()
    );
    let text = config_text(&store, &upstream.url(), "");
    let gates: Vec<GateProcess> = (0..3).map(|_| GateProcess::start(&text)).collect();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    let ids: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();

    let (answers, elapsed) = hammer(&Sender::new(), &urls, &ids, 6, 64).await;

    assert_identical_answers(&answers, 6);
    assert_exactly_once(&upstream, &ids);
    let primaries = cluster.primaries();
    let held: Vec<HashSet<String>> = primaries.iter().map(|p| scan_records(p.port)).collect();
    for (primary, records) in primaries.iter().zip(&held) {
        assert!(
            !records.is_empty(),
            "primary {} holds records: {records:?}",
            primary.port
        );
    }
    assert_eq!(
        held.iter().map(HashSet::len).sum::<usize>(),
        ids.len(),
        "one record per key, in the whole cluster"
    );
    // Each record sits on the primary that owns its slot (and the key is
    // the SPEC §5 layout, computed here independently).
    for id in &ids {
        let slot = slot(id);
        let owner = primaries
            .iter()
            .position(|p| p.owns(slot))
            .expect("slot owner");
        assert!(
            held[owner].contains(&store_key(id)),
            "{id}: record on the owner of slot {slot}"
        );
    }
    let requests = ids.len() * 6;
    let spread: Vec<String> = primaries
        .iter()
        .zip(&held)
        .map(|(p, r)| format!("{}: {}", p.port, r.len()))
        .collect();
    println!(
        "[fault] redis_cluster_spreads_keys_and_deduplicates: cluster up in {:.1} s; {requests} \
         requests ({} keys x 6) over 3 instances in {:.2} s = {:.0} requests/s; upstream \
         executed {}; records per primary [{}]",
        setup.as_secs_f64(),
        ids.len(),
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64(),
        upstream.calls(),
        spread.join(", ")
    );
    report_time("redis_cluster_spreads_keys_and_deduplicates", started);
}

// ---------------------------------------------------------------------------
// 3 and 4. Failover under load (Cluster and Sentinel)
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

/// A key's first delivery and the sender's retry once it had an answer.
#[derive(Debug, Clone)]
struct KeyRun {
    id: String,
    first: Attempt,
    retry: Attempt,
}

/// Senders delivering distinct keys, each once and then again, on
/// alternating instances, until stopped.
struct Workload {
    stop: Arc<AtomicBool>,
    runs: Arc<Mutex<Vec<KeyRun>>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Bound of keys per sender task.
const MAX_KEYS_PER_WORKER: usize = 5_000;

impl Workload {
    fn start(sender: &Sender, urls: &[String], prefix: &str, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..workers)
            .map(|w| {
                let (sender, urls, prefix) = (sender.clone(), urls.to_vec(), prefix.to_owned());
                let (stop, runs) = (Arc::clone(&stop), Arc::clone(&runs));
                tokio::spawn(async move {
                    for n in 0..MAX_KEYS_PER_WORKER {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let id = format!("{prefix}-{w}-{n}");
                        let first = attempt(&sender, &urls[(w + n) % urls.len()], &id).await;
                        let retry = attempt(&sender, &urls[(w + n + 1) % urls.len()], &id).await;
                        runs.lock().unwrap().push(KeyRun { id, first, retry });
                    }
                })
            })
            .collect();
        Self { stop, runs, tasks }
    }

    fn any(&self, predicate: impl Fn(&KeyRun) -> bool) -> bool {
        self.runs.lock().unwrap().iter().any(predicate)
    }

    async fn finish(self) -> Vec<KeyRun> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            tokio::time::timeout(2 * REQUEST_LIMIT + Duration::from_secs(5), task)
                .await
                .expect("sender stops")
                .expect("sender task");
        }
        std::mem::take(&mut *self.runs.lock().unwrap())
    }
}

/// What a failover test does to its Redis deployment.
trait Failover {
    /// SIGKILL the primary (of the slots under test).
    fn kill_primary(&mut self);
    /// The replica has been promoted and the deployment routes to it.
    fn promoted(&self) -> bool;
    /// Port of the replica that is promoted.
    fn promoted_port(&self) -> u16;
    /// Start the dead primary again, as a replica of the promoted one, as
    /// a supervisor would.
    fn restart_old_primary(&mut self);
    /// The promoted primary has an in-sync replica again.
    fn replica_back(&self) -> bool;
}

struct ClusterFailover<'a> {
    cluster: &'a mut Cluster,
    victim: NodeInfo,
    replica: u16,
    survivor: u16,
}

impl Failover for ClusterFailover<'_> {
    fn kill_primary(&mut self) {
        self.cluster.kill(self.victim.port);
    }

    fn promoted(&self) -> bool {
        role(self.replica) == "master"
            && cli(self.survivor, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    }

    fn promoted_port(&self) -> u16 {
        self.replica
    }

    fn restart_old_primary(&mut self) {
        // With its nodes.conf the node rejoins, learns that its slots have
        // a newer owner and turns itself into that owner's replica.
        self.cluster.restart(self.victim.port);
    }

    fn replica_back(&self) -> bool {
        has_online_replica(self.replica)
    }
}

struct SentinelFailover<'a> {
    setup: &'a mut SentinelSetup,
}

impl Failover for SentinelFailover<'_> {
    fn kill_primary(&mut self) {
        self.setup.primary.kill();
    }

    fn promoted(&self) -> bool {
        self.setup.reported_primary() == Some(self.setup.replica_port)
            && role(self.setup.replica_port) == "master"
    }

    fn promoted_port(&self) -> u16 {
        self.setup.replica_port
    }

    fn restart_old_primary(&mut self) {
        let dir = self.setup.dir.path().to_owned();
        let mut args = data_args(&dir, self.setup.primary_port);
        args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            self.setup.replica_port.to_string(),
        ]);
        self.setup.primary = spawn_redis("old primary", self.setup.primary_port, &args);
    }

    fn replica_back(&self) -> bool {
        has_online_replica(self.setup.replica_port)
    }
}

/// Figures of one failover run.
struct FailoverReport {
    runs: Vec<KeyRun>,
    finals: HashMap<String, Attempt>,
    executed: HashMap<String, usize>,
    affected: HashSet<String>,
    killed: Instant,
    promoted: Instant,
    reached: Instant,
    restarted: Instant,
    replica_back: Instant,
    recovered: Instant,
    run_time: Duration,
}

/// Drives the failover of `ops` under a continuous load of distinct keys
/// (each delivered, then retried once it had an answer): kill the primary
/// 1.5 s in, wait for the promotion, for idemgate to reach the promoted
/// primary (without a restart), keep it a second without a replica, start
/// the old primary again as a replica, wait for the first key on the
/// affected slots to be forwarded again, then one more second. Afterwards
/// every key is delivered once more. All of it within a 25 s budget.
async fn run_failover(
    ops: &mut dyn Failover,
    urls: &[String],
    upstream: &Upstream,
    prefix: &str,
    affected: &dyn Fn(&str) -> bool,
) -> FailoverReport {
    let sender = Sender::new();
    // Warm up: every instance is connected and forwarding.
    for (i, url) in urls.iter().enumerate() {
        let id = format!("{prefix}-warm-{i}");
        let mut ok = false;
        for _ in 0..50 {
            if sender.deliver(url, &payment(&id)).await.map(|a| a.status) == Ok(200) {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "instance {url} forwards before the failover");
    }
    let promoted_port = ops.promoted_port();
    cli(promoted_port, &["CONFIG", "RESETSTAT"]);

    let run_started = Instant::now();
    let workload = Workload::start(&sender, urls, prefix, 12);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    tokio::task::block_in_place(|| ops.kill_primary());
    let killed = Instant::now();
    let budget = killed + Duration::from_secs(25);
    let phase = |name: &str, at: Option<Instant>| {
        at.unwrap_or_else(|| panic!("{name}: not within the failover budget"))
    };

    let promoted = phase(
        "replica promoted",
        poll_until(budget, || ops.promoted()).await,
    );
    // idemgate follows the failover by itself: the promoted primary gets
    // script calls (which, without a replica to acknowledge, end in 503).
    let reached = phase(
        "idemgate reaches the promoted primary",
        poll_until(budget, || command_calls(promoted_port, "evalsha") > 0).await,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Taken before the start: the replica may be in sync before
    // `restart_old_primary` has even returned.
    let restarted = Instant::now();
    tokio::task::block_in_place(|| ops.restart_old_primary());
    let replica_back = phase(
        "old primary back as a replica",
        poll_until(budget, || ops.replica_back()).await,
    );
    let recovered = phase(
        "a key on the failed-over slots forwarded again",
        poll_until(budget, || {
            workload.any(|run| {
                affected(&run.id)
                    && [&run.first, &run.retry]
                        .iter()
                        .any(|a| a.sent > killed && a.executed())
            })
        })
        .await,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = workload.finish().await;
    let run_time = run_started.elapsed();

    // Every key once more, now that the deployment is whole again.
    let permits = Arc::new(Semaphore::new(32));
    let tasks: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let (sender, permits) = (sender.clone(), Arc::clone(&permits));
            let (url, id) = (urls[i % urls.len()].clone(), run.id.clone());
            tokio::spawn(async move {
                let _permit = permits.acquire_owned().await.expect("semaphore");
                let answer = attempt(&sender, &url, &id).await;
                (id, answer)
            })
        })
        .collect();
    let mut finals = HashMap::new();
    for task in tasks {
        let (id, answer) = task.await.expect("final delivery");
        finals.insert(id, answer);
    }
    let affected = runs
        .iter()
        .filter(|r| affected(&r.id))
        .map(|r| r.id.clone())
        .collect();
    FailoverReport {
        executed: executions(upstream),
        runs,
        finals,
        affected,
        killed,
        promoted,
        reached,
        restarted,
        replica_back,
        recovered,
        run_time,
    }
}

/// The exactly-once rule under failover, asserted per key, and the
/// figures printed.
///
/// Rule: a delivery is forwarded only after its claim was acknowledged by
/// a replica (`min_replicas_ack = 1`), so a key whose first delivery got a
/// 2xx answer is executed exactly once, whatever happens to the primary
/// afterwards. A delivery answered 503 was not forwarded (its claim could
/// not be acknowledged); its retry may be. So every execution shows up as
/// exactly one live 2xx answer, and no key is executed twice.
fn check_failover(name: &str, report: &FailoverReport) {
    let run_ids: HashSet<&str> = report.runs.iter().map(|r| r.id.as_str()).collect();
    for (id, n) in &report.executed {
        assert!(
            run_ids.contains(id.as_str()) || id.contains("-warm-"),
            "unexpected execution of {id} ({n}x)"
        );
    }
    let (mut status_503, mut affected_503, mut in_flight, mut unknown, mut replays) =
        (0, 0, 0, 0, 0);
    let mut first_2xx = 0;
    let mut window_503 = 0;
    // Keys executed once whose answer the final pass could not replay: the
    // store was unreachable when the answer came back, so the claim was
    // left in flight (409 until lease + unknown_hold run out).
    let mut unstored = 0;
    // Keys outside the failed primary's slots: (503s, requests) per second
    // after the kill, by the time the request was sent.
    let mut others: Vec<(usize, usize)> = Vec::new();
    for run in &report.runs {
        let last = &report.finals[&run.id];
        let attempts = [&run.first, &run.retry, last];
        for a in attempts {
            match (a.status, a.reason.as_deref()) {
                (200, _) if a.live => {}
                (200, _) => replays += 1,
                (503, Some("store_unavailable")) => {
                    assert!(a.retry_after, "{}: 503 without Retry-After", run.id);
                    status_503 += 1;
                    if report.affected.contains(&run.id) {
                        affected_503 += 1;
                    }
                }
                (409, Some("in_flight")) => in_flight += 1,
                (409, Some("outcome_unknown")) => unknown += 1,
                _ => panic!(
                    "{}: unexpected answer {a:?} (transport error: {:?})",
                    run.id, a.error
                ),
            }
            if !report.affected.contains(&run.id) && a.sent > report.killed {
                let second = (a.sent - report.killed).as_secs().min(30) as usize;
                if others.len() <= second {
                    others.resize(second + 1, (0, 0));
                }
                others[second].0 += usize::from(a.status == 503);
                others[second].1 += 1;
            }
            // While the promoted primary had no replica, nothing on its
            // slots may be forwarded: no claim could be acknowledged.
            if report.affected.contains(&run.id)
                && a.sent > report.killed
                && a.done < report.restarted
            {
                assert!(
                    !a.executed(),
                    "{}: forwarded without a replica: sent {:?} and answered {:?} after \
                     the SIGKILL, old primary restarted after {:?}: {a:?}",
                    run.id,
                    a.sent - report.killed,
                    a.done - report.killed,
                    report.restarted - report.killed,
                );
                if a.status == 503 {
                    window_503 += 1;
                }
            }
        }
        let live = attempts.iter().filter(|a| a.executed()).count();
        let executed = report.executed.get(&run.id).copied().unwrap_or(0);
        assert_eq!(
            executed, live,
            "{}: every execution is one live answer: {run:?} {last:?}",
            run.id
        );
        assert!(executed <= 1, "{}: executed {executed} times", run.id);
        if (200..300).contains(&run.first.status) {
            first_2xx += 1;
            assert!(
                run.first.live,
                "{}: a new key's first answer is live",
                run.id
            );
            assert_eq!(executed, 1, "{}: acknowledged claim executed once", run.id);
        }
        if executed == 1 && last.status == 409 {
            unstored += 1;
        }
    }
    assert!(
        window_503 > 0,
        "requests on the failed-over slots were refused while no replica could acknowledge"
    );
    let keys = report.runs.len();
    let since = |t: Instant| t.duration_since(report.killed).as_secs_f64();
    let others = if others.is_empty() {
        "none (every key on the failed primary)".to_owned()
    } else {
        let seconds: Vec<String> = others.iter().map(|(n, of)| format!("{n}/{of}")).collect();
        format!("[{}]", seconds.join(" "))
    };
    let executions: usize = report
        .runs
        .iter()
        .filter_map(|r| report.executed.get(&r.id))
        .sum();
    println!(
        "[fault] {name}: {keys} keys ({} on the failed primary), {} requests incl. the final \
         pass, {executions} executions (0 twice), first delivery 2xx for {first_2xx} keys; \
         answers: 503 store_unavailable {status_503} ({affected_503} on the failed primary, \
         {window_503} while the promoted primary had no replica), 503s/requests on the \
         other slots per second after the SIGKILL {others}, 409 in_flight {in_flight}, \
         409 outcome_unknown {unknown}, replays {replays}; executed keys whose answer was not \
         stored (final delivery still 409) {unstored}; after the SIGKILL: promoted \
         {:.2} s, idemgate on the promoted primary {:.2} s, old primary restarted {:.2} s, \
         replica in sync {:.2} s, first key on the failed slots forwarded again {:.2} s; \
         load ran {:.1} s",
        report.affected.len(),
        keys * 3,
        since(report.promoted),
        since(report.reached),
        since(report.restarted),
        since(report.replica_back),
        since(report.recovered),
        report.run_time.as_secs_f64(),
    );
}

/// A 30 ms upstream and two idemgate processes on the Redis at `url`,
/// each claim waiting for one replica (`min_replicas_ack = 1`); with the
/// gates' `/notify` URLs.
async fn failover_gates(url: &str) -> (Upstream, Vec<GateProcess>, Vec<String>) {
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(30))).await;
    let store = format!(
        "kind = \"redis\"\nurl = \"{url}\"\ncommand_timeout = \"250ms\"\nmin_replicas_ack = 1"
    );
    let text = config_text(&store, &upstream.url(), "");
    let gates: Vec<GateProcess> = (0..2).map(|_| GateProcess::start(&text)).collect();
    let urls = gates.iter().map(|g| g.url("/notify")).collect();
    (upstream, gates, urls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn cluster_failover_keeps_acknowledged_claims() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start();
    println!(
        "[fault] cluster_failover_keeps_acknowledged_claims: 6-node cluster ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (upstream, _gates, urls) = failover_gates(&cluster.url()).await;
    let primaries = cluster.primaries();
    let victim = primaries[1].clone();
    let replica = Cluster::replica_of(&victim);
    let survivor = primaries[0].port;
    let in_victim = |id: &str| victim.owns(slot(id));
    let mut ops = ClusterFailover {
        cluster: &mut cluster,
        victim: victim.clone(),
        replica,
        survivor,
    };

    let report = run_failover(&mut ops, &urls, &upstream, "cfo", &in_victim).await;

    check_failover("cluster_failover_keeps_acknowledged_claims", &report);
    report_time("cluster_failover_keeps_acknowledged_claims", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis sentinel"]
async fn sentinel_failover() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut setup = SentinelSetup::start();
    println!(
        "[fault] sentinel_failover: primary, replica and 3 sentinels ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (upstream, _gates, urls) = failover_gates(&setup.url()).await;
    let mut ops = SentinelFailover { setup: &mut setup };

    let report = run_failover(&mut ops, &urls, &upstream, "sfo", &|_| true).await;

    check_failover("sentinel_failover", &report);
    report_time("sentinel_failover", started);
}

// ---------------------------------------------------------------------------
// 5. An instance SIGKILLed with 50 upstream calls in flight
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_instance_with_50_calls_in_flight() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let redis = RedisServer::start();
    // The first call of each "crash-" key hangs 5 s; everything else is quick.
    let seen = Mutex::new(HashSet::new());
    let upstream = Upstream::scripted(move |_, body| {
        let id = id_of(body);
        let first = seen.lock().unwrap().insert(id.clone());
        if first && id.starts_with("crash-") {
            Reply::slow(Duration::from_secs(5))
        } else {
            Reply::ok()
        }
    })
    .await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "lease = \"500ms\"\nunknown_hold = \"3s\"\non_in_flight = \"conflict\"",
    );
    let mut doomed = GateProcess::start(&text);
    let survivors = [GateProcess::start(&text), GateProcess::start(&text)];
    let urls: Vec<String> = survivors.iter().map(|g| g.url("/notify")).collect();
    let sender = Sender::new();
    let crash: Vec<String> = (0..50).map(|i| format!("crash-{i}")).collect();

    let stranded: Vec<_> = crash
        .iter()
        .map(|id| {
            let (sender, url, body) = (sender.clone(), doomed.url("/notify"), payment(id));
            tokio::spawn(async move { sender.deliver(&url, &body).await })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || upstream.calls() == 50).await,
        "all 50 reached the upstream (got {})",
        upstream.calls()
    );
    doomed.kill();
    let killed = Instant::now();
    for task in stranded {
        let answer = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("sender notices the dead instance")
            .expect("sender task");
        assert!(
            answer.is_err(),
            "no answer from a killed instance: {answer:?}"
        );
    }

    // Both survivors at once, for every key; returns the answers per key.
    let both = |ids: Vec<String>| {
        let (sender, urls) = (sender.clone(), urls.clone());
        async move {
            let tasks: Vec<_> = ids
                .iter()
                .flat_map(|id| urls.iter().map(move |url| (id.clone(), url.clone())))
                .map(|(id, url)| {
                    let sender = sender.clone();
                    tokio::spawn(async move {
                        let answer = attempt(&sender, &url, &id).await;
                        (id, answer)
                    })
                })
                .collect();
            let mut answers: HashMap<String, Vec<Attempt>> = HashMap::new();
            for task in tasks {
                let (id, answer) = task.await.expect("delivery task");
                answers.entry(id).or_default().push(answer);
            }
            answers
        }
    };

    // Keys that never reached the upstream before the kill: exactly one
    // execution each on the survivors.
    let fresh: Vec<String> = (0..10).map(|i| format!("fresh-{i}")).collect();
    for (id, answers) in both(fresh.clone()).await {
        assert_eq!(answers.iter().filter(|a| a.executed()).count(), 1, "{id}");
        for a in answers.iter().filter(|a| !a.executed()) {
            let in_flight = a.status == 409 && a.reason.as_deref() == Some("in_flight");
            assert!(a.status == 200 || in_flight, "{id}: {a:?}");
        }
    }

    // Right after the kill the claims still look alive or already unknown;
    // either way nothing is forwarded.
    let early = both(crash.clone()).await;
    let mut early_reasons: HashMap<String, usize> = HashMap::new();
    for (id, answers) in &early {
        for a in answers {
            assert_eq!(a.status, 409, "{id}: {a:?}");
            *early_reasons
                .entry(a.reason.clone().unwrap_or_default())
                .or_default() += 1;
        }
    }

    // Once the lease (500 ms) ran out, the dead owner's claims are unknown
    // outcomes: 409 outcome_unknown, no execution, for the whole hold.
    // The last renewal was at most lease/3 before the kill, so the records
    // expire between kill + 3.33 s and kill + 3.5 s.
    let hold_end = killed + Duration::from_millis(3300);
    let mut checked = 0;
    let mut rounds = 0;
    for offset_ms in [800u64, 1600, 2400] {
        let at = killed + Duration::from_millis(offset_ms);
        tokio::time::sleep(at.saturating_duration_since(Instant::now())).await;
        for (id, answers) in both(crash.clone()).await {
            for a in answers.iter().filter(|a| a.done < hold_end) {
                assert_eq!(a.status, 409, "{id}: {a:?}");
                assert_eq!(a.reason.as_deref(), Some("outcome_unknown"), "{id}: {a:?}");
                assert!(a.retry_after, "{id}: Retry-After");
                checked += 1;
            }
        }
        rounds += 1;
    }
    assert!(
        checked >= 2 * crash.len(),
        "at least one whole round inside the hold"
    );
    let executed = executions(&upstream);
    for id in &crash {
        assert_eq!(executed[id], 1, "{id}: not re-executed during the hold");
    }

    // After the hold the key is free: a retry is forwarded, exactly once
    // even though it reaches both survivors at the same time.
    tokio::time::sleep(
        (killed + Duration::from_millis(3800)).saturating_duration_since(Instant::now()),
    )
    .await;
    for (id, answers) in both(crash.clone()).await {
        assert_eq!(answers.iter().filter(|a| a.executed()).count(), 1, "{id}");
    }
    let executed = executions(&upstream);
    for id in &crash {
        assert_eq!(
            executed[id], 2,
            "{id}: once before the crash, once after the hold"
        );
    }
    for id in &fresh {
        assert_eq!(executed[id], 1, "{id}");
    }
    assert_eq!(upstream.calls(), 50 * 2 + 10);
    println!(
        "[fault] killed_instance_with_50_calls_in_flight: 50 calls in flight at the SIGKILL; \
         right after it {early_reasons:?}; {rounds} rounds / {checked} retries during the hold \
         all 409 outcome_unknown with 0 executions; after the hold 50 forwarded once each \
         (2 executions per key in total); 10 keys first sent after the kill executed once each; \
         upstream calls {}",
        upstream.calls()
    );
    report_time("killed_instance_with_50_calls_in_flight", started);
}

// ---------------------------------------------------------------------------
// 6. Upstream faults
// ---------------------------------------------------------------------------

/// Connection refused: nothing was sent, so the claim is released and the
/// retry is forwarded once the upstream is back.
async fn refused_connection_releases() {
    let redis = RedisServer::start();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let gate = Gate::start(&config_text(
        &redis_store(&redis),
        &format!("http://{addr}"),
        "",
    ))
    .await;
    let url = gate.url("/notify");
    let body = payment("refused");
    for _ in 0..2 {
        let refused = deliver(&url, &body).await;
        assert_eq!(refused.status, 502, "{refused:?}");
        assert_eq!(refused.reason().as_deref(), Some("upstream_error"));
        assert!(redis.keys(RECORDS).is_empty(), "claim released");
    }
    let upstream = RawUpstream::bind(addr, false).await;
    let forwarded = deliver(&url, &body).await;
    assert_eq!(forwarded.status, 200);
    assert_eq!(forwarded.replayed(), Some("false"));
    let replay = deliver(&url, &body).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.body, forwarded.body);
    assert_eq!(upstream.requests(), 1);
    gate.stop().await;
    println!(
        "[fault] upstream_faults/refused: 2 x 502 with no record left, then 1 execution and a replay"
    );
}

/// The upstream writes a 200 head and resets the connection mid-body: it
/// may have acted, so the outcome is unknown and the retry is not forwarded.
async fn reset_mid_response_is_unknown() {
    let redis = RedisServer::start();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let upstream = RawUpstream::bind(addr, true).await;
    let gate = Gate::start(&config_text(
        &redis_store(&redis),
        &format!("http://{addr}"),
        "",
    ))
    .await;
    let url = gate.url("/notify");
    let body = payment("reset");
    let cut = deliver(&url, &body).await;
    assert_eq!(cut.status, 502, "{cut:?}");
    assert_eq!(cut.reason().as_deref(), Some("upstream_error"));
    for _ in 0..3 {
        let retry = deliver(&url, &body).await;
        assert_eq!(retry.status, 409, "{retry:?}");
        assert_eq!(retry.reason().as_deref(), Some("outcome_unknown"));
        assert!(retry.header("retry-after").is_some());
    }
    assert_eq!(upstream.requests(), 1, "never forwarded again");
    assert_eq!(redis.keys(RECORDS).len(), 1, "the unknown record stays");
    gate.stop().await;
    println!("[fault] upstream_faults/reset: 502, then 3 retries 409 outcome_unknown, 1 execution");
}

/// A slow upstream outlives many short leases; renewal keeps the claim, so
/// duplicates on another instance are 409 in_flight, never a second call.
async fn slow_upstream_keeps_its_claim() {
    let redis = RedisServer::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_secs(2))).await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        "lease = \"300ms\"\nunknown_hold = \"300ms\"\non_in_flight = \"conflict\"",
    );
    let (one, two) = (Gate::start(&text).await, Gate::start(&text).await);
    let body = payment("slow");
    let started = Instant::now();
    let first = tokio::spawn({
        let (url, body) = (one.url("/notify"), body.clone());
        async move { deliver(&url, &body).await }
    });
    // 1.5x, 3x and 5x the lease: without renewal the claim (lease + hold =
    // 600 ms) would have turned unknown, then expired.
    for at_ms in [450u64, 900, 1500] {
        let at = started + Duration::from_millis(at_ms);
        tokio::time::sleep(at.saturating_duration_since(Instant::now())).await;
        let duplicate = deliver(&two.url("/notify"), &body).await;
        assert_eq!(duplicate.status, 409, "at {at_ms} ms: {duplicate:?}");
        assert_eq!(
            duplicate.reason().as_deref(),
            Some("in_flight"),
            "at {at_ms} ms"
        );
    }
    let first = first.await.expect("first delivery");
    assert_eq!(first.status, 200);
    let replay = deliver(&two.url("/notify"), &body).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.body, first.body);
    assert_eq!(upstream.calls(), 1);
    one.stop().await;
    two.stop().await;
    println!(
        "[fault] upstream_faults/slow: duplicates at 1.5x/3x/5x lease all 409 in_flight, 1 execution"
    );
}

/// 200 keys all answered 500: every claim released, nothing stuck in
/// flight, and every retry forwarded once the upstream is healthy.
async fn five_hundred_storm_leaves_nothing() {
    let redis = RedisServer::start();
    let storm = Arc::new(AtomicBool::new(true));
    let upstream = Upstream::scripted({
        let storm = Arc::clone(&storm);
        move |_, _| {
            if storm.load(Ordering::SeqCst) {
                Reply::status(500)
            } else {
                Reply::ok()
            }
        }
    })
    .await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let urls = vec![gate.url("/notify")];
    let ids: Vec<String> = (0..200).map(|i| format!("storm-{i}")).collect();
    let sender = Sender::new();

    let (answers, _) = hammer(&sender, &urls, &ids, 1, 32).await;
    for (id, list) in &answers {
        assert_eq!(
            list[0].status, 500,
            "{id}: the upstream's answer is passed on"
        );
        assert!(is_live(&list[0]), "{id}");
    }
    assert_eq!(upstream.calls(), 200);
    let left = redis.keys(RECORDS);
    assert!(left.is_empty(), "no record left behind: {left:?}");

    storm.store(false, Ordering::SeqCst);
    let (answers, _) = hammer(&sender, &urls, &ids, 1, 32).await;
    for (id, list) in &answers {
        assert_eq!(list[0].status, 200, "{id}");
        assert!(is_live(&list[0]), "{id}: forwarded, not replayed");
    }
    assert_eq!(upstream.calls(), 400);
    let executed = executions(&upstream);
    assert!(ids.iter().all(|id| executed[id] == 2));
    assert_eq!(redis.keys(RECORDS).len(), 200);
    gate.stop().await;
    println!(
        "[fault] upstream_faults/5xx storm: 200 x 500, 0 records left, 200 retries forwarded (400 executions)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_faults() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    refused_connection_releases().await;
    reset_mid_response_is_unknown().await;
    slow_upstream_keeps_its_claim().await;
    five_hundred_storm_leaves_nothing().await;
    report_time("upstream_faults", started);
}

// ---------------------------------------------------------------------------
// 7. A Redis restart without persistence forgets every record
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_forgets() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let gate = Gate::start(&config_text(&redis_store(&redis), &upstream.url(), "")).await;
    let url = gate.url("/notify");
    let body = payment("forgotten");
    assert_eq!(deliver(&url, &body).await.replayed(), Some("false"));
    assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));

    redis.restart(); // --save '' --appendonly no: the data set is gone
    let restarted = Instant::now();
    let mut refused = 0;
    let mut again = None;
    for _ in 0..100 {
        let answer = deliver(&url, &body).await;
        if answer.status == 200 {
            again = Some(answer);
            break;
        }
        assert_eq!(answer.status, 503, "{answer:?}");
        refused += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = again.expect("idemgate reconnects to the restarted Redis");
    assert_eq!(
        again.replayed(),
        Some("false"),
        "the record was lost with the restart, so the retry is forwarded again"
    );
    assert_eq!(
        upstream.calls(),
        2,
        "a second execution: documented behaviour"
    );
    assert_eq!(deliver(&url, &body).await.replayed(), Some("true"));
    gate.stop().await;
    println!(
        "[fault] redis_restart_without_persistence_forgets: after a restart without \
         persistence the completed key was executed a second time (upstream calls 2); \
         {refused} x 503 while reconnecting, first answer {:.2} s after the restart. \
         NOTE: a Redis that may restart needs persistence (appendonly) or replicas.",
        restarted.elapsed().as_secs_f64()
    );
    report_time("redis_restart_without_persistence_forgets", started);
}

// ---------------------------------------------------------------------------
// Redis Cluster: every primary's eviction settings are checked
// ---------------------------------------------------------------------------

/// One primary of three may evict: `/readyz` fails and
/// names that primary, although the others (and the URL's first node) are
/// fine; the policy fixed on that node, `/readyz` recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn redis_cluster_eviction_is_checked_on_every_primary() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let cluster = Cluster::start();
    let evicting = cluster.primaries()[2].port;
    for (name, value) in [("maxmemory", "10mb"), ("maxmemory-policy", "volatile-lru")] {
        assert_eq!(cli(evicting, &["CONFIG", "SET", name, value]).trim(), "OK");
    }
    let upstream = Upstream::start().await;
    let store = format!(
        "kind = \"redis\"\nurl = \"{}\"\ncommand_timeout = \"250ms\"",
        cluster.url()
    );
    let gate = GateProcess::start(&config_text(&store, &upstream.url(), ""));
    let readyz = async |expected: u16| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (status, body) = admin_get(gate.admin, "/readyz").await;
            if status == expected {
                return body;
            }
            assert!(Instant::now() < deadline, "/readyz {status}: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let body = readyz(503).await;
    assert!(
        body.contains(&format!("127.0.0.1:{evicting}")) && body.contains("volatile-lru"),
        "{body}"
    );
    for other in &cluster.primaries()[..2] {
        assert!(!body.contains(&format!(":{} ", other.port)), "{body}");
    }
    assert_eq!(
        metric(gate.admin, "idemgate_store_eviction_risk").await,
        Some(1.0)
    );

    assert_eq!(
        cli(
            evicting,
            &["CONFIG", "SET", "maxmemory-policy", "noeviction"]
        )
        .trim(),
        "OK"
    );
    readyz(200).await;
    assert_eq!(
        metric(gate.admin, "idemgate_store_eviction_risk").await,
        Some(0.0)
    );
    println!(
        "[fault] redis_cluster_eviction_is_checked_on_every_primary: /readyz named the \
         evicting primary :{evicting} of 3 and recovered after CONFIG SET noeviction"
    );
    report_time(
        "redis_cluster_eviction_is_checked_on_every_primary",
        started,
    );
}
