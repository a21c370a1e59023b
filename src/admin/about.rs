//! `/admin/config` and `/admin/info`: what this instance runs, for the
//! operator who has only the admin port.
//!
//! `/admin/config` is the effective configuration exactly as
//! `idemgate check-config` prints it (every default written out, secrets
//! as their source, URL passwords replaced), so two instances can be
//! diffed without shell access. `/admin/info` names the build, when the
//! process started, the store and its readiness (the same verdict as
//! `/readyz`), the routes, and the name and scope of the token that asked. Both sit behind the admin token: a
//! configuration is a map of the deployment even with its secrets out.

use tokio::time::Instant;

use http::{Response, StatusCode};

use super::auth::Caller;
use super::{Admin, json, reply};
use crate::body::ProxyBody;
use crate::metrics::REVISION;

/// The two read-only views this module serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum About {
    /// `GET /admin/config`.
    Config,
    /// `GET /admin/info`.
    Info,
}

/// The start of this process, on both clocks: the wall clock to report
/// it, the monotonic one to count the uptime (immune to clock steps).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    unix_ms: u64,
    monotonic: Instant,
}

impl Started {
    /// Now, taken when the admin state is built at start-up.
    pub(crate) fn now() -> Self {
        Self {
            unix_ms: crate::time::now_ms(),
            monotonic: Instant::now(),
        }
    }
}

impl Admin {
    /// Answers `GET` on one of the [`About`] views, for the holder of
    /// `caller` (token name and scope).
    pub(super) async fn about(
        &self,
        view: About,
        caller: Option<Caller<'_>>,
    ) -> Response<ProxyBody> {
        match view {
            About::Config => reply(
                StatusCode::OK,
                "application/toml; charset=utf-8",
                self.config.to_toml(),
            ),
            About::Info => {
                let mut info = self.info().await;
                // Which token asked, so the console offers a read-only
                // token no action it would be refused.
                info["token"] = match caller {
                    Some(caller) => serde_json::json!({
                        "name": caller.name,
                        "scope": crate::config::Choice::name(caller.scope),
                    }),
                    None => serde_json::Value::Null,
                };
                json(StatusCode::OK, &info)
            }
        }
    }

    /// The declared `[store] durability` and what the last check of the
    /// servers found (Redis); the embedded store commits with fsync.
    fn durability(&self) -> serde_json::Value {
        let (level, findings) = self.store.durability();
        let findings = findings.unwrap_or_default();
        serde_json::json!({
            "level": crate::config::Choice::name(level),
            "met": findings.shortfalls.is_empty(),
            "shortfalls": findings.shortfalls,
            "warnings": findings.warnings,
            "servers": findings.servers,
        })
    }

    async fn info(&self) -> serde_json::Value {
        let readiness = self.readiness().await;
        let routes: Vec<serde_json::Value> = self
            .config
            .routes
            .iter()
            .map(|route| {
                serde_json::json!({
                    "name": route.name,
                    "path_prefix": route.path_prefix,
                    "methods": route.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
                    "upstream": route.upstream.shown_url(),
                    "inbox": route.inbox.is_some(),
                    // The console offers an entity lookup on these.
                    "entity": route.entity.is_some(),
                })
            })
            .collect();
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "revision": REVISION,
            "started_at_unix_ms": self.started.unix_ms,
            "uptime_ms": crate::time::millis(self.started.monotonic.elapsed()),
            "store": {
                "kind": self.config.store.backend.kind(),
                "location": self.config.store.backend.location(),
                "ready": readiness.is_ok(),
                "problem": readiness.err(),
                "durability": self.durability(),
                // The embedded store's check of its whole file (null on Redis).
                "integrity": self.store.integrity(),
            },
            "routes": routes,
        })
    }
}
