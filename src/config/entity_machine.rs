//! `[route.entity]`: the state machine of the business entity a delivery
//! is about (a payment, an order), enforced before the handler.
//!
//! Gateways deliver out of order, and each notice carries its own notify
//! id: key-based deduplication lets a stale "pending" or a failure that
//! follows the success through, and a legacy handler regresses the order.
//! A route that names the entity (`id`, selectors joined like key parts)
//! and the state a delivery announces (`state`) has every delivery judged
//! against the entity's current state: an allowed transition is forwarded,
//! the same state again is acknowledged without the handler, anything else
//! is a discrepancy that never reaches it (`crate::entity` has the runtime).
//!
//! The declared states form an implied guard: a delivery announcing a
//! state the table does not name is refused with 400 `field_invalid`, like
//! a `[[route.guard]]`, so metric labels stay a bounded set.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Selector;
use super::choice::choices;
use super::duration::{ConfigDuration, format_duration};
use super::inbox_rules::{Ack, Inbox, ack_from};
use super::problems::Problems;
use super::status::CacheStatus;

/// `[route.entity]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntity {
    /// A channel's machine whose settings fill what the table leaves out
    /// (`alipay`, `wechatpay-v2`, `payment`).
    pub machine: Option<String>,
    /// Selectors naming the business id (joined like key parts).
    #[serde(default)]
    pub id: Vec<String>,
    /// Selector of the state a delivery announces.
    #[serde(default)]
    pub state: String,
    /// Selector of the event a delivery announces (a refund id): the same
    /// state with a new event is a change, not a repeat.
    pub event: Option<String>,
    /// `"enforce"` or `"shadow"`: judge and act, or only count and log.
    pub mode: Option<EntityMode>,
    /// States an entity seen for the first time may take (default: any).
    pub initial: Option<Vec<String>>,
    /// Allowed changes, `"from -> to"`, either side `a | b`.
    #[serde(default)]
    pub transitions: Vec<String>,
    /// States nothing may leave.
    pub terminal: Option<Vec<String>>,
    /// `"acknowledge"` or `"conflict"`: the answer to a refused transition.
    pub on_refused: Option<OnRefused>,
    /// How long an entity's state is kept after its last change.
    pub retention: Option<ConfigDuration>,
    /// The handler's answers that mean it accepted a change (default 2xx).
    pub advance_status: Option<Vec<String>>,
    /// Notices held behind one busy entity at most (routes with an inbox).
    pub max_held_per_entity: Option<u64>,
    /// Status of the acknowledgement (default: the inbox's).
    pub ack_status: Option<u16>,
    /// Body of the acknowledgement.
    pub ack_body: Option<String>,
    /// `Content-Type` of that body.
    pub ack_content_type: Option<String>,
}

/// Default `retention`: thirty days, past every gateway's retry horizon
/// and most refund windows' first weeks.
const DEFAULT_RETENTION: ConfigDuration = ConfigDuration::secs(720 * 3600);
/// Most states one machine may declare: they are metric label values,
/// and every refused pair has its series from start-up.
const MAX_STATES: usize = 32;
/// Longest state value, in bytes.
const MAX_STATE_LEN: usize = 64;
/// Default `max_held_per_entity`: more notices for one payment than any
/// channel sends while one change is pending, few enough that one stuck
/// entity can not fill the inbox.
const DEFAULT_MAX_HELD: u64 = 32;
/// The most `max_held_per_entity` may be: the queue lives in one entity
/// record, read and written whole.
const MAX_MAX_HELD: u64 = 1_000;

/// The answer to a transition the machine refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRefused {
    /// Answer with the route's acknowledgement: the sender stops retrying.
    Acknowledge,
    /// Answer 409 `transition_refused`: the sender keeps retrying.
    Conflict,
}

choices! {
    OnRefused { "acknowledge" => Acknowledge, "conflict" => Conflict }
}

/// Whether the machine acts or only watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityMode {
    /// Repeats and refused changes are answered without the handler,
    /// notices for a busy entity wait or are held.
    Enforce,
    /// Every delivery is forwarded as without `[route.entity]`; what the
    /// machine would have refused, repeated or held is counted and logged,
    /// so it can be adopted beside a live handler.
    Shadow,
}

choices! {
    EntityMode { "enforce" => Enforce, "shadow" => Shadow }
}

/// The allowed states and changes of one entity kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMachine {
    /// Every declared state, in order of first mention.
    states: Vec<String>,
    /// States an entity seen for the first time may take; `None`: any.
    initial: Option<Vec<String>>,
    /// Allowed changes, `(from, to)`.
    transitions: Vec<(String, String)>,
    /// States nothing may leave (declared; none has a transition out).
    terminal: Vec<String>,
}

/// Where a delivery announcing one state may come from, as the store's
/// check takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// States the entity may be in for the change to be allowed.
    pub from: Vec<String>,
    /// Whether an entity with no recorded state may take it.
    pub initial: bool,
}

impl StateMachine {
    /// The declared state equal to `value`, if any: only declared states
    /// are ever judged, stored or used as a label.
    pub fn state(&self, value: &[u8]) -> Option<&str> {
        self.states
            .iter()
            .find(|state| state.as_bytes() == value)
            .map(String::as_str)
    }

    /// Every declared state.
    pub fn states(&self) -> &[String] {
        &self.states
    }

    /// Where `to` may be entered from.
    pub fn sources(&self, to: &str) -> Sources {
        Sources {
            from: self
                .transitions
                .iter()
                .filter(|(_, target)| target == to)
                .map(|(from, _)| from.clone())
                .collect(),
            initial: self
                .initial
                .as_ref()
                .is_none_or(|initial| initial.iter().any(|s| s == to)),
        }
    }

    /// Whether `from` (`None`: no recorded state) may become `to`.
    pub fn allows(&self, from: Option<&str>, to: &str) -> bool {
        let sources = self.sources(to);
        match from {
            None => sources.initial,
            Some(from) => sources.from.iter().any(|s| s == from),
        }
    }

    /// Whether the two machines judge every delivery alike (routes that
    /// share a scope share their entities).
    pub fn same_as(&self, other: &Self) -> bool {
        let set = |m: &Self| {
            (
                m.states.iter().cloned().collect::<BTreeSet<_>>(),
                m.initial
                    .as_ref()
                    .map(|i| i.iter().cloned().collect::<BTreeSet<_>>()),
                m.transitions.iter().cloned().collect::<BTreeSet<_>>(),
            )
        };
        set(self) == set(other)
    }
}

/// `[route.entity]`, validated.
#[derive(Debug, Clone)]
pub struct Entity {
    /// Where the business id is read (joined like key parts).
    pub id: Vec<Selector>,
    /// Where the announced state is read.
    pub state: Selector,
    /// Where the announced event is read, if the route names one: a notice
    /// of the entity's state with another event is a change (a second
    /// partial refund), not a repeat.
    pub event: Option<Selector>,
    /// Act on the machine's verdicts, or only count and log them.
    pub mode: EntityMode,
    /// The shipped machine the table started from, if any (`machines`).
    pub machine_name: Option<String>,
    /// What may follow what.
    pub machine: StateMachine,
    /// The answer to a refused transition.
    pub on_refused: OnRefused,
    /// How long an entity's state is kept after its last write.
    pub retention: Duration,
    /// The handler's answers that mean it accepted a change
    /// (`advance_status`, default 2xx): only those advance the entity,
    /// whatever `cache_status` stores and replays.
    pub advance_status: CacheStatus,
    /// What a repeat (and, with `acknowledge`, a refusal) is answered.
    pub ack: Ack,
    /// With an inbox, how many notices may wait behind one busy entity
    /// (`max_held_per_entity`); beyond it a notice is not acknowledged.
    pub max_held: usize,
}

/// Validates `raw` (route `key`'s `[route.entity]`); the route's inbox
/// lends its acknowledgement when the table names none, and `retention`
/// is the route's record retention, which an entity must outlive.
pub(super) fn entity(
    problems: &mut Problems,
    key: &str,
    raw: Option<&RawEntity>,
    inbox: Option<&Inbox>,
    retention: Duration,
) -> Option<Entity> {
    let key = format!("{key}.entity");
    let raw = &machines::with_machine(problems, &key, raw?);
    let id: Vec<Selector> = raw
        .id
        .iter()
        .enumerate()
        .filter_map(|(i, text)| problems.take(&format!("{key}.id[{i}]"), Selector::parse(text)))
        .collect();
    if raw.id.is_empty() {
        problems.push(&format!("{key}.id"), "must name at least one selector");
    }
    if raw.state.is_empty() {
        problems.push(
            &format!("{key}.state"),
            "must name the state's selector (or a machine that does)",
        );
    }
    let state = (!raw.state.is_empty())
        .then(|| problems.take(&format!("{key}.state"), Selector::parse(&raw.state)))
        .flatten();
    let event = raw
        .event
        .as_ref()
        .and_then(|text| problems.take(&format!("{key}.event"), Selector::parse(text)));
    let machine = machine(problems, &key, raw);
    let entity_retention = raw.retention.unwrap_or(DEFAULT_RETENTION).get();
    if entity_retention < retention {
        problems.push(
            &format!("{key}.retention"),
            format!(
                "{} is shorter than the route's retention ({}): an entity would forget its state while its deliveries are still replayed",
                format_duration(entity_retention),
                format_duration(retention)
            ),
        );
    }
    let written = raw.ack_status.is_some() || raw.ack_body.is_some();
    let ack = match (written, inbox) {
        (false, Some(inbox)) => inbox.ack.clone(),
        (false, None) => {
            problems.push(
                &format!("{key}.ack_status"),
                "a repeated or refused state is acknowledged without the handler: set ack_status and ack_body (what the channel expects, e.g. \"success\"), or configure [route.inbox], whose acknowledgement is used",
            );
            ack_from(problems, &key, (None, None, None))
        }
        (true, _) => ack_from(
            problems,
            &key,
            (
                raw.ack_status,
                raw.ack_body.clone(),
                raw.ack_content_type.clone(),
            ),
        ),
    };
    Some(Entity {
        id,
        state: state?,
        event,
        machine_name: raw.machine.clone(),
        mode: raw.mode.unwrap_or(EntityMode::Enforce),
        machine,
        on_refused: raw.on_refused.unwrap_or(OnRefused::Acknowledge),
        retention: entity_retention,
        advance_status: advance_status(problems, &key, raw.advance_status.as_deref()),
        ack,
        max_held: max_held(problems, &key, raw.max_held_per_entity),
    })
}

/// `max_held_per_entity`: 1 to [`MAX_MAX_HELD`]. Only a route with an
/// inbox holds notices; without one it is read and unused (a busy entity
/// answers 409 there).
fn max_held(problems: &mut Problems, key: &str, raw: Option<u64>) -> usize {
    let key = format!("{key}.max_held_per_entity");
    let value = raw.unwrap_or(DEFAULT_MAX_HELD);
    if !(1..=MAX_MAX_HELD).contains(&value) {
        problems.push(&key, format!("{value} is not in 1..={MAX_MAX_HELD}"));
    }
    usize::try_from(value.clamp(1, MAX_MAX_HELD)).unwrap_or(1)
}

/// `advance_status`, default `["2xx"]`: a stored 4xx (the handler refused
/// the notice) must never move the entity on.
fn advance_status(problems: &mut Problems, key: &str, items: Option<&[String]>) -> CacheStatus {
    let key = format!("{key}.advance_status");
    match items {
        None => CacheStatus::successes(),
        Some([]) => {
            problems.push(
                &key,
                "must list at least one status, e.g. [\"2xx\"]: otherwise no entity ever changes",
            );
            CacheStatus::successes()
        }
        Some(items) => problems
            .take(&key, CacheStatus::parse(items))
            .unwrap_or_else(CacheStatus::successes),
    }
}

/// The machine the table spells, with every problem named.
fn machine(problems: &mut Problems, key: &str, raw: &RawEntity) -> StateMachine {
    let mut states: Vec<String> = Vec::new();
    let mut declare = |problems: &mut Problems, at: &str, state: &str| {
        if state.is_empty() || state.len() > MAX_STATE_LEN || state.contains(['\n', '\t', '|']) {
            problems.push(
                at,
                format!("{state:?} must be 1-{MAX_STATE_LEN} bytes without '|', tab or newline"),
            );
        } else if !states.iter().any(|s| s == state) {
            states.push(state.to_owned());
        }
    };
    let mut transitions = Vec::new();
    for (i, text) in raw.transitions.iter().enumerate() {
        let at = format!("{key}.transitions[{i}]");
        let Some((from, to)) = text.split_once("->") else {
            problems.push(
                &at,
                format!("{text:?} is not \"from -> to\" (either side may list a | b)"),
            );
            continue;
        };
        for from in from.split('|').map(str::trim) {
            for to in to.split('|').map(str::trim) {
                declare(problems, &at, from);
                declare(problems, &at, to);
                if from == to {
                    problems.push(
                        &at,
                        format!("{from:?} -> {to:?}: the same state again is always acknowledged as a repeat, never forwarded; remove it"),
                    );
                } else if !transitions.contains(&(from.to_owned(), to.to_owned())) {
                    transitions.push((from.to_owned(), to.to_owned()));
                }
            }
        }
    }
    let mut list = |problems: &mut Problems, name: &str, values: Option<&Vec<String>>| {
        values.map(|values| {
            for (i, state) in values.iter().enumerate() {
                declare(problems, &format!("{key}.{name}[{i}]"), state);
            }
            values.clone()
        })
    };
    let initial = list(problems, "initial", raw.initial.as_ref());
    let terminal = list(problems, "terminal", raw.terminal.as_ref()).unwrap_or_default();
    for state in &terminal {
        if let Some((_, to)) = transitions.iter().find(|(from, _)| from == state) {
            problems.push(
                &format!("{key}.terminal"),
                format!("{state:?} is terminal, but a transition leaves it (-> {to:?})"),
            );
        }
    }
    if states.is_empty() {
        problems.push(
            &format!("{key}.transitions"),
            "must declare at least one state (a transition, initial or terminal)",
        );
    }
    if states.len() > MAX_STATES {
        problems.push(
            key,
            format!("declares {} states; at most {MAX_STATES}", states.len()),
        );
    }
    StateMachine {
        states,
        initial,
        transitions,
        terminal,
    }
}

impl Entity {
    /// The table as `check-config` prints it.
    pub(super) fn to_raw(&self) -> RawEntity {
        let machine = &self.machine;
        RawEntity {
            machine: self.machine_name.clone(),
            id: self.id.iter().map(ToString::to_string).collect(),
            state: self.state.to_string(),
            event: self.event.as_ref().map(ToString::to_string),
            mode: Some(self.mode),
            initial: machine.initial.clone(),
            transitions: machine
                .transitions
                .iter()
                .map(|(from, to)| format!("{from} -> {to}"))
                .collect(),
            terminal: Some(machine.terminal.clone()),
            on_refused: Some(self.on_refused),
            retention: Some(self.retention.into()),
            advance_status: Some(self.advance_status.names()),
            max_held_per_entity: u64::try_from(self.max_held).ok(),
            ack_status: Some(self.ack.status),
            ack_body: Some(String::from_utf8_lossy(&self.ack.body).into_owned()),
            ack_content_type: self.ack.content_type.clone(),
        }
    }
}

mod machines;

#[cfg(test)]
mod tests;
