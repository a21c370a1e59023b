//! The inbox waits for the durability `min_replicas_ack`
//! promises. A real primary with one real replica; the replica is frozen
//! (SIGSTOP) to stand for replication lag:
//!
//! - a delivery queued while no replica acknowledges is not acknowledged
//!   to its sender (it gets the handler's failure and retries), since a
//!   failover right then would lose it;
//! - a redelivery is not sent on a claim no replica acknowledged (a
//!   failover would revert the claim and the delivery would be sent
//!   again); once the replica is back, each executes once.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// A primary and its replica, in sync (their files in a directory of
/// their own: a full sync writes a snapshot).
struct Replicated {
    replica: Proc,
    _primary: Proc,
    primary_port: u16,
    _dir: tempfile::TempDir,
}

impl Replicated {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().display().to_string();
        let ports = free_ports(2);
        let primary = spawn_redis("primary", ports[0], &["--dir".to_owned(), path.clone()]);
        let args = [
            "--dir".to_owned(),
            path,
            "--dbfilename".to_owned(),
            "replica.rdb".to_owned(),
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            ports[0].to_string(),
        ];
        let replica = spawn_redis("replica", ports[1], &args);
        wait_until(Duration::from_secs(10), "replica in sync", || {
            has_online_replica(ports[0])
        });
        Self {
            replica,
            _primary: primary,
            primary_port: ports[0],
            _dir: dir,
        }
    }

    /// The store section: every claim and queued delivery waits for one
    /// replica, at most 300 ms.
    fn store(&self) -> String {
        format!(
            "kind = \"redis\"\nurl = \"redis://127.0.0.1:{}/0\"\ncommand_timeout = \"1s\"\ndurability = \"memory\"\nmin_replicas_ack = 1\nreplica_ack_timeout = \"300ms\"",
            self.primary_port
        )
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.replica.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    /// Freezes the replica: the primary keeps serving, nothing replicates.
    fn freeze(&self) {
        self.signal("-STOP");
    }

    fn thaw(&self) {
        self.signal("-CONT");
        wait_until(Duration::from_secs(10), "replica in sync again", || {
            has_online_replica(self.primary_port)
        });
    }
}

impl Drop for Replicated {
    fn drop(&mut self) {
        // A frozen process ignores nothing but SIGKILL; thaw it anyway so
        // its own shutdown is clean.
        let _ = Command::new("kill")
            .args(["-CONT", &self.replica.pid().to_string()])
            .status();
    }
}

/// A handler that fails slowly (503 after 1 s) until `healthy`, and
/// counts the deliveries it took (2xx) per payment id.
async fn switchable_handler(
    healthy: &Arc<AtomicBool>,
    taken: &Arc<Mutex<HashMap<String, usize>>>,
) -> Upstream {
    let (healthy, taken) = (Arc::clone(healthy), Arc::clone(taken));
    Upstream::scripted(move |_, body| {
        if healthy.load(Ordering::SeqCst) {
            *taken.lock().unwrap().entry(id_of(body)).or_insert(0) += 1;
            Reply::ok()
        } else {
            Reply {
                status: 503,
                delay: Duration::from_secs(1),
                body: None,
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_queued_without_a_replica_is_not_acknowledged() {
    let _serial = SERIAL.lock().await;
    let redis = Replicated::start();
    let healthy = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(Mutex::new(HashMap::new()));
    let handler = switchable_handler(&healthy, &taken).await;
    let text = inbox_config(&redis.store(), &handler.url(), PATIENT);
    let gate = GateProcess::start(&text);
    let ids: Vec<String> = (0..4).map(|i| format!("unreplicated-{i}")).collect();

    // Claimed while the replica keeps up; frozen while the handler takes
    // its second to fail, so the queued records can not be replicated.
    let sending: Vec<_> = ids
        .iter()
        .map(|id| {
            let (url, body) = (gate.url("/notify"), payment(id));
            tokio::spawn(async move { Sender::new().deliver(&url, &body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.freeze();
    for (id, task) in ids.iter().zip(sending) {
        let answer = task.await.expect("task").expect("an answer");
        assert_eq!(
            answer.status, 503,
            "{id}: the handler's failure, not the ack: {answer:?}"
        );
        assert_ne!(&answer.body[..], ACK.as_bytes(), "{id}");
    }
    assert!(
        listed(gate.admin, "queued").await.is_empty(),
        "nothing kept"
    );
    redis.thaw();

    // The sender's own retries now go through, each once.
    healthy.store(true, Ordering::SeqCst);
    for id in &ids {
        let answer =
            deliver_until_served(&gate.url("/notify"), &payment(id), Duration::from_secs(10)).await;
        // Executed live once the release got through; or, when the
        // inbox's worker took the written record before the queueing
        // failed (its first due time can fall inside the `WAIT`), the
        // record stays queued and the retry gets the ack. Either way the
        // first answer was no ack, and the handler runs it once (below).
        assert_eq!(answer.status, 200, "{id}");
        assert!(
            answer.replayed() == Some("false") || &answer.body[..] == ACK.as_bytes(),
            "{id}: executed or acknowledged as queued: {answer:?}"
        );
    }
    // A delivery that stayed queued is redelivered by the worker at its
    // next due time (up to max_backoff away): wait for every one, then a
    // second more for any second execution.
    eventually(Duration::from_secs(15), || {
        let taken = taken.lock().unwrap();
        ids.iter().all(|id| taken.contains_key(id))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let taken = taken.lock().unwrap().clone();
    for id in &ids {
        assert_eq!(taken.get(id), Some(&1), "{id} executed once: {taken:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_is_not_sent_on_a_claim_no_replica_acknowledged() {
    let _serial = SERIAL.lock().await;
    let redis = Replicated::start();
    let (port, url) = absent_handler();
    let text = inbox_config(&redis.store(), &url, PATIENT);
    let gate = GateProcess::start(&text);
    let ids: Vec<String> = (0..5).map(|i| format!("unreplicated-claim-{i}")).collect();
    assert_acknowledged(&deliver_copies(&[gate.url("/notify")], &ids, 1).await);

    redis.freeze();
    let handler = Upstream::scripted_at(port, |_, _| Reply::ok()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        handler.calls(),
        0,
        "no redelivery on a claim a failover could undo"
    );
    assert_eq!(listed(gate.admin, "queued").await.len(), ids.len());

    redis.thaw();
    drained_once(gate.admin, &handler, &ids, Duration::from_secs(30)).await;
}
