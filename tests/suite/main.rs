//! The fast tier: every integration suite that needs at most a local
//! `redis-server`, in one test binary (one link instead of one per file).
//! Tests that need tools a laptop rarely has (Prometheus, promtool,
//! systemd-analyze) are `#[ignore = "needs …"]`; `.ci/run` runs them with
//! `--include-ignored`.
// These tests drive real processes (redis-server, the binary, Prometheus)
// in real time: the paused-clock rule of `.clippy.toml` is for `src/`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod admin_cli;
mod ambiguity;
mod bounded_answers;
mod buffer_budget;
mod check_config;
mod compact_records;
mod concurrency;
mod coverage;
mod demo;
mod deploy;
mod docs;
mod durability;
mod embedded;
mod entity;
mod entity_events;
mod entity_held;
mod entity_machines;
mod entity_model;
mod entity_orders;
mod entity_outcomes;
mod entity_store;
mod eviction;
mod failures;
mod fingerprints;
mod guards;
mod hardening;
mod harness;
mod hot_keys;
mod inbox_store;
mod logging;
mod operator_metrics;
mod parameters;
mod payment_fuzz;
mod payments;
mod presets;
mod probe;
mod replay;
mod replay_cache;
mod routing;
mod scopes;
mod secrets;
mod signatures;
mod status_class;
mod store_auth;
mod store_contract;
mod store_integrity;
mod store_pressure;
mod store_tls;
mod systemd;
mod tracing;
mod transport;
