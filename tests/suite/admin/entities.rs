//! `GET /admin/entities/{route}`: an entity's state, pending
//! change and history with the deliveries that made them, on a real
//! Redis behind a real gate driving the entity route of `entity.rs`.

use crate::entity::{MACHINE, notice};
use crate::support::*;

use super::{TOKEN, admin, with_admin};

fn body(answer: &Answer) -> serde_json::Value {
    serde_json::from_slice(&answer.body).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entity_api_shows_state_and_the_deliveries_that_made_it() {
    let (redis, upstream, gate) =
        redis_gate_edited(Upstream::start().await, MACHINE, |text| with_admin(&text)).await;
    let url = gate.url("/notify");
    assert_eq!(notify(&url, "n1", "o 1", "pending").await, 200);
    assert_eq!(notify(&url, "n2", "o 1", "success").await, 200);
    // A late failure: acknowledged, refused by the machine.
    assert_eq!(notify(&url, "n3", "o 1", "failed").await, 200);
    // The same success again under another notice id: a repeat.
    assert_eq!(notify(&url, "n4", "o 1", "success").await, 200);

    let path = "/admin/entities/pay?id=o%201";
    assert_eq!(admin(&gate, "GET", path, None).await.status, 401);
    let answer = admin(&gate, "GET", path, Some(TOKEN)).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let view = body(&answer);
    assert_eq!(view["route"], "pay");
    assert_eq!(view["id"], "o 1");
    assert_eq!(view["state"], "success", "{view}");
    assert!(view["since_ms"].as_u64().unwrap() > 0, "{view}");
    assert!(view["pending"].is_null(), "{view}");
    assert!(view["ttl_ms"].as_u64().unwrap() > 0, "{view}");
    assert_eq!(
        view["counts"],
        serde_json::json!({"applied": 2, "refused": 1, "repeats": 1}),
        "{view}"
    );
    let history = view["history"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = history
        .iter()
        .map(|t| (t["kind"].as_str().unwrap(), t["to"].as_str().unwrap()))
        .collect();
    // Newest first.
    assert_eq!(
        kinds,
        [
            ("repeat", "success"),
            ("refused", "failed"),
            ("applied", "success"),
            ("applied", "pending")
        ],
        "{view}"
    );
    assert!(history[3]["from"].is_null(), "{view}");
    assert_eq!(history[2]["from"], "pending", "{view}");
    // Each applied change's delivery leads to its record (a refused or
    // repeated notice is acknowledged without a claim: no record).
    for transition in history.iter().filter(|t| t["kind"] == "applied") {
        let delivery = transition["delivery"].as_str().unwrap();
        let record = admin(
            &gate,
            "GET",
            &format!(
                "/admin/records/pay?hash={}",
                delivery.replace('{', "%7B").replace('}', "%7D")
            ),
            Some(TOKEN),
        )
        .await;
        assert_eq!(record.status, 200, "{transition}: {record:?}");
    }

    // The same entity by its hash; ids are not shown then.
    let hash = view["entity"].as_str().unwrap().to_owned();
    assert_eq!(hash.len(), 32);
    let by_hash = admin(
        &gate,
        "GET",
        &format!("/admin/entities/pay?hash={}", hash.to_uppercase()),
        Some(TOKEN),
    )
    .await;
    let by_hash_view = body(&by_hash);
    assert_eq!(by_hash_view["state"], "success");
    assert!(by_hash_view["id"].is_null());
    assert_eq!(by_hash_view["history"], view["history"]);

    let refusals = [
        ("/admin/entities/pay?id=o-unknown", 404, "entity_not_found"),
        ("/admin/entities/nope?id=o%201", 404, "unknown_route"),
        ("/admin/entities/pay", 400, "bad_request"),
        ("/admin/entities/pay?hash=abc", 400, "bad_request"),
        ("/admin/entities/pay?key=o", 400, "bad_request"),
    ];
    for (path, status, reason) in refusals {
        let answer = admin(&gate, "GET", path, Some(TOKEN)).await;
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert_eq!(answer.reason().as_deref(), Some(reason), "{path}");
    }
    // DELETE clears an entity, but only given what the operator saw
    // (suite entity_outcomes); another method is 405.
    let delete = admin(&gate, "DELETE", path, Some(TOKEN)).await;
    assert_eq!(delete.reason().as_deref(), Some("bad_request"));
    let post = admin(&gate, "POST", path, Some(TOKEN)).await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, PUT, DELETE"));
    gate.stop().await;

    // A route without [route.entity] keeps no entity state.
    let plain = Gate::start(&with_admin(&config_text(
        &redis_store(&redis),
        &upstream.url(),
        "",
    )))
    .await;
    let answer = admin(&plain, "GET", path, Some(TOKEN)).await;
    assert_eq!(answer.status, 404, "{answer:?}");
    assert_eq!(answer.reason().as_deref(), Some("entity_not_configured"));
    plain.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_in_flight_is_pending_with_its_delivery_on_the_embedded_store() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::slow_first(std::time::Duration::from_millis(1500)).await;
    let text = config_text(&store, &upstream.url(), MACHINE);
    let gate = Gate::start(&with_admin(&text)).await;
    let url = gate.url("/notify");
    let slow = tokio::spawn({
        let url = url.clone();
        async move { deliver(&url, &notice("n1", "o-9", "success")).await }
    });
    let path = "/admin/entities/pay?id=o-9";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let view = loop {
        let answer = admin(&gate, "GET", path, Some(TOKEN)).await;
        if answer.status == 200 && !body(&answer)["pending"].is_null() {
            break body(&answer);
        }
        assert!(std::time::Instant::now() < deadline, "{answer:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(view["state"].is_null(), "{view}");
    assert!(view["since_ms"].is_null(), "{view}");
    assert_eq!(view["pending"]["to"], "success", "{view}");
    assert!(view["pending"]["from"].is_null(), "{view}");
    let delivery = view["pending"]["delivery"].as_str().unwrap().to_owned();
    let record = admin(
        &gate,
        "GET",
        &format!(
            "/admin/records/pay?hash={}",
            delivery.replace('{', "%7B").replace('}', "%7D")
        ),
        Some(TOKEN),
    )
    .await;
    assert_eq!(body(&record)["state"], "in_flight", "{record:?}");

    assert_eq!(slow.await.unwrap().status, 200);
    let settled = body(&admin(&gate, "GET", path, Some(TOKEN)).await);
    assert_eq!(settled["state"], "success", "{settled}");
    assert!(settled["pending"].is_null(), "{settled}");
    assert_eq!(settled["history"][0]["delivery"], delivery.as_str());
    gate.stop().await;
}

/// A record on an entity route carries its entity's tag in its store key,
/// so a key value alone can not name it: `?key=` and the path form take
/// `entity=` (the id, as the entities API does) and find it; without it
/// they say so (400, never a 404 for a record that exists); the listing's
/// and the hot keys' hashes carry the tag and find it; a purge by key and
/// entity works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_way_names_a_record_on_an_entity_route() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), MACHINE)
        + "\n[hot_keys]\nk = 3\nwindow = \"1m\"\n";
    let gate = Gate::start(&with_admin(&text)).await;
    let url = gate.url("/notify");
    for _ in 0..3 {
        assert_eq!(notify(&url, "n 1", "o 1", "pending").await, 200);
    }
    let get = |path: String| {
        let gate = &gate;
        async move { admin(gate, "GET", &path, Some(TOKEN)).await }
    };
    for path in [
        "/admin/records/pay?key=n%201&entity=o%201",
        "/admin/records/pay/n%201?entity=o%201",
    ] {
        let answer = get(path.into()).await;
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
        assert_eq!(body(&answer)["state"], "completed", "{path}");
    }
    for path in ["/admin/records/pay?key=n%201", "/admin/records/pay/n%201"] {
        let answer = get(path.into()).await;
        assert_eq!(answer.status, 400, "{path}: {answer:?}");
        let detail = body(&answer)["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("entity="), "{path}: {detail}");
    }
    // entity= beside hash= (whose tag names the entity) is refused, not
    // ignored; so is a hash without the tag.
    let plain_entity =
        get("/admin/records/pay?hash=".to_owned() + &"a".repeat(64) + "&entity=x").await;
    assert_eq!(plain_entity.status, 400, "{plain_entity:?}");
    let untagged = get("/admin/records/pay?hash=".to_owned() + &"a".repeat(64)).await;
    assert_eq!(untagged.status, 400, "{untagged:?}");

    // The hot keys' hash names the record.
    let hot = body(&get("/admin/hot-keys".into()).await);
    let hash = hot["routes"][0]["keys"][0]["key"]
        .as_str()
        .unwrap_or_else(|| panic!("{hot}"))
        .to_owned();
    assert!(hash.ends_with('}'), "the entity tag: {hash}");
    let by_hash = get(format!(
        "/admin/records/pay?hash={}",
        hash.replace('{', "%7B").replace('}', "%7D")
    ))
    .await;
    assert_eq!(by_hash.status, 200, "{by_hash:?}");

    // A purge by key and entity finds the record, and the entity rules
    // judge it: its change is applied, so the purge is refused.
    let purged = admin(
        &gate,
        "DELETE",
        "/admin/records/pay?key=n%201&entity=o%201&expect_state=completed",
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        (purged.status, purged.reason().as_deref()),
        (409, Some("entity_applied")),
        "{purged:?}"
    );
    gate.stop().await;
}
