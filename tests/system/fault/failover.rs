//! Failover under load (Cluster and Sentinel): acknowledged claims survive
//! the primary's SIGKILL.

use super::failover_ops::{ClusterFailover, Failover, SentinelFailover};
use super::*;

/// Whether the replica falls behind before its primary dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lag {
    /// The replica is in sync when the primary is killed.
    None,
    /// The replica is frozen (SIGSTOP) for a second before the kill and
    /// thawed with it: the primary's writes of that second never reach it.
    FrozenReplica,
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

/// Figures of one failover run.
pub(super) struct FailoverReport {
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
pub(super) async fn run_failover(
    ops: &mut dyn Failover,
    lag: Lag,
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
    if lag == Lag::FrozenReplica {
        tokio::task::block_in_place(|| ops.freeze_replica(true));
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    tokio::task::block_in_place(|| {
        ops.kill_primary();
        if lag == Lag::FrozenReplica {
            ops.freeze_replica(false);
        }
    });
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
/// Returns how many executed keys' final delivery still found no stored
/// answer (409).
pub(super) fn check_failover(name: &str, report: &FailoverReport) -> usize {
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
    let healthy = SlotGroup::measure(report, false);
    let dead = SlotGroup::measure(report, true);
    if !healthy.rest.latencies.is_empty() {
        println!(
            "[fault] {name}: healthy slots {}; failed primary's slots {}",
            healthy.summary(),
            dead.summary()
        );
    }
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
    // A dying primary stalls only its own slots: the others' keys are
    // claimed and forwarded throughout.
    assert_eq!(
        healthy.failover.refused,
        0,
        "requests for keys on healthy primaries refused during the failover: {}",
        healthy.summary()
    );
    unstored
}

/// Latency, 503 share and throughput of one slot group (the failed
/// primary's, or the others) at rest (before the SIGKILL) and during the
/// failover (from the SIGKILL until the failed slots forward again).
struct SlotGroup {
    rest: Window,
    failover: Window,
}

#[derive(Default)]
struct Window {
    latencies: Vec<Duration>,
    refused: usize,
    span: Duration,
}

impl Window {
    fn p99(&self) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        sorted
            .get((sorted.len() * 99).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    }

    fn refused_share(&self) -> f64 {
        self.refused as f64 / self.latencies.len().max(1) as f64
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.span.as_secs_f64().max(0.001)
    }

    fn summary(&self) -> String {
        format!(
            "{} requests, {:.0}/s, 503 {:.1}%, p99 {:.0} ms",
            self.latencies.len(),
            self.per_second(),
            100.0 * self.refused_share(),
            self.p99().as_secs_f64() * 1000.0
        )
    }
}

impl SlotGroup {
    /// The live pass's requests (not the final one) on the failed
    /// primary's slots (`failed`) or on the others.
    fn measure(report: &FailoverReport, failed: bool) -> Self {
        let started = report.killed - Duration::from_millis(1500);
        let mut rest = Window {
            span: report.killed - started,
            ..Window::default()
        };
        let mut failover = Window {
            span: report.recovered - report.killed,
            ..Window::default()
        };
        for run in &report.runs {
            if report.affected.contains(&run.id) != failed {
                continue;
            }
            for a in [&run.first, &run.retry] {
                let window = if a.sent < report.killed {
                    &mut rest
                } else if a.sent < report.recovered {
                    &mut failover
                } else {
                    continue;
                };
                window.latencies.push(a.done - a.sent);
                window.refused += usize::from(a.status == 503);
            }
        }
        Self { rest, failover }
    }

    fn summary(&self) -> String {
        format!(
            "at rest [{}], during the failover [{}]",
            self.rest.summary(),
            self.failover.summary()
        )
    }
}

/// A 30 ms upstream and two idemgate processes on the Redis at `url` at
/// `durability`, each claim waiting for one replica (`min_replicas_ack =
/// 1`); with the gates' `/notify` URLs. Store calls and replica
/// acknowledgements get the harness's patience (a loaded machine, not the
/// failover, made healthy slots' claims miss 250 ms and 100 ms): a
/// failover that stalled every slot would still miss it by seconds.
pub(super) async fn failover_gates(
    url: &str,
    durability: &str,
) -> (Upstream, Vec<GateProcess>, Vec<String>) {
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(30))).await;
    let store = format!(
        "kind = \"redis\"\nurl = \"{url}\"\ncommand_timeout = \"{TEST_STORE_TIMEOUT}\"\ndurability = \"{durability}\"\nmin_replicas_ack = 1\nreplica_ack_timeout = \"500ms\""
    );
    let text = config_text(&store, &upstream.url(), "");
    let gates: Vec<GateProcess> = (0..2).map(|_| GateProcess::start(&text)).collect();
    let urls = gates.iter().map(|g| g.url("/notify")).collect();
    (upstream, gates, urls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn cluster_failover_keeps_acknowledged_claims() {
    let _lane = CLUSTER_LANE.lock().await;
    let started = Instant::now();
    let mut cluster = Cluster::start();
    println!(
        "[fault] cluster_failover_keeps_acknowledged_claims: 6-node cluster ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (upstream, _gates, urls) = failover_gates(&cluster.url(), "memory").await;
    let mut ops = ClusterFailover::of_second_primary(&mut cluster);
    let victim = ops.victim.clone();
    let in_victim = |id: &str| victim.owns(slot(id));

    let report = run_failover(&mut ops, Lag::None, &urls, &upstream, "cfo", &in_victim).await;

    check_failover("cluster_failover_keeps_acknowledged_claims", &report);
    report_time("cluster_failover_keeps_acknowledged_claims", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis sentinel"]
async fn sentinel_failover() {
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    let mut setup = SentinelSetup::start();
    println!(
        "[fault] sentinel_failover: primary, replica and 3 sentinels ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (upstream, gates, urls) = failover_gates(&setup.url(), "memory").await;
    let mut ops = SentinelFailover { setup: &mut setup };
    // Each instance answers a replay from its cache before the failover:
    // tracking is armed (start-up is behind us), so a later flush is the
    // failover's.
    let flushes = "idemgate_replay_cache_flushes_total{reason=\"disconnected\"}";
    let mut before = Vec::new();
    for (i, gate) in gates.iter().enumerate() {
        let body = payment(&format!("sfo-warm-cache-{i}"));
        poll(
            "a replay answered from the cache",
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                let hits = metric(gate.admin, "idemgate_replay_cache_hits_total").await;
                let answer = deliver(&gate.url("/notify"), &body).await;
                (answer.replayed() == Some("true")
                    && metric(gate.admin, "idemgate_replay_cache_hits_total").await > hits)
                    .then_some(())
            },
        )
        .await;
        before.push(metric(gate.admin, flushes).await.expect("flush counter"));
    }

    let report = run_failover(&mut ops, Lag::None, &urls, &upstream, "sfo", &|_| true).await;

    check_failover("sentinel_failover", &report);
    // Every instance's replay cache was flushed when its connections
    // moved to the promoted primary: invalidations sent on the old
    // primary's connection are lost with it.
    for (gate, before) in gates.iter().zip(before) {
        let after = metric(gate.admin, flushes).await.expect("flush counter");
        assert!(
            after > before,
            "replay cache flushed on failover: {before} -> {after}"
        );
    }
    report_time("sentinel_failover", started);
}
