//! The durable inbox against real parts: the idemgate binary (one or two
//! instances), a real `redis-server` (with AOF where a restart must keep
//! the queue) or the embedded store, and a real handler that is down,
//! failing, slow or killed mid-call.
//!
//! What every test checks in the end is the promise: each delivery the
//! sender was acknowledged for executes exactly once, or is held for an
//! operator (outcome unknown) and never sent again by itself. The tests
//! take turns (one lock for the file): their schedules are timed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;

mod accounting;
mod chaos;
mod crash;
mod dead;
mod handler_down;
mod redis_restart;
mod repair;
mod replicated;
mod unknown;

/// One test at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The admin token of every inbox test configuration.
const TOKEN: &str = "inbox-admin-token";

/// Inbox settings that redeliver quickly and never give up within a test:
/// for tests that wait for a handler to come back.
const PATIENT: &str =
    "backoff = \"500ms\"\nmax_backoff = \"2s\"\nmax_attempts = 100\nvisibility_timeout = \"10s\"";

/// What the sender is told when its delivery is queued.
const ACK: &str = "success";

/// The test route ([`config_text`]) with an inbox: quick backoff, the
/// given attempt limit and visibility timeout (the handler timeout is 5 s),
/// and the admin API on.
fn inbox_config(store: &str, upstream: &str, inbox: &str) -> String {
    let base = config_text(store, upstream, "");
    format!(
        "{base}\n[route.inbox]\nack_body = \"{ACK}\"\n{inbox}\n\n[admin]\ntoken = \"literal:{TOKEN}\"\n"
    )
}

/// A handler URL where nothing listens yet: idemgate's calls are refused
/// until a test starts an [`Upstream`] on that port.
fn absent_handler() -> (u16, String) {
    let port = free_port();
    (port, format!("http://127.0.0.1:{port}"))
}

/// Sends one admin API request with the token: (status, JSON or text).
async fn admin(admin: SocketAddr, method: &str, path: &str) -> (u16, serde_json::Value) {
    let headers = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let answer = send(method, &format!("http://{admin}{path}"), &headers, "").await;
    let body = serde_json::from_slice(&answer.body).unwrap_or_else(|_| {
        serde_json::Value::String(String::from_utf8_lossy(&answer.body).into())
    });
    (answer.status, body)
}

/// The delivery `id` as the admin API shows it.
async fn delivery(gate: SocketAddr, id: &str) -> serde_json::Value {
    let (status, view) = admin(gate, "GET", &format!("/admin/inbox/pay/delivery?key={id}")).await;
    assert_eq!(status, 200, "delivery {id}: {view}");
    view
}

/// Polls the delivery `id` until it reaches `state` (bounded: 30 s).
async fn until_state(gate: SocketAddr, id: &str, state: &str) -> serde_json::Value {
    let what = format!("delivery {id} to be {state}");
    poll(
        &what,
        Duration::from_secs(30),
        Duration::from_millis(100),
        async || {
            let view = delivery(gate, id).await;
            (view["state"] == state).then_some(view)
        },
    )
    .await
}

/// Waits (bounded by `limit`) until the inbox behind `admin` is empty and
/// every one of `ids` reached `handler`, then checks each executed exactly
/// once and nothing else was called.
async fn drained_once(admin: SocketAddr, handler: &Upstream, ids: &[String], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let pending = listed(admin, "queued").await.len();
        let executed = executions(handler).len();
        if pending == 0 && executed == ids.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "inbox drained within {limit:?}: {pending} queued, {executed} of {} executed",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let counts = executions(handler);
    for id in ids {
        assert_eq!(counts.get(id), Some(&1), "{id} executed exactly once");
    }
    assert_eq!(
        handler.calls(),
        ids.len(),
        "no call beyond one per delivery"
    );
}

/// Every key hash of a listing (`queued` or `dead`), all pages.
async fn listed(gate: SocketAddr, state: &str) -> Vec<serde_json::Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/admin/inbox/pay?state={state}&limit=100&cursor={cursor}"),
            None => format!("/admin/inbox/pay?state={state}&limit=100"),
        };
        // A store call slowed past `command_timeout` by a loaded machine
        // answers 503 store_unavailable: asked again, as an operator would.
        let mut attempt = 0;
        let (status, page) = loop {
            let (status, page) = admin(gate, "GET", &path).await;
            attempt += 1;
            if status != 503 || attempt == 5 {
                break (status, page);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(status, 200, "{path}: {page}");
        items.extend(page["items"].as_array().expect("items").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
}

/// Sends `copies` copies of each id's delivery, spread over `urls`, 32 at
/// a time; returns every answer per id.
async fn deliver_copies(
    urls: &[String],
    ids: &[String],
    copies: usize,
) -> HashMap<String, Vec<Answer>> {
    let sender = Sender::new();
    let limit = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        for copy in 0..copies {
            let url = urls[(i + copy) % urls.len()].clone();
            let (sender, limit, id) = (sender.clone(), Arc::clone(&limit), id.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.expect("semaphore");
                // A store reply slowed past `command_timeout` by a loaded
                // machine is a 503 store_unavailable: nothing was taken,
                // and the sender sends again, as a real one does.
                let mut attempt = 0;
                let answer = loop {
                    let answer = sender.deliver(&url, &payment(&id)).await;
                    attempt += 1;
                    match &answer {
                        Ok(a) if a.status == 503 && attempt < 5 => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        _ => break answer,
                    }
                };
                (id, answer)
            }));
        }
    }
    let mut answers: HashMap<String, Vec<Answer>> = HashMap::new();
    for task in tasks {
        let (id, answer) = task.await.expect("delivery task");
        answers
            .entry(id)
            .or_default()
            .push(answer.expect("an answer"));
    }
    answers
}

/// Every copy was acknowledged with the ack; exactly one per id as the
/// first (`Idempotent-Replayed: false`), the others as replays.
fn assert_acknowledged(answers: &HashMap<String, Vec<Answer>>) {
    for (id, copies) in answers {
        for answer in copies {
            assert_eq!(answer.status, 200, "{id}: {:?}", answer.body);
            assert_eq!(&answer.body[..], ACK.as_bytes(), "{id}");
        }
        let firsts = copies
            .iter()
            .filter(|a| a.replayed() == Some("false"))
            .count();
        assert_eq!(firsts, 1, "{id}: one first answer, the rest replays");
    }
}
