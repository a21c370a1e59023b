//! One history of the entity model (`super`): the harness that drives a
//! store as the pipeline, the workers and an operator would, the
//! reference model it keeps beside the store, and the promise's checker.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use idemgate::config::{CacheStatus, Sources};
use idemgate::record::{
    Fingerprint, InboxEntry, OwnerMint, Record, RecordState, Stage, StoredBody, StoredRequest,
    StoredResponse,
};
use idemgate::store::entity::{
    Correction, EntityEffect, EntityStep, EntityVerdict, HoldVerdict, Judgement, KeptBack, Seen,
};
use idemgate::store::inbox::InboxOps;
use idemgate::store::{ClaimOutcome, EntityKey, Releasing, Store, StoreKey};

use super::model::{Announced, Fate, Model, Notice};
use super::{HOLD, Handler, LONG, MAX_HELD, Op, Restart, STATES, allowed, sources};

/// One history against one store.
pub(super) struct Run<'a, S> {
    store: &'a S,
    restart: Option<Restart<'a>>,
    mint: OwnerMint,
    entity: String,
    inbox: bool,
    model: Model,
    notices: Vec<Notice>,
    /// The handler's accepted calls, in order: (notice, state, event).
    accepted: Vec<(usize, Announced)>,
}

fn key_of(entity: &str, n: usize) -> StoreKey {
    StoreKey::for_entity("model", "pay", &format!("{n:064x}"), entity)
}

fn response(status: u16) -> StoredResponse {
    StoredResponse {
        status,
        headers: Vec::new(),
        body: StoredBody::Kept(Bytes::from_static(b"ok")),
    }
}

fn entry(stage: Stage, last: Option<u16>) -> InboxEntry {
    InboxEntry {
        ack: response(200),
        stage,
        attempts: 1,
        limit: 1,
        due_ms: 0,
        route: "pay".into(),
        last_error: String::new(),
        last_answer: last.map(response),
        request: StoredRequest {
            method: Bytes::from_static(b"POST"),
            target: Bytes::from_static(b"/notify"),
            headers: Vec::new(),
            body: Bytes::from_static(b"{}"),
        },
        probes: 0,
    }
}

fn effect(record: &Record) -> EntityEffect {
    EntityEffect::of(record, &CacheStatus::successes())
}

impl<'a, S: Store + InboxOps> Run<'a, S> {
    /// A fresh history of entity `case` on `store`; `inbox`: the route
    /// holds notices and queues failures.
    /// `restart` restarts the store for `Op::Restart`.
    pub(super) fn new(store: &'a S, case: u64, inbox: bool, restart: Option<Restart<'a>>) -> Self {
        Self {
            store,
            restart,
            mint: OwnerMint::new(),
            entity: format!("{case:032x}"),
            inbox,
            model: Model::default(),
            notices: Vec::new(),
            accepted: Vec::new(),
        }
    }

    fn step(&self, (to, event): Announced) -> EntityStep {
        EntityStep {
            key: EntityKey::new("model", "pay", &self.entity),
            to: to.to_owned(),
            sources: Sources {
                from: sources(to),
                initial: true,
            },
            retention: LONG,
            advance: CacheStatus::successes(),
            event: event.map(str::to_owned),
        }
    }

    fn key(&self, n: usize) -> StoreKey {
        key_of(&self.entity, n)
    }

    pub(super) async fn apply(&mut self, op: Op) {
        match op {
            Op::Arrive { to, event, handler } => {
                self.notices.push(Notice {
                    to: STATES[to],
                    event: event.map(|second| if second { "e2" } else { "e1" }),
                    fate: Fate::NotAcknowledged,
                    recorded: false,
                    applied_unknown: None,
                    stage: None,
                });
                self.deliver(self.notices.len() - 1, handler).await;
            }
            Op::Copy { which, handler } if !self.notices.is_empty() => {
                self.deliver(which % self.notices.len(), handler).await;
            }
            Op::Work { which, handler } => self.work(which, handler).await,
            Op::Expire => tokio::time::sleep(HOLD * 3).await,
            Op::Restart => self.restart().await,
            Op::Purge => self.purge().await,
            Op::Retry { which } => self.operator(which, true).await,
            Op::Drop { which } => self.operator(which, false).await,
            Op::Copy { .. } => {}
        }
        self.compare().await;
    }

    /// A sender delivers notice `n` (its first copy or another one).
    async fn deliver(&mut self, n: usize, handler: Handler) {
        let announced = (self.notices[n].to, self.notices[n].event);
        let to = announced.0;
        let key = self.key(n);
        let step = self.step(announced);
        let record = Record::in_flight(self.mint.next(), Fingerprint([7; 32]), None);
        // An owner that dies mid-call stops renewing: its claim lives for
        // a short hold, then the record is gone, unsettled.
        let crashes = matches!(handler, Handler::CrashApplied | Handler::CrashNotApplied);
        let ttl = if crashes { HOLD } else { LONG };
        let outcome = self
            .store
            .claim(&key, record, ttl, (Some(&step), None))
            .await
            .unwrap();
        // An unknown outcome's record lives for HOLD: gone by now or not.
        let notice = &mut self.notices[n];
        let fleeting =
            notice.recorded && notice.applied_unknown.is_some() && notice.stage.is_none();
        if fleeting && !matches!(outcome, ClaimOutcome::Existing(_)) {
            notice.recorded = false;
        }
        let recorded = notice.recorded;
        match outcome {
            ClaimOutcome::Existing(_) => assert!(recorded, "{n}: a record the model lost"),
            ClaimOutcome::Claimed(lease) => {
                assert!(
                    !recorded && !self.model.busy(),
                    "{n}: claimed: {:?}",
                    self.model
                );
                assert_eq!(self.model.judge(n, announced), Ok(()), "{n}: claimed {to}");
                self.notices[n].recorded = true;
                self.call(
                    n,
                    handler,
                    |state| lease.record().with_state(state),
                    lease.owner(),
                )
                .await;
            }
            ClaimOutcome::Decided(EntityVerdict::Busy { .. }) => {
                assert!(
                    !recorded && self.model.busy(),
                    "{n}: busy: {:?}",
                    self.model
                );
                if self.inbox {
                    self.hold(n, &key, &step).await;
                }
            }
            ClaimOutcome::Decided(EntityVerdict::Judged(judgement)) => {
                assert!(!recorded && !self.model.busy(), "{n}: {judgement:?}");
                let expected = self.model.judge(n, announced).unwrap_err();
                let got = if judgement == Judgement::Repeat {
                    "repeat"
                } else {
                    "refused"
                };
                assert_eq!(got, expected, "{n}: {to} from {:?}", self.model.state);
                self.notices[n].fate = Fate::Judged;
            }
        }
    }

    async fn hold(&mut self, n: usize, key: &StoreKey, step: &EntityStep) {
        let record = Record::in_flight(self.mint.next(), Fingerprint([7; 32]), None)
            .with_state(RecordState::Inbox(Box::new(entry(Stage::Queued, None))));
        let verdict = self.store.hold(key, &record, step, MAX_HELD).await.unwrap();
        if self.model.pending == Some(n) {
            // A copy of the unresolved change itself is never held.
            assert_eq!(verdict, HoldVerdict::Itself, "{n}");
            return;
        }
        if self.model.held.len() >= MAX_HELD {
            assert_eq!(verdict, HoldVerdict::Full, "{n}");
            return;
        }
        assert_eq!(verdict, HoldVerdict::Held, "{n}: {:?}", self.model);
        self.model.held.push_back(n);
        let notice = &mut self.notices[n];
        (notice.recorded, notice.fate, notice.stage) = (true, Fate::Owed, Some(Stage::Queued));
    }

    /// The handler's call for notice `n`, settled as the pipeline would:
    /// `with` builds the record over the claim owned by `owner`.
    async fn call(
        &mut self,
        n: usize,
        handler: Handler,
        with: impl Fn(RecordState) -> Record,
        owner: idemgate::record::OwnerToken,
    ) {
        let key = self.key(n);
        let to = (self.notices[n].to, self.notices[n].event);
        if let Handler::CrashApplied | Handler::CrashNotApplied = handler {
            // Nothing more is written: the claim expires in flight.
            let applied = handler == Handler::CrashApplied;
            self.notices[n].applied_unknown = Some(applied);
            if applied {
                self.accepted.push((n, to));
            }
            return;
        }
        let (state, ttl) = match handler {
            Handler::Accept => (RecordState::Completed(response(200)), LONG),
            Handler::Refuse => (RecordState::Completed(response(404)), LONG),
            Handler::Fail if self.inbox => (
                RecordState::Inbox(Box::new(entry(Stage::Queued, Some(503)))),
                LONG,
            ),
            Handler::Fail => {
                let released = self
                    .store
                    .release(&key, owner, Releasing::Owned)
                    .await
                    .unwrap();
                assert!(released, "{n}");
                self.notices[n].recorded = false;
                self.model.drop_change(n);
                return;
            }
            Handler::TimeoutApplied | Handler::TimeoutNotApplied => (RecordState::Unknown, HOLD),
            Handler::CrashApplied | Handler::CrashNotApplied => unreachable!("returned above"),
        };
        let record = with(state);
        let stored = self
            .store
            .complete(&key, owner, &record, ttl, effect(&record))
            .await
            .unwrap();
        assert!(stored.stored(), "{n}");
        let notice = &mut self.notices[n];
        match handler {
            Handler::Accept => {
                notice.fate = Fate::Accepted;
                self.accepted.push((n, to));
                self.model.apply(n, to.0);
            }
            Handler::Refuse => self.model.drop_change(n),
            Handler::Fail => (notice.fate, notice.stage) = (Fate::Owed, Some(Stage::Queued)),
            Handler::TimeoutApplied => {
                notice.applied_unknown = Some(true);
                self.accepted.push((n, to));
            }
            Handler::TimeoutNotApplied => notice.applied_unknown = Some(false),
            Handler::CrashApplied | Handler::CrashNotApplied => {}
        }
    }

    /// A worker takes the `which`-th owed queued delivery.
    async fn work(&mut self, which: usize, handler: Handler) {
        let queued: Vec<usize> = (0..self.notices.len())
            .filter(|&n| self.notices[n].stage == Some(Stage::Queued))
            .collect();
        let Some(&n) = queued.get(which % queued.len().max(1)) else {
            return;
        };
        let key = self.key(n);
        let found = Store::lookup(self.store, &key)
            .await
            .unwrap()
            .unwrap()
            .record;
        let RecordState::Inbox(found_entry) = &found.state else {
            panic!("{n}: not an inbox record: {found:?}");
        };
        let mut sending = (**found_entry).clone();
        sending.stage = Stage::Delivering;
        let mut claimed = found.with_state(RecordState::Inbox(Box::new(sending)));
        claimed.owner = self.mint.next();
        let taken = self
            .store
            .take(&key, found.owner, &claimed, LONG)
            .await
            .unwrap();
        let expected = if self.model.pending == Some(n) {
            Ok(())
        } else if self.model.pending.is_some() || self.model.held.front() != Some(&n) {
            Err("wait")
        } else {
            self.model.held.pop_front();
            self.model
                .judge(n, (self.notices[n].to, self.notices[n].event))
        };
        match (taken, expected) {
            (Ok(swapped), Ok(())) => {
                assert!(swapped.written(), "{n}");
                self.redelivered(n, handler, &claimed).await;
            }
            (Err(KeptBack::Wait), Err("wait")) => {}
            (Err(KeptBack::Decided(judgement, to)), Err(expected)) => {
                assert_eq!(to, self.notices[n].to);
                let got = if judgement == Judgement::Repeat {
                    "repeat"
                } else {
                    "refused"
                };
                assert_eq!(got, expected, "{n}");
                if let Handler::CrashApplied | Handler::CrashNotApplied = handler {
                    // The worker dies before its drop is written: the
                    // notice stays at the front, to be judged again.
                    self.model.held.push_front(n);
                    return;
                }
                self.swap_stage(n, &found, Stage::Dropped, None).await;
                (self.notices[n].fate, self.notices[n].stage) =
                    (Fate::Judged, Some(Stage::Dropped));
            }
            (taken, expected) => panic!("{n}: took {taken:?}, the model says {expected:?}"),
        }
    }

    /// A redelivery's outcome, written as the worker writes it.
    async fn redelivered(&mut self, n: usize, handler: Handler, claimed: &Record) {
        let to = (self.notices[n].to, self.notices[n].event);
        // A worker dying mid-call: the next worker finds its claim past
        // the visibility deadline and holds the delivery as unknown.
        let handler = match handler {
            Handler::CrashApplied => Handler::TimeoutApplied,
            Handler::CrashNotApplied => Handler::TimeoutNotApplied,
            other => other,
        };
        let (stage, last) = match handler {
            Handler::Accept => (Stage::Delivered, Some(200)),
            Handler::Refuse => (Stage::Delivered, Some(404)),
            Handler::Fail => (Stage::Dead, Some(503)),
            Handler::TimeoutApplied | Handler::TimeoutNotApplied => (Stage::Unknown, None),
            Handler::CrashApplied | Handler::CrashNotApplied => unreachable!("mapped above"),
        };
        self.swap_stage(n, claimed, stage, last).await;
        self.notices[n].stage = Some(stage);
        match handler {
            Handler::Accept => {
                self.notices[n].fate = Fate::Accepted;
                self.accepted.push((n, to));
                self.model.apply(n, to.0);
            }
            Handler::Refuse => {
                self.notices[n].fate = Fate::Refused;
                self.model.drop_change(n);
            }
            Handler::TimeoutApplied => {
                self.notices[n].applied_unknown = Some(true);
                self.accepted.push((n, to));
            }
            Handler::TimeoutNotApplied => self.notices[n].applied_unknown = Some(false),
            Handler::Fail | Handler::CrashApplied | Handler::CrashNotApplied => {}
        }
    }

    /// Restarts the store, if the caller can, and waits until it answers:
    /// everything acknowledged before must still be there (the comparison
    /// after this step says so).
    async fn restart(&self) {
        let Some(restart) = self.restart else { return };
        restart();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while self.store.ping().await.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the store did not come back"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn swap_stage(&self, n: usize, current: &Record, stage: Stage, last: Option<u16>) {
        let mut record = current.with_state(RecordState::Inbox(Box::new(entry(stage, last))));
        record.owner = self.mint.next();
        let swapped = self
            .store
            .swap(&self.key(n), current.owner, &record, LONG, effect(&record))
            .await
            .unwrap();
        assert!(swapped.written(), "{n}: {stage:?}");
    }

    /// The operator purges the pending delivery if it is unresolved and
    /// did not apply (an applied one stays held: no operator tool here
    /// may say so, so the entity must stay held, visibly).
    async fn purge(&mut self) {
        let Some(n) = self.model.pending else { return };
        if self.notices[n].applied_unknown == Some(true) {
            return self.set_applied(n).await;
        }
        if self.notices[n].applied_unknown != Some(false) {
            return;
        }
        if self.notices[n].stage.is_some() {
            return; // an inbox delivery: the operator drops it instead
        }
        let purged = self.store.purge(&self.key(n), None).await.unwrap();
        assert_eq!(purged, idemgate::store::Purged::Deleted, "{n}");
        self.notices[n].recorded = false;
        self.model.drop_change(n);
    }

    /// The operator, having found that the handler did apply the pending
    /// change `n`, sets the entity's state to it, from what the entity
    /// shows; a stale view first, which must be refused.
    async fn set_applied(&mut self, n: usize) {
        let key = EntityKey::new("model", "pay", &self.entity);
        let to = self.notices[n].to;
        let seen = Seen {
            state: self.model.state.map(str::to_owned),
            pending: Some(self.key(n).hash().to_owned()),
        };
        let set = Correction::Set(to.to_owned());
        let stale = Seen {
            pending: None,
            ..seen.clone()
        };
        let by = ("model", LONG);
        let refused = self.store.correct_entity(&key, &stale, &set, by).await;
        assert!(!refused.unwrap(), "{n}: a correction from a stale view");
        assert!(
            self.store
                .correct_entity(&key, &seen, &set, by)
                .await
                .unwrap(),
            "{n}"
        );
        self.model.pending = None;
        // The pending change's own state: its event is the entity's.
        self.model.enter(to, self.model.pending_event);
    }

    /// The operator retries (`retry`) or drops the `which`-th dead or
    /// unknown inbox delivery; an unknown one only when it did not apply.
    async fn operator(&mut self, which: usize, retry: bool) {
        let held: Vec<usize> = (0..self.notices.len())
            .filter(|&n| matches!(self.notices[n].stage, Some(Stage::Dead | Stage::Unknown)))
            .filter(|&n| self.notices[n].applied_unknown != Some(true))
            .collect();
        let Some(&n) = held.get(which % held.len().max(1)) else {
            return;
        };
        let found = Store::lookup(self.store, &self.key(n))
            .await
            .unwrap()
            .unwrap()
            .record;
        if retry {
            self.swap_stage(n, &found, Stage::Queued, None).await;
            self.notices[n].stage = Some(Stage::Queued);
            self.notices[n].applied_unknown = None;
        } else {
            self.swap_stage(n, &found, Stage::Dropped, None).await;
            (self.notices[n].stage, self.notices[n].fate) = (Some(Stage::Dropped), Fate::Dropped);
            self.model.drop_change(n);
        }
    }

    /// The store's entity equals the model's.
    async fn compare(&self) {
        let key = EntityKey::new("model", "pay", &self.entity);
        let stored = self
            .store
            .entity(&key)
            .await
            .unwrap()
            .map(|(state, _)| state);
        let state = stored.as_ref().and_then(|s| s.state.clone());
        assert_eq!(
            state.as_deref(),
            self.model.state,
            "state: {stored:?} {:?}",
            self.model
        );
        let pending = stored.as_ref().and_then(|s| s.pending.as_ref());
        let want = self.model.pending.map(|n| self.key(n).hash().to_owned());
        assert_eq!(pending.map(|p| p.delivery().to_owned()), want, "pending");
        let held: Vec<String> = stored
            .iter()
            .flat_map(|s| s.held.iter().map(|h| h.delivery().to_owned()))
            .collect();
        let want: Vec<String> = self
            .model
            .held
            .iter()
            .map(|&n| self.key(n).hash().to_owned())
            .collect();
        assert_eq!(held, want, "held");
    }

    /// The promise over the whole history (module docs).
    pub(super) fn check(&self) {
        let mut seen = BTreeMap::new();
        let (mut state, mut events): (Option<&str>, Vec<&str>) = (None, Vec::new());
        for &(n, (to, with)) in &self.accepted {
            assert!(seen.insert(n, to).is_none(), "notice {n} accepted twice");
            // The same state again only with a new event (a second refund).
            let new_event = state == Some(to) && with.is_some_and(|e| !events.contains(&e));
            assert!(
                new_event || (state != Some(to) && allowed(state, to)),
                "the handler saw {state:?} ({events:?}) -> {to} ({with:?})"
            );
            if state != Some(to) {
                events.clear();
            }
            events.extend(with);
            state = Some(to);
        }
        let held_by_applied = self
            .model
            .pending
            .is_some_and(|n| self.notices[n].applied_unknown == Some(true));
        if !held_by_applied {
            assert_eq!(self.model.state, state, "the entity follows the handler");
        }
        for (n, notice) in self.notices.iter().enumerate() {
            match notice.fate {
                Fate::Accepted => assert!(seen.contains_key(&n), "{n}"),
                Fate::Owed => assert!(
                    seen.contains_key(&n) || notice.stage.is_some_and(|s| !s.is_resolved()),
                    "{n}: acknowledged, neither executed nor owed: {notice:?}"
                ),
                Fate::NotAcknowledged | Fate::Judged | Fate::Dropped | Fate::Refused => {}
            }
        }
    }
}
