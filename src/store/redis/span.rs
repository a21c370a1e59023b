//! The OpenTelemetry spans of the Redis calls a traced delivery makes
//! (docs/tracing.md), by the semantic conventions for Redis: kind client,
//! `db.system.name = "redis"`, `db.operation.name` the command
//! (`EVALSHA`, `WAIT`), `db.stored_procedure.name` the idemgate script
//! (`claim`, `complete`, …), named `EVALSHA claim`, and `server.address`/
//! `server.port` when the store is one standalone server.
//!
//! A call makes a span only inside one of the delivery's own spans (the
//! current span has target [`TARGET`]): the store's background work (lease
//! upkeep outside a request, the inbox workers' scans, the eviction
//! watcher) would otherwise start a new trace every few seconds. With
//! tracing off no delivery span exists, so no Redis span is made either.

use fred::prelude::Config as FredConfig;
use fred::types::config::ServerConfig;
use opentelemetry::trace::Status;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::super::StoreError;
use crate::telemetry::TARGET;

/// What every Redis span of one store says about the server.
#[derive(Debug, Clone, Default)]
pub(super) struct Spans {
    /// The configured server; `None` for a Cluster or Sentinel deployment,
    /// whose calls go to whichever node holds the key.
    server: Option<(String, u16)>,
}

impl Spans {
    /// Spans for the store `config` connects to.
    pub(super) fn of(config: &FredConfig) -> Self {
        let server = match &config.server {
            ServerConfig::Centralized { server } => Some((server.host.to_string(), server.port)),
            _ => None,
        };
        Self { server }
    }

    /// The span of one `operation` (of `script` when it is an `EVALSHA`),
    /// [`Span::none`] unless the caller is tracing a delivery. The call is
    /// instrumented with it in place (`call.instrument(span)`), not
    /// wrapped in another future: the store's futures stay their size,
    /// which the debug builds' test threads need.
    pub(super) fn span(&self, operation: &'static str, script: Option<&'static str>) -> Span {
        // Only the current span is looked at (a thread-local read): a
        // `tracing::enabled!` check on [`TARGET`] first looked cheaper, but
        // it kept later warn and error lines out of the log
        // (store_pressure's unknown-outcome test).
        let traced = Span::current()
            .metadata()
            .is_some_and(|meta| meta.target() == TARGET);
        if !traced {
            return Span::none();
        }
        let name = match script {
            Some(script) => format!("{operation} {script}"),
            None => operation.to_owned(),
        };
        let span = tracing::info_span!(
            target: TARGET,
            "redis",
            otel.kind = "client",
            otel.name = name,
            db.system.name = "redis",
            db.operation.name = operation,
        );
        if let Some(script) = script {
            span.set_attribute("db.stored_procedure.name", script);
        }
        if let Some((host, port)) = &self.server {
            span.set_attribute("server.address", host.clone());
            span.set_attribute("server.port", i64::from(*port));
        }
        span
    }
}

/// Notes a failed call on its `span`: `error.type` and the error status.
pub(super) fn ended<T>(span: &Span, result: &Result<T, StoreError>) {
    if let (false, Err(error)) = (span.is_disabled(), result) {
        span.set_attribute("error.type", error_type(error));
        span.set_status(Status::error(error.to_string()));
    }
}

/// The `error.type` of a failed call: the store's class of failure.
fn error_type(error: &StoreError) -> &'static str {
    match error {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Full(_) => "full",
        StoreError::Corrupt(_) => "corrupt",
        StoreError::Unstorable(_) => "unstorable",
        StoreError::Unsupported(_) => "unsupported",
        StoreError::Backend(_) => "backend",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_known_only_when_there_is_one() {
        let one = FredConfig::from_url("redis://user:pw@10.0.0.5:6380").unwrap();
        assert_eq!(
            Spans::of(&one).server,
            Some(("10.0.0.5".to_owned(), 6380)),
            "no credentials"
        );
        let cluster = FredConfig::from_url("redis-cluster://10.0.0.5:7000").unwrap();
        assert_eq!(Spans::of(&cluster).server, None);
    }

    #[test]
    fn outside_a_delivery_no_span_is_made() {
        let spans = Spans::default();
        assert!(spans.span("EVALSHA", Some("renew")).is_disabled());
        assert!(spans.span("WAIT", None).is_disabled());
        let span = Span::none();
        ended(&span, &Err::<(), _>(StoreError::Full("OOM".into())));
    }
}
