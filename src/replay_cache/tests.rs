use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::record::StoredResponse;

/// A store key as `store::StoreKey` spells it.
fn key(n: u32) -> String {
    format!("idemgate:r:{n:064x}")
}

fn record(state: RecordState) -> Record {
    crate::record::sample(state)
}

fn completed(body_len: usize) -> RecordState {
    RecordState::Completed(StoredResponse {
        status: 200,
        headers: vec![(Bytes::from_static(b"x-a"), Bytes::from_static(b"1"))],
        body: StoredBody::Kept(Bytes::from(vec![b'a'; body_len])),
    })
}

fn found(state: RecordState, ttl: Duration) -> Option<Found> {
    Some(Found {
        record: record(state),
        ttl: Some(ttl),
    })
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Fills `key` with a completed record of `body_len` bytes and `ttl`.
fn fill(cache: &Arc<ReplayCache>, key: &str, body_len: usize, ttl: Duration) {
    let fill = cache.begin_fill(key).expect("a fill may start");
    fill.land(found(completed(body_len), ttl));
}

fn coherent(capacity: usize) -> Arc<ReplayCache> {
    Arc::new(ReplayCache::new(capacity, true))
}

#[tokio::test(start_paused = true)]
async fn a_filled_record_is_served_until_its_retention_ends_and_never_after() {
    let cache = coherent(1 << 20);
    let mut filling = cache.begin_fill(&key(1)).unwrap();
    filling.sending();
    // The reply takes 300 ms: the retention counts from the send.
    tokio::time::advance(Duration::from_millis(300)).await;
    filling.land(found(completed(10), secs(10)));
    let hit = cache.get(&key(1)).expect("cached");
    assert_eq!(hit.ttl, Some(Duration::from_millis(9_700)));
    assert!(matches!(hit.record.state, RecordState::Completed(_)));

    tokio::time::advance(Duration::from_millis(9_699)).await;
    assert!(cache.get(&key(1)).is_some(), "1 ms before the end");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        cache.get(&key(1)).is_none(),
        "served at the end of retention"
    );
    assert_eq!(cache.bytes(), 0, "the expired entry is gone");
}

#[tokio::test(start_paused = true)]
async fn only_completed_records_with_a_ttl_are_cached() {
    let cache = coherent(1 << 20);
    for state in [
        RecordState::InFlight(Default::default()),
        RecordState::Unknown,
    ] {
        cache
            .begin_fill(&key(1))
            .unwrap()
            .land(found(state, secs(10)));
        assert!(cache.get(&key(1)).is_none());
    }
    cache.begin_fill(&key(1)).unwrap().land(Some(Found {
        record: record(completed(1)),
        ttl: None,
    }));
    assert!(cache.get(&key(1)).is_none(), "no TTL: retention unknown");
    cache
        .begin_fill(&key(1))
        .unwrap()
        .land(found(completed(1), Duration::ZERO));
    assert!(cache.get(&key(1)).is_none(), "already expired");
    cache.begin_fill(&key(1)).unwrap().land(None);
    assert!(cache.get(&key(1)).is_none(), "nothing found");
    assert!(cache.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_during_a_fill_keeps_the_old_record_out() {
    let cache = coherent(1 << 20);
    let filling = cache.begin_fill(&key(1)).unwrap();
    // The read returned the record, then the key was purged elsewhere and
    // the invalidation overtook the reply.
    cache.invalidate(key(1).as_str());
    filling.land(found(completed(10), secs(10)));
    assert!(cache.get(&key(1)).is_none());

    fill(&cache, &key(1), 10, secs(10));
    assert!(cache.get(&key(1)).is_some());
    cache.invalidate(key(1).as_str());
    assert!(cache.get(&key(1)).is_none(), "the entry itself is dropped");
    assert_eq!(cache.bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_suspended_cache_is_flushed_and_takes_no_fill_until_resumed() {
    let cache = coherent(1 << 20);
    fill(&cache, &key(1), 10, secs(10));
    let filling = cache.begin_fill(&key(2)).unwrap();
    cache.suspend(FlushReason::Disconnected);
    assert!(cache.get(&key(1)).is_none(), "flushed");
    filling.land(found(completed(10), secs(10)));
    assert!(
        cache.get(&key(2)).is_none(),
        "a fill from before the drop lands nothing"
    );
    assert!(
        cache.begin_fill(&key(2)).is_none(),
        "no fill while suspended"
    );
    cache.resume();
    fill(&cache, &key(2), 10, secs(10));
    assert!(cache.get(&key(2)).is_some());

    let filling = cache.begin_fill(&key(3)).unwrap();
    cache.flush(FlushReason::Server);
    filling.land(found(completed(10), secs(10)));
    assert!(cache.is_empty(), "a flush withdraws fills too");
}

#[tokio::test(start_paused = true)]
async fn a_cache_for_redis_fills_only_once_tracking_is_armed() {
    let cache = Arc::new(ReplayCache::new(1 << 20, false));
    assert!(cache.begin_fill(&key(1)).is_none());
    cache.resume();
    assert!(cache.begin_fill(&key(1)).is_some());
}

#[tokio::test(start_paused = true)]
async fn one_fill_per_key_at_a_time_and_a_dropped_one_frees_the_key() {
    let cache = coherent(1 << 20);
    let first = cache.begin_fill(&key(1)).unwrap();
    assert!(cache.begin_fill(&key(1)).is_none(), "single flight");
    assert!(cache.begin_fill(&key(2)).is_some(), "other keys are free");
    drop(first);
    let again = cache
        .begin_fill(&key(1))
        .expect("a failed read frees the key");
    again.land(found(completed(1), secs(10)));
    assert!(
        cache.begin_fill(&key(1)).is_none(),
        "no fill of a key already cached"
    );
}

#[tokio::test(start_paused = true)]
async fn the_least_recently_replayed_entry_makes_room_and_bytes_stay_bounded() {
    // Each entry weighs its body plus about 350 bytes of key and overhead.
    let capacity = 8 * 1024;
    let cache = coherent(capacity);
    for n in 0..4 {
        fill(&cache, &key(n), 1500, secs(60));
    }
    assert_eq!(cache.len(), 4);
    // Replaying key 0 makes key 1 the least recently used.
    assert!(cache.get(&key(0)).is_some());
    fill(&cache, &key(4), 1500, secs(60));
    assert!(cache.bytes() <= capacity, "{} bytes", cache.bytes());
    assert!(cache.get(&key(1)).is_none(), "the LRU entry left");
    for n in [0, 2, 3, 4] {
        assert!(cache.get(&key(n)).is_some(), "key {n} stays");
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_over_a_quarter_of_the_cache_is_not_cached() {
    let cache = coherent(64 * 1024);
    cache
        .begin_fill(&key(1))
        .unwrap()
        .land(found(completed(16 * 1024), secs(60)));
    assert!(cache.get(&key(1)).is_none());
    fill(&cache, &key(2), 15 * 1024, secs(60));
    assert!(cache.get(&key(2)).is_some());
}

#[tokio::test(start_paused = true)]
async fn weight_counts_key_headers_and_body() {
    let record = record(completed(1000));
    let key = key(1);
    let weight = weight(key.as_str(), &record);
    assert!(weight >= 1000 + key.as_str().len() + 4, "{weight}");
    assert!(weight <= 1000 + key.as_str().len() + 4 + 2 * ENTRY_OVERHEAD);
}

#[tokio::test(start_paused = true)]
async fn a_landed_answer_owns_its_bytes_and_pins_no_reply_buffer() {
    // A store reply whose bytes the decoded record's body slices.
    let reply = Bytes::from(vec![7u8; 64 * 1024]);
    let mut state = completed(0);
    if let RecordState::Completed(answer) = &mut state {
        answer.body = StoredBody::Kept(reply.slice(0..100));
    }
    let cache = coherent(1 << 20);
    let filling = cache.begin_fill(&key(1)).expect("a fill");
    filling.land(found(state, secs(60)));
    let hit = cache.get(&key(1)).expect("cached");
    let RecordState::Completed(answer) = hit.record.state else {
        panic!("completed")
    };
    let StoredBody::Kept(body) = answer.body else {
        panic!("kept")
    };
    assert_eq!(body.len(), 100);
    // Only this handle is left on the reply: the cache copied the body.
    assert!(
        reply.is_unique(),
        "the cached body shares the reply's buffer"
    );
}

/// Fills keys 0..=4 of 1,500-byte answers into an 8 KiB cache: the fifth
/// evicts the first, so the cache is full from then on.
fn full_cache() -> Arc<ReplayCache> {
    let cache = coherent(8 * 1024);
    for n in 0..5 {
        fill(&cache, &key(n), 1500, secs(60));
    }
    assert!(cache.get(&key(0)).is_none(), "the fifth fill evicted");
    cache
}

#[tokio::test(start_paused = true)]
async fn once_full_a_key_is_cached_on_its_second_miss_not_its_first() {
    let cache = full_cache();
    assert!(
        cache.begin_fill(&key(10)).is_none(),
        "a key's first miss in a full cache evicts nothing"
    );
    fill(&cache, &key(10), 1500, secs(60));
    assert!(cache.get(&key(10)).is_some(), "its second miss fills");
}

#[tokio::test(start_paused = true)]
async fn keys_replayed_once_each_do_not_wash_a_full_cache_out() {
    let cache = full_cache();
    // A sender re-sending a backlog: every key once, none again.
    for n in 100..10_100 {
        if let Some(fill) = cache.begin_fill(&key(n)) {
            fill.land(found(completed(1500), secs(60)));
        }
    }
    let kept = (1..5).filter(|n| cache.get(&key(*n)).is_some()).count();
    assert_eq!(kept, 4, "the entries replayed before stay");
}

#[tokio::test(start_paused = true)]
async fn a_flush_empties_the_cache_and_it_fills_on_first_misses_again() {
    let cache = full_cache();
    cache.flush(FlushReason::Server);
    fill(&cache, &key(10), 1500, secs(60));
    assert!(cache.get(&key(10)).is_some());
}
