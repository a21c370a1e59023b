//! Must hold 2: an instance is SIGKILLed while its workers redeliver.
//! Nothing is lost and nothing executes twice: the deliveries whose
//! redelivery was in flight have an unknown outcome (the handler may have
//! acted), and they are held for an operator, not resent.
//!
//! Each instance reaches the handler through a port of its own (two
//! listeners, one script), so the test knows which calls the killed
//! instance had in flight.

use super::*;

/// What the handler saw through one instance's port.
#[derive(Default)]
struct Seen {
    started: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_leaves_its_in_flight_redeliveries_held_never_resent() {
    let _serial = SERIAL.lock().await;
    let redis = RedisServer::start();
    let (doomed_port, doomed_url) = absent_handler();
    let (survivor_port, survivor_url) = absent_handler();
    let inbox = "backoff = \"300ms\"\nmax_backoff = \"1s\"\nmax_attempts = 100\nvisibility_timeout = \"8s\"\nconcurrency = 4";
    let mut doomed = GateProcess::start(&inbox_config(&redis_store(&redis), &doomed_url, inbox));
    let survivor = GateProcess::start(&inbox_config(&redis_store(&redis), &survivor_url, inbox));

    // Both handler ports down: 40 deliveries queue.
    let ids: Vec<String> = (0..40).map(|i| format!("crash-{i}")).collect();
    let answers = deliver_copies(&[doomed.url("/notify"), survivor.url("/notify")], &ids, 1).await;
    assert_acknowledged(&answers);

    // The handler comes back slow (1.5 s a call) on both ports.
    let slow = |seen: Arc<Mutex<Seen>>| {
        move |_: usize, body: &bytes::Bytes| {
            seen.lock().unwrap().started.push(id_of(body));
            Reply::slow(Duration::from_millis(1_500))
        }
    };
    let via_doomed = Arc::new(Mutex::new(Seen::default()));
    let via_survivor = Arc::new(Mutex::new(Seen::default()));
    let doomed_handler = Upstream::scripted_at(doomed_port, slow(Arc::clone(&via_doomed))).await;
    let survivor_handler =
        Upstream::scripted_at(survivor_port, slow(Arc::clone(&via_survivor))).await;
    assert!(
        eventually(Duration::from_secs(15), || via_doomed
            .lock()
            .unwrap()
            .started
            .len()
            >= 6)
        .await,
        "the doomed instance is redelivering"
    );
    // Kill it mid-call: its calls in flight are those started in the
    // last 1.5 s; the handler still executes them.
    doomed.kill();
    let killed = Instant::now();
    let started_by_doomed = via_doomed.lock().unwrap().started.clone();

    // The survivor finishes the rest and, once the visibility timeout
    // has passed, finds the killed worker's claims expired.
    let deadline = killed + Duration::from_secs(60);
    let (delivered, held) = loop {
        let mut delivered = 0;
        let mut held = Vec::new();
        let mut pending = 0;
        for id in &ids {
            let view = delivery(survivor.admin, id).await;
            match view["state"].as_str() {
                Some("delivered") => delivered += 1,
                Some("unknown") => held.push(id.clone()),
                _ => pending += 1,
            }
        }
        if pending == 0 {
            break (delivered, held);
        }
        assert!(
            Instant::now() < deadline,
            "{pending} still pending 60 s after the kill"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Any resend would land within a few backoffs: wait, then count.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut counts = executions(&doomed_handler);
    for (id, n) in executions(&survivor_handler) {
        *counts.entry(id).or_insert(0) += n;
    }
    println!(
        "killed with {} calls started through it; {delivered} delivered, {} held as unknown, in {:?}",
        started_by_doomed.len(),
        held.len(),
        killed.elapsed()
    );
    for id in &ids {
        let n = counts.get(id).copied().unwrap_or(0);
        assert!(n <= 1, "{id} executed {n} times");
        if !held.contains(id) {
            assert_eq!(n, 1, "{id} delivered exactly once");
        }
    }
    assert!(
        !held.is_empty(),
        "the killed instance had redeliveries in flight"
    );
    // The killed instance's requests still in the socket when it died
    // reach the handler after the kill: what it sent is read now. A
    // delivery it had taken but not yet sent is held too (nobody can know
    // it was not sent), and never executed.
    let sent_by_doomed = via_doomed.lock().unwrap().started.clone();
    let resent = executions(&survivor_handler);
    for id in &held {
        assert!(
            !resent.contains_key(id),
            "{id} is held, yet the survivor sent it"
        );
        let n = counts.get(id).copied().unwrap_or(0);
        assert!(
            n == 0 || sent_by_doomed.contains(id),
            "{id} is held and executed although the killed instance never sent it"
        );
        let view = delivery(survivor.admin, id).await;
        assert!(
            view["last_error"]
                .as_str()
                .unwrap_or("")
                .contains("vanished"),
            "{view}"
        );
    }
    assert_eq!(delivered + held.len(), ids.len(), "nothing lost");
    let dead = listed(survivor.admin, "dead").await;
    assert_eq!(
        dead.len(),
        held.len(),
        "the held ones wait for the operator: {dead:?}"
    );
}
