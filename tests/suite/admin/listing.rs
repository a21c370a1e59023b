//! `GET /admin/records/{route}?state=unknown|in_flight`: the records that
//! need a person, listed by state and paged with a cursor, on Redis and
//! on the embedded store.

use std::collections::BTreeSet;
use std::time::Duration;

use idemgate::pipeline::admit::identify::hash_key_parts;
use idemgate::record::{Fingerprint, OwnerToken, Record};

use super::{TOKEN, admin, with_admin};
use crate::support::*;

/// The upstream: ids starting with `slow` take a minute (past the 2 s
/// upstream timeout: an unknown outcome, or a claim in flight until
/// then); every other id is answered at once.
async fn upstream() -> Upstream {
    Upstream::scripted(|_, body| {
        if id_of(body).starts_with("slow") {
            Reply::slow(Duration::from_secs(60))
        } else {
            Reply::ok()
        }
    })
    .await
}

/// The test route with a 2 s upstream timeout, unknown outcomes held for
/// 10 minutes, and the admin token.
fn listing_config(store: &str, upstream: &Upstream) -> String {
    with_admin(
        &config_text(store, &upstream.url(), "unknown_hold = \"10m\"")
            .replace("timeout = \"5s\"", "timeout = \"2s\""),
    )
}

fn hash_of(key: &str) -> String {
    hex::encode(hash_key_parts([key.as_bytes()]))
}

/// `GET` of a listing path: status and JSON body (`Null` if not JSON).
async fn list(gate: &Gate, query: &str) -> (u16, serde_json::Value) {
    let answer = admin(
        gate,
        "GET",
        &format!("/admin/records/pay?{query}"),
        Some(TOKEN),
    )
    .await;
    let body = serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null);
    (answer.status, body)
}

fn items(page: &serde_json::Value) -> &Vec<serde_json::Value> {
    page["items"].as_array().expect("items")
}

/// Every page of `state` at `limit` items a page: the items in order.
async fn every_page(gate: &Gate, state: &str, limit: usize) -> Vec<serde_json::Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let query = match &cursor {
            Some(cursor) => format!("state={state}&limit={limit}&cursor={cursor}"),
            None => format!("state={state}&limit={limit}"),
        };
        let (status, page) = list(gate, &query).await;
        assert_eq!(status, 200, "{page}");
        assert!(items(&page).len() <= limit, "{page}");
        all.extend(items(&page).iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
    panic!("no last page after 100 pages");
}

/// Delivers payment `id` on a task of its own.
fn spawn_delivery(gate: &Gate, id: &str) -> tokio::task::JoinHandle<Answer> {
    let (url, body) = (gate.url("/notify"), payment(id));
    tokio::spawn(async move { deliver(&url, &body).await })
}

/// Writes an in-flight record for `key` whose owner stopped renewing it:
/// its TTL is below `unknown_hold`, so it reads as unknown (owner lost).
fn owner_lost_record(redis: &RedisServer, key: &str) {
    let record = Record::in_flight(OwnerToken([5; 16]), Fingerprint([6; 32]), None)
        .with_key(Some(key.as_bytes()))
        .encode()
        .unwrap();
    let name = format!("idemgate:pay:{}", hash_of(key));
    redis.set_bytes(&name, &record);
    redis.cli(&["PEXPIRE", &name, "60000"]);
}

/// The whole story on one store: completed, unknown and in-flight records
/// are each listed under their state only, with key value, age and TTL;
/// paging one item at a time visits every record exactly once.
async fn lists_records_by_state(store: &str, redis: Option<&RedisServer>) {
    let upstream = upstream().await;
    let gate = Gate::start(&listing_config(store, &upstream)).await;
    for id in ["done-1", "done-2"] {
        assert_eq!(
            deliver(&gate.url("/notify"), &payment(id)).await.status,
            200
        );
    }
    let unknown = ["slow-u1", "slow-u2", "slow-u3"];
    let sends: Vec<_> = unknown.iter().map(|id| spawn_delivery(&gate, id)).collect();
    for send in sends {
        assert_eq!(send.await.unwrap().status, 504, "upstream timed out");
    }
    let mut expected_unknown: BTreeSet<String> =
        unknown.iter().map(|id| (*id).to_owned()).collect();
    if let Some(redis) = redis {
        owner_lost_record(redis, "lost-1");
        expected_unknown.insert("lost-1".to_owned());
    }

    // A delivery in flight: listed as in_flight, and only there.
    let in_flight = spawn_delivery(&gate, "slow-f1");
    let page = poll(
        "the in-flight claim listed",
        Duration::from_millis(1_500),
        Duration::from_millis(20),
        async || {
            let (status, page) = list(&gate, "state=in_flight").await;
            assert_eq!(status, 200, "{page}");
            (!items(&page).is_empty()).then_some(page)
        },
    )
    .await;
    assert_eq!(
        (&page["route"], &page["scope"]),
        (&"pay".into(), &"pay".into())
    );
    assert_eq!(page["state"], "in_flight");
    assert_eq!(page["next_cursor"], serde_json::Value::Null);
    let [item] = items(&page).as_slice() else {
        panic!("one in-flight record: {page}");
    };
    assert_eq!(item["key"], "slow-f1");
    assert_eq!(item["key_hash"], hash_of("slow-f1"));
    assert_eq!(item["state"], "in_flight");
    assert_eq!(item["past_lease"], false);
    assert_eq!(item["status"], serde_json::Value::Null);
    assert_eq!(item["trace_id"], serde_json::Value::Null, "tracing is off");
    assert!(item["ttl_ms"].as_u64().unwrap() > 600_000, "lease + hold");
    assert!(item["age_ms"].as_u64().unwrap() < 2_000);

    // The unknown outcomes: exactly those, with their key values.
    let (status, page) = list(&gate, "state=unknown").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["state"], "unknown");
    assert_eq!(page["next_cursor"], serde_json::Value::Null);
    let listed: BTreeSet<String> = items(&page)
        .iter()
        .map(|item| item["key"].as_str().expect("key value").to_owned())
        .collect();
    assert_eq!(listed, expected_unknown, "{page}");
    for item in items(&page) {
        let key = item["key"].as_str().unwrap();
        assert_eq!(item["key_hash"], hash_of(key));
        assert_eq!(item["status"], serde_json::Value::Null);
        let ttl = item["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 0 && ttl <= 600_000, "held for 10m: {item}");
        if key == "lost-1" {
            assert_eq!(item["state"], "unknown_owner_lost");
            assert_eq!(item["past_lease"], true);
        } else {
            assert_eq!(item["state"], "unknown");
            assert!(item.get("past_lease").is_none(), "{item}");
            let age = item["age_ms"].as_u64().unwrap();
            assert!(
                (1_900..60_000).contains(&age),
                "claimed before the 2 s timeout: {item}"
            );
        }
        // The hash names the record in the record API.
        let one = admin(
            &gate,
            "GET",
            &format!(
                "/admin/records/pay?hash={}",
                item["key_hash"].as_str().unwrap()
            ),
            Some(TOKEN),
        )
        .await;
        assert_eq!(one.status, 200);
    }

    // One item a page: every record exactly once, in as many pages.
    let paged = every_page(&gate, "unknown", 1).await;
    let paged_keys: Vec<String> = paged
        .iter()
        .map(|item| item["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paged_keys.len(), expected_unknown.len(), "{paged_keys:?}");
    assert_eq!(
        paged_keys.iter().cloned().collect::<BTreeSet<_>>(),
        expected_unknown
    );
    let paged_flight = every_page(&gate, "in_flight", 1).await;
    assert_eq!(paged_flight.len(), 1, "{paged_flight:?}");

    refuses_bad_listings(&gate).await;
    in_flight.abort();
    gate.stop().await;
}

async fn refuses_bad_listings(gate: &Gate) {
    for query in [
        "state=dead",
        "state=completed",
        "state=unknown&limit=0",
        "state=unknown&limit=501",
        "state=unknown&cursor=not-a-cursor",
        "state=unknown&key=slow-u1",
        &format!("state=unknown&hash={}", hash_of("slow-u1")),
        "state=unknown&page=2",
        "state=unknown&state=in_flight",
    ] {
        let (status, body) = list(gate, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["reason"], "bad_request", "{query}: {body}");
    }
    let path_key = admin(
        gate,
        "GET",
        "/admin/records/pay/slow-u1?state=unknown",
        Some(TOKEN),
    )
    .await;
    assert_eq!(path_key.status, 400);
    let delete = admin(
        gate,
        "DELETE",
        "/admin/records/pay?state=unknown",
        Some(TOKEN),
    )
    .await;
    assert_eq!(delete.status, 400);
    let detail = String::from_utf8_lossy(&delete.body).into_owned();
    assert!(detail.contains("DELETE needs hash= or key="), "{detail}");
    for token in [None, Some("wrong")] {
        let answer = admin(gate, "GET", "/admin/records/pay?state=unknown", token).await;
        assert_eq!(answer.status, 401, "{token:?}");
    }
    let no_route = admin(
        gate,
        "GET",
        "/admin/records/nope?state=unknown",
        Some(TOKEN),
    )
    .await;
    assert_eq!(no_route.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_records_by_state_on_redis() {
    let redis = RedisServer::start();
    lists_records_by_state(&redis_store(&redis), Some(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_records_by_state_on_the_embedded_store() {
    let (_dir, store) = temp_embedded_store();
    lists_records_by_state(&store, None).await;
}

/// A page examines at most ten keys per item asked for: with many
/// completed records and one unknown outcome, `limit=1` walks several
/// pages (some empty, each with a cursor) and still finds it exactly once.
/// The bound is read where it is kept, in the `SCAN` commands each page
/// sends (`MONITOR`): their `COUNT` hints add up to at most ten. How many
/// keys Redis returns for a hint is its own business (more while its
/// table is rehashing), so the page count is only bounded below by two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_per_page_is_bounded_and_paging_still_finds_everything() {
    let redis = RedisServer::start();
    let upstream = upstream().await;
    let gate = Gate::start(&listing_config(&redis_store(&redis), &upstream)).await;
    for n in 0..40 {
        let id = format!("done-{n}");
        assert_eq!(
            deliver(&gate.url("/notify"), &payment(&id)).await.status,
            200
        );
    }
    assert_eq!(
        deliver(&gate.url("/notify"), &payment("slow-u"))
            .await
            .status,
        504
    );
    let watch = redis.watch_data();
    let mut seen = 0;
    let mut examined_by_last_page = || {
        let commands = watch.commands();
        let hints = scan_hints(&commands[seen..]);
        seen = commands.len();
        hints
    };
    let (status, first) = list(&gate, "state=unknown&limit=1").await;
    assert_eq!(status, 200);
    let mut hints = vec![examined_by_last_page()];
    let mut found = items(&first).len();
    let mut cursor = first["next_cursor"].as_str().map(str::to_owned);
    while let Some(next) = cursor {
        let (status, page) = list(&gate, &format!("state=unknown&limit=1&cursor={next}")).await;
        assert_eq!(status, 200, "{page}");
        hints.push(examined_by_last_page());
        found += items(&page).len();
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        assert!(hints.len() < 50, "no last page");
    }
    assert_eq!(found, 1, "the one unknown outcome, once");
    assert!(
        hints.iter().all(|&hint| (1..=10).contains(&hint)),
        "every page asks Redis to examine 1 to 10 keys: {hints:?}"
    );
    assert!(
        hints.len() >= 2,
        "41 keys at 10 a page take more than one page: {hints:?}"
    );
    gate.stop().await;
}

/// The `COUNT` hints of the `SCAN` commands among `monitor_lines`, added.
fn scan_hints(monitor_lines: &[String]) -> usize {
    monitor_lines
        .iter()
        .filter(|line| line.contains("\"SCAN\"") || line.contains("\"scan\""))
        .map(|line| {
            let args: Vec<&str> = line.split('"').filter(|a| !a.trim().is_empty()).collect();
            let at = args
                .iter()
                .position(|a| a.eq_ignore_ascii_case("COUNT"))
                .expect("every listing SCAN carries a COUNT");
            args[at + 1].parse::<usize>().expect("a COUNT number")
        })
        .sum()
}
