//! The probe plans the store keeps (`[route.probe]`, contract §4 rule 5):
//! what a probe of an unknown outcome needs, kept with the claim so that
//! whichever instance is alive asks the handler, even after the instance
//! that forwarded the delivery died or restarted.
//!
//! | op | effect |
//! |----|--------|
//! | (claim) | a claim of a probe route keeps the delivery's plan in the same step, in the scope's due set a lease plus `start_after` from now |
//! | (complete, release, purge) | a key of a probe route settles its plan in the same step: an unknown outcome is due `start_after` from now, any other outcome forgets the plan |
//! | due | the record keys of a scope whose plans are due |
//! | take | judge a due plan ([`judge`]); if its record is unknown (or in flight with its owner lost) and the attempt is due, the record becomes the taker's (a new owner token, state unknown, its expiry kept) and the plan is not due again for the probe lease |
//! | note | owner-checked: an attempt that could not tell, and when to look again |
//! | pending | read a plan and when it is due (the admin record view) |
//!
//! Taking a probe is taking the record: afterwards the taker settles it
//! with the ordinary owner-checked `complete` and `release`, so two
//! instances never both act on one record, and the original owner, should
//! it come back, finds its claim taken over. A taker that dies leaves the
//! plan due again once its probe lease ends; another instance takes it.
//!
//! On Redis the plans live in a hash and the due times in a sorted set per
//! scope (`{prefix}:{scope}:probe:plans`, `…:probe:due`), on a Cluster one
//! of each per hash slot, named by the slot's tag (`redis/slots.rs`), so a
//! record, its plan and its due entry share a slot and every script above
//! changes them together. On the embedded store they are two tables of
//! the same file, written in the record's transaction.

use std::time::Duration;

use super::{AnyStore, Call, Lease, StoreError, StoreKey};
use crate::config::CacheStatus;
use crate::record::{OwnerToken, Record, RecordState};

/// What the store keeps of one delivery's probe (module docs). Its text
/// form is what the Lua scripts read: the first four fields are numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePlan {
    /// How long after the call ended the first attempt may be sent.
    pub start_after: Duration,
    /// The route's `unknown_hold`: how a script tells a lost owner's
    /// in-flight claim from a live one.
    pub hold: Duration,
    /// Attempts made so far (counting one being made).
    pub attempts: u32,
    /// The attempts are spent: the record stays unknown.
    pub done: bool,
    /// The route whose probe settings apply.
    pub route: String,
    /// What the last attempt heard (`""` before the first).
    pub last: String,
    /// The probe's path and query, values percent-encoded.
    pub target: String,
}

impl ProbePlan {
    /// A fresh plan: no attempt yet.
    pub fn new(route: &str, target: String, start_after: Duration, hold: Duration) -> Self {
        Self {
            start_after,
            hold,
            attempts: 0,
            done: false,
            route: route.to_owned(),
            last: String::new(),
            target,
        }
    }

    /// When a claim written for `claim_ttl` (lease + hold) is first due,
    /// from its claim: its lease plus `start_after`, the earliest a lost
    /// owner's record could be probed.
    pub fn first_due(&self, claim_ttl: Duration) -> Duration {
        claim_ttl.saturating_sub(self.hold) + self.start_after
    }

    /// The text the store keeps. `last` loses tabs and line breaks, the
    /// one field that could carry them.
    pub fn encode(&self) -> String {
        let last: String = self
            .last
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            crate::time::millis(self.start_after),
            crate::time::millis(self.hold),
            self.attempts,
            u8::from(self.done),
            self.route,
            last,
            self.target
        )
    }

    /// Reads [`ProbePlan::encode`]'s text.
    pub fn decode(text: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::Backend(format!("unreadable probe plan {text:?}"));
        let mut fields = text.splitn(7, '\t');
        let mut next = || fields.next().ok_or_else(bad);
        let millis = |field: &str| field.parse::<u64>().map(Duration::from_millis);
        Ok(Self {
            start_after: millis(next()?).map_err(|_| bad())?,
            hold: millis(next()?).map_err(|_| bad())?,
            attempts: next()?.parse().map_err(|_| bad())?,
            done: match next()? {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            },
            route: next()?.to_owned(),
            last: next()?.to_owned(),
            target: next()?.to_owned(),
        })
    }
}

/// A plan the admin record view shows: the plan and when it is due next
/// (unix ms; for a spent plan, when its entry is dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingProbe {
    /// The plan as stored.
    pub plan: ProbePlan,
    /// When an instance looks at it next (unix ms).
    pub next_at_ms: u64,
}

/// What [`judge`] makes of a due plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// The record is settled, gone or unreadable: the plan goes.
    Forget,
    /// Look again at this time (unix ms): the owner still renews, the
    /// attempt is not due, or the attempts are spent.
    Later(u64),
    /// Probe it now.
    Take,
}

/// The rule `probe_take.lua` applies, for the embedded store: `state` is
/// the record's (`None`: gone), `ttl_ms` its remaining lifetime, `due_ms`
/// the plan's due time, `now` the clock.
pub fn judge(
    plan: &ProbePlan,
    state: Option<&RecordState>,
    (ttl_ms, due_ms, now): (u64, u64, u64),
) -> Judged {
    let hold = crate::time::millis(plan.hold);
    let due = match state {
        Some(RecordState::InFlight(_)) => {
            // Renewed to lease + hold while its owner lives: at a TTL of
            // `hold` it stopped, and its call ended no later than that.
            (now + ttl_ms).saturating_sub(hold) + crate::time::millis(plan.start_after)
        }
        Some(RecordState::Unknown) => due_ms,
        _ => return Judged::Forget,
    };
    if plan.done {
        Judged::Later(now + ttl_ms + 1000)
    } else if due > now {
        Judged::Later(due)
    } else {
        Judged::Take
    }
}

/// A probe this instance took: the record is its own until it settles it.
#[derive(Debug)]
pub struct Taken {
    /// The lease on the record, as rewritten by the take.
    pub lease: Lease,
    /// The plan, its attempts counting this one.
    pub plan: ProbePlan,
}

/// The probe operations of the module docs, implemented by both backends.
pub trait ProbeOps: Send + Sync + std::fmt::Debug {
    /// Up to `limit` record keys of scope `namespace` due by `now_ms`.
    fn probe_due<'a>(
        &'a self,
        namespace: &'a str,
        now_ms: u64,
        limit: usize,
    ) -> Call<'a, Vec<String>>;
    /// See [`AnyStore::take_probe`]: the rewritten record, its TTL and
    /// the plan's text, if taken.
    fn probe_take<'a>(
        &'a self,
        key: &'a StoreKey,
        owner: OwnerToken,
        lease: Duration,
    ) -> Call<'a, Option<(Record, Duration, String)>>;
    /// See [`AnyStore::note_probe`].
    fn probe_note<'a>(
        &'a self,
        key: &'a StoreKey,
        owner: OwnerToken,
        plan: &'a str,
        next: Option<Duration>,
    ) -> Call<'a, bool>;
    /// A plan's text and due time (unix ms), if the key has one.
    fn probe_pending<'a>(&'a self, key: &'a StoreKey) -> Call<'a, Option<(String, u64)>>;
}

impl AnyStore {
    fn probes(&self) -> &dyn ProbeOps {
        &*self.backend
    }

    /// Up to `limit` keys of scope `namespace` (`{prefix}:{scope}`) whose
    /// probes are due now.
    pub async fn due_probes(
        &self,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<StoreKey>, StoreError> {
        let keys = self
            .probes()
            .probe_due(namespace, crate::time::now_ms(), limit)
            .await?;
        Ok(keys.into_iter().map(|key| StoreKey(key, true)).collect())
    }

    /// Takes `key`'s due probe for `owner` for `lease` (module docs);
    /// `advance` gives the `advance_status` of the plan's route if it is
    /// an entity route, so a completion settles the entity as a first
    /// delivery's would. `None`: nothing to probe now.
    pub async fn take_probe(
        &self,
        key: &StoreKey,
        owner: OwnerToken,
        lease: Duration,
        advance: &(dyn Fn(&str) -> Option<CacheStatus> + Sync),
    ) -> Result<Option<Taken>, StoreError> {
        let Some((record, ttl, plan)) = self.probes().probe_take(key, owner, lease).await? else {
            return Ok(None);
        };
        let plan = ProbePlan::decode(&plan)?;
        self.forget(key);
        let advance = advance(&plan.route);
        Ok(Some(Taken {
            lease: Lease::claimed(key.clone(), record, ttl, advance),
            plan,
        }))
    }

    /// Notes an attempt of the probe `lease` holds that could not tell:
    /// `plan` as it now stands, the next attempt `next` from now (`None`:
    /// none, the attempts are spent). `false`: the record is no longer
    /// this taker's.
    pub async fn note_probe(
        &self,
        lease: &Lease,
        plan: &ProbePlan,
        next: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let text = plan.encode();
        self.probes()
            .probe_note(lease.key(), lease.owner(), &text, next)
            .await
    }

    /// `key`'s probe plan and when it is due, if it has one.
    pub async fn pending_probe(&self, key: &StoreKey) -> Result<Option<PendingProbe>, StoreError> {
        let Some((text, next_at_ms)) = self.probes().probe_pending(key).await? else {
            return Ok(None);
        };
        Ok(Some(PendingProbe {
            plan: ProbePlan::decode(&text)?,
            next_at_ms,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> ProbePlan {
        ProbePlan::new(
            "pay",
            "/orders/a%20b".into(),
            Duration::from_secs(60),
            Duration::from_secs(120),
        )
    }

    #[test]
    fn a_plan_reads_back_as_written() {
        let mut plan = plan();
        plan.attempts = 2;
        plan.last = "status 503\tbusy".into();
        let back = ProbePlan::decode(&plan.encode()).unwrap();
        assert_eq!(back.last, "status 503 busy");
        assert_eq!(
            ProbePlan {
                last: back.last.clone(),
                ..plan
            },
            back
        );
        assert!(ProbePlan::decode("60000\t1\tx").is_err());
        assert!(ProbePlan::decode("1\t2\t3\t7\tr\t\t/").is_err());
    }

    #[test]
    fn a_live_owner_is_never_probed_and_a_lost_one_after_start_after() {
        let plan = plan();
        let now = 1_000_000;
        // TTL above the hold: the owner renews; due once it would have
        // stopped (10 s from now) plus start_after.
        assert_eq!(
            judge(
                &plan,
                Some(&RecordState::InFlight(Default::default())),
                (130_000, 0, now)
            ),
            Judged::Later(now + 10_000 + 60_000)
        );
        // Stopped 61 s ago: due.
        assert_eq!(
            judge(
                &plan,
                Some(&RecordState::InFlight(Default::default())),
                (59_000, 0, now)
            ),
            Judged::Take
        );
        assert_eq!(
            judge(&plan, Some(&RecordState::Unknown), (100_000, now + 5, now)),
            Judged::Later(now + 5)
        );
        assert_eq!(
            judge(&plan, Some(&RecordState::Unknown), (100_000, now, now)),
            Judged::Take
        );
        assert_eq!(judge(&plan, None, (0, 0, now)), Judged::Forget);
        let done = ProbePlan { done: true, ..plan };
        assert_eq!(
            judge(&done, Some(&RecordState::Unknown), (5_000, 0, now)),
            Judged::Later(now + 6_000)
        );
    }
}
