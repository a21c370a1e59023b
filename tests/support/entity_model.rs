//! The entity model, shared by the fast tier's runs on
//! Redis and the embedded store (`tests/suite/entity_model.rs`) and the
//! system tier's run on a real Redis Cluster: a reference model of one
//! entity, random histories with faults, and the promise's checker. The
//! module docs of the suite's file say what a history holds and what is
//! checked; `history.rs` is the harness.
//!
//! Faults: an unknown outcome whose hold runs out, an owner that dies
//! mid-call (its claim left in flight until it expires), a store restart
//! (when the caller can restart its store: Redis with AOF `always`).

use std::time::Duration;

use idemgate::store::Store;
use idemgate::store::inbox::InboxOps;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};

mod history;
mod model;
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
    /// The instance dies mid-call, having applied it or not: its claim is
    /// left in flight until it expires.
    CrashApplied,
    CrashNotApplied,
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
    /// The store restarts (only where the caller can restart it).
    Restart,
}

fn handler() -> impl Strategy<Value = Handler> {
    prop_oneof![
        4 => Just(Handler::Accept),
        1 => Just(Handler::Refuse),
        2 => Just(Handler::Fail),
        1 => Just(Handler::TimeoutApplied),
        1 => Just(Handler::TimeoutNotApplied),
        1 => Just(Handler::CrashApplied),
        1 => Just(Handler::CrashNotApplied),
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
        1 => Just(Op::Restart),
    ]
}

/// Restarts the store a history runs on, returning once it answers.
pub type Restart<'a> = &'a (dyn Fn() + Sync);

async fn history<S: Store + InboxOps>(
    (store, restart): (&S, Option<Restart<'_>>),
    case: u64,
    inbox: bool,
    ops: Vec<Op>,
) {
    let mut run = Run::new(store, case, inbox, restart);
    for op in ops {
        run.apply(op).await;
    }
    run.check();
}

/// The runner of a model-based test: `IDEMGATE_MODEL_CASES` histories
/// (default `cases`), from `IDEMGATE_MODEL_SEED` when it is set, with no
/// failure files (a failing seed is printed; replay it with the variable).
pub fn model_runner(cases: u32) -> TestRunner {
    let cases = std::env::var("IDEMGATE_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    let config = RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    };
    match std::env::var("IDEMGATE_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(seed) => {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
        }
        None => TestRunner::new(config),
    }
}

/// Runs `cases` histories on `store` (`IDEMGATE_MODEL_CASES` overrides
/// it), from `IDEMGATE_MODEL_SEED` when it is set; `restart` restarts the
/// store (`Op::Restart` does nothing without it). Entities are numbered
/// from `offset`, so runs on one store never share one. Returns how many
/// histories ran.
pub fn explore<S: Store + InboxOps>(
    (store, restart): (&S, Option<Restart<'_>>),
    runtime: &tokio::runtime::Handle,
    offset: u64,
    cases: u32,
) -> u64 {
    let mut runner = model_runner(cases);
    let case = std::cell::Cell::new(offset);
    let strategy = (any::<bool>(), proptest::collection::vec(op(), 1..40));
    let started = std::time::Instant::now();
    runner
        .run(&strategy, |(inbox, ops)| {
            case.set(case.get() + 1);
            runtime.block_on(history((store, restart), case.get(), inbox, ops));
            Ok(())
        })
        .unwrap();
    let ran = case.get() - offset;
    eprintln!(
        "entity model: {ran} histories in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    ran
}
