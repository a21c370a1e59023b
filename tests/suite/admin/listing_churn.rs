//! The Redis records listing while the keyspace grows and shrinks between
//! pages: every record present for the whole walk is listed exactly once
//! (`SCAN`'s own guarantee, kept by never cutting a batch without resuming
//! it), and a page's work is bounded by the keys the server examines,
//! whatever they are.

use std::collections::{BTreeMap, BTreeSet};

use idemgate::pipeline::admit::identify::hash_key_parts;
use idemgate::record::{Fingerprint, OwnerToken, Record};

use super::{TOKEN, admin, with_admin};
use crate::support::*;

/// Owner-lost claims (TTL one minute, below the route's ten-minute hold):
/// listed as unknown.
const TTL_MS: u64 = 60_000;

/// The record key of test record `name` on route `pay`.
fn record_key(name: &str) -> String {
    format!(
        "idemgate:pay:{}",
        hex::encode(hash_key_parts([name.as_bytes()]))
    )
}

/// `count` owner-lost records named `{stem}-{n}`: (key, value) pairs.
fn owner_lost(stem: &str, range: std::ops::Range<usize>) -> Vec<(String, Vec<u8>)> {
    let value = Record::in_flight(OwnerToken([5; 16]), Fingerprint([6; 32]), None)
        .encode()
        .unwrap()
        .to_vec();
    range
        .map(|n| (record_key(&format!("{stem}-{n}")), value.clone()))
        .collect()
}

/// A gate on `redis` whose route `pay` holds unknown outcomes ten minutes.
async fn gate_on(redis: &RedisServer) -> Gate {
    Gate::start(&with_admin(&config_text(
        &redis_store(redis),
        "http://127.0.0.1:9",
        "unknown_hold = \"10m\"",
    )))
    .await
}

/// Walks `state=unknown` at `limit` a page, calling `between(page)` after
/// each page: how many times each listed key hash was shown, and the pages.
async fn walk(
    gate: &Gate,
    limit: usize,
    mut between: impl FnMut(usize),
) -> (BTreeMap<String, usize>, usize) {
    let mut shown = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for page in 1..=3_000 {
        let query = match &cursor {
            Some(cursor) => format!("state=unknown&limit={limit}&cursor={cursor}"),
            None => format!("state=unknown&limit={limit}"),
        };
        let answer = admin(
            gate,
            "GET",
            &format!("/admin/records/pay?{query}"),
            Some(TOKEN),
        )
        .await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        let items = body["items"].as_array().expect("items");
        assert!(
            items.len() <= limit,
            "at most {limit} a page: {}",
            items.len()
        );
        for item in items {
            let hash = item["key_hash"].as_str().expect("key_hash").to_owned();
            *shown.entry(format!("idemgate:pay:{hash}")).or_insert(0) += 1;
        }
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (shown, page),
        }
        between(page);
    }
    panic!("no last page after 3,000 pages");
}

/// Every key of `kept` shown exactly once (`at_least`: once or more).
fn assert_each_shown(kept: &[(String, Vec<u8>)], shown: &BTreeMap<String, usize>, at_least: bool) {
    let missed: Vec<&String> = kept
        .iter()
        .map(|(key, _)| key)
        .filter(|key| !shown.contains_key(*key))
        .collect();
    let repeated: BTreeSet<&String> = kept
        .iter()
        .map(|(key, _)| key)
        .filter(|key| shown.get(*key).is_some_and(|n| *n > 1))
        .collect();
    assert!(
        missed.is_empty(),
        "{} of {} records present throughout never shown",
        missed.len(),
        kept.len()
    );
    assert!(
        at_least || repeated.is_empty(),
        "{} of {} records present throughout shown twice",
        repeated.len(),
        kept.len()
    );
}

/// 2,000 records, paged seven at a time while twelve more arrive after
/// every page (the hash table doubles during the walk): each of the 2,000
/// exactly once, and no record at all twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_keyspace_shows_each_record_exactly_once() {
    let redis = RedisServer::start();
    let kept = owner_lost("kept", 0..2_000);
    redis.write_many(&kept, TTL_MS, &[]);
    let gate = gate_on(&redis).await;
    let (shown, pages) = walk(&gate, 7, |page| {
        redis.write_many(&owner_lost(&format!("new{page}"), 0..12), TTL_MS, &[]);
    })
    .await;
    assert_each_shown(&kept, &shown, false);
    let twice = shown.values().filter(|n| **n > 1).count();
    assert_eq!(twice, 0, "a growing table repeats nothing ({pages} pages)");
    gate.stop().await;
}

/// `kept` records stay and `doomed` are deleted `per_page` after every
/// page of a seven-a-page walk: each kept record shown (`at_least`: once
/// or more, else exactly once).
async fn shrinking_walk(kept: usize, doomed: usize, per_page: usize, at_least: bool) {
    let redis = RedisServer::start();
    let kept = owner_lost("kept", 0..kept);
    let doomed = owner_lost("doomed", 0..doomed);
    redis.write_many(&kept, TTL_MS, &[]);
    redis.write_many(&doomed, TTL_MS, &[]);
    let gate = gate_on(&redis).await;
    let mut doomed_keys = doomed.iter().map(|(key, _)| key.clone());
    let (shown, _) = walk(&gate, 7, |_| {
        let batch: Vec<String> = doomed_keys.by_ref().take(per_page).collect();
        redis.write_many(&[], TTL_MS, &batch);
    })
    .await;
    assert_each_shown(&kept, &shown, at_least);
    gate.stop().await;
}

/// 2,000 records kept and 2,000 deleted thirty after every page: each kept
/// record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrinking_keyspace_shows_each_record_exactly_once() {
    shrinking_walk(2_000, 2_000, 30, false).await;
}

/// 200 records kept among 3,800 deleted: the table shrinks to a tenth
/// during the walk, and `SCAN` may then return a key twice (its own
/// caveat), but never misses one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_shrinking_to_a_tenth_misses_nothing() {
    shrinking_walk(200, 3_800, 150, true).await;
}

/// One `limit=1` page of a route with no records among 3,000 keys of
/// another route: the server examines a bounded number of keys, not the
/// whole keyspace, and the page says more may follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_examines_a_bounded_number_of_keys_whatever_they_are() {
    let redis = RedisServer::start();
    let others: Vec<(String, Vec<u8>)> = (0..3_000)
        .map(|n| (format!("idemgate:refunds:{n:064x}"), b"x".to_vec()))
        .collect();
    redis.write_many(&others, TTL_MS, &[]);
    let gate = gate_on(&redis).await;
    redis.reset_stats();
    let answer = admin(
        &gate,
        "GET",
        "/admin/records/pay?state=unknown&limit=1",
        Some(TOKEN),
    )
    .await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let scans = redis.command_counts().get("scan").copied().unwrap_or(0);
    assert!(scans <= 10, "one page: {scans} SCAN calls");
    let page: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert!(page["next_cursor"].is_string(), "{page}");
    gate.stop().await;
}
