//! The clock of a claim (contract §4 rule 4): the TTL it is written with, how
//! often its owner renews it, and how long a refused duplicate is told to
//! wait.
//!
//! A claim is written for `lease + unknown_hold` and renewed every third
//! of the lease while the upstream call runs, so its remaining TTL stays
//! above `unknown_hold` for as long as its owner lives. Once the owner
//! stops renewing, the TTL runs down into its last `unknown_hold`, where
//! every reader calls the outcome unknown (`Existing::observe`). The
//! arithmetic lives here, apart from the store calls, so that it is stated
//! once and tested in virtual time.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::config::Idempotency;
use crate::record::ClaimHold;
use crate::store::{AnyStore, Lease};

/// Shortest renewal period: a tiny configured lease must not turn renewal
/// into a busy loop against the store.
const MIN_RENEWAL_PERIOD: Duration = Duration::from_millis(10);

/// A route's `lease` and `unknown_hold`, and what follows from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseTiming {
    /// How long a live owner's claim lasts between renewals.
    pub(crate) lease: Duration,
    /// How long an outcome stays unknown before its record expires.
    pub(crate) unknown_hold: Duration,
}

impl LeaseTiming {
    /// The timing a route's rules ask for.
    pub(crate) fn of(rules: &Idempotency) -> Self {
        Self {
            lease: rules.lease,
            unknown_hold: rules.unknown_hold,
        }
    }

    /// TTL a claim is written and renewed with: the lease, then the hold
    /// that marks an owner who stopped renewing.
    pub(crate) fn claim_ttl(self) -> Duration {
        self.lease + self.unknown_hold
    }

    /// How often a live owner renews: three times per lease, so one or
    /// two failed renewals still leave the claim in flight.
    pub(crate) fn renewal_period(self) -> Duration {
        (self.lease / 3).max(MIN_RENEWAL_PERIOD)
    }

    /// How long a duplicate refused as in flight should wait before it
    /// retries: what is left of the claim's lease (its TTL less the hold
    /// it was claimed with, this route's when it carries none), or a whole
    /// lease when the store reports no TTL.
    pub(crate) fn retry_after_in_flight(self, ttl: Option<Duration>, hold: ClaimHold) -> Duration {
        ttl.map_or(self.lease, |ttl| {
            ttl.saturating_sub(hold.or(self.unknown_hold))
        })
    }
}

/// Runs `work` while renewing `lease` every [`LeaseTiming::renewal_period`],
/// so a slow upstream never lets the claim lapse (contract §4 rule 4). Renewal
/// failures are logged and retried at the next tick; the work is never
/// interrupted.
pub(crate) async fn while_renewing<T>(
    store: &AnyStore,
    lease: &Lease,
    timing: LeaseTiming,
    work: impl Future<Output = T>,
) -> T {
    let ttl = timing.claim_ttl();
    let period = timing.renewal_period();
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tokio::pin!(work);
    loop {
        tokio::select! {
            output = &mut work => return output,
            _ = ticker.tick() => match store.renew(lease, ttl).await {
                Ok(true) => {}
                Ok(false) => tracing::warn!(key = lease.key().hash(), "lease lost while the upstream call runs"),
                Err(error) => tracing::warn!(key = lease.key().hash(), %error, "lease renewal failed"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::pipeline::scripted::{Scripted, lease};
    use crate::store::{Existing, Observed, StoreError};

    /// `work` under [`while_renewing`] against `scripted`.
    async fn renewing<T>(
        scripted: &Arc<Scripted>,
        timing: LeaseTiming,
        work: impl Future<Output = T>,
    ) -> T {
        let store = AnyStore::for_tests(Arc::clone(scripted));
        while_renewing(&store, &lease(), timing, work).await
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The defaults: a 30 s lease, a 5 min hold.
    fn timing() -> LeaseTiming {
        LeaseTiming {
            lease: secs(30),
            unknown_hold: secs(300),
        }
    }

    /// A release retries until the lease's expiry (`store::release`), so
    /// only an acknowledged renewal may move it, and to the renewal's TTL.
    #[tokio::test(start_paused = true)]
    async fn only_an_acknowledged_renewal_moves_the_expiry() {
        let scripted = Arc::new(Scripted::renewing(vec![
            Ok(true),
            Ok(false),
            Err(StoreError::Unavailable("down".into())),
        ]));
        let store = AnyStore::for_tests(Arc::clone(&scripted));
        let lease = lease();
        let claimed = tokio::time::Instant::now();
        assert_eq!(lease.expires(), claimed + secs(60));
        tokio::time::advance(secs(10)).await;
        assert!(store.renew(&lease, secs(330)).await.unwrap());
        assert_eq!(lease.expires(), claimed + secs(340));
        tokio::time::advance(secs(10)).await;
        assert!(!store.renew(&lease, secs(330)).await.unwrap());
        assert!(store.renew(&lease, secs(330)).await.is_err());
        assert_eq!(lease.expires(), claimed + secs(340), "unchanged");
    }

    #[test]
    fn the_claim_ttl_and_the_retry_hint_follow_from_lease_and_hold() {
        let timing = timing();
        assert_eq!(timing.claim_ttl(), secs(330));
        assert_eq!(timing.renewal_period(), secs(10));
        let none = ClaimHold::default();
        assert_eq!(
            timing.retry_after_in_flight(Some(secs(312)), none),
            secs(12)
        );
        assert_eq!(timing.retry_after_in_flight(Some(secs(200)), none), secs(0));
        assert_eq!(timing.retry_after_in_flight(None, none), secs(30));
        // A sibling route's claim, written with a 10 s hold.
        let own = ClaimHold(Some(secs(10)));
        assert_eq!(timing.retry_after_in_flight(Some(secs(25)), own), secs(15));
        let tiny = LeaseTiming {
            lease: Duration::from_millis(15),
            unknown_hold: secs(1),
        };
        assert_eq!(tiny.renewal_period(), MIN_RENEWAL_PERIOD);
    }

    #[tokio::test(start_paused = true)]
    async fn renews_every_third_of_the_lease_with_the_whole_claim_ttl() {
        let store = Arc::new(Scripted::default());
        let started = Instant::now();
        let work = async {
            tokio::time::sleep(secs(95)).await;
            "answer"
        };
        let output = renewing(&store, timing(), work).await;
        assert_eq!(output, "answer");
        assert_eq!(started.elapsed(), secs(95), "the work is never delayed");
        let renewals = store.renewals();
        let at: Vec<Duration> = renewals.iter().map(|(when, _)| *when - started).collect();
        assert_eq!(at, (1..=9).map(|n| secs(10 * n)).collect::<Vec<_>>());
        assert!(renewals.iter().all(|(_, ttl)| *ttl == secs(330)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_or_failed_renewal_keeps_the_cadence_and_the_work() {
        let store = Arc::new(Scripted::renewing(vec![
            Ok(false),
            Err(StoreError::Unavailable("connection refused".into())),
        ]));
        let started = Instant::now();
        let work = tokio::time::sleep(secs(35));
        renewing(&store, timing(), work).await;
        assert_eq!(started.elapsed(), secs(35));
        let at: Vec<Duration> = store
            .renewals()
            .iter()
            .map(|(when, _)| *when - started)
            .collect();
        assert_eq!(at, [secs(10), secs(20), secs(30)]);
    }

    /// What a reader makes of the claim at `now`, given the renewals so far.
    fn observed_at(store: &Scripted, timing: LeaseTiming, claimed: Instant) -> Observed<'static> {
        let last_write = store.renewals().last().map_or(claimed, |(when, _)| *when);
        let ttl = (last_write + timing.claim_ttl()).saturating_duration_since(Instant::now());
        let existing = Existing {
            record: lease().record().clone(),
            ttl: Some(ttl),
        };
        match existing.observe(timing.unknown_hold) {
            Observed::InFlight => Observed::InFlight,
            Observed::Unknown { remaining } => Observed::Unknown { remaining },
            Observed::Completed(_) | Observed::Acknowledged(_) => {
                unreachable!("an in-flight record")
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_claim_stays_in_flight_and_turns_unknown_a_lease_after_its_owner_stops() {
        let store = Arc::new(Scripted::default());
        let timing = timing();
        let claimed = Instant::now();
        let work = async {
            for _ in 0..95 {
                tokio::time::sleep(secs(1)).await;
                assert_eq!(
                    observed_at(&store, timing, claimed),
                    Observed::InFlight,
                    "at {:?}",
                    claimed.elapsed()
                );
            }
        };
        renewing(&store, timing, work).await;
        // The owner stopped renewing at 90 s: in flight until 120 s, then
        // unknown for exactly the hold.
        tokio::time::sleep_until(claimed + secs(119)).await;
        assert_eq!(observed_at(&store, timing, claimed), Observed::InFlight);
        tokio::time::sleep_until(claimed + secs(120)).await;
        assert_eq!(
            observed_at(&store, timing, claimed),
            Observed::Unknown {
                remaining: secs(300)
            }
        );
    }
}
