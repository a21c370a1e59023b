//! An instance SIGKILLed with 50 upstream calls in flight.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_instance_with_50_calls_in_flight() {
    let _lane = SINGLE_LANE.lock().await;
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
