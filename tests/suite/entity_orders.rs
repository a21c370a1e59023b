//! Property: random orders of notices for one entity, sent at once through
//! two idemgate instances on one real Redis, with copies, a handler that
//! fails some calls and takes a while on others. Whatever the order, the
//! handler sees only transitions the machine allows from the state its
//! last accepted call left, and accepts each notice at most once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::entity::{MACHINE, notice};
use crate::support::*;

const STATES: [&str; 4] = ["pending", "success", "failed", "refunded"];

/// `MACHINE`'s rules, written out again independently.
fn allowed(from: Option<&str>, to: &str) -> bool {
    match from {
        None => true,
        Some(from) => matches!(
            (from, to),
            ("pending", "success" | "failed") | ("failed", "success") | ("success", "refunded")
        ),
    }
}

/// One call the handler saw: the notice's id and status, and whether it
/// answered 200 (accepted) or 500.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    status: String,
    accepted: bool,
}

/// Two gates on one Redis, shared by every case of one run (each case has
/// its own order, so cases never meet), with the handler's log. Owned by
/// the test, so every process it started is stopped when it ends.
struct Rig {
    urls: [String; 2],
    calls: Arc<Mutex<Vec<Call>>>,
    upstream: Upstream,
    gates: [Gate; 2],
    redis: RedisServer,
}

impl Rig {
    async fn start() -> Self {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&calls);
        let n = Arc::new(AtomicUsize::new(0));
        // Every third call fails; every call takes 0-20 ms.
        let upstream = Upstream::scripted(move |_, body: &Bytes| {
            let seen = n.fetch_add(1, Ordering::SeqCst);
            let value: serde_json::Value = serde_json::from_slice(body).unwrap();
            let accepted = seen % 3 != 2;
            log.lock().unwrap().push(Call {
                id: value["id"].as_str().unwrap().to_owned(),
                status: value["status"].as_str().unwrap().to_owned(),
                accepted,
            });
            let reply = if accepted {
                Reply::ok()
            } else {
                Reply::status(500)
            };
            Reply {
                delay: Duration::from_millis((seen as u64 * 7) % 21),
                ..reply
            }
        })
        .await;
        let redis = RedisServer::start();
        let extra = format!("wait_timeout = \"3s\"\n{MACHINE}");
        let text = config_text(&redis_store(&redis), &upstream.url(), &extra);
        let gates = [Gate::start(&text).await, Gate::start(&text).await];
        Self {
            urls: [gates[0].url("/notify"), gates[1].url("/notify")],
            calls,
            upstream,
            gates,
            redis,
        }
    }

    /// Sends `notices` (index into STATES, gate, copies) of order `order`
    /// all at once; returns the handler's calls for that order.
    async fn run(&self, order: &str, notices: &[(usize, usize, usize)]) -> Vec<Call> {
        let mut sends = Vec::new();
        for (i, &(state, gate, copies)) in notices.iter().enumerate() {
            for copy in 0..=copies {
                let url = self.urls[(gate + copy) % 2].clone();
                let body = notice(&format!("{order}-{i}"), order, STATES[state]);
                sends.push(tokio::spawn(async move { deliver(&url, &body).await }));
            }
        }
        for send in sends {
            let answer = send.await.unwrap();
            assert!(
                [200, 409, 500].contains(&answer.status),
                "unexpected answer {answer:?}"
            );
        }
        let prefix = format!("{order}-");
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|call| call.id.starts_with(&prefix))
            .cloned()
            .collect()
    }

    async fn stop(self) {
        let [a, b] = self.gates;
        a.stop().await;
        b.stop().await;
        drop((self.upstream, self.redis));
    }
}

/// Whether the handler's calls kept the machine: every call a change
/// allowed from the state its last accepted call left, each notice
/// accepted at most once.
fn kept_the_machine(calls: &[Call]) -> Result<(), TestCaseError> {
    let mut state: Option<String> = None;
    let mut accepted = HashSet::new();
    for call in calls {
        prop_assert!(
            allowed(state.as_deref(), &call.status),
            "the handler saw {:?} -> {} ({calls:?})",
            state,
            call.status
        );
        if call.accepted {
            prop_assert!(
                accepted.insert(call.id.clone()),
                "{} accepted twice: {calls:?}",
                call.id
            );
            state = Some(call.status.clone());
        }
    }
    Ok(())
}

#[test]
fn any_order_of_notices_across_two_instances_keeps_the_machine() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rig = runtime.block_on(Rig::start());
    let mut runner = TestRunner::new(ProptestConfig::with_cases(24));
    let notices = prop::collection::vec((0..STATES.len(), 0..2usize, 0..3usize), 1..7);
    let result = runner.run(&(notices, any::<u64>()), |(notices, order)| {
        let order = format!("o{order:x}");
        let calls = runtime.block_on(rig.run(&order, &notices));
        kept_the_machine(&calls)
    });
    runtime.block_on(rig.stop());
    result.unwrap();
}
