//! Notices held in order behind a busy entity, on a route
//! with an inbox: instead of 409, a notice whose entity has a change
//! pending (in flight, unknown, owed by the inbox, unresolved) or other
//! notices already waiting is acknowledged, kept as a queued inbox
//! delivery, and put at the back of its entity's queue. A redelivery
//! worker may send a held delivery only when it reaches the front and no
//! change is pending ([`EntityState::take`]); it is then judged against
//! the state the change before it left, like a claim: allowed, it becomes
//! the pending change and is sent; a repeat or a refusal is resolved
//! without the handler (the worker drops it, saying why; the notice leaves
//! the queue with that drop, so a drop that never lands is judged again).
//!
//! Each held notice keeps the rule it was judged by at the door (its
//! announced state and where that state may be entered from), so the
//! worker needs nothing but the entity to judge it. Redis keeps the queue
//! in the entity hash's field `q`, one line per notice:
//! `record \t to \t initial (0|1) \t from|from… \t event` (states never
//! contain a tab, a newline or `|`: `config::entity_machine`; the event is a hex
//! hash or empty).

use serde::{Deserialize, Serialize};

use super::{EntityState, EntityStep, Judgement, PendingRecord};
use crate::config::Sources;

/// One notice waiting for its entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Its record key (an inbox delivery, stage queued).
    pub record: String,
    /// The state it announces.
    pub to: String,
    /// Whether an entity with no state may take it.
    pub initial: bool,
    /// The states it may be entered from.
    pub from: Vec<String>,
    /// The event it announces (hashed), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
}

impl Held {
    /// The notice `record_key` announcing `step.to`.
    pub fn of(step: &EntityStep, record_key: &str) -> Self {
        Self {
            record: record_key.to_owned(),
            to: step.to.clone(),
            initial: step.sources.initial,
            from: step.sources.from.clone(),
            event: step.event.clone(),
        }
    }

    /// The delivery's key hash: what `/admin/inbox/{route}` takes.
    pub fn delivery(&self) -> &str {
        super::hash_of(&self.record)
    }

    fn sources(&self) -> Sources {
        Sources {
            from: self.from.clone(),
            initial: self.initial,
        }
    }

    /// One line of the Redis field `q` (module docs).
    #[cfg(test)]
    pub(super) fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}",
            self.record,
            self.to,
            u8::from(self.initial),
            self.from.join("|"),
            self.event.as_deref().unwrap_or_default()
        )
    }

    /// Reads one line of the Redis field `q`.
    pub(super) fn parse(line: &str) -> Option<Self> {
        let mut parts = line.splitn(5, '\t');
        let record = parts.next()?.to_owned();
        let to = parts.next()?.to_owned();
        let initial = parts.next()? == "1";
        let from = parts.next()?;
        let event = parts.next().unwrap_or_default();
        Some(Self {
            record,
            to,
            initial,
            from: from
                .split('|')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            event: (!event.is_empty()).then(|| event.to_owned()),
        })
    }
}

/// What [`EntityState::hold`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldVerdict {
    /// Queued behind the pending change and the notices before it.
    Held,
    /// Nothing to wait for any more: claim it instead.
    Free,
    /// `max_held_per_entity` notices wait already: not acknowledged.
    Full,
    /// The key holds a record already (a copy raced this notice): claim
    /// again, which answers from it. Only a store says so.
    Exists,
    /// The notice is the entity's pending change itself: a copy of a
    /// delivery whose outcome is unresolved (its record gone). Never held:
    /// sent in its turn, it would run a second time if the first applied.
    Itself,
}

/// Why [`EntityState::take`] keeps a queued delivery from its worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptBack {
    /// Not its turn: a change is pending, or notices before it wait.
    Wait,
    /// Its turn came, and the entity decided without the handler: a
    /// repeat or a refusal, for the announced state (the `String`).
    Decided(Judgement, String),
}

impl EntityState {
    /// Holds `record_key` (announcing `step.to`) behind the entity's
    /// pending change, given what that change's record says, if the entity
    /// is busy and fewer than `max` notices wait.
    pub fn hold(
        &mut self,
        step: &EntityStep,
        record_key: &str,
        pending: PendingRecord,
        max: usize,
        now_ms: u64,
    ) -> HoldVerdict {
        if self.blocker(pending, now_ms).is_none() {
            return HoldVerdict::Free;
        }
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.record == record_key)
        {
            return HoldVerdict::Itself;
        }
        if self.held.len() >= max {
            return HoldVerdict::Full;
        }
        self.held.push(Held::of(step, record_key));
        HoldVerdict::Held
    }

    /// Whether a worker may send the queued delivery `record_key` now
    /// (module docs): `Ok` when it is the pending change (now, or already:
    /// a first delivery the inbox took, a retried one) or no entity knows
    /// it. At the front of the queue with no change pending, it is judged:
    /// allowed, it leaves the queue as the pending change; a repeat or a
    /// refusal stays at the front until its drop is written.
    pub fn take(&mut self, record_key: &str, now_ms: u64) -> Result<(), KeptBack> {
        match &self.pending {
            Some(pending) if pending.record == record_key => return Ok(()),
            Some(_) => return Err(KeptBack::Wait),
            None => {}
        }
        match self.held.iter().position(|held| held.record == record_key) {
            None => Ok(()),
            Some(0) => {
                let head = self.held[0].clone();
                let announced = (head.to.as_str(), head.event.as_deref());
                self.judge(record_key, announced, &head.sources(), now_ms)
                    .map_err(|judgement| KeptBack::Decided(judgement, head.to))?;
                // Allowed: it is the pending change now, out of the queue.
                // Decided otherwise, it stays at the front until the
                // worker's drop (a second write) takes it out, so a lost
                // drop means judged again, never sent unjudged.
                self.held.remove(0);
                Ok(())
            }
            Some(_) => Err(KeptBack::Wait),
        }
    }
}
