//! Every poll loop of the tests, bounded in time.

use std::time::{Duration, Instant};

/// Polls `condition` every 10 ms until it holds or `limit` passes.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
}

/// Polls `condition` every 50 ms for at most `limit`, blocking the thread;
/// panics naming `what`.
pub fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Like [`wait_until`] without blocking the runtime between polls (a
/// blocking `condition` runs under `block_in_place`): when the condition
/// held, `None` if it did not before `deadline`.
pub async fn poll_until(deadline: Instant, mut condition: impl FnMut() -> bool) -> Option<Instant> {
    loop {
        if tokio::task::block_in_place(&mut condition) {
            return Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls `probe` every `every` until it yields a value; panics naming
/// `what` after `limit`.
pub async fn poll<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}
