//! The claim loop on the paused clock: patience, and how soon a waiter
//! sees its first delivery settle.

use super::*;
use crate::config::Config;
use crate::record::Fingerprint;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A claimer on an embedded store in `dir`, and the rules of a route
/// that waits up to 1 s for an in-flight first delivery.
async fn setup(dir: &tempfile::TempDir) -> (Claimer, Idempotency) {
    let text = format!(
        "[store]\nkind = \"embedded\"\npath = {:?}\n\
         [upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"r\"\npath_prefix = \"/\"\n\
         [route.signature]\nscheme = \"none\"\n\
         [route.idempotency]\non_in_flight = \"wait\"\nwait_timeout = \"1s\"\n",
        dir.path().join("claims.redb").display().to_string()
    );
    let mut config = Config::parse(&text).expect("test config");
    let store = AnyStore::connect(&config.store).await.expect("store");
    let claimer = Claimer::new(
        Arc::new(store),
        TaskTracker::new(),
        CancellationToken::new(),
        8,
    );
    (claimer, config.routes.remove(0).idempotency)
}

fn identity() -> Identity {
    let hash = "b".repeat(64);
    Identity {
        key: StoreKey::new("idemgate", "r", &hash),
        key_hash: hash,
        key_digest: [0xbb; 32],
        fingerprint: Fingerprint([3; 32]),
        key_value: None,
        entity: None,
        probe: None,
    }
}

/// Claims the key as a first delivery would.
async fn first(claimer: &Claimer, rules: &Idempotency) -> Lease {
    match claimer
        .claim(&identity(), rules, None, rules.wait_timeout, None)
        .await
    {
        Ok(Decision::Forward(lease)) => lease,
        other => panic!("expected a first delivery, got {other:?}"),
    }
}

fn in_flight(decision: &Result<Decision, StoreError>) -> bool {
    matches!(
        decision,
        Ok(Decision::Refuse(Rejection::InFlight { .. }, _))
    )
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_gives_up_exactly_at_its_patience() {
    let dir = tempfile::tempdir().unwrap();
    let (claimer, rules) = setup(&dir).await;
    let _lease = first(&claimer, &rules).await;
    let started = Instant::now();
    let decision = claimer
        .claim(&identity(), &rules, None, rules.wait_timeout, None)
        .await;
    assert!(in_flight(&decision), "{decision:?}");
    assert_eq!(started.elapsed(), rules.wait_timeout);

    let started = Instant::now();
    let decision = claimer
        .claim(&identity(), &rules, None, Duration::ZERO, None)
        .await;
    assert!(in_flight(&decision), "{decision:?}");
    assert_eq!(started.elapsed(), Duration::ZERO, "no patience, no wait");
}

/// How long a waiting duplicate takes to be forwarded when its first
/// delivery's claim is released at 333 ms, by this instance (which
/// wakes local waiters) or by another one (which can not).
async fn forwarded_after_release(wake_locally: bool) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let (claimer, rules) = setup(&dir).await;
    let lease = first(&claimer, &rules).await;
    let started = Instant::now();
    let settle = async {
        tokio::time::sleep(ms(333)).await;
        assert!(claimer.store.release(&lease).await.unwrap());
        if wake_locally {
            claimer.settled(lease.key());
        }
    };
    let duplicate = identity();
    let (decision, ()) = tokio::join!(
        claimer.claim(&duplicate, &rules, None, rules.wait_timeout, None),
        settle
    );
    assert!(matches!(decision, Ok(Decision::Forward(_))), "{decision:?}");
    started.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_local_settle_wakes_the_waiter_at_once() {
    assert_eq!(forwarded_after_release(true).await, ms(333));
}

#[tokio::test(start_paused = true)]
async fn a_remote_settle_is_seen_at_the_next_re_check() {
    // Re-checks come after jittered pauses of 10 to 100 ms, so the
    // release at 333 ms is seen after it and within one longest pause.
    for _ in 0..20 {
        let waited = forwarded_after_release(false).await;
        assert!(
            waited > ms(333) && waited <= ms(333) + POLL_MAX,
            "{waited:?}"
        );
    }
}
