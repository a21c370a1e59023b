//! `idemgate admin records …`: get and purge by key and by hash, and the
//! listing of unknown outcomes page by page.

use std::time::Duration;

use super::{cli_at, with_admin};
use crate::support::*;

/// A config whose upstream times out after 200 ms (the first call takes
/// 2 s), so that delivery's outcome turns unknown and is held.
fn times_out_to_unknown(redis: &RedisServer, upstream: &Upstream) -> String {
    with_admin(
        &config_text(
            &redis_store(redis),
            &upstream.url(),
            "unknown_hold = \"10m\"",
        )
        .replace("timeout = \"5s\"", "timeout = \"200ms\""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_get_and_purge_by_key_and_by_hash_resolve_an_unknown_outcome() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let gate = Gate::start(&times_out_to_unknown(&redis, &upstream)).await;
    let body = payment("p-cli");
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 504);

    let shown = cli_at(gate.admin, &["records", "get", "pay", "--key", "p-cli"])
        .await
        .ok();
    assert!(
        shown.stdout.contains("state        unknown"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("route        pay"),
        "{}",
        shown.stdout
    );
    let view = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--key", "p-cli"],
    )
    .await
    .ok()
    .json();
    assert_eq!(view["state"], "unknown");
    let hash = view["key_hash"].as_str().unwrap().to_owned();
    let by_hash = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--hash", &hash],
    )
    .await
    .ok()
    .json();
    assert_eq!(by_hash["fingerprint"], view["fingerprint"]);

    // A purge names the state it saw; another one is refused.
    let purge = |state: &'static str| {
        let hash = hash.clone();
        async move {
            let args = ["records", "purge", "pay", "--hash", &hash, "--state", state];
            cli_at(gate.admin, &args).await
        }
    };
    let stale = purge("completed").await;
    assert_eq!(stale.code, Some(1), "{stale:?}");
    assert!(
        stale.stderr.contains("reason record_changed") && stale.stderr.contains("unknown now"),
        "{stale:?}"
    );
    // Purged by hash: the next delivery is forwarded.
    let purged = purge("unknown").await.ok();
    assert!(
        purged.stdout.contains("purged the unknown record"),
        "{purged:?}"
    );
    let again = purge("unknown").await;
    assert_eq!(again.code, Some(1), "{again:?}");
    assert!(
        again.stderr.contains("reason record_not_found"),
        "{again:?}"
    );
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2);

    // Completed now; purged by key (a key value with characters a URL
    // escapes), the next delivery is forwarded again.
    let completed = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--key", "p-cli"],
    )
    .await
    .ok()
    .json();
    assert_eq!(
        (&completed["state"], &completed["status"]),
        (&"completed".into(), &200.into())
    );
    let args = [
        "records",
        "purge",
        "pay",
        "--key",
        "p-cli",
        "--state",
        "completed",
    ];
    let purged = cli_at(gate.admin, &args).await.ok();
    assert!(
        purged
            .stdout
            .contains("runs again: the handler had already done it"),
        "{purged:?}"
    );
    let third = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((third.status, third.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 3);

    let odd = "a b+c/d&e=%";
    assert_eq!(
        deliver(&gate.url("/notify"), &payment(odd)).await.status,
        200
    );
    let odd_view = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--key", odd],
    )
    .await
    .ok()
    .json();
    assert_eq!(odd_view["state"], "completed");

    // The audit trail: the four purges, newest first, two per page.
    let page = cli_at(gate.admin, &["audit", "--limit", "2"]).await.ok();
    let lines: Vec<&str> = page.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("OUTCOME"),
        "{page:?}"
    );
    let newest: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        (newest[3], newest[4], newest[5], newest[7..].join(" ")),
        (
            "admin",
            "purge",
            "pay",
            "completed → absent done".to_owned()
        ),
        "{page:?}"
    );
    assert!(lines[3].starts_with("more: --cursor a1."), "{page:?}");
    let all = cli_at(gate.admin, &["--json", "audit", "--all", "--limit", "2"])
        .await
        .ok();
    let outcomes: Vec<String> = all
        .stdout
        .lines()
        .flat_map(|line| {
            let page: serde_json::Value = serde_json::from_str(line).unwrap();
            page["items"].as_array().unwrap().clone()
        })
        .map(|entry| entry["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        outcomes,
        ["done", "record_not_found", "done", "record_changed"],
        "{all:?}"
    );
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_list_pages_through_the_unknown_outcomes() {
    let redis = RedisServer::start();
    // Every call outlasts the 200 ms upstream timeout: every outcome is unknown.
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_secs(2))).await;
    let gate = Gate::start(&times_out_to_unknown(&redis, &upstream)).await;
    let ids = ["p-list-0", "p-list-1", "p-list-2"];
    for id in ids {
        assert_eq!(
            deliver(&gate.url("/notify"), &payment(id)).await.status,
            504
        );
    }

    // People: one table of every page.
    let all = cli_at(
        gate.admin,
        &[
            "records", "list", "pay", "--state", "unknown", "--limit", "1", "--all",
        ],
    )
    .await
    .ok();
    let mut lines = all.stdout.lines();
    assert!(
        lines.next().unwrap().starts_with("KEY HASH  "),
        "{}",
        all.stdout
    );
    let mut keys: Vec<&str> = lines
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells[0].len(), 64, "{line}");
            assert_eq!(cells[2], "unknown", "{line}");
            cells[1]
        })
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ids, "{}", all.stdout);

    // One page: the rest is announced with its cursor, which the next run takes.
    let first = cli_at(
        gate.admin,
        &[
            "records", "list", "pay", "--state", "unknown", "--limit", "1",
        ],
    )
    .await
    .ok();
    let cursor = first
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("more: --cursor "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("a next page: {}", first.stdout))
        .to_owned();
    cli_at(
        gate.admin,
        &[
            "records", "list", "pay", "--state", "unknown", "--cursor", &cursor,
        ],
    )
    .await
    .ok();

    // Scripts: one page document per line, the items of all of them.
    let pages = cli_at(
        gate.admin,
        &[
            "--json", "records", "list", "pay", "--state", "unknown", "--limit", "1", "--all",
        ],
    )
    .await
    .ok();
    let items: usize = pages
        .stdout
        .lines()
        .map(|line| {
            let page: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(page["state"], "unknown", "{line}");
            page["items"].as_array().unwrap().len()
        })
        .sum();
    assert_eq!(items, 3, "{}", pages.stdout);
    assert!(pages.stdout.lines().count() >= 3, "{}", pages.stdout);

    let none = cli_at(
        gate.admin,
        &["records", "list", "pay", "--state", "in_flight"],
    )
    .await
    .ok();
    assert_eq!(none.stdout, "no in_flight records on route pay\n");
    gate.stop().await;
}

/// One unknown outcome among 2,000 healthy claims: a page examines only
/// part of the keyspace, so the first pages hold no row; the listing
/// follows them rather than saying "no unknown records", and finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_list_says_none_only_of_a_whole_walk() {
    use idemgate::pipeline::admit::identify::hash_key_parts;
    use idemgate::record::{Fingerprint, OwnerToken, Record};

    let redis = RedisServer::start();
    let key = |name: &str| {
        format!(
            "idemgate:pay:{}",
            hex::encode(hash_key_parts([name.as_bytes()]))
        )
    };
    let claim = Record::in_flight(OwnerToken([5; 16]), Fingerprint([6; 32]), None);
    // Claimed with a 1 ms hold: in flight for their whole minute of TTL.
    let healthy = claim
        .clone()
        .with_hold(Duration::from_millis(1))
        .encode()
        .unwrap();
    let healthy: Vec<(String, Vec<u8>)> = (0..2_000)
        .map(|n| (key(&format!("healthy-{n}")), healthy.to_vec()))
        .collect();
    redis.write_many(&healthy, 60_000, &[]);
    // Claimed under the route's ten-minute hold, a minute left: owner lost.
    let lost = claim.with_key(Some(b"lost-one")).encode().unwrap();
    redis.write_many(&[(key("lost-one"), lost.to_vec())], 60_000, &[]);
    let upstream = Upstream::scripted(|_, _| Reply::ok()).await;
    let gate = Gate::start(&times_out_to_unknown(&redis, &upstream)).await;

    let listed = cli_at(
        gate.admin,
        &["records", "list", "pay", "--state", "unknown"],
    )
    .await
    .ok();
    let rows: Vec<&str> = listed.stdout.lines().skip(1).collect();
    assert!(
        rows.first().is_some_and(|row| row.contains("lost-one")),
        "{}",
        listed.stdout
    );
    assert!(!listed.stdout.contains("no unknown"), "{}", listed.stdout);
    gate.stop().await;
}
