//! `[limits]`: the bounds that protect idemgate (and the handler behind
//! it) from slow, huge or numerous requests.
//!
//! [`Limits`] is the table itself: serde reads it from the file (each key
//! absent takes its value from `Default`), `check-config` prints it, and
//! [`limits`] checks each bound against what could ever work (a zero
//! timeout, a buffer budget smaller than one body) and against its ceiling.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration;
use super::problems::Problems;

/// Largest upstream answer body stored for replay by default: 1 MiB keeps
/// one duplicate's store read short enough not to hold up other keys'
/// calls on a shared Redis connection; larger answers stream to the sender
/// unstored.
pub const DEFAULT_MAX_STORED_ANSWER_BYTES: usize = 1024 * 1024;
/// Ceiling of `max_stored_answer_bytes`: records carry a 32-bit body
/// length and Redis strings end at 512 MiB.
const MAX_STORED_ANSWER_BYTES: usize = 256 * 1024 * 1024;
/// Ceiling of `replay_cache_bytes`: a cache larger than this is a second
/// store, which is what Redis is for.
const MAX_REPLAY_CACHE_BYTES: usize = 4 * 1024 * 1024 * 1024;
/// Ceiling of `max_buffered_bytes` (the budget is a tokio semaphore,
/// whose permits end well above this).
const MAX_BUFFERED_BYTES: u64 = 1024 * 1024 * 1024 * 1024;
/// More worker threads than this is a typo, not a machine.
const MAX_WORKER_THREADS: usize = 1024;

/// `[limits]`, as written and as used.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest accepted request body in bytes.
    pub max_body_bytes: u64,
    /// Time allowed to receive the request headers (slowloris guard).
    #[serde(with = "duration::field")]
    pub header_read_timeout: Duration,
    /// Time in-flight work gets after SIGTERM.
    #[serde(with = "duration::field")]
    pub shutdown_grace: Duration,
    /// Time allowed to receive the body after the headers (slow-body guard).
    #[serde(with = "duration::field")]
    pub body_read_timeout: Duration,
    /// Time a connection may stay open with no request in progress; a
    /// connection's first request must start within
    /// `header_read_timeout` of accept (`crate::server`).
    #[serde(with = "duration::field")]
    pub idle_timeout: Duration,
    /// Bytes of request bodies buffered at once across all connections;
    /// a body that would go beyond gets 503 `over_capacity`.
    pub max_buffered_bytes: u64,
    /// Open proxy connections at most; further ones wait in the listen
    /// backlog until one closes.
    pub max_connections: usize,
    /// Header fields per request at most (hyper answers 431 beyond).
    pub max_headers: usize,
    /// Request-head bytes at most (hyper answers 431 beyond).
    pub max_header_bytes: usize,
    /// Duplicates of one key that may wait at once; more copies get 409
    /// `in_flight` at once, so a flood of copies can not pin memory.
    pub max_waiting_per_key: usize,
    /// Probes of unknown outcomes in flight at once on this instance
    /// (`[route.probe]`), so a stalled handler is not asked about every
    /// outcome at the same moment.
    pub max_probes_in_flight: usize,
    /// Largest upstream answer body stored for replay; larger ones stream
    /// to the sender and their key is completed without a body.
    pub max_stored_answer_bytes: usize,
    /// Bytes of completed records kept in memory so replays skip the
    /// store (`crate::replay_cache`); 0 turns the cache off.
    pub replay_cache_bytes: usize,
    /// Threads that serve requests: 0 in the file means one per CPU, and
    /// `limits()` resolves it (at least 1); one selects tokio's
    /// current-thread scheduler (why: the crate docs, "Runtime").
    pub worker_threads: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Callbacks are small; 1 MiB leaves ample room.
            max_body_bytes: 1024 * 1024,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(30),
            // Generous for callbacks of at most `max_body_bytes`.
            body_read_timeout: Duration::from_secs(10),
            // Senders open a connection per delivery or reuse one within
            // seconds, so 10 s keeps reuse and frees idle slots.
            idle_timeout: Duration::from_secs(10),
            // 64 full-size bodies, far above what one handler's senders
            // deliver at once, small beside a sidecar's memory.
            max_buffered_bytes: 64 * 1024 * 1024,
            // Far above what one handler's senders need, low enough that
            // file descriptors and memory stay bounded.
            max_connections: 1024,
            // hyper's own default.
            max_headers: 100,
            // Webhook heads are well under 8 KiB.
            max_header_bytes: 16 * 1024,
            max_waiting_per_key: 64,
            max_probes_in_flight: 16,
            max_stored_answer_bytes: DEFAULT_MAX_STORED_ANSWER_BYTES,
            // About 20,000 typical webhook answers, well inside a
            // sidecar's memory budget.
            replay_cache_bytes: 32 * 1024 * 1024,
            // One thread, the cheapest per request (the crate docs,
            // "Runtime").
            worker_threads: 1,
        }
    }
}

/// Resolves `worker_threads = 0` to the CPU count, then checks the bounds.
pub(super) fn limits(problems: &mut Problems, mut limits: Limits) -> Limits {
    if limits.worker_threads == 0 {
        limits.worker_threads = std::thread::available_parallelism().map_or(1, usize::from);
    }
    check(problems, &limits);
    limits
}

fn check(problems: &mut Problems, limits: &Limits) {
    if limits.worker_threads > MAX_WORKER_THREADS {
        problems.push(
            "limits.worker_threads",
            format!("must be at most {MAX_WORKER_THREADS}"),
        );
    }
    for (key, value, least) in [
        ("limits.max_connections", limits.max_connections, 1),
        ("limits.max_headers", limits.max_headers, 1),
        ("limits.max_header_bytes", limits.max_header_bytes, 8192),
        (
            "limits.max_probes_in_flight",
            limits.max_probes_in_flight,
            1,
        ),
    ] {
        if value < least {
            problems.push(key, format!("must be at least {least}"));
        }
    }
    for (key, value) in [
        ("limits.body_read_timeout", limits.body_read_timeout),
        ("limits.header_read_timeout", limits.header_read_timeout),
        ("limits.idle_timeout", limits.idle_timeout),
    ] {
        if value.is_zero() {
            problems.push(key, "must be greater than zero");
        }
    }
    if limits.max_body_bytes == 0 {
        problems.push("limits.max_body_bytes", "must be at least 1");
    }
    if limits.max_buffered_bytes < limits.max_body_bytes {
        problems.push(
            "limits.max_buffered_bytes",
            format!(
                "must be at least limits.max_body_bytes ({}), or no body of the largest accepted size could ever be read",
                limits.max_body_bytes
            ),
        );
    }
    for (key, value, most) in [
        (
            "limits.max_buffered_bytes",
            limits.max_buffered_bytes,
            MAX_BUFFERED_BYTES,
        ),
        (
            "limits.max_stored_answer_bytes",
            limits.max_stored_answer_bytes as u64,
            MAX_STORED_ANSWER_BYTES as u64,
        ),
        (
            "limits.replay_cache_bytes",
            limits.replay_cache_bytes as u64,
            MAX_REPLAY_CACHE_BYTES as u64,
        ),
    ] {
        if value > most {
            problems.push(key, format!("must be at most {most}"));
        }
    }
}
