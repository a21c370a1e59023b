//! `[limits]`, validated and printed: the bounds that protect idemgate
//! (and the handler behind it) from slow, huge or numerous requests.
//!
//! Each bound is checked against what could ever work (a zero timeout, a
//! buffer budget smaller than one body) and against its ceiling; the
//! defaults and ceilings are `raw.rs`'s named constants.

use std::time::Duration;

use super::problems::Problems;
use super::raw::{self, RawLimits};

/// More worker threads than this is a typo, not a machine.
const MAX_WORKER_THREADS: usize = 1024;

/// Resource limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted request body in bytes.
    pub max_body_bytes: u64,
    /// Time allowed to receive the request headers.
    pub header_read_timeout: Duration,
    /// Time in-flight work gets after SIGTERM.
    pub shutdown_grace: Duration,
    /// Time allowed to receive the body after the headers (slow-body guard).
    pub body_read_timeout: Duration,
    /// Time a connection may stay open with no request in progress; a
    /// connection's first request must start within
    /// `header_read_timeout` of accept (`crate::server`).
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
    /// Duplicates of one key that may wait at once.
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
    /// Threads that serve requests, resolved (at least 1); one selects
    /// tokio's current-thread scheduler (why: the crate docs, "Runtime").
    pub worker_threads: usize,
}

/// Reads `[limits]`, defaults filled in, then checks the bounds.
pub(super) fn limits(problems: &mut Problems, raw: &RawLimits) -> Limits {
    let limits = read(raw);
    check(problems, &limits);
    limits
}

fn read(raw: &RawLimits) -> Limits {
    Limits {
        max_body_bytes: raw.max_body_bytes.unwrap_or(raw::DEFAULT_MAX_BODY_BYTES),
        header_read_timeout: raw
            .header_read_timeout
            .unwrap_or(raw::DEFAULT_HEADER_READ_TIMEOUT)
            .get(),
        shutdown_grace: raw
            .shutdown_grace
            .unwrap_or(raw::DEFAULT_SHUTDOWN_GRACE)
            .get(),
        body_read_timeout: raw
            .body_read_timeout
            .unwrap_or(raw::DEFAULT_BODY_READ_TIMEOUT)
            .get(),
        idle_timeout: raw.idle_timeout.unwrap_or(raw::DEFAULT_IDLE_TIMEOUT).get(),
        max_buffered_bytes: raw
            .max_buffered_bytes
            .unwrap_or(raw::DEFAULT_MAX_BUFFERED_BYTES),
        max_connections: raw.max_connections.unwrap_or(raw::DEFAULT_MAX_CONNECTIONS),
        max_headers: raw.max_headers.unwrap_or(raw::DEFAULT_MAX_HEADERS),
        max_header_bytes: raw
            .max_header_bytes
            .unwrap_or(raw::DEFAULT_MAX_HEADER_BYTES),
        max_waiting_per_key: raw
            .max_waiting_per_key
            .unwrap_or(raw::DEFAULT_MAX_WAITING_PER_KEY),
        max_probes_in_flight: raw
            .max_probes_in_flight
            .unwrap_or(raw::DEFAULT_MAX_PROBES_IN_FLIGHT),
        max_stored_answer_bytes: raw
            .max_stored_answer_bytes
            .unwrap_or(raw::DEFAULT_MAX_STORED_ANSWER_BYTES),
        replay_cache_bytes: raw
            .replay_cache_bytes
            .unwrap_or(raw::DEFAULT_REPLAY_CACHE_BYTES),
        worker_threads: match raw.worker_threads.unwrap_or(raw::DEFAULT_WORKER_THREADS) {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            threads => threads,
        },
    }
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
            raw::MAX_BUFFERED_BYTES,
        ),
        (
            "limits.max_stored_answer_bytes",
            limits.max_stored_answer_bytes as u64,
            raw::MAX_STORED_ANSWER_BYTES as u64,
        ),
        (
            "limits.replay_cache_bytes",
            limits.replay_cache_bytes as u64,
            raw::MAX_REPLAY_CACHE_BYTES as u64,
        ),
    ] {
        if value > most {
            problems.push(key, format!("must be at most {most}"));
        }
    }
}

impl Limits {
    /// The table as `check-config` prints it.
    pub(super) fn to_raw(&self) -> RawLimits {
        RawLimits {
            max_body_bytes: Some(self.max_body_bytes),
            header_read_timeout: Some(self.header_read_timeout.into()),
            shutdown_grace: Some(self.shutdown_grace.into()),
            body_read_timeout: Some(self.body_read_timeout.into()),
            idle_timeout: Some(self.idle_timeout.into()),
            max_buffered_bytes: Some(self.max_buffered_bytes),
            max_connections: Some(self.max_connections),
            max_headers: Some(self.max_headers),
            max_header_bytes: Some(self.max_header_bytes),
            max_waiting_per_key: Some(self.max_waiting_per_key),
            max_probes_in_flight: Some(self.max_probes_in_flight),
            max_stored_answer_bytes: Some(self.max_stored_answer_bytes),
            replay_cache_bytes: Some(self.replay_cache_bytes),
            worker_threads: Some(self.worker_threads),
        }
    }
}
