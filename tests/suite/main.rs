//! The integration suites that need at most a local `redis-server`, in one
//! test binary (one link instead of one per file), cut by cost:
//!
//! * the fast tier, what `cargo test` runs: every module without a `cfg`,
//!   under a minute in all on a 2-core machine;
//! * the modules marked `#[cfg(feature = "system-tests")]`, part of the
//!   system tier (with `tests/system`): they wait out timers and timeouts,
//!   flood, cut the store off, restart it, kill processes, speak TLS or
//!   drive a browser, and take seconds each. `cargo test --features
//!   system-tests` adds them; `.ci/run` does.
//!
//! Tests that need tools a laptop rarely has (Prometheus, promtool,
//! systemd-analyze, kubectl) are `#[ignore = "needs …"]`; `.ci/run` runs
//! them with `--include-ignored`.
// These tests drive real processes (redis-server, the binary, Prometheus)
// in real time: the paused-clock rule of `.clippy.toml` is for `src/`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

// The fast tier.
mod admin;
mod admin_cli;
mod ambiguity;
mod check_config;
mod compact_records;
mod coverage;
mod deploy;
mod docs;
mod embedded;
mod entity;
mod entity_events;
mod entity_machines;
mod entity_orders;
mod entity_store;
mod eviction;
mod fingerprints;
mod guards;
mod harness;
mod hot_keys;
mod inbox_store;
mod logging;
mod operator_metrics;
mod parameters;
mod payment_fuzz;
mod payments;
mod presets;
mod replay;
mod routing;
mod scopes;
mod secrets;
mod signatures;
mod status_class;
mod store_auth;
mod store_contract;
mod systemd;

/// Declares the system tier's modules: built only with `--features
/// system-tests` (module docs).
macro_rules! system_tier {
    ($($module:ident),* $(,)?) => {
        $(
            #[cfg(feature = "system-tests")]
            mod $module;
        )*
    };
}

system_tier! {
    bounded_answers,
    buffer_budget,
    concurrency,
    demo,
    durability,
    entity_held,
    entity_model,
    entity_outcomes,
    failures,
    hardening,
    probe,
    replay_cache,
    store_integrity,
    store_pressure,
    store_tls,
    tracing,
    transport,
}
