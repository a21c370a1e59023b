//! How long a release keeps trying: until the store answers or the claim
//! has expired.
//!
//! A claim that is not released blocks its key: `409 in_flight` for the
//! rest of its lease, then `409 outcome_unknown` for `unknown_hold`,
//! although the upstream never saw the delivery. A fixed number of tries
//! gives up inside an outage (a Cluster failover lasts several seconds), so
//! a release instead retries with a doubling pause until the store answers
//! (released, or not ours any more) or the claim's TTL has run out, when
//! there is nothing left to release. Kept apart from the store calls so the
//! schedule is pinned by a test on paused time.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{StoreError, StoreKey};
use crate::backoff::Backoff;

/// What a release may delete under its owner's token.
///
/// An owner may have written more than its claim: an inbox record whose
/// queueing then failed (too few replicas acknowledged it) is released so
/// the sender's retry executes. Once the sender has been answered, though,
/// a duplicate may already have read that record and been acknowledged by
/// it, so a release still running then must leave anything but a claim
/// alone: deleting it would lose an acknowledged delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Releasing {
    /// Whatever the owner holds: before the sender is answered.
    Owned,
    /// Only an in-flight claim: after the sender is answered.
    ClaimOnly,
}

/// First pause after an unreachable store: a blink is over quickly.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// Longest pause: a store that comes back is noticed within this.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Runs `attempt` until it is answered by anything but
/// [`StoreError::Unavailable`], pausing between tries, or until `expires`
/// has passed with the store still unreachable: then `Ok(false)`, as for
/// a claim that expired before it was released. `stop` ends the pauses
/// early with the last error (shutdown's grace is over).
pub(super) async fn until_answered<F, Fut>(
    key: &StoreKey,
    expires: Instant,
    stop: &CancellationToken,
    mut attempt: F,
) -> Result<bool, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, StoreError>>,
{
    let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
    let mut tries = 0u32;
    loop {
        tries += 1;
        match attempt().await {
            Err(StoreError::Unavailable(error)) => {
                let left = expires.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::warn!(
                        key = key.hash(),
                        tries,
                        %error,
                        "store unreachable until the claim expired: nothing left to release"
                    );
                    return Ok(false);
                }
                if tries == 1 {
                    tracing::warn!(key = key.hash(), %error, "store unreachable while releasing; retrying until the claim expires");
                }
                tokio::select! {
                    () = stop.cancelled() => return Err(StoreError::Unavailable(error)),
                    () = tokio::time::sleep(backoff.next_pause().min(left)) => {}
                }
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn key() -> StoreKey {
        StoreKey::new("idemgate", "r", &"a".repeat(64))
    }

    fn down() -> Result<bool, StoreError> {
        Err(StoreError::Unavailable("down".into()))
    }

    /// Every attempt's time since the start, and the result; `answer`
    /// says what the attempt made at a given time returns.
    async fn run(
        expires_in: Duration,
        answer: impl Fn(Duration) -> Result<bool, StoreError>,
    ) -> (Vec<Duration>, Result<bool, StoreError>) {
        let start = Instant::now();
        let times = RefCell::new(Vec::new());
        let result = until_answered(
            &key(),
            start + expires_in,
            &CancellationToken::new(),
            || {
                let at = start.elapsed();
                times.borrow_mut().push(at);
                let result = answer(at);
                async move { result }
            },
        )
        .await;
        (times.into_inner(), result)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_longer_than_five_tries_is_outlasted() {
        // The old schedule gave up after five tries, 1.5 s of pauses; a
        // store back after 4 s is still reached, well before the claim's 60 s.
        let (times, result) = run(Duration::from_secs(60), |at| {
            if at < Duration::from_secs(4) {
                down()
            } else {
                Ok(true)
            }
        })
        .await;
        assert!(matches!(result, Ok(true)), "{result:?}");
        assert_tries_follow_the_backoff(&times);
        let last = times[times.len() - 1];
        assert!(
            last >= Duration::from_secs(4) && last <= Duration::from_secs(4) + MAX_PAUSE,
            "reached within one longest pause of the store's return: {times:?}"
        );
    }

    /// Tries start at once, then wait at least `FIRST_PAUSE` and at most
    /// `MAX_PAUSE` between each other (the jitter is `crate::backoff`'s).
    fn assert_tries_follow_the_backoff(times: &[Duration]) {
        assert_eq!(times[0], Duration::ZERO, "the first try at once");
        for pair in times.windows(2) {
            let pause = pair[1] - pair[0];
            assert!(
                pause >= FIRST_PAUSE && pause <= MAX_PAUSE,
                "pause {pause:?} in {times:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_when_the_claim_has_expired() {
        let (times, result) = run(ms(1_000), |_| down()).await;
        assert!(
            matches!(result, Ok(false)),
            "nothing left to release: {result:?}"
        );
        // The last pause is cut short so the final try is at the expiry.
        assert_eq!(times.last(), Some(&ms(1_000)), "{times:?}");
        assert!(times.len() >= 3, "tried again in between: {times:?}");
        assert_eq!(times[..2], [ms(0), ms(100)], "the first pause is the floor");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_ends_the_retries_at_once() {
        let (times, result) = run(Duration::from_secs(60), |_| Ok(false)).await;
        assert!(matches!(result, Ok(false)));
        assert_eq!(times, [ms(0)]);
        let (times, result) = run(Duration::from_secs(60), |_| {
            Err(StoreError::Backend("NOSCRIPT".into()))
        })
        .await;
        assert!(matches!(result, Err(StoreError::Backend(_))), "{result:?}");
        assert_eq!(times, [ms(0)], "only an unreachable store is retried");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_retries() {
        let stop = CancellationToken::new();
        let start = Instant::now();
        let cancel = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(250)).await;
            cancel.cancel();
        });
        let result = until_answered(&key(), start + Duration::from_secs(60), &stop, || async {
            down()
        })
        .await;
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "{result:?}"
        );
        assert_eq!(start.elapsed(), ms(250));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_claim_is_tried_once() {
        let (times, result) = run(Duration::ZERO, |_| down()).await;
        assert!(matches!(result, Ok(false)));
        assert_eq!(times, [ms(0)]);
    }
}
