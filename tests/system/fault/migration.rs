//! A slot migrating while a delivery is in flight (a Cluster reshard):
//! the answer in hand follows the record to its new node (`ASK`), so the
//! delivery answered 200 is replayed as 200, never turned unknown.

use super::*;

/// `CLUSTER MYID` of the node on `port`.
fn node_id(port: u16) -> String {
    cli(port, &["CLUSTER", "MYID"]).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis cluster"]
async fn an_answer_follows_its_record_to_the_slots_new_node() {
    let _lane = CLUSTER_LANE.lock().await;
    let cluster = Cluster::start();
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_millis(1500))).await;
    let store = cluster.store(TEST_STORE_TIMEOUT);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("idemgate.log");
    let gate = GateProcess::launch(
        &config_text(&store, &upstream.url(), ""),
        &[("RUST_LOG", "idemgate=debug")],
        Some(&log),
    );
    let primaries = cluster.primaries();
    let mut measured = Vec::new();
    for (n, id) in ["mig-1", "mig-2", "mig-3"].iter().enumerate() {
        let slot = slot(id);
        let source = primaries.iter().find(|p| p.owns(slot)).expect("owner");
        let target = primaries
            .iter()
            .find(|p| p.port != source.port)
            .expect("another primary");
        let body = payment(id);
        let first =
            deliver_while_upstream_works(gate.url("/notify"), &body, &upstream, n + 1).await;

        // Mid-call, the slot starts moving and the in-flight record moves.
        let slot_text = slot.to_string();
        let (source_id, target_id) = (node_id(source.port), node_id(target.port));
        let set = |port: u16, how: &str, id: &str| {
            let out = cli(port, &["CLUSTER", "SETSLOT", &slot_text, how, id]);
            assert_eq!(out.trim(), "OK", "SETSLOT {how} on {port}: {out}");
        };
        set(target.port, "IMPORTING", &source_id);
        set(source.port, "MIGRATING", &target_id);
        let key = store_key(id);
        let moved = cli(
            source.port,
            &[
                "MIGRATE",
                "127.0.0.1",
                &target.port.to_string(),
                "",
                "0",
                "5000",
                "KEYS",
                &key,
            ],
        );
        assert_eq!(moved.trim(), "OK", "MIGRATE: {moved}");

        let answer = first.await.unwrap();
        assert_eq!(answer.status, 200, "{id}: {answer:?}");
        // A copy while the slot still migrates: its claim is asked over.
        let copy = deliver(&gate.url("/notify"), &body).await;
        assert_eq!(
            copy.status,
            200,
            "{id}: mid-migration copy: {copy:?}\n{}",
            log_text(&log)
        );
        assert_eq!(copy.replayed(), Some("true"), "{id}: {copy:?}");
        // The migration ends: the slot is the target's everywhere.
        for node in &primaries {
            set(node.port, "NODE", &target_id);
        }
        let copy = deliver_until_served(&gate.url("/notify"), &body, Duration::from_secs(10)).await;
        assert_eq!(copy.replayed(), Some("true"), "{id}: after it: {copy:?}");
        measured.push(format!(
            "{id}: slot {slot} {} -> {}",
            source.port, target.port
        ));
    }
    assert_eq!(upstream.calls(), 3, "each delivery ran once");
    assert_eq!(
        metric(gate.admin, "idemgate_unknown_outcomes_total{route=\"pay\"}").await,
        Some(0.0),
        "no answer given up"
    );
    eprintln!(
        "measured: slot migrations mid-call, all replayed 200: {}",
        measured.join("; ")
    );
}
