//! Model-based test of the entity rules with faults, at the
//! store's operations, on a real Redis (the Lua of `lua/entity.lua`) and
//! on the embedded store (the same rules in Rust).
//!
//! A small reference model of one entity (its state and event, its pending
//! change, the notices held behind it) drives random histories: notices
//! (new ones, copies, regressions, repeats, new events) × handler outcomes (accepted, refused
//! 404, failed 5xx, timed out having applied or not, failed into the
//! inbox, an owner dying mid-call having applied it or not) × faults (an
//! unknown outcome's hold or a dead owner's claim running out) × worker steps
//! (a queued or held delivery taken, sent or kept back) × operator actions
//! (purge the unresolved pending delivery, retry or drop a dead one), with
//! and without an inbox. After every step the store's entity must equal
//! the model's; after every history a checker asserts the promise:
//!
//! - the handler never accepted a notice twice;
//! - the handler's accepted sequence is a path of the machine;
//! - the entity is in the state of the last notice the handler accepted,
//!   unless an unresolved change the handler did apply holds it;
//! - every notice whose sender was told it is handled was accepted, or
//!   judged by the entity (a repeat, a refusal), or is still owed by the
//!   inbox (queued, held, dead), or was dropped by an operator.
//!
//! The model, its faults and its checker are `tests/support/entity_model`
//! (the system tier runs it on a real Redis Cluster, and on a Redis with
//! AOF that it restarts mid-history). `IDEMGATE_MODEL_CASES` sets the
//! number of histories per store (default 48: the fast tier);
//! `IDEMGATE_MODEL_SEED` replays one seed.


use idemgate::store::Store;
use idemgate::store::inbox::InboxOps;

use crate::support::explore;

/// Histories per store in the fast tier.
const CASES: u32 = 48;

/// Random histories on one backend, checked against the reference model.
fn keeps_the_entity_promise_over_random_histories<S: Store + InboxOps>(
    store: &S,
    runtime: &tokio::runtime::Runtime,
    lane: u64,
) {
    explore((store, None), runtime.handle(), lane, CASES);
}

crate::support::for_every_backend!(blocking: keeps_the_entity_promise_over_random_histories);
