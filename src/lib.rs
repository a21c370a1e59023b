//! idemgate: an idempotency sidecar for at-least-once webhook and payment
//! callbacks.
//!
//! It sits in front of a legacy handler, verifies each delivery's signature
//! and freshness, claims the delivery's key atomically in a shared store,
//! forwards only the first delivery, stores the handler's answer and
//! replays it to every duplicate. The product contract is
//! `docs/contract.md` (cited in the code as "contract §N");
//! `config/idemgate.toml` is the reference of every setting and `docs/` (indexed
//! by the README) the user guide.
//!
//! # Architecture
//!
//! ```text
//! sender ──► server.rs ──► pipeline.rs ─────────────────────────────────────► response
//!                            │ (paths under pipeline/)
//!                            │ 1 route    admit/route.rs      400 ──┤ (unmatched: forward | 404)
//!                            │   (hands the request its pipeline/runtime.rs RouteRuntime)
//!                            │ 2 body     admit/body.rs       413 ──┤  error.rs: the ONE
//!                            │ 3 verify   admit/verify.rs     401 ──┤  Rejection → status,
//!                            │   guard    admit/guard.rs      400 ──┤  reason, problem+json
//!                            │ 4 identify admit/identify.rs   400 ──┤
//!                            │   entity   admit/entity.rs     400 ──┤ ([route.entity]: id, state)
//!                            │ 5 claim    claim.rs            503/409/422 (+ entity judgement:
//!                            │            repeat → ack, refused → ack | 409; busy → wait | hold | 409)
//!                            │ 6 forward  first_delivery/deliver.rs → upstream/  502/504
//!                            │ 7 settle   first_delivery/settle.rs + settle_once.rs (complete | release | unknown)
//!                            │            or inbox/ (queued; the sender gets the ack)
//!                            │   mode     answer/shadow.rs (enforce | shadow)
//!                            ▼
//!          store.rs (AnyStore) ── store/backend.rs: the one Backend trait, implemented by
//!                                 store/redis (fred + lua/*.lua) │ store/embedded (redb)
//!                              └── store/entity.rs: entity state, judged with the claim
//!                              └── replay_cache.rs in front of it; store/upkeep.rs its own
//!                                  background work (sweeper, eviction watch, tracking)
//!          inbox/ ── redelivers through upstream/ and the store; never through pipeline/
//!          admin/ ── /metrics /healthz /readyz /admin/*   metrics.rs: buckets, shared names (a leaf)
//! ```
//!
//! Each module depends only on modules below it; `.ci/module-cycles`
//! checks that no two top-level modules, and no two children of
//! `config/`, `pipeline/` or `store/`, import each other.
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
//! # Conventions
//!
//! A poisoned lock is recovered (`PoisonError::into_inner`), never turned
//! into a second panic: every lock guards a map or counter updated in
//! single statements, valid whatever panicked. Time is unix milliseconds
//! ([`time`]).
//!
//! # Layout
//!
//! * [`config`] — the TOML file: each section's serde table (durations and
//!   word choices typed), its validator, cross-section checks, the
//!   effective-config printer.
//! * [`app`] — wires config into store, per-route runtimes, pipeline,
//!   inbox, listeners; owns shutdown.
//! * `server` — accept loop, HTTP/1+2, progress and idle bounds, HTTP/2
//!   stream limits, graceful drain.
//! * [`pipeline`] — the request stages by phase (admit, claim, first
//!   delivery, answer), sequenced in one place; the per-route runtime; the
//!   pipeline's metrics.
//! * `upstream` — talking to the handler: the pooled client, forwarding,
//!   quick-ack, the stored form of an answer.
//! * `inbox` — the durable inbox: queueing, redelivery workers, the repair
//!   pass, operator actions, its metrics.
//! * [`store`] — the store contract: one `Backend` trait (records, inbox,
//!   probe plans, audit trail, listing) with its Redis and embedded
//!   implementations, the store's metrics and background work.
//! * [`replay_cache`] — completed records in memory, in front of the store.
//! * [`record`] — the versioned record encoding both stores share.
//! * [`signature`] — the HMAC core, the signature schemes, the senders'
//!   presets and key material (secrets, RSA public keys).
//! * [`extract`] — a buffered request, selectors and message templates,
//!   and selector reads out of the request.
//! * [`path`] — canonical request paths (routing and `path_prefix` checks).
//! * [`error`] — every rejection's status, reason and problem+json.
//! * `metrics` — histogram buckets, build info and the names several
//!   modules share; each module keeps its own metrics beside it.
//! * [`hot_keys`] — per-route top-k keys by deliveries in a sliding window.
//! * [`admin`] — the admin listener.
//! * [`cli`] — `idemgate admin …`, the operator's commands over the admin API.
//! * [`rotation`] — `file:` secrets re-read on SIGHUP or when they change.
//! * [`telemetry`] — optional OpenTelemetry trace export (`[tracing]`).
//! * [`log_writer`] — log lines to stderr in timed batches.
//! * [`demo`] — `idemgate demo`, a self-contained demonstration.
//! * [`time`] — unix milliseconds, and the one `Duration` conversion.
//! * `body`, `budget`, `backoff`, `encoding` — the one body type, the
//!   process-wide bound on buffered bodies, doubling pauses, the lenient
//!   base64 engine.

pub mod admin;
pub mod app;
pub(crate) mod backoff;
pub(crate) mod body;
pub(crate) mod budget;
pub mod cli;
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
pub(crate) mod peers;
pub mod pipeline;
pub mod record;
pub mod replay_cache;
pub mod rotation;
pub(crate) mod server;
pub mod signature;
pub mod store;
pub mod telemetry;
pub mod time;
pub(crate) mod upstream;
