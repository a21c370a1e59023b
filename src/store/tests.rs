use super::*;

fn existing(state: RecordState, ttl_ms: u64) -> Existing {
    Existing {
        record: crate::record::sample(state),
        ttl: Some(Duration::from_millis(ttl_ms)),
    }
}

/// A claim is judged by the hold it was written with, whichever
/// route of its scope reads it: a reader with a longer hold must not
/// take a live claim for a lost one (and offer to purge it), nor one
/// with a shorter hold a lost claim for a live one.
#[test]
fn a_claim_is_judged_by_its_own_hold_not_the_readers() {
    use crate::record::ClaimHold;
    let claimed_with = ClaimHold(Some(Duration::from_secs(5)));
    let live = existing(RecordState::InFlight(claimed_with), 20_000);
    assert_eq!(live.observe(Duration::from_secs(3600)), Observed::InFlight);
    let lost = existing(RecordState::InFlight(claimed_with), 4_000);
    assert_eq!(
        lost.observe(Duration::from_secs(1)),
        Observed::Unknown {
            remaining: Duration::from_secs(4)
        }
    );
}

#[test]
fn in_flight_past_its_lease_is_unknown() {
    let hold = Duration::from_secs(60);
    assert_eq!(
        existing(RecordState::InFlight(Default::default()), 60_001).observe(hold),
        Observed::InFlight
    );
    assert_eq!(
        existing(RecordState::InFlight(Default::default()), 60_000).observe(hold),
        Observed::Unknown {
            remaining: Duration::from_secs(60)
        }
    );
    assert_eq!(
        existing(RecordState::Unknown, 10).observe(hold),
        Observed::Unknown {
            remaining: Duration::from_millis(10)
        }
    );
}
