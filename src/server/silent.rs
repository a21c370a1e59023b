//! Connections that have not yet sent a whole request head, oldest first:
//! what a full admin listener closes to make room ([`super::Crowding`]).
//!
//! The admin listener's clients (a liveness probe, a Prometheus scrape, an
//! operator's CLI) send their request as soon as they connect, so a
//! connection still silent when the listener is full is the cheapest to
//! close: nothing of it has reached a handler. Closing the oldest such one
//! for each new connection means a flood of idle sockets can never hold
//! every slot against a client that speaks — `/healthz` answers under it.
//! A connection leaves the queue when its first request head is read (or
//! when it ends); one evicted is dropped at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

/// The silent connections of one listener, oldest first.
#[derive(Debug, Default)]
pub(super) struct Silent {
    queue: Mutex<VecDeque<(u64, CancellationToken)>>,
    next: AtomicU64,
}

impl Silent {
    /// A new connection, silent until [`Waiting::spoke`].
    pub(super) fn enter(self: &Arc<Self>) -> Waiting {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        self.lock().push_back((id, evicted.clone()));
        Waiting {
            id,
            evicted,
            silent: Arc::clone(self),
            left: AtomicBool::new(false),
        }
    }

    /// Tells the oldest silent connection to close; `false` if there is
    /// none.
    pub(super) fn evict_oldest(&self) -> bool {
        match self.lock().pop_front() {
            Some((_, evicted)) => {
                evicted.cancel();
                true
            }
            None => false,
        }
    }

    fn leave(&self, id: u64) {
        let mut queue = self.lock();
        if let Some(at) = queue.iter().position(|(queued, _)| *queued == id) {
            queue.remove(at);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, CancellationToken)>> {
        // Every statement leaves the queue whole, so a poisoned lock is
        // still consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One connection's place in [`Silent`] until it speaks or ends.
#[derive(Debug)]
pub(super) struct Waiting {
    id: u64,
    evicted: CancellationToken,
    silent: Arc<Silent>,
    left: AtomicBool,
}

impl Waiting {
    /// Its first request head arrived: no longer evictable.
    pub(super) fn spoke(&self) {
        if !self.left.swap(true, Ordering::Relaxed) {
            self.silent.leave(self.id);
        }
    }

    /// Resolves when the listener closes this connection to make room.
    pub(super) async fn evicted(&self) {
        self.evicted.cancelled().await;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.spoke();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_silent_connection_goes_first_and_a_speaker_never() {
        let silent = Arc::new(Silent::default());
        let first = silent.enter();
        let second = silent.enter();
        let third = silent.enter();
        first.spoke();
        assert!(silent.evict_oldest());
        assert!(second.evicted.is_cancelled());
        assert!(!first.evicted.is_cancelled() && !third.evicted.is_cancelled());
        drop(third);
        assert!(!silent.evict_oldest(), "a closed one left the queue");
    }
}
