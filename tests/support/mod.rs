//! The one test harness, shared by both test binaries (`tests/suite`,
//! `tests/system`, each with `#[path = "../support/mod.rs"] mod support;`,
//! hence a `mod.rs`: a path-attributed `support.rs` would look for its
//! submodules beside itself). Real parts on loopback, stopped by PID; every
//! wait bounded.
//!
//! * [`process`] — free ports, the one child-process guard [`Proc`] and
//!   bounded short commands.
//! * [`wait`] — every poll loop: async and blocking, boolean and valued.
//! * [`redis`] — [`RedisServer`] (plain or TLS only) and the per-port
//!   `redis-cli` helpers.
//! * [`backends`] — every store backend for the contract suites
//!   ([`for_every_backend!`]).
//! * [`monitor`] — [`DataWatch`], the commands a server ran on data (its
//!   `MONITOR`), for the tests that assert a request never reached it.
//! * [`tls`] — [`TestPki`], a CA and certificates made at test time, and
//!   [`RedisTls`], how a TLS `redis-server` runs with them.
//! * [`upstream`] — [`Upstream`], a real HTTP server that counts executions
//!   and answers as a test script says.
//! * [`gate`] — the test configuration, [`Gate`] (in-process) and
//!   [`GateProcess`] (the real binary).
//! * [`browser`] — [`Browser`], headless Chromium over WebDriver, for the
//!   console's tests.
//! * [`client`] — [`send`], the bounded pooled [`Sender`], [`http_get`] and
//!   raw HTTP/1.1 exchanges.
//! * [`signing`] — the test route's signing scheme and payment bodies.
//! * [`entity`] — the test route's `[route.entity]` and its notices.
//! * [`entity_model`] — the entity's model-based test: a reference model,
//!   random histories with faults, the promise's checker ([`explore`]).
//! * [`presets`] — configurations, headers and bodies per preset scheme.
//! * [`payments`] — the payment channels' SDK vectors, their routes and
//!   fresh WeChat Pay v3 signatures.
//! * [`otlp`] — [`OtlpReceiver`], a real OTLP/HTTP trace receiver that
//!   decodes what idemgate exports with the official protobuf types.
//! * [`exposition`] — the admin `/metrics` text: [`sample`] and the
//!   [`Exposition`] parser.
// Each binary uses a part of the harness.
#![allow(
    dead_code,
    unused_imports,
    unused_macros,
    unreachable_pub,
    missing_docs
)]

mod backends;
mod browser;
mod client;
mod entity;
mod entity_model;
mod exposition;
mod gate;
mod monitor;
mod otlp;
mod payments;
mod presets;
mod process;
mod redis;
mod signing;
mod tls;
mod upstream;
mod wait;

pub(crate) use backends::for_every_backend;
pub use backends::{fresh_embedded_backend, fresh_redis_backend, fresh_valkey_backend};
pub use browser::*;
pub use client::*;
pub use entity::*;
pub use entity_model::{explore, model_runner};
pub use exposition::*;
pub use gate::*;
pub use monitor::*;
pub use otlp::*;
pub use payments::*;
pub use presets::*;
pub use process::*;
pub use redis::*;
pub use signing::*;
pub use tls::*;
pub use upstream::*;
pub use wait::*;

use std::path::PathBuf;

/// Request headers as name/value pairs.
pub type Headers = Vec<(String, String)>;

/// The secret every test route uses.
pub const SECRET: &str = "test-secret-0123456789";

/// `relative` inside the repository.
pub fn repo_path(relative: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to `-`,
/// punctuation other than `-` and `_` dropped. The docs link check and
/// the runbook check both resolve `#…` links with it.
pub fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
