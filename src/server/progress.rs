//! Whether a connection is still doing something worth its slot.
//!
//! A connection holds one of the `max_connections` slots for as long as it
//! is open, so one that sends nothing must lose it on a clock that starts at
//! accept, not at some later point a peer can put off. hyper's own
//! `header_read_timeout` starts only once the auto builder has read enough
//! bytes to tell HTTP/1 from HTTP/2, and HTTP/2 has no idle timeout at all:
//! a silent socket, or one that sends the HTTP/2 preface and stops, would
//! hold its slot forever.
//!
//! Progress here means *requests*, the one thing a peer can not fake
//! cheaply: bytes, pings, window updates and SETTINGS frames do not count.
//! A connection must start its first request within the first-request
//! bound of accept, and may sit with no request open for at most the idle
//! bound; while a request is open (its answer not yet fully written) the
//! clock stands still, because the request's own timeouts bound it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a connection may go without a request, before its first one
/// and between later ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// From accept to the first request (`limits.header_read_timeout`).
    pub(crate) first_request: Duration,
    /// From the end of the last request to the next one
    /// (`limits.idle_timeout`).
    pub(crate) idle: Duration,
}

/// One connection's request activity, shared by its service (which opens
/// and closes [`Open`] requests) and its watchdog ([`Progress::stalled`]).
#[derive(Debug)]
pub(crate) struct Progress {
    state: Mutex<State>,
    /// Woken when a request opens or the last open one closes: either
    /// moves the deadline.
    changed: Notify,
}

#[derive(Debug)]
struct State {
    open: usize,
    /// When the connection was accepted or its last request closed.
    since: Instant,
    /// A request has been seen on this connection.
    served: bool,
}

/// An open request: the connection counts as busy until this is dropped,
/// which happens when the answer's body has been written (or abandoned).
#[derive(Debug)]
pub(crate) struct Open(Arc<Progress>);

impl Progress {
    /// A connection accepted now.
    pub(crate) fn accepted() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                open: 0,
                since: Instant::now(),
                served: false,
            }),
            changed: Notify::new(),
        })
    }

    /// Marks a request as open until the returned guard is dropped.
    pub(crate) fn open(self: &Arc<Self>) -> Open {
        let mut state = self.lock();
        state.open += 1;
        state.served = true;
        drop(state);
        self.changed.notify_one();
        Open(Arc::clone(self))
    }

    /// Completes once the connection has gone longer than `bounds` allow
    /// without an open request; never while one is open.
    pub(crate) async fn stalled(&self, bounds: Bounds) {
        loop {
            let deadline = {
                let state = self.lock();
                (state.open == 0).then(|| {
                    let allowed = if state.served {
                        bounds.idle
                    } else {
                        bounds.first_request
                    };
                    state.since + allowed
                })
            };
            // A stored wake-up from an earlier change only costs one more
            // turn of the loop.
            match deadline {
                None => self.changed.notified().await,
                Some(deadline) if Instant::now() >= deadline => return,
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = self.changed.notified() => {}
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is two counters and a time: a panic elsewhere can not
        // leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.open -= 1;
        if state.open == 0 {
            state.since = Instant::now();
            drop(state);
            self.0.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        first_request: Duration::from_secs(10),
        idle: Duration::from_secs(3),
    };

    /// How long `stalled` takes from now, or `None` if it has not
    /// completed within `horizon`.
    async fn stalls_after(progress: &Progress, horizon: Duration) -> Option<Duration> {
        let start = Instant::now();
        tokio::time::timeout(horizon, progress.stalled(BOUNDS))
            .await
            .ok()
            .map(|()| start.elapsed())
    }

    /// A watchdog running from now on: it answers when it saw the stall.
    fn watch(progress: &Arc<Progress>) -> tokio::task::JoinHandle<Instant> {
        let progress = Arc::clone(progress);
        tokio::spawn(async move {
            progress.stalled(BOUNDS).await;
            Instant::now()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_stalls_at_the_first_request_bound_from_accept() {
        let progress = Progress::accepted();
        let after = stalls_after(&progress, Duration::from_secs(60)).await;
        assert_eq!(after, Some(BOUNDS.first_request));
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_starts_at_accept_not_when_the_watchdog_looks() {
        let progress = Progress::accepted();
        tokio::time::sleep(Duration::from_secs(7)).await;
        let after = stalls_after(&progress, Duration::from_secs(60)).await;
        assert_eq!(after, Some(Duration::from_secs(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_request_holds_the_clock_however_long_it_runs() {
        let progress = Progress::accepted();
        let open = progress.open();
        assert_eq!(
            stalls_after(&progress, Duration::from_secs(600)).await,
            None
        );
        drop(open);
        let after = stalls_after(&progress, Duration::from_secs(60)).await;
        assert_eq!(after, Some(BOUNDS.idle), "idle bound after a request");
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_clock_restarts_when_the_last_of_several_requests_closes() {
        let progress = Progress::accepted();
        let watchdog = watch(&progress);
        let first = progress.open();
        let second = progress.open();
        tokio::time::sleep(Duration::from_secs(20)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!watchdog.is_finished(), "one request is still open");
        drop(second);
        let closed = Instant::now();
        let stalled_at = watchdog.await.unwrap();
        assert_eq!(stalled_at - closed, BOUNDS.idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watchdog_waiting_for_the_first_request_switches_to_the_idle_bound() {
        let progress = Progress::accepted();
        let watchdog = watch(&progress);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let open = progress.open();
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(open);
        let closed = Instant::now();
        let stalled_at = watchdog.await.unwrap();
        assert_eq!(
            stalled_at - closed,
            BOUNDS.idle,
            "idle bound from the close, not the first-request bound from accept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_inside_the_idle_bound_pushes_the_deadline_back() {
        let progress = Progress::accepted();
        drop(progress.open());
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(progress.open());
        let after = stalls_after(&progress, Duration::from_secs(60)).await;
        assert_eq!(after, Some(BOUNDS.idle));
    }
}
