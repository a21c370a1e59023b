//! The durable inbox's owed sets and replica waits (docs/contract.md
//! §4 rule 13, §5): the inbox through a failover with replication
//! lag, on the real local Cluster and Sentinel: none lost, none twice.
//!
//! Two idemgate instances (`min_replicas_ack = 1`, `repair_every = 1s`)
//! in front of a handler that first fails (so deliveries are queued),
//! then takes them slowly (so redeliveries are in flight). Senders keep
//! delivering new keys, each retried until it gets a 200, as a gateway
//! would. Mid-run the replica that will be promoted is frozen for 1.5 s
//! (every write of the primary in that time is lost by the failover),
//! then the primary is SIGKILLed and the stale replica promoted. On the
//! Cluster the victim is the primary holding the scope's inbox indexes,
//! the one whose loss used to strand deliveries queued on the others.
//!
//! Afterwards every key a sender got a 200 for must execute exactly once,
//! or be held for an operator (outcome unknown); no key may execute
//! twice.

use super::failover_ops::{ClusterFailover, Failover, SentinelFailover};
use super::*;

const TOKEN: &str = "inbox-failover-token";
const ACK: &str = "success";

/// How the handler answers.
const FAILING: usize = 0;
const TAKING: usize = 1;

/// One key as its sender saw it.
#[derive(Debug, Clone)]
struct Sent {
    id: String,
    /// The 200 it finally got: `Some(true)` the inbox's ack (queued),
    /// `Some(false)` the handler's own answer; `None`: no 200 in time.
    answered: Option<bool>,
    attempts: usize,
    /// The last answer that was not a 200 (status, reason).
    last: Option<LastAnswer>,
}

/// Status and problem reason of an answer (status 0: no answer).
type LastAnswer = (u16, Option<String>);

/// The handler: 503 at once while [`FAILING`], 200 after 300 ms while
/// [`TAKING`]; counts what it took (2xx) per payment id.
async fn handler(mode: &Arc<AtomicUsize>, taken: &Arc<Mutex<HashMap<String, usize>>>) -> Upstream {
    let (mode, taken) = (Arc::clone(mode), Arc::clone(taken));
    Upstream::scripted(move |_, body| {
        if mode.load(Ordering::SeqCst) == TAKING {
            *taken.lock().unwrap().entry(id_of(body)).or_insert(0) += 1;
            Reply::slow(Duration::from_millis(300))
        } else {
            Reply::status(503)
        }
    })
    .await
}

fn gate_config(url: &str, handler: &str) -> String {
    let store = format!(
        "kind = \"redis\"\nurl = \"{url}\"\ncommand_timeout = \"250ms\"\ndurability = \"memory\"\nmin_replicas_ack = 1\nreplica_ack_timeout = \"500ms\""
    );
    let base = config_text(&store, handler, "");
    format!(
        "{base}\n[route.inbox]\nack_body = \"{ACK}\"\nbackoff = \"500ms\"\nmax_backoff = \"2s\"\nmax_attempts = 100\nvisibility_timeout = \"10s\"\nrepair_every = \"1s\"\n\n[admin]\ntoken = \"literal:{TOKEN}\"\n"
    )
}

/// Senders delivering new keys until stopped, each key until a 200.
struct Senders {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Keys per sender task at most, and attempts per key at most.
const MAX_KEYS: usize = 2_000;
const MAX_ATTEMPTS: usize = 100;

impl Senders {
    fn start(urls: &[String], prefix: &str, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..workers)
            .map(|w| {
                let (urls, prefix) = (urls.to_vec(), prefix.to_owned());
                let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
                tokio::spawn(async move {
                    let sender = Sender::new();
                    for n in 0..MAX_KEYS {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let id = format!("{prefix}-{w}-{n}");
                        let mut key = Sent {
                            id: id.clone(),
                            answered: None,
                            attempts: 0,
                            last: None,
                        };
                        while key.attempts < MAX_ATTEMPTS {
                            let url = &urls[(w + key.attempts) % urls.len()];
                            key.attempts += 1;
                            match sender.deliver(url, &payment(&id)).await {
                                Ok(answer) if answer.status == 200 => {
                                    key.answered = Some(&answer.body[..] == ACK.as_bytes());
                                    break;
                                }
                                Ok(answer) => key.last = Some((answer.status, answer.reason())),
                                Err(_) => key.last = Some((0, None)),
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        sent.lock().unwrap().push(key);
                    }
                })
            })
            .collect();
        Self { stop, sent, tasks }
    }

    async fn finish(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("sender stops")
                .expect("sender task");
        }
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

/// The inbox's view of payment `id` (`state`), if it is in the inbox.
async fn inbox_state(admin: SocketAddr, id: &str) -> Option<String> {
    let path = format!("http://{admin}/admin/inbox/pay/delivery?key={id}");
    let headers = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let answer = send("GET", &path, &headers, "").await;
    if answer.status != 200 {
        return None;
    }
    let view: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
    view["state"].as_str().map(str::to_owned)
}

/// The run: load, freeze, failing → taking, kill, promotion, the old
/// primary back as a replica, then the drain; asserts the promise and
/// prints the figures.
async fn run(
    name: &str,
    ops: &mut dyn Failover,
    url: &str,
    prefix: &str,
    victim: &dyn Fn(&str) -> bool,
) {
    let mode = Arc::new(AtomicUsize::new(FAILING));
    let taken = Arc::new(Mutex::new(HashMap::new()));
    let upstream = handler(&mode, &taken).await;
    let text = gate_config(url, &upstream.url());
    let gates: Vec<GateProcess> = (0..2).map(|_| GateProcess::start(&text)).collect();
    let urls: Vec<String> = gates.iter().map(|g| g.url("/notify")).collect();
    for (i, url) in urls.iter().enumerate() {
        let body = payment(&format!("{prefix}-warm-{i}"));
        let answer = deliver_until_served(url, &body, Duration::from_secs(10)).await;
        assert_eq!(
            answer.status, 200,
            "instance {url} acknowledges before the failover"
        );
    }

    let started = Instant::now();
    let senders = Senders::start(&urls, prefix, 8);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    tokio::task::block_in_place(|| ops.freeze_replica(true));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    mode.store(TAKING, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| {
        ops.kill_primary();
        ops.freeze_replica(false);
    });
    let killed = Instant::now();
    let budget = killed + Duration::from_secs(30);
    poll_until(budget, || ops.promoted())
        .await
        .expect("replica promoted within 30 s");
    let promoted = killed.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| ops.restart_old_primary());
    // A budget of its own: the resync after the restart is not what is
    // tested, and on a loaded machine the promotion may have used most of
    // the first one.
    poll_until(Instant::now() + Duration::from_secs(30), || {
        ops.replica_back()
    })
    .await
    .expect("old primary back as a replica within 30 s of its restart");
    let replica_back = killed.elapsed();
    let sent = senders.finish().await;
    let load = started.elapsed();

    // The drain: every answered key executes, or is held for an operator.
    let answered: Vec<&Sent> = sent.iter().filter(|k| k.answered.is_some()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let done = taken.lock().unwrap().clone();
        let waiting: Vec<&Sent> = answered
            .iter()
            .copied()
            .filter(|k| !done.contains_key(&k.id))
            .collect();
        let mut undecided = Vec::new();
        for key in &waiting {
            let state = inbox_state(gates[0].admin, &key.id).await;
            if !matches!(state.as_deref(), Some("unknown" | "dead")) {
                undecided.push((key.id.clone(), state));
            }
        }
        if undecided.is_empty() || Instant::now() > deadline {
            break undecided;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let drained = killed.elapsed();
    let done = taken.lock().unwrap().clone();
    let twice: Vec<(&String, &usize)> = done.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{name}: executed twice: {twice:?}");
    assert!(
        waiting.is_empty(),
        "{name}: {} answered deliveries neither executed nor held within 60 s of the drain: {:?}",
        waiting.len(),
        &waiting[..waiting.len().min(10)]
    );

    let queued = answered.iter().filter(|k| k.answered == Some(true)).count();
    let on_victim = answered.iter().filter(|k| victim(&k.id)).count();
    let held = answered
        .iter()
        .filter(|k| !done.contains_key(&k.id))
        .count();
    let mut repaired = 0.0;
    for gate in &gates {
        repaired += metric(gate.admin, "idemgate_inbox_repaired_total{route=\"pay\"}")
            .await
            .unwrap_or(0.0);
    }
    let unanswered: Vec<(&str, usize, &Option<LastAnswer>)> = sent
        .iter()
        .filter(|k| k.answered.is_none())
        .map(|k| (k.id.as_str(), k.attempts, &k.last))
        .collect();
    println!(
        "[fault] {name}: {} keys, {} answered 200 ({queued} acknowledged by the inbox, {} by the handler live; {on_victim} on the failed primary's slots), {} without a 200 after {MAX_ATTEMPTS} attempts {unanswered:?}; executed once {}, held unknown/dead {held}, twice 0; index entries repaired {repaired}; after the SIGKILL: promoted {:.2} s, old primary back as a replica {:.2} s, drained {:.2} s; load ran {:.1} s",
        sent.len(),
        answered.len(),
        answered.len() - queued,
        unanswered.len(),
        answered.len() - held,
        promoted.as_secs_f64(),
        replica_back.as_secs_f64(),
        drained.as_secs_f64(),
        load.as_secs_f64(),
    );
    assert!(queued > 0, "{name}: deliveries were queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn cluster_failover_with_lag_loses_no_inbox_delivery() {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start();
    let url = cluster.url();
    let primaries = cluster.primaries();
    let index_slot = fred::util::redis_keyslot(b"idemgate:pay:inbox:due");
    let victim = primaries
        .iter()
        .find(|p| p.owns(index_slot))
        .expect("the index's primary")
        .clone();
    let replica = Cluster::replica_of(&victim);
    let survivor = primaries
        .iter()
        .find(|p| p.port != victim.port)
        .expect("another primary")
        .port;
    let on_victim = |id: &str| victim.owns(slot(id));
    let mut ops = ClusterFailover {
        cluster: &mut cluster,
        victim: victim.clone(),
        replica,
        survivor,
    };
    run(
        "cluster_failover_with_lag_loses_no_inbox_delivery",
        &mut ops,
        &url,
        "cib",
        &on_victim,
    )
    .await;
    report_time("cluster_failover_with_lag_loses_no_inbox_delivery", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis sentinel"]
async fn sentinel_failover_with_lag_loses_no_inbox_delivery() {
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    let mut setup = SentinelSetup::start();
    let url = setup.url();
    let mut ops = SentinelFailover { setup: &mut setup };
    run(
        "sentinel_failover_with_lag_loses_no_inbox_delivery",
        &mut ops,
        &url,
        "sib",
        &|_| true,
    )
    .await;
    report_time(
        "sentinel_failover_with_lag_loses_no_inbox_delivery",
        started,
    );
}
