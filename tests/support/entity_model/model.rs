//! The reference model of one entity (`super`): where each notice
//! stands as the harness knows it, and the state, pending change and held
//! queue the promise says the store must agree with.

use std::collections::VecDeque;

use idemgate::record::Stage;

use super::allowed;

/// Where one notice stands, as the harness knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// The sender was not told it is handled (404, 5xx, 504, 409).
    NotAcknowledged,
    /// Acknowledged and accepted by the handler.
    Accepted,
    /// Acknowledged without the handler: a repeat or a refusal.
    Judged,
    /// Acknowledged and owed by the inbox (queued, held, dead, unknown).
    Owed,
    /// Acknowledged, then dropped by an operator.
    Dropped,
    /// Acknowledged (queued), then redelivered: the handler saw it once
    /// and refused it (404).
    Refused,
}

#[derive(Debug)]
pub(super) struct Notice {
    pub(super) to: &'static str,
    pub(super) event: Option<&'static str>,
    pub(super) fate: Fate,
    /// Whether its record exists in the store (claims and queues write
    /// it; releases, purges and short holds running out take it away).
    pub(super) recorded: bool,
    /// An unknown outcome: whether the handler in fact applied it.
    pub(super) applied_unknown: Option<bool>,
    /// Its inbox stage, when the inbox owes or owed it.
    pub(super) stage: Option<Stage>,
}

/// A notice's announced state and event.
pub(super) type Announced = (&'static str, Option<&'static str>);

/// The reference model of the entity.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) state: Option<&'static str>,
    /// The events taken while in this state.
    pub(super) events: Vec<&'static str>,
    pub(super) pending: Option<usize>,
    /// The pending change's event.
    pub(super) pending_event: Option<&'static str>,
    pub(super) held: VecDeque<usize>,
}

impl Model {
    pub(super) fn busy(&self) -> bool {
        self.pending.is_some() || !self.held.is_empty()
    }

    /// A notice judged in turn: `Ok` (now pending) or the verdict.
    pub(super) fn judge(&mut self, n: usize, (to, event): Announced) -> Result<(), &'static str> {
        let same = self.state == Some(to);
        if same && event.is_none_or(|event| self.events.contains(&event)) {
            return Err("repeat");
        }
        if !same && !allowed(self.state, to) {
            return Err("refused");
        }
        self.pending = Some(n);
        self.pending_event = event;
        Ok(())
    }

    pub(super) fn apply(&mut self, n: usize, to: &'static str) {
        if self.pending == Some(n) {
            self.enter(to, self.pending_event);
            self.pending = None;
        }
    }

    /// Enters `to` with `event`: the same state keeps its events and adds
    /// this one, another starts again.
    pub(super) fn enter(&mut self, to: &'static str, event: Option<&'static str>) {
        if self.state != Some(to) {
            self.events.clear();
        }
        self.events.extend(event);
        self.state = Some(to);
    }

    pub(super) fn drop_change(&mut self, n: usize) {
        self.held.retain(|&h| h != n);
        if self.pending == Some(n) {
            self.pending = None;
        }
    }
}
