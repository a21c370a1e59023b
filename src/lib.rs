//! idemgate: an idempotency sidecar for at-least-once webhook and payment
//! callbacks.
//!
//! It sits in front of a legacy handler, verifies each delivery's signature
//! and freshness, claims the delivery's key atomically in a shared store,
//! forwards only the first delivery, stores the handler's answer and
//! replays it to every duplicate. The product contract is `SPEC.md`
//! (mirrored in `config/idemgate.toml` and the README).
//!
//! # Architecture
//!
//! ```text
//! sender ──► server.rs ──► pipeline.rs ────────────────────────────────► response
//!                            │ 1 route     pipeline/route.rs    400 ───┤  (unmatched: forward | 404)
//!                            │ 2 body      pipeline/body.rs     413 ───┤
//!                            │ 3 verify    pipeline/verify.rs   401 ───┤  error.rs: the ONE
//!                            │ 4 identify  pipeline/identify.rs 400 ───┤  Rejection → status,
//!                            │ 5 claim     pipeline/claim.rs    503/409/422  reason, problem+json
//!                            │ 6 forward   pipeline/forward.rs  502/504┤
//!                            │ 7 settle    pipeline/settle.rs  (complete | release | unknown)
//!                            │             pipeline/outcome.rs + persist.rs: stored until it sticks
//!                            ▼
//!                         store.rs (trait) ── store/redis.rs (fred + lua/*.lua)
//!                            │             └─ store/embedded.rs (redb)
//!                            └ replay_cache.rs: completed records in memory,
//!                              replay_cache/tracking.rs: CLIENT TRACKING invalidations
//!         admin.rs: /metrics /healthz /readyz      metrics.rs: names, buckets, helpers
//! ```
//!
//! # Runtime
//!
//! `idemgate serve` runs on tokio's current-thread scheduler by default
//! (`[limits] worker_threads = 1`): the sender's connection, the detached
//! first-delivery task, fred's router and reader and hyper's upstream
//! connection all run on one thread, so no wake-up crosses threads (no
//! futex calls, no work stealing, no cache lines bouncing between cores).
//! More threads select the multi-thread scheduler with one Redis
//! connection each. This is the one place the choice is explained; the
//! measured difference is in `bench/RESULTS.md` (Optimisations).
//!
//! # Layout
//!
//! * [`config`] — the TOML file: raw serde structs, selectors, validation.
//! * [`app`] — wires config into store, pipeline, listeners; owns shutdown.
//! * [`server`] — accept loop, HTTP/1+2, progress and idle bounds,
//!   HTTP/2 stream limits, graceful drain.
//! * [`body`] — the one body type, and the one way to build a buffered one.
//! * [`budget`] — the process-wide bound on buffered request bodies.
//! * [`pipeline`] — the request stages, sequenced in one place.
//! * [`path`] — canonical request paths (routing and `path_prefix` checks).
//! * [`encoding`] — the lenient base64 engine secrets and signatures share.
//! * [`extract`] — a buffered request and selector reads out of it.
//! * [`signature`] — the HMAC core and the signature schemes.
//! * [`store`] — the store contract; Redis and embedded backends.
//! * [`record`] — the versioned record encoding both stores share.
//! * [`error`] — every rejection's status, reason and problem+json.
//! * [`metrics`] — metric names, labels and recording helpers.
//! * [`hot_keys`] — per-route top-k keys by deliveries in a sliding window.
//! * [`log_writer`] — log lines to stderr in timed batches.
//! * [`admin`] — the admin listener.
//! * [`rotation`] — `file:` secrets re-read on SIGHUP or when they change.
//! * [`demo`] — `idemgate demo`, a self-contained demonstration.
//! * [`telemetry`] — optional OpenTelemetry trace export (`[tracing]`).

pub mod admin;
pub mod app;
pub(crate) mod body;
pub(crate) mod budget;
pub mod config;
pub mod demo;
pub(crate) mod encoding;
pub mod error;
pub mod extract;
pub mod hot_keys;
pub(crate) mod inbox;
pub mod log_writer;
pub(crate) mod metrics;
pub mod path;
pub mod pipeline;
pub mod record;
pub mod replay_cache;
pub mod rotation;
pub(crate) mod server;
pub mod signature;
pub mod store;
pub mod telemetry;
