//! Entity state: the business entity a delivery is about (`[route.entity]`),
//! kept beside its deliveries' records and judged in the same atomic step
//! as the claim.
//!
//! An entity holds its current state, at most one *pending* change (the
//! delivery forwarded to change it, named by its record key) and its last
//! [`HISTORY`] transitions. One rule set, two implementations: the Lua of
//! `lua/entity.lua` (prepended to `claim_entity.lua`, `complete.lua` and
//! `swap.lua`) and [`EntityState`] for the embedded store; the contract
//! suite runs the same cases on both.
//!
//! **Claim** (a delivery whose record key is free): the pending change is
//! looked at first. Its record still in flight, unknown or owed by the
//! inbox (queued, delivering, dead or unknown there): the entity is
//! *busy* ([`Blocker`]), and the delivery waits or gets 409. Its record
//! completed: the change is applied (a defensive fold; completion settles
//! it itself). Its record gone although nothing settled the change (an
//! unknown outcome or a lost owner whose hold ran out, an evicted
//! record): the change is *unresolved* and the entity stays held
//! ([`Blocker::Unresolved`]) — never silently reverted, because the
//! handler may have acted on it — until an operator resolves it (purging
//! the pending delivery: it never happened; or setting the state). A
//! release (the handler failed) and a purge drop the change in the same
//! step as they delete its record. Then the announced state is judged
//! against the current one: the same state is a *repeat* (acknowledged,
//! never forwarded), a change the machine allows is claimed and becomes
//! the pending change, anything else is *refused* (a discrepancy). Only
//! declared states reach the store (`config::entity_machine`), so every value here
//! is a bounded label.
//!
//! **Settle**: every write of a record that is an entity's pending change
//! says what it means for it ([`EntityEffect::of`]): an answer whose status
//! the route's `advance_status` lists (default 2xx; a handler that took
//! the notice), or a redelivery delivered with such an answer, applies it;
//! any other stored answer (a cached 404: the handler refused the notice)
//! and an inbox delivery an operator dropped drop it; an unknown outcome,
//! a queued delivery and a dead one keep it pending (a dead delivery may
//! still be retried by an operator, and its change must then apply).
//! Applying happens in the script that writes the record, so the state
//! advances atomically with the completion, and a handler failure (a
//! released claim) leaves the state as it was.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::EntityKey;
use crate::config::{CacheStatus, Sources};
use crate::record::{ClaimHold, Record, RecordState, Stage};

/// Transitions an entity remembers, newest first.
pub const HISTORY: usize = 16;

/// Events an entity remembers for its current state (`EntityState::events`):
/// enough for every partial refund of one payment; an older one falls out.
pub const EVENTS: usize = 64;

/// What a claim on an entity route asks of the entity.
#[derive(Debug, Clone)]
pub struct EntityStep {
    /// The entity.
    pub key: EntityKey,
    /// The state the delivery announces (a declared one).
    pub to: String,
    /// The event it announces, hashed (`[route.entity] event`): the same
    /// state with a new event is a change the handler must see, not a
    /// repeat. `None`: the route names no event, or the notice has none.
    pub event: Option<String>,
    /// Where `to` may be entered from.
    pub sources: Sources,
    /// How long the entity is kept after this write.
    pub retention: Duration,
    /// Which of the handler's answers mean it accepted the change
    /// (`advance_status`): the lease carries it to the completion.
    pub advance: CacheStatus,
}

/// What holds a busy entity: the pending change's record as the claim
/// found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocker {
    /// In flight, its record expiring within `remaining` (the owner's
    /// lease plus `unknown_hold` while it renews; at most `unknown_hold`
    /// once it stopped: then the outcome is unknown).
    InFlight {
        /// The pending record's remaining TTL.
        remaining: Duration,
        /// The hold the pending claim was written with, by which it is
        /// judged whichever route of the scope meets it.
        hold: ClaimHold,
    },
    /// Its outcome is unknown, held for `remaining` more.
    Unknown {
        /// The pending record's remaining TTL.
        remaining: Duration,
    },
    /// The inbox owes it (queued, delivering, dead or unknown there).
    Inbox,
    /// Its record is gone without the change having been settled: the
    /// handler may have acted. Held until an operator resolves it.
    Unresolved,
    /// No change is pending, but notices acknowledged earlier wait their
    /// turn: a new one goes behind them.
    Queue,
}

/// A claim the entity decided instead of the record key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityVerdict {
    /// Another delivery's change is still pending (or unresolved): the
    /// delivery waits, is held or is refused, but nothing is decided
    /// about it yet.
    Busy {
        /// What holds it.
        blocker: Blocker,
    },
    /// The machine decided the delivery itself.
    Judged(Judgement),
}

/// What the machine decided about a delivery it will not forward: the
/// one part of a verdict that is counted (`decisions`) and answered at
/// once, apart from [`EntityVerdict::Busy`] so no one has to ignore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The entity already is in the announced state.
    Repeat,
    /// The machine does not allow the change from `from` (`None`: the
    /// entity has no state yet and the announced one is not initial).
    Refused {
        /// The entity's current state.
        from: Option<String>,
    },
}

/// What a record write means for its entity's pending change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityEffect {
    /// The handler succeeded: the entity takes the pending state.
    Apply,
    /// The change never happened: the entity stays as it was.
    Drop,
    /// Not decided yet: the entity stays busy.
    Keep,
}

impl EntityEffect {
    /// The effect of writing `record` on a route whose handler accepts a
    /// change with the statuses `advance` lists (module docs, "Settle").
    pub fn of(record: &Record, advance: &CacheStatus) -> Self {
        let by_status = |status: u16| {
            if advance.contains(status) {
                Self::Apply
            } else {
                Self::Drop
            }
        };
        match &record.state {
            RecordState::Completed(answer) => by_status(answer.status),
            RecordState::Acknowledged(marker) => by_status(marker.status()),
            RecordState::InFlight(_) | RecordState::Unknown => Self::Keep,
            RecordState::Inbox(entry) => match entry.stage {
                Stage::Delivered => entry
                    .last_answer
                    .as_ref()
                    .map_or(Self::Apply, |answer| by_status(answer.status)),
                Stage::Dropped => Self::Drop,
                Stage::Queued | Stage::Delivering | Stage::Dead | Stage::Unknown => Self::Keep,
            },
        }
    }

    /// The effect of writing `record` under `advance` if its route has an
    /// entity (`None`: nothing to settle, [`EntityEffect::Keep`]).
    pub fn of_route(record: &Record, advance: Option<&CacheStatus>) -> Self {
        advance.map_or(Self::Keep, |advance| Self::of(record, advance))
    }

    /// The word the scripts take.
    pub(super) fn code(self) -> &'static str {
        match self {
            Self::Apply => "apply",
            Self::Drop => "drop",
            Self::Keep => "keep",
        }
    }
}

/// What one history entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionKind {
    /// A forwarded change the handler accepted.
    Applied,
    /// A change the machine refused (a discrepancy).
    Refused,
    /// The same state announced again.
    Repeat,
    /// An operator set the state (`delivery` names the operator).
    Set,
    /// An operator cleared the state (`to` is empty, `delivery` names the
    /// operator).
    Cleared,
}

impl TransitionKind {
    #[cfg(test)]
    fn letter(self) -> &'static str {
        match self {
            Self::Applied => "a",
            Self::Refused => "x",
            Self::Repeat => "r",
            Self::Set => "s",
            Self::Cleared => "c",
        }
    }

    fn from_letter(letter: &str) -> Option<Self> {
        Some(match letter {
            "a" => Self::Applied,
            "x" => Self::Refused,
            "r" => Self::Repeat,
            "s" => Self::Set,
            "c" => Self::Cleared,
            _ => return None,
        })
    }
}

/// One remembered transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// Applied, refused or repeated.
    pub kind: TransitionKind,
    /// The state before (`None`: none yet).
    pub from: Option<String>,
    /// The state announced.
    pub to: String,
    /// The delivery's key hash (the record's, with its entity tag).
    pub delivery: String,
    /// When, unix ms.
    pub at_ms: u64,
}

impl Transition {
    /// One line of the history text `entity.lua` keeps:
    /// `kind \t from \t to \t delivery \t at_ms`.
    #[cfg(test)]
    fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}",
            self.kind.letter(),
            self.from.as_deref().unwrap_or(""),
            self.to,
            self.delivery,
            self.at_ms
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut parts = line.split('\t');
        let kind = TransitionKind::from_letter(parts.next()?)?;
        let from = parts.next()?;
        Some(Self {
            kind,
            from: (!from.is_empty()).then(|| from.to_owned()),
            to: parts.next()?.to_owned(),
            delivery: parts.next()?.to_owned(),
            at_ms: parts.next()?.parse().ok()?,
        })
    }
}

/// The change a forwarded delivery is making.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The delivery's record key.
    pub record: String,
    /// The state it leaves (`None`: none yet).
    pub from: Option<String>,
    /// The state it announces.
    pub to: String,
    /// The event it announces (hashed), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
}

impl Pending {
    /// The delivery's key hash: what `/admin/records/{route}?hash=` takes.
    pub fn delivery(&self) -> &str {
        hash_of(&self.record)
    }
}

/// An entity as both stores keep it, and as the admin API shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityState {
    /// The current state (`None`: no change applied yet).
    pub state: Option<String>,
    /// When it was entered, unix ms.
    pub since_ms: u64,
    /// The events (hashed) the entity took while in this state, oldest
    /// first, at most [`EVENTS`]: a notice of the same state with any of
    /// them is a repeat (an older partial refund notified again after a
    /// newer one is still a repeat). A change to another state starts
    /// the list again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// The change being made, if one is.
    pub pending: Option<Pending>,
    /// The last transitions, newest first.
    pub history: Vec<Transition>,
    /// Changes applied, refused and repeated over the entity's life.
    pub applied: u64,
    /// Refused changes (discrepancies).
    pub refused: u64,
    /// Repeats.
    pub repeats: u64,
    /// Notices acknowledged while the entity was busy, oldest first
    /// (`held.rs`): each is judged, in turn, against the state the one
    /// before it left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<Held>,
}

/// What the pending change's record says when a claim looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingRecord {
    /// Gone, although nothing settled the change (a release or a purge
    /// would have): expired, evicted or lost.
    Absent,
    /// Completed: the handler succeeded.
    Completed,
    /// Not settled yet: what holds the entity.
    Open(Blocker),
}

impl EntityState {
    /// Whether something holds the entity: a change pending (in flight,
    /// unknown, owed by the inbox, or unresolved) or notices waiting.
    pub fn is_held(&self) -> bool {
        self.pending.is_some() || !self.held.is_empty()
    }

    /// Judges a claim of `record_key` announcing `step.to`, given what the
    /// pending change's record says (module docs, "Claim"). `Ok(())`: the
    /// caller writes the claim, and the delivery is now the pending change.
    pub fn claim(
        &mut self,
        step: &EntityStep,
        record_key: &str,
        pending: PendingRecord,
        now_ms: u64,
    ) -> Result<(), EntityVerdict> {
        if let Some(blocker) = self.blocker(pending, now_ms) {
            return Err(EntityVerdict::Busy { blocker });
        }
        let announced = (step.to.as_str(), step.event.as_deref());
        self.judge(record_key, announced, &step.sources, now_ms)
            .map_err(EntityVerdict::Judged)
    }

    /// What holds the entity, given what its pending change's record says
    /// (a completed one is folded in first); `None`: free to judge.
    fn blocker(&mut self, pending: PendingRecord, now_ms: u64) -> Option<Blocker> {
        if self.pending.is_some() {
            match pending {
                PendingRecord::Open(blocker) => return Some(blocker),
                PendingRecord::Absent => return Some(Blocker::Unresolved),
                PendingRecord::Completed => {
                    if let Some(record) = self.pending.as_ref().map(|p| p.record.clone()) {
                        self.settle(&record, EntityEffect::Apply, now_ms);
                    }
                }
            }
        }
        (!self.held.is_empty()).then_some(Blocker::Queue)
    }

    /// Judges a change to `to` (enterable from `sources`) made by
    /// `record_key` against the current state: a repeat or a refusal is
    /// remembered and returned; an allowed change becomes the pending one.
    fn judge(
        &mut self,
        record_key: &str,
        (to, event): (&str, Option<&str>),
        sources: &Sources,
        now_ms: u64,
    ) -> Result<(), Judgement> {
        let delivery = hash_of(record_key).to_owned();
        let from = self.state.clone();
        let entry = |kind| Transition {
            kind,
            from: from.clone(),
            to: to.to_owned(),
            delivery: delivery.clone(),
            at_ms: now_ms,
        };
        let same = from.as_deref() == Some(to);
        // The same state is a repeat, unless it comes with an event the
        // entity has not entered it with (a second partial refund).
        let new_event = event.is_some_and(|event| !self.events.iter().any(|e| e == event));
        if same && !new_event {
            self.repeats += 1;
            self.remember(entry(TransitionKind::Repeat));
            return Err(Judgement::Repeat);
        }
        let allowed = match &from {
            _ if same => true,
            None => sources.initial,
            Some(from) => sources.from.contains(from),
        };
        if !allowed {
            self.refused += 1;
            self.remember(entry(TransitionKind::Refused));
            return Err(Judgement::Refused { from });
        }
        self.pending = Some(Pending {
            record: record_key.to_owned(),
            from,
            to: to.to_owned(),
            event: event.map(str::to_owned),
        });
        Ok(())
    }

    /// Applies `effect` of a write of `record_key` if that record is the
    /// pending change (module docs, "Settle").
    pub fn settle(&mut self, record_key: &str, effect: EntityEffect, now_ms: u64) {
        if effect == EntityEffect::Drop {
            // A held notice dropped or purged leaves the queue with it.
            self.held.retain(|held| held.record != record_key);
        }
        let Some(pending) = self.pending.take_if(|p| p.record == record_key) else {
            return;
        };
        match effect {
            EntityEffect::Keep => self.pending = Some(pending),
            EntityEffect::Drop => {}
            EntityEffect::Apply => {
                self.applied += 1;
                self.remember(Transition {
                    kind: TransitionKind::Applied,
                    from: pending.from,
                    to: pending.to.clone(),
                    delivery: hash_of(&pending.record).to_owned(),
                    at_ms: now_ms,
                });
                self.take_event(&pending.to, pending.event);
                self.state = Some(pending.to);
                self.since_ms = now_ms;
            }
        }
    }

    /// Enters `to` with `event`: the same state adds the event to those
    /// it holds (the oldest falls out past [`EVENTS`]), another state
    /// starts them again.
    pub(super) fn take_event(&mut self, to: &str, event: Option<String>) {
        if self.state.as_deref() != Some(to) {
            self.events.clear();
        }
        if let Some(event) = event {
            self.events.push(event);
            if self.events.len() > EVENTS {
                self.events.remove(0);
            }
        }
    }

    fn remember(&mut self, transition: Transition) {
        self.history.insert(0, transition);
        self.history.truncate(HISTORY);
    }

    /// Reads the Redis hash's fields (`s`, `at`, `pk`, `pf`, `pt`, `h`,
    /// `n`, `x`, `r`; absent fields are defaults).
    pub(super) fn from_fields<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut state = Self::default();
        let (mut record, mut from, mut to, mut event) = (None, None, None, None);
        let number = |text: &str| text.parse().unwrap_or(0);
        for (field, value) in fields {
            match field {
                "s" => state.state = Some(value.to_owned()),
                "at" => state.since_ms = number(value),
                "pk" => record = Some(value.to_owned()),
                "pf" => from = (!value.is_empty()).then(|| value.to_owned()),
                "pt" => to = Some(value.to_owned()),
                "pe" => event = Some(value.to_owned()),
                "e" => state.events = value.lines().map(str::to_owned).collect(),
                "h" => state.history = value.lines().filter_map(Transition::parse).collect(),
                "n" => state.applied = number(value),
                "x" => state.refused = number(value),
                "r" => state.repeats = number(value),
                "q" => state.held = value.lines().filter_map(Held::parse).collect(),
                _ => {}
            }
        }
        if let (Some(record), Some(to)) = (record, to) {
            state.pending = Some(Pending {
                record,
                from,
                to,
                event,
            });
        }
        state
    }
}

/// A record key's last part: the delivery's key hash with its entity tag.
fn hash_of(record_key: &str) -> &str {
    record_key
        .rsplit_once(':')
        .map_or(record_key, |(_, hash)| hash)
}

pub(crate) mod decisions;
mod held;
mod operator;
pub use held::{Held, HoldVerdict, KeptBack};
pub use operator::{Correction, Seen};

#[cfg(test)]
mod tests;
