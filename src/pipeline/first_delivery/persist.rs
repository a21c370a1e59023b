//! Stage 7 when the store blinks: an answer in hand is stored until it
//! sticks (contract §4 rule 10).
//!
//! Once the upstream has answered, the delivery has had its effect; losing
//! the answer would let the key run again once its claim expires. So a
//! failed `complete` is retried for as long as the failure is transient
//! (store unreachable, or full and refusing writes), with a growing, jittered
//! pause (`crate::backoff`) capped at `MAX_PAUSE`, renewing the claim between attempts (a full
//! Redis still takes `PEXPIRE`). It ends when:
//!
//! * the outcome is stored, over our claim or into a key that went free
//!   while the store was away ([`Completion::StoredInFreeKey`]);
//! * another owner holds the key: the lease is provably lost
//!   ([`Persisted::TakenOver`]);
//! * the error is not transient, or the shutdown grace period ran out
//!   ([`Persisted::GaveUp`]).
//!
//! The caller counts and logs every ending but the first as an unknown
//! outcome.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::record::Record;
use crate::store::{AnyStore, Completion, Lease, StoreError};

/// Pause after the first failed attempt; later ones grow with jitter.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// Longest pause between attempts: an outage's end is noticed within it.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How storing an outcome ended.
#[derive(Debug)]
pub(crate) enum Persisted {
    /// In the store ([`Completion::Stored`] or
    /// [`Completion::StoredInFreeKey`]).
    Stored(Completion),
    /// Another owner holds the key; nothing was written.
    TakenOver,
    /// Stopped trying: a failure that retrying can not mend, or shutdown.
    GaveUp(StoreError),
}

/// One outcome to store for one lease.
#[derive(Debug)]
pub(crate) struct Persist<'a> {
    store: &'a AnyStore,
    lease: &'a Lease,
    record: &'a Record,
    /// TTL of the stored outcome (retention or unknown_hold).
    ttl: Duration,
    /// TTL a renewal sets on the claim meanwhile (lease + unknown_hold).
    claim_ttl: Duration,
}

impl<'a> Persist<'a> {
    /// Prepares to store `record` for `ttl` under `lease`.
    pub(crate) fn new(
        store: &'a AnyStore,
        lease: &'a Lease,
        record: &'a Record,
        ttl: Duration,
        claim_ttl: Duration,
    ) -> Self {
        Self {
            store,
            lease,
            record,
            ttl,
            claim_ttl,
        }
    }

    /// One attempt. `Err` carries a transient failure worth retrying with
    /// [`Persist::until_stored`].
    pub(crate) async fn once(&self) -> Result<Persisted, StoreError> {
        match self.store.complete(self.lease, self.record, self.ttl).await {
            Ok(Completion::TakenOver) => Ok(Persisted::TakenOver),
            Ok(completion) => Ok(Persisted::Stored(completion)),
            Err(error) if error.is_transient() => Err(error),
            Err(error) => Ok(Persisted::GaveUp(error)),
        }
    }

    /// Retries after a transient `failure` until the outcome is stored, the
    /// lease is provably lost, or `stop` is cancelled (shutdown's grace
    /// period ran out).
    pub(crate) async fn until_stored(
        &self,
        mut failure: StoreError,
        stop: &CancellationToken,
    ) -> Persisted {
        let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
        loop {
            let pause = backoff.next_pause();
            tracing::warn!(
                key = self.lease.key().hash(),
                error = %failure,
                retry_in_ms = crate::time::millis(pause),
                "could not store the outcome yet; retrying"
            );
            tokio::select! {
                () = stop.cancelled() => return Persisted::GaveUp(failure),
                () = tokio::time::sleep(pause) => {}
            }
            // Keeps our claim from turning unknown while the store refuses
            // only the larger write; a failure here changes nothing.
            if let Err(error) = self.store.renew(self.lease, self.claim_ttl).await {
                tracing::debug!(%error, "lease not renewed while the answer waits to be stored");
            }
            match self.once().await {
                Ok(done) => return done,
                Err(error) => failure = error,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::pipeline::scripted::{Scripted, lease};
    use tokio::time::Instant;

    fn down() -> Result<Completion, StoreError> {
        Err(StoreError::Unavailable("connection refused".into()))
    }

    fn full() -> Result<Completion, StoreError> {
        Err(StoreError::Full("OOM".into()))
    }

    async fn run(store: &Arc<Scripted>, stop: &CancellationToken) -> Persisted {
        let store = AnyStore::for_tests(Arc::clone(store));
        let lease = lease();
        let record = lease.record().clone();
        let persist = Persist::new(
            &store,
            &lease,
            &record,
            Duration::from_secs(60),
            Duration::from_secs(9),
        );
        match persist.once().await {
            Ok(done) => done,
            Err(failure) => persist.until_stored(failure, stop).await,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_of_a_minute_still_ends_stored() {
        // 70 transient failures, half of them "full": far past the old
        // five-attempt budget of about three seconds.
        let answers = (0..70)
            .map(|i| if i % 2 == 0 { down() } else { full() })
            .chain([Ok(Completion::StoredInFreeKey)])
            .collect();
        let store = Arc::new(Scripted::new(answers));
        let started = Instant::now();
        let ended = run(&store, &CancellationToken::new()).await;
        assert!(
            matches!(ended, Persisted::Stored(Completion::StoredInFreeKey)),
            "{ended:?}"
        );
        let calls = store.completes.lock().unwrap().clone();
        assert_eq!(calls.len(), 71);
        assert_eq!(
            store.renewals().len(),
            70,
            "the claim is renewed before every retry"
        );
        // Jittered pauses from 50 ms that never pass 1 s: the outage is
        // retried through at a pace that neither spins nor stalls.
        let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps[0], FIRST_PAUSE);
        assert!(
            gaps.iter()
                .all(|gap| (FIRST_PAUSE..=MAX_PAUSE).contains(gap))
        );
        let elapsed = started.elapsed();
        assert!(elapsed <= MAX_PAUSE * 70, "{elapsed:?}");
        assert!(elapsed >= MAX_PAUSE * 10, "{elapsed:?}: not hammered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_or_a_broken_store_ends_at_once() {
        let store = Arc::new(Scripted::new(vec![down(), Ok(Completion::TakenOver)]));
        assert!(matches!(
            run(&store, &CancellationToken::new()).await,
            Persisted::TakenOver
        ));
        let store = Arc::new(Scripted::new(vec![Err(StoreError::Backend(
            "WRONGTYPE".into(),
        ))]));
        assert!(matches!(
            run(&store, &CancellationToken::new()).await,
            Persisted::GaveUp(StoreError::Backend(_))
        ));
        assert_eq!(store.completes.lock().unwrap().len(), 1, "not retried");
    }

    #[tokio::test(start_paused = true)]
    async fn only_shutdown_cuts_the_retries_short() {
        let store = Arc::new(Scripted::new((0..1_000).map(|_| down()).collect()));
        let stop = CancellationToken::new();
        let cancel = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let ended = run(&store, &stop).await;
        assert!(
            matches!(ended, Persisted::GaveUp(StoreError::Unavailable(_))),
            "{ended:?}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }
}
