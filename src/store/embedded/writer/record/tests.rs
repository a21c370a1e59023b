//! The idle checkpoint and how often writes' commits record the
//! allocator state.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::super::tests::{RECOVERY, commits, futures_join, grouped, put};
use super::CHECKPOINT_IDLE;
use crate::store::embedded::EmbeddedStore;

/// Waits until the writer's last commit recorded the allocator state (the
/// idle checkpoint); panics after [`RECOVERY`].
async fn recorded(store: &EmbeddedStore) {
    let deadline = tokio::time::Instant::now() + RECOVERY;
    while store.inner.shared.unrecorded() {
        assert!(tokio::time::Instant::now() < deadline, "no checkpoint");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Writes' commits record the allocator state at most once a second; an
/// idle writer records it in an empty commit (an open after a crash then
/// loads it instead of walking the file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_record_the_allocator_state_rarely_and_an_idle_writer_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 0);
    let shared = &store.inner.shared;
    let quick = || shared.quick_commits.load(Ordering::SeqCst);
    let checkpoints = || shared.checkpoints.load(Ordering::SeqCst);
    recorded(&store).await;

    let (commits_before, quick_before, checkpoints_before) =
        (commits(&store), quick(), checkpoints());
    let started = tokio::time::Instant::now();
    let writes = (0..400).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { put(&store, &format!("burst-{n}"), vec![2; 512]).await })
    });
    for write in futures_join(writes).await {
        write.unwrap();
    }
    let seconds = started.elapsed().as_secs();
    let used = commits(&store) - commits_before;
    let recorded_by_writes = quick() - quick_before;
    assert!(used >= 2, "400 writes in {used} commits");
    assert!(
        usize::try_from(seconds).unwrap() + 1 >= recorded_by_writes,
        "{recorded_by_writes} of {used} write commits in {seconds} s recorded the allocator state"
    );
    recorded(&store).await;
    assert!(checkpoints() > checkpoints_before);

    // Idle and recorded: no further checkpoint until the next write.
    let idle = checkpoints();
    tokio::time::sleep(CHECKPOINT_IDLE * 5).await;
    assert_eq!(
        checkpoints(),
        idle,
        "a recorded, idle writer commits nothing"
    );
    put(&store, "one-more", vec![1]).await.unwrap();
    recorded(&store).await;
}

/// A store that refuses writes (damage found by the background check)
/// gets no checkpoint, and the writer does not keep trying one (the run
/// loop waits for a checkpoint only while one is owed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_checkpoint_is_written_to_a_store_that_refuses_writes() {
    use crate::store::embedded::verify::{Integrity, IntegrityCell};
    /// Waits until the background check of the new file is over.
    async fn settled(cell: &IntegrityCell) {
        while matches!(cell.get(), Integrity::Checking { .. }) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(&dir, 0);
    let shared = &store.inner.shared;
    recorded(&store).await;
    put(&store, "before", vec![1]).await.unwrap();
    recorded(&store).await;
    // A plain commit, then damage: the checkpoint it would be owed is not
    // written.
    let cell = shared.integrity.get().expect("the open watches its check");
    settled(cell).await;
    cell.set(Integrity::Damaged {
        reason: "damaged for the test".into(),
    });
    assert!(
        put(&store, "after", vec![1]).await.is_err(),
        "writes are refused"
    );
    let before = shared.checkpoints.load(Ordering::SeqCst);
    {
        let mut recorded = shared.recorded();
        recorded.last = false;
        recorded.gave_up = false;
    }
    assert!(shared.unrecorded(), "a checkpoint is owed");
    shared.checkpoint();
    assert_eq!(shared.checkpoints.load(Ordering::SeqCst), before);
    assert!(
        !shared.unrecorded(),
        "it gave up, instead of trying every 20 ms"
    );
}
