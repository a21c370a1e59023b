//! One store read at a time per key on this instance (contract §4 rule 11).
//!
//! A storm of concurrent duplicates of one key would otherwise ask the
//! store for the same record once each: with a large stored answer that is
//! many copies of it on one pooled connection, and every unrelated key's
//! call queued behind them. Here the first caller for a key *leads* and
//! does the work; callers that arrive while it runs *join* and receive a
//! shared summary of its result instead of asking themselves.
//!
//! A leader whose future is dropped before it finishes (its sender hung
//! up) hands nothing on: its joiners find the flight gone and the next of
//! them leads a new one. The map entry is removed as the leader lands, so
//! the next caller after that asks the store afresh.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

/// Flights in progress, by key; `S` is what a leader shares.
#[derive(Debug)]
pub(crate) struct SingleFlight<K, S> {
    flights: Mutex<HashMap<K, watch::Receiver<Option<S>>>>,
}

impl<K, S> Default for SingleFlight<K, S> {
    fn default() -> Self {
        Self {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

/// How a caller took part in a flight.
#[derive(Debug)]
pub(crate) enum Flight<T, S> {
    /// It did the work itself: its own result.
    Led(T),
    /// Another caller did: the shared summary of that result.
    Joined(S),
}

/// Removes the leader's entry when it lands or is dropped, if the entry is
/// still its own.
struct Landing<'a, K: Hash + Eq, S> {
    flights: &'a Mutex<HashMap<K, watch::Receiver<Option<S>>>>,
    key: &'a K,
    sender: watch::Sender<Option<S>>,
}

impl<K: Hash + Eq, S> Drop for Landing<'_, K, S> {
    fn drop(&mut self) {
        let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
        let ours = flights
            .get(self.key)
            .is_some_and(|receiver| receiver.same_channel(&self.sender.subscribe()));
        if ours {
            flights.remove(self.key);
        }
    }
}

impl<K: Hash + Eq + Clone, S: Clone> SingleFlight<K, S> {
    /// Runs `work` for `key`, unless a flight for `key` is under way: then
    /// waits for it and returns what its leader shares (`share` of the
    /// leader's result).
    pub(crate) async fn run<T>(
        &self,
        key: &K,
        work: impl Future<Output = T>,
        share: impl FnOnce(&T) -> S,
    ) -> Flight<T, S> {
        let sender = loop {
            let mut receiver = {
                let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
                match flights.get(key) {
                    Some(receiver) => receiver.clone(),
                    None => {
                        let (sender, receiver) = watch::channel(None);
                        flights.insert(key.clone(), receiver);
                        break sender;
                    }
                }
            };
            if let Ok(shared) = receiver.wait_for(Option::is_some).await {
                if let Some(shared) = shared.clone() {
                    return Flight::Joined(shared);
                }
            }
            // The leader was dropped before it finished: try again.
        };
        let landing = Landing {
            flights: &self.flights,
            key,
            sender,
        };
        let output = work.await;
        // The map holds one receiver; any other is a joiner waiting. With
        // none, nothing is shared (a joiner arriving just now finds the
        // flight gone and asks the store itself).
        if landing.sender.receiver_count() > 1 {
            landing.sender.send_replace(Some(share(&output)));
        }
        drop(landing);
        Flight::Led(output)
    }

    /// Flights under way (for tests).
    #[cfg(test)]
    fn in_progress(&self) -> usize {
        self.flights
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::task::JoinHandle;

    /// Runs `work` as a flight of `key` in a task of its own, sharing its
    /// output as it is.
    fn spawn_flight(
        flights: &Arc<SingleFlight<&'static str, usize>>,
        key: &'static str,
        work: impl Future<Output = usize> + Send + 'static,
    ) -> JoinHandle<Flight<usize, usize>> {
        let flights = Arc::clone(flights);
        tokio::spawn(async move { flights.run(&key, work, |n| *n).await })
    }

    /// Work that takes `time` and then gives `output`.
    async fn taking(time: Duration, output: usize) -> usize {
        tokio::time::sleep(time).await;
        output
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_run() {
        let flights = Arc::new(SingleFlight::<&str, usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..64)
            .map(|_| {
                let runs = Arc::clone(&runs);
                let work = async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    runs.fetch_add(1, Ordering::SeqCst) + 41
                };
                spawn_flight(&flights, "k", work)
            })
            .collect();
        for caller in callers {
            match caller.await.unwrap() {
                Flight::Led(n) | Flight::Joined(n) => assert_eq!(n, 41),
            }
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(flights.in_progress(), 0, "the landed flight is gone");
        // The next caller asks afresh.
        let again = flights.run(&"k", async { 7 }, |n| *n).await;
        assert!(matches!(again, Flight::Led(7)));
    }

    #[tokio::test]
    async fn a_lone_leader_shares_nothing() {
        let flights = SingleFlight::<&str, usize>::default();
        let alone = flights
            .run(&"k", async { 1 }, |_| unreachable!("nobody joined"))
            .await;
        assert!(matches!(alone, Flight::Led(1)));
        assert_eq!(flights.in_progress(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn different_keys_do_not_wait_for_each_other() {
        let flights = Arc::new(SingleFlight::<&str, usize>::default());
        let slow = spawn_flight(&flights, "slow", taking(Duration::from_secs(10), 0));
        tokio::task::yield_now().await;
        let started = tokio::time::Instant::now();
        assert!(matches!(
            flights.run(&"other", async { 1 }, |n| *n).await,
            Flight::Led(1)
        ));
        assert_eq!(started.elapsed(), Duration::ZERO);
        slow.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_leader_hands_over_to_a_joiner() {
        let flights = Arc::new(SingleFlight::<&str, usize>::default());
        let leader = spawn_flight(&flights, "k", taking(Duration::from_secs(60), 1));
        tokio::task::yield_now().await;
        let joiner = spawn_flight(&flights, "k", async { 2 });
        tokio::task::yield_now().await;
        leader.abort();
        let joined = joiner.await.unwrap();
        assert!(matches!(joined, Flight::Led(2)), "{joined:?}");
        assert_eq!(flights.in_progress(), 0);
    }
}
