//! Connecting the configured backend, and the first settings check that
//! must run before the first delivery.

use super::backend::Backend;
use super::metrics::StoreMetrics;
use super::{AnyStore, StoreError, WritePolicy, embedded, redis, upkeep};
use crate::config::{StoreBackend, StoreConfig};

/// A credential's text (checked to be UTF-8 when the configuration loaded).
fn text(secret: &crate::config::Secret) -> String {
    String::from_utf8_lossy(&secret.expose()).into_owned()
}

impl AnyStore {
    /// Connects the backend `config` names.
    pub async fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        // The one match on the backend kind.
        let backend: Box<dyn Backend> = match &config.backend {
            StoreBackend::Redis { url } => Box::new(
                redis::RedisStore::connect_authenticated(
                    url,
                    redis::RedisAuth {
                        username: config.username.as_ref().map(text),
                        password: config.password.as_ref().map(text),
                        tls: config.tls.as_ref().map(|tls| tls.client.clone()),
                    },
                    config.command_timeout,
                    WritePolicy {
                        level: config.durability,
                        replica_ack: config.replica_ack,
                    },
                    config.connections,
                )
                .await?,
            ),
            StoreBackend::Embedded { path } => Box::new(embedded::EmbeddedStore::open_with(
                path,
                embedded::GroupCommit {
                    commit_delay: config.commit_delay,
                    room: embedded::room_for_answers(config.largest_answer),
                    ..embedded::GroupCommit::default()
                },
                config.integrity_check,
            )?),
        };
        let confirmation = backend.redis().map(redis::RedisStore::confirmation);
        let store = Self {
            backend,
            metrics: StoreMetrics::new(),
            cache: None,
            upkeep: upkeep::Upkeep::new(config, confirmation),
        };
        // The durability check decides whether a write can be confirmed:
        // it runs before the first delivery, not after it. A Redis not
        // reached yet is read again on connect (`store::upkeep`).
        if let Err(error) = store.probe_settings().await {
            tracing::debug!(%error, "first settings check deferred");
        }
        // A server idemgate does not run on is refused here, before any
        // delivery; one met later fails `/readyz` (`store::server`).
        let unsupported = store.upkeep.unsupported_servers();
        if !unsupported.is_empty() {
            return Err(StoreError::Unsupported(format!(
                "the store runs a server idemgate does not support: {}",
                unsupported.join("; ")
            )));
        }
        Ok(store)
    }
}
