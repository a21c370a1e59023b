//! Whole systems on loopback: fault injection (several idemgate processes,
//! Redis Cluster, Sentinel, killed processes) and the observability contract
//! against a real Prometheus. Part of the system tier: built only with
//! `--features system-tests` (Cargo.toml), as `.ci/run` does. A binary of
//! their own so that their timings and throughput figures do not compete
//! with the other tests for the cores (cargo runs test binaries one after
//! another). Tests that need Redis
//! Cluster, Sentinel or Prometheus are `#[ignore = "needs …"]`.
// These tests drive real processes (redis-server, the binary, Prometheus)
// in real time: the paused-clock rule of `.clippy.toml` is for `src/`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod fault;
mod inbox;
mod prometheus;
