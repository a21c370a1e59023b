//! `idemgate admin entity …`: an entity's state and history as
//! a table and as the API's JSON, by id and by hash, against a real gate
//! on a real `redis-server`.

use super::{cli_at, with_admin};
use crate::entity::MACHINE;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entity_shows_state_and_history_by_id_and_by_hash() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, MACHINE, |text| with_admin(&text)).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "n1", "o-7", "success").await, 200);
    assert_eq!(notify(&url, "n2", "o-7", "failed").await, 200);

    let shown = cli_at(gate.admin, &["entity", "pay", "o-7"]).await.ok();
    for expected in [
        "state           success",
        "counts.applied  1",
        "counts.refused  1",
        "KIND     FROM     TO       DELIVERY",
    ] {
        assert!(
            shown.stdout.contains(expected),
            "{expected}:\n{}",
            shown.stdout
        );
    }
    // Newest first: the refused failure above the applied success.
    let refused = shown.stdout.find("refused  success  failed").unwrap();
    let applied = shown.stdout.find("applied  -        success").unwrap();
    assert!(refused < applied, "{}", shown.stdout);

    let json = cli_at(gate.admin, &["--json", "entity", "pay", "o-7"])
        .await
        .ok()
        .json();
    assert_eq!(json["state"], "success");
    let hash = json["entity"].as_str().unwrap().to_owned();
    let by_hash = cli_at(gate.admin, &["--json", "entity", "pay", "--hash", &hash])
        .await
        .ok()
        .json();
    assert_eq!(by_hash["history"], json["history"]);

    let unknown = cli_at(gate.admin, &["entity", "pay", "o-none"]).await;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    assert!(unknown.stderr.contains("entity_not_found"), "{unknown:?}");
    let neither = cli_at(gate.admin, &["entity", "pay"]).await;
    assert_eq!(neither.code, Some(2), "{neither:?}");
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entity_set_and_clear_take_what_the_operator_saw() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, MACHINE, |text| with_admin(&text)).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "n1", "o-8", "pending").await, 200);
    let stale = cli_at(
        gate.admin,
        &[
            "entity",
            "pay",
            "o-8",
            "--set",
            "success",
            "--expect-state",
            "failed",
            "--expect-pending",
            "none",
        ],
    )
    .await;
    assert_eq!(stale.code, Some(1), "{stale:?}");
    assert!(stale.stderr.contains("entity_changed"), "{stale:?}");
    let set = cli_at(
        gate.admin,
        &[
            "--json",
            "entity",
            "pay",
            "o-8",
            "--set",
            "success",
            "--expect-state",
            "pending",
            "--expect-pending",
            "none",
            "--operator",
            "ana",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(set["state"], "success");
    assert_eq!(set["history"][0]["kind"], "set");
    assert_eq!(set["history"][0]["delivery"], "ana");
    let cleared = cli_at(
        gate.admin,
        &[
            "entity",
            "pay",
            "o-8",
            "--clear",
            "--expect-state",
            "success",
            "--expect-pending",
            "none",
        ],
    )
    .await
    .ok();
    assert!(cleared.stdout.contains("cleared"), "{}", cleared.stdout);
    // Saying what was seen is required.
    let blind = cli_at(gate.admin, &["entity", "pay", "o-8", "--clear"]).await;
    assert_eq!(blind.code, Some(2), "{blind:?}");

    // The audit trail: the clear, the set and the stale set, newest first,
    // each with the state it found and the state it left.
    let trail = cli_at(gate.admin, &["--json", "audit"]).await.ok().json();
    let rows: Vec<String> = trail["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} {}",
                e["action"], e["expected"], e["before"], e["after"], e["outcome"]
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            r#""entity_clear" "success" "success" "none" "done""#,
            r#""entity_set" "pending" "pending" "success" "done""#,
            r#""entity_set" "failed" "pending" "pending" "entity_changed""#,
        ],
        "{trail}"
    );
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_lists_the_entities_something_holds() {
    let redis = RedisServer::start();
    // The success's call times out: its unknown outcome holds the entity.
    let upstream = Upstream::slow_first(std::time::Duration::from_millis(800)).await;
    let extra = format!("unknown_hold = \"10m\"\n{MACHINE}");
    let text = config_text(&redis_store(&redis), &upstream.url(), &extra)
        .replace("timeout = \"5s\"", "timeout = \"200ms\"");
    let gate = Gate::start(&with_admin(&text)).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "h1", "o-9", "success").await, 504);
    // Another entity, settled: not listed.
    assert_eq!(notify(&url, "h2", "o-10", "pending").await, 200);
    let shown = cli_at(gate.admin, &["held", "pay", "--all"]).await.ok();
    assert!(
        shown.stdout.contains("ENTITY") && shown.stdout.contains("PENDING TO"),
        "{}",
        shown.stdout
    );
    let rows: Vec<&str> = shown
        .stdout
        .lines()
        .filter(|line| line.contains("success"))
        .collect();
    assert_eq!(rows.len(), 1, "{}", shown.stdout);
    let json = cli_at(gate.admin, &["--json", "held", "pay"])
        .await
        .ok()
        .json();
    assert_eq!(json["items"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(json["items"][0]["pending"]["to"], "success");
    gate.stop().await;
}

/// `records get --key --entity` and `inbox show`-style naming on an entity
/// route: the key value with the entity id finds the record; the key alone
/// is refused with the reason, not answered "no record".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_get_names_an_entity_routes_record_by_key_and_entity() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, MACHINE, |text| with_admin(&text)).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "n1", "o-7", "success").await, 200);

    let found = cli_at(
        gate.admin,
        &[
            "--json", "records", "get", "pay", "--key", "n1", "--entity", "o-7",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!(found["state"], "completed", "{found}");
    let alone = cli_at(gate.admin, &["records", "get", "pay", "--key", "n1"]).await;
    assert_ne!(alone.code, Some(0));
    assert!(alone.stderr.contains("entity="), "{}", alone.stderr);
    assert!(
        !alone.stderr.contains("record_not_found"),
        "{}",
        alone.stderr
    );
    gate.stop().await;
}
