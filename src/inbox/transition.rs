//! How an inbox delivery moves between stages: pure functions of the
//! entry, the route's rules and the clock, so every rule of the schedule
//! is pinned by a unit test without a store or a handler.
//!
//! ```text
//! queued ──take──▶ delivering ──handler took it──▶ delivered
//!    ▲                 │ ──failed, attempts left──▶ queued (backoff)
//!    │                 │ ──failed, none left──────▶ dead
//!    │                 │ ──timed out / worker vanished──▶ unknown (hold)
//!    └─────────────────┴─────────────────────────────────┘ (release)
//! dead, unknown ──operator retry──▶ queued (one attempt) ; ──drop──▶ dropped
//! ```

use std::time::Duration;

use crate::config::{Inbox, OnUpstreamTimeout};
use crate::record::{InboxEntry, Stage, StoredResponse};
use crate::time::millis;

/// What a worker finds when it looks at a taken delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkerStep {
    /// Due: claim it as this entry (stage delivering) and send it.
    Send(Box<InboxEntry>),
    /// Not due before this time (unix ms): put it back in the index there.
    NotYet(u64),
    /// Its worker vanished mid-call (the visibility timeout passed): the
    /// handler may have acted.
    Abandoned,
    /// Nothing for a worker to do in this stage.
    Settled(Stage),
}

/// How one redelivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The handler answered with a status the route stores.
    Delivered(StoredResponse),
    /// A clean failure: the handler did not act (refused, or any answer
    /// the route does not store).
    Failed {
        /// Why, for the admin API.
        error: String,
        /// The handler's answer, if it gave one.
        answer: Option<StoredResponse>,
    },
    /// The request may have reached the handler without an answer coming
    /// back (timeout, broken connection, vanished worker).
    Unknown(String),
}

/// How a redelivery is counted (`result` label of
/// `idemgate_inbox_redeliveries_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedeliveryResult {
    /// The handler took it.
    Delivered,
    /// Failed; rescheduled.
    Failed,
    /// Outcome unknown (held, or rescheduled under `release`).
    Unknown,
    /// Failed with no attempts left.
    Dead,
}

impl RedeliveryResult {
    /// Every result, in label order.
    pub(crate) const ALL: [Self; 4] = [Self::Delivered, Self::Failed, Self::Unknown, Self::Dead];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
            Self::Dead => "dead",
        }
    }
}

/// The delay before attempt `attempts + 1`: `backoff` doubled per attempt
/// made, scaled by `jitter` (a factor in 0.75..=1.25, drawn by the caller)
/// so deliveries queued together do not return together, and only then
/// capped: `max_backoff` is the longest gap there is, jitter included.
pub(crate) fn delay(rules: &Inbox, attempts: u32, jitter: f64) -> Duration {
    let doubled = rules
        .backoff
        .saturating_mul(1u32.checked_shl(attempts.min(31)).unwrap_or(u32::MAX));
    let scaled = Duration::try_from_secs_f64(doubled.as_secs_f64() * jitter.clamp(0.75, 1.25))
        .unwrap_or(Duration::MAX);
    scaled.min(rules.max_backoff)
}

/// A jitter factor in 0.75..=1.25.
pub(crate) fn jitter() -> f64 {
    let draw = getrandom::u32().unwrap_or(u32::MAX / 2);
    0.75 + 0.5 * f64::from(draw) / f64::from(u32::MAX)
}

/// What a worker should do with `entry` at `now`. A queued entry is due a
/// little early (`early`) so a wake-up that lands just before its time
/// does not waste a round trip.
pub(crate) fn look(entry: &InboxEntry, rules: &Inbox, now: u64, early: Duration) -> WorkerStep {
    match entry.stage {
        Stage::Queued if entry.due_ms > now.saturating_add(millis(early)) => {
            WorkerStep::NotYet(entry.due_ms)
        }
        Stage::Queued => {
            let mut sending = entry.clone();
            sending.stage = Stage::Delivering;
            sending.attempts = entry.attempts.saturating_add(1);
            sending.due_ms = now.saturating_add(millis(rules.visibility_timeout));
            WorkerStep::Send(Box::new(sending))
        }
        Stage::Delivering if entry.due_ms > now => WorkerStep::NotYet(entry.due_ms),
        Stage::Delivering => WorkerStep::Abandoned,
        stage => WorkerStep::Settled(stage),
    }
}

/// The entry after an attempt ended at `now`, and the counter it adds to.
pub(crate) fn after(
    entry: &InboxEntry,
    attempt: Attempt,
    rules: &Inbox,
    on_timeout: OnUpstreamTimeout,
    now: u64,
    jitter: f64,
) -> (InboxEntry, RedeliveryResult) {
    let mut next = entry.clone();
    next.due_ms = now;
    let counted = match attempt {
        Attempt::Delivered(answer) => {
            next.stage = Stage::Delivered;
            next.last_answer = Some(answer);
            next.last_error.clear();
            RedeliveryResult::Delivered
        }
        Attempt::Failed { error, answer } => {
            next.set_error(&error);
            if answer.is_some() {
                next.last_answer = answer;
            }
            if next.attempts >= next.limit {
                next.stage = Stage::Dead;
                RedeliveryResult::Dead
            } else {
                reschedule(&mut next, rules, now, jitter);
                RedeliveryResult::Failed
            }
        }
        Attempt::Unknown(error) => {
            next.set_error(&format!("outcome unknown: {error}"));
            // A new unknown outcome: a probe asks about this attempt afresh.
            next.probes = 0;
            match on_timeout {
                OnUpstreamTimeout::Hold => next.stage = Stage::Unknown,
                OnUpstreamTimeout::Release if next.attempts >= next.limit => {
                    next.stage = Stage::Dead;
                }
                OnUpstreamTimeout::Release => reschedule(&mut next, rules, now, jitter),
            }
            RedeliveryResult::Unknown
        }
    };
    (next, counted)
}

fn reschedule(entry: &mut InboxEntry, rules: &Inbox, now: u64, jitter: f64) {
    entry.stage = Stage::Queued;
    entry.due_ms = now.saturating_add(millis(delay(rules, entry.attempts, jitter)));
}

/// An operator's "send now, once" for a dead or unknown delivery: queued
/// at `now` with exactly one attempt before it is dead again. `None` for
/// any other stage.
pub(crate) fn retry_now(entry: &InboxEntry, now: u64) -> Option<InboxEntry> {
    if !entry.stage.is_held() {
        return None;
    }
    let mut next = entry.clone();
    next.stage = Stage::Queued;
    next.due_ms = now;
    next.limit = entry.attempts.saturating_add(1);
    Some(next)
}

/// An operator's "resolve without sending": any stage but delivering (a
/// worker is calling the handler) and delivered (already resolved).
pub(crate) fn drop_now(entry: &InboxEntry, now: u64) -> Option<InboxEntry> {
    if matches!(entry.stage, Stage::Delivering | Stage::Delivered) {
        return None;
    }
    let mut next = entry.clone();
    next.stage = Stage::Dropped;
    next.due_ms = now;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::inbox_entry::tests::entry;

    fn rules() -> Inbox {
        let route = crate::config::test_route(
            "[route.inbox]\nbackoff = \"1s\"\nmax_backoff = \"10s\"\nmax_attempts = 3\n",
        );
        route.inbox.expect("the test route has an inbox")
    }

    fn secs(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    #[test]
    fn the_delay_doubles_to_its_cap_within_a_quarter_either_way() {
        let rules = rules();
        let plain: Vec<_> = (0..6).map(|a| delay(&rules, a, 1.0)).collect();
        assert_eq!(plain, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0].map(secs));
        assert_eq!(delay(&rules, 1, 0.75), secs(1.5));
        assert_eq!(delay(&rules, 1, 1.25), secs(2.5));
        assert_eq!(delay(&rules, 1, 9.0), secs(2.5), "jitter is clamped");
        assert_eq!(delay(&rules, u32::MAX, 1.0), secs(10.0));
        // The cap holds with jitter too: max_backoff is the longest gap.
        assert_eq!(delay(&rules, 3, 1.25), secs(10.0), "8 s x 1.25 capped");
        assert_eq!(delay(&rules, 3, 0.75), secs(6.0));
        assert_eq!(delay(&rules, u32::MAX, 1.25), secs(10.0));
        for _ in 0..1_000 {
            assert!((0.75..=1.25).contains(&jitter()));
        }
    }

    #[test]
    fn a_due_delivery_is_claimed_with_a_visibility_deadline() {
        let rules = rules();
        let mut queued = entry(Stage::Queued);
        queued.due_ms = 10_000;
        assert_eq!(
            look(&queued, &rules, 5_000, secs(0.1)),
            WorkerStep::NotYet(10_000)
        );
        let WorkerStep::Send(sending) = look(&queued, &rules, 9_950, secs(0.1)) else {
            panic!("due within the early margin");
        };
        assert_eq!(sending.stage, Stage::Delivering);
        assert_eq!(sending.attempts, queued.attempts + 1);
        assert_eq!(sending.due_ms, 9_950 + 60_000);
        assert_eq!(
            look(&sending, &rules, 60_000, secs(0.1)),
            WorkerStep::NotYet(69_950)
        );
        assert_eq!(
            look(&sending, &rules, 69_950, secs(0.1)),
            WorkerStep::Abandoned
        );
        for stage in [
            Stage::Delivered,
            Stage::Dead,
            Stage::Unknown,
            Stage::Dropped,
        ] {
            assert_eq!(
                look(&entry(stage), &rules, 0, secs(0.1)),
                WorkerStep::Settled(stage)
            );
        }
    }

    #[test]
    fn failures_reschedule_until_the_limit_then_die() {
        let rules = rules();
        let failed = || Attempt::Failed {
            error: "handler answered 503".into(),
            answer: None,
        };
        let fail = |sending: &InboxEntry| {
            after(sending, failed(), &rules, OnUpstreamTimeout::Hold, 100, 1.0)
        };
        let mut sending = entry(Stage::Delivering);
        sending.attempts = 1;
        sending.limit = 3;
        let (next, counted) = fail(&sending);
        assert_eq!(
            (next.stage, counted),
            (Stage::Queued, RedeliveryResult::Failed)
        );
        assert_eq!(next.due_ms, 100 + 2_000);
        assert_eq!(next.last_error, "handler answered 503");
        assert!(next.last_answer.is_some(), "an earlier answer is kept");
        sending.attempts = 3;
        let (next, counted) = fail(&sending);
        assert_eq!((next.stage, counted), (Stage::Dead, RedeliveryResult::Dead));
    }

    #[test]
    fn an_unknown_outcome_is_held_or_released_as_the_route_says() {
        let rules = rules();
        let sending = entry(Stage::Delivering);
        let unknown = |sending: &InboxEntry, rule| {
            let attempt = Attempt::Unknown("upstream timed out".into());
            after(sending, attempt, &rules, rule, 7, 1.0)
        };
        let (held, counted) = unknown(&sending, OnUpstreamTimeout::Hold);
        assert_eq!(
            (held.stage, counted),
            (Stage::Unknown, RedeliveryResult::Unknown)
        );
        assert!(held.last_error.starts_with("outcome unknown"));
        let mut early = sending;
        early.attempts = 1;
        let (released, _) = unknown(&early, OnUpstreamTimeout::Release);
        assert_eq!(released.stage, Stage::Queued);
    }

    #[test]
    fn delivery_keeps_the_handlers_answer() {
        let answer = entry(Stage::Queued).ack;
        let (next, counted) = after(
            &entry(Stage::Delivering),
            Attempt::Delivered(answer.clone()),
            &rules(),
            OnUpstreamTimeout::Hold,
            1,
            1.0,
        );
        assert_eq!(
            (next.stage, counted),
            (Stage::Delivered, RedeliveryResult::Delivered)
        );
        assert_eq!(next.last_answer, Some(answer));
        assert!(next.last_error.is_empty());
    }

    #[test]
    fn operators_retry_held_deliveries_once_and_drop_any_not_in_flight() {
        let mut dead = entry(Stage::Dead);
        dead.attempts = 12;
        let retried = retry_now(&dead, 50).unwrap();
        assert_eq!(
            (retried.stage, retried.due_ms, retried.limit),
            (Stage::Queued, 50, 13)
        );
        assert!(retry_now(&entry(Stage::Unknown), 50).is_some());
        assert!(retry_now(&entry(Stage::Queued), 50).is_none());
        assert!(retry_now(&entry(Stage::Delivered), 50).is_none());
        for stage in [Stage::Queued, Stage::Dead, Stage::Unknown, Stage::Dropped] {
            assert_eq!(drop_now(&entry(stage), 9).unwrap().stage, Stage::Dropped);
        }
        assert!(drop_now(&entry(Stage::Delivering), 9).is_none());
        assert!(drop_now(&entry(Stage::Delivered), 9).is_none());
    }
}
