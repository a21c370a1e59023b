//! Model-based test of the entity rules with faults (issue 43 §5), at the
//! store's operations, on a real Redis (the Lua of `lua/entity.lua`) and
//! on the embedded store (the same rules in Rust).
//!
//! A small reference model of one entity (its state and event, its pending
//! change, the notices held behind it) drives random histories: notices
//! (new ones, copies, regressions, repeats, new events) × handler outcomes (accepted, refused
//! 404, failed 5xx, timed out having applied or not, failed into the
//! inbox) × faults (an unknown outcome whose hold runs out) × worker steps
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
//! `IDEMGATE_MODEL_CASES` sets the number of histories per store (default
//! 48: the fast tier); `IDEMGATE_MODEL_SEED` replays one seed.

use std::time::Duration;

use idemgate::store::Store;
use idemgate::store::embedded::EmbeddedStore;
use idemgate::store::inbox::InboxOps;
use idemgate::store::redis::RedisStore;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};

use crate::support::RedisServer;

mod history;
use history::Run;

const STATES: [&str; 4] = ["pending", "success", "failed", "refunded"];
const LONG: Duration = Duration::from_secs(3600);
/// An unknown outcome's hold in the model: short, so a history can outlive it.
const HOLD: Duration = Duration::from_millis(3);
/// Notices held behind one entity at most (small, so `Full` happens).
const MAX_HELD: usize = 3;

/// `MACHINE`'s rules, written out again: where `to` may come from.
fn sources(to: &str) -> Vec<String> {
    let from: &[&str] = match to {
        "success" => &["pending", "failed"],
        "failed" => &["pending"],
        "refunded" => &["success"],
        _ => &[],
    };
    from.iter().map(|s| (*s).to_owned()).collect()
}

fn allowed(from: Option<&str>, to: &str) -> bool {
    from.is_none_or(|from| sources(to).iter().any(|s| s == from))
}

/// What the handler does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handler {
    Accept,
    Refuse,
    Fail,
    TimeoutApplied,
    TimeoutNotApplied,
}

/// One step of a history.
#[derive(Debug, Clone)]
enum Op {
    /// A new notice announcing `STATES[to]`.
    Arrive {
        to: usize,
        /// Its event, of two (`None`: it carries none).
        event: Option<bool>,
        handler: Handler,
    },
    /// A copy of an earlier notice.
    Copy {
        which: usize,
        handler: Handler,
    },
    /// A worker takes an owed inbox delivery.
    Work {
        which: usize,
        handler: Handler,
    },
    /// Short holds run out.
    Expire,
    /// The operator purges the pending delivery (having checked it did
    /// not apply), or retries or drops a dead delivery.
    Purge,
    Retry {
        which: usize,
    },
    Drop {
        which: usize,
    },
}

fn handler() -> impl Strategy<Value = Handler> {
    prop_oneof![
        4 => Just(Handler::Accept),
        1 => Just(Handler::Refuse),
        2 => Just(Handler::Fail),
        1 => Just(Handler::TimeoutApplied),
        1 => Just(Handler::TimeoutNotApplied),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..STATES.len(), any::<Option<bool>>(), handler())
            .prop_map(|(to, event, handler)| Op::Arrive { to, event, handler }),
        2 => (any::<usize>(), handler()).prop_map(|(which, handler)| Op::Copy { which, handler }),
        5 => (any::<usize>(), handler()).prop_map(|(which, handler)| Op::Work { which, handler }),
        1 => Just(Op::Expire),
        1 => Just(Op::Purge),
        1 => any::<usize>().prop_map(|which| Op::Retry { which }),
        1 => any::<usize>().prop_map(|which| Op::Drop { which }),
    ]
}

async fn history<S: Store + InboxOps>(store: &S, case: u64, inbox: bool, ops: Vec<Op>) {
    let mut run = Run::new(store, case, inbox);
    for op in ops {
        run.apply(op).await;
    }
    run.check();
}

/// Runs the histories on `store`: `IDEMGATE_MODEL_CASES` of them (48 by
/// default), from `IDEMGATE_MODEL_SEED` when it is set.
fn explore<S: Store + InboxOps>(store: &S, runtime: &tokio::runtime::Handle, offset: u64) {
    let cases = std::env::var("IDEMGATE_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(48);
    let config = RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    };
    let mut runner = match std::env::var("IDEMGATE_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(seed) => {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
        }
        None => TestRunner::new(config),
    };
    let case = std::cell::Cell::new(offset);
    let strategy = (any::<bool>(), proptest::collection::vec(op(), 1..40));
    let started = std::time::Instant::now();
    runner
        .run(&strategy, |(inbox, ops)| {
            case.set(case.get() + 1);
            runtime.block_on(history(store, case.get(), inbox, ops));
            Ok(())
        })
        .unwrap();
    eprintln!(
        "entity model: {} histories in {:.1}s",
        case.get() - offset,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn redis_store_keeps_the_entity_promise_over_random_histories() {
    let redis = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(RedisStore::connect(
            &redis.url(),
            Duration::from_secs(2),
            None,
            1,
        ))
        .unwrap();
    explore(&store, runtime.handle(), 0);
}

#[test]
fn embedded_store_keeps_the_entity_promise_over_random_histories() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("model.redb")).unwrap();
    explore(&store, runtime.handle(), 1 << 32);
}
