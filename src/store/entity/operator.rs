//! An operator's correction of an entity: set its state
//! (the handler did apply a change idemgate could not settle) or clear it,
//! judged against the state and pending change the operator saw, so an
//! action taken on a stale view is refused rather than applied over a
//! change made meanwhile. Set to the pending change's own state, the
//! correction takes that change's event too (a copy of it is a repeat).
//! The correction resolves the pending change (a
//! later write of that delivery's record no longer touches the entity),
//! leaves the held notices in their queue (the first is judged against
//! the corrected state in its turn), and is remembered in the history with
//! who made it.

use super::{EntityState, Transition, TransitionKind};

/// What the operator saw of an entity: an action must still find it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its state (`None`: none).
    pub state: Option<String>,
    /// Its pending change's delivery (key hash with the entity tag;
    /// `None`: no change pending).
    pub pending: Option<String>,
}

/// An operator's change to an entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Correction {
    /// Put the entity in this (declared) state.
    Set(String),
    /// Forget its state: the next notice is judged as a first one.
    Clear,
}

impl EntityState {
    /// Whether the entity still is as `seen`.
    pub fn is_as(&self, seen: &Seen) -> bool {
        self.state == seen.state
            && self.pending.as_ref().map(|p| p.delivery()) == seen.pending.as_deref()
    }

    /// Applies `correction` by operator `by` if the entity is still as
    /// `seen`; `false` (nothing changed) otherwise.
    pub fn correct(&mut self, seen: &Seen, correction: &Correction, by: &str, now_ms: u64) -> bool {
        if !self.is_as(seen) {
            return false;
        }
        let (kind, to) = match correction {
            Correction::Set(to) => (TransitionKind::Set, to.clone()),
            Correction::Clear => (TransitionKind::Cleared, String::new()),
        };
        self.remember(Transition {
            kind,
            from: self.state.clone(),
            to: to.clone(),
            delivery: by.to_owned(),
            at_ms: now_ms,
        });
        // Set to the pending change's own state: the operator says that
        // change was made, so its event is the entity's (a copy of it is
        // then a repeat). A clear forgets every event.
        let pending = self.pending.take();
        match (correction, pending) {
            (Correction::Set(to), Some(pending)) if pending.to == *to => {
                self.take_event(to, pending.event);
            }
            (Correction::Set(to), _) => self.take_event(to, None),
            (Correction::Clear, _) => self.events.clear(),
        }
        match correction {
            Correction::Set(_) => {
                self.state = Some(to);
                self.since_ms = now_ms;
            }
            Correction::Clear => {
                self.state = None;
                self.since_ms = 0;
            }
        }
        true
    }
}
