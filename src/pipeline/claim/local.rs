//! What this instance knows of a key that the store may not say: the
//! duplicates here waiting for its first delivery ([`LocalWaiters`]), and
//! the answers this process holds but has not stored yet
//! ([`AnswersInHand`]).
//!
//! An answer in hand is one the handler gave and the store refused to keep
//! (a full disk or Redis, an outage): `pipeline::persist` stores it again
//! until it sticks. If that takes longer than the claim's lease and
//! `unknown_hold` (a store that also refuses renewals), the claim runs out
//! and the store says the key is free; a copy that claimed it would run the
//! delivery again. So while the answer is in hand, copies on this instance
//! see the key in flight (they wait, or get 409 `in_flight`), and get the
//! answer once it is stored.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// Duplicates on this instance waiting for a key's first delivery, woken
/// the moment it settles instead of at their next store re-check.
#[derive(Debug, Default)]
pub(in crate::pipeline) struct LocalWaiters {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
}

impl LocalWaiters {
    /// A handle to wait on `key`, unless `limit` waiters hold one already.
    pub(in crate::pipeline) fn subscribe(&self, key: &str, limit: usize) -> Option<Arc<Notify>> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let notify = waiting.entry(key.to_owned()).or_default();
        // The map holds one handle; every other one is a waiter.
        (Arc::strong_count(notify) <= limit).then(|| Arc::clone(notify))
    }

    /// Drops a waiter's handle, and the key's entry with the last one.
    pub(in crate::pipeline) fn unsubscribe(&self, key: &str, notify: &Arc<Notify>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's handle plus ours: nobody else is waiting.
        if Arc::strong_count(notify) == 2 {
            waiting.remove(key);
        }
    }

    /// Wakes every local waiter on `key`.
    pub(in crate::pipeline) fn settled(&self, key: &str) {
        let notify = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }
}

/// Keys whose answer this process holds but has not stored yet.
#[derive(Debug, Default)]
pub(in crate::pipeline) struct AnswersInHand {
    keys: Mutex<HashSet<String>>,
}

/// One answer in hand; dropping it (stored, or given up) wakes the key's
/// local waiters.
#[derive(Debug)]
pub(crate) struct InHand<'a> {
    in_hand: &'a AnswersInHand,
    waiters: &'a LocalWaiters,
    key: String,
}

impl AnswersInHand {
    /// Marks `key` held until the guard drops.
    pub(in crate::pipeline) fn hold<'a>(
        &'a self,
        key: &str,
        waiters: &'a LocalWaiters,
    ) -> InHand<'a> {
        self.lock().insert(key.to_owned());
        InHand {
            in_hand: self,
            waiters,
            key: key.to_owned(),
        }
    }

    /// Whether `key`'s answer is in hand.
    pub(in crate::pipeline) fn holds(&self, key: &str) -> bool {
        self.lock().contains(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for InHand<'_> {
    fn drop(&mut self) {
        self.in_hand.lock().remove(&self.key);
        self.waiters.settled(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_while_its_guard_lives_and_its_waiters_wake_after() {
        let waiters = LocalWaiters::default();
        let in_hand = AnswersInHand::default();
        let waiter = waiters.subscribe("k", 4).unwrap();
        let woken = waiter.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let guard = in_hand.hold("k", &waiters);
        assert!(in_hand.holds("k") && !in_hand.holds("other"));
        drop(guard);
        assert!(!in_hand.holds("k"));
        assert!(
            futures_now(woken.as_mut()),
            "the drop woke the key's waiters"
        );
    }

    /// Whether `future` is ready when polled once.
    fn futures_now<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        future.poll(&mut cx).is_ready()
    }
}
