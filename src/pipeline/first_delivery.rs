//! The first delivery: from the claim on, what a delivery that holds its
//! key needs. [`Forwarder`] is the phase's shared parts (handler calls,
//! store, claimer, inboxes, task tracker), used by the request path and by
//! the probe runner alike.
//!
//! ```text
//! forwarder.rs        the shared parts
//! hold.rs             the claim, or a hold behind a busy entity
//! deliver.rs          stage 6: the forward, in a task of its own; a failure
//!                     the inbox takes is queued there
//! settle.rs           stage 7: what the store is told (keep, release)
//! settle_once.rs      one store attempt, then persist.rs retries until stored
//! persist.rs          storing an answer in hand until it sticks
//! probe_runner.rs     asks the handler about outcomes left unknown
//! redeliveries.rs     the same for an inbox's unknown redeliveries
//! ```

pub(in crate::pipeline) mod deliver;
pub(in crate::pipeline) mod forwarder;
pub(in crate::pipeline) mod hold;
pub(crate) mod persist;
pub(crate) mod probe_runner;
mod redeliveries;
pub(crate) mod settle;
pub(in crate::pipeline) mod settle_once;

pub(crate) use forwarder::Forwarder;
