//! The last connection error of the store's pool, so that a Redis that
//! refuses the connection itself (a TLS handshake that fails: an unknown
//! CA, a certificate for another name, a client certificate Redis requires
//! but did not get) says why at start-up and in `/readyz`, where a command
//! would only report that it timed out.
//!
//! fred reports connection errors on an event stream, not to the command
//! that waits for the connection; this listens to it for every client of
//! the pool and forgets the error once a connection succeeds.

use std::sync::{Arc, Mutex, PoisonError};

use fred::prelude::{EventInterface as _, Pool};

use crate::store::StoreError;

/// The pool's last connection error, until the next successful connection.
#[derive(Debug, Clone, Default)]
pub(super) struct LastError(Arc<Mutex<Option<String>>>);

impl LastError {
    /// Follows the connection events of every client of `pool` (tasks that
    /// end with the pool's event streams).
    pub(super) fn follow(pool: &Pool) -> Self {
        let last = Self::default();
        for client in pool.clients() {
            let on_error = last.clone();
            client.on_error(move |(error, _server)| {
                on_error.set(Some(error.to_string()));
                async { Ok(()) }
            });
            let on_reconnect = last.clone();
            client.on_reconnect(move |_server| {
                on_reconnect.set(None);
                async { Ok(()) }
            });
        }
        last
    }

    fn set(&self, error: Option<String>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// The error, if the last connection attempt failed.
    fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Start-up found no connection within its wait: an error naming the
    /// refusal when there was one (a TLS or authentication failure will
    /// not mend by itself), else a warning.
    pub(super) fn log_unreachable(&self) {
        match self.get() {
            Some(error) => tracing::error!(
                %error,
                "redis refused the connection; retrying in the background"
            ),
            None => tracing::warn!("redis is not reachable yet; retrying in the background"),
        }
    }

    /// An unavailable store's error with the last connection error
    /// appended, when there is one and the error does not already say it.
    pub(super) fn explain(&self, error: StoreError) -> StoreError {
        match (error, self.get()) {
            (StoreError::Unavailable(error), Some(cause)) if !error.contains(&cause) => {
                StoreError::Unavailable(format!("{error} (last connection error: {cause})"))
            }
            (error, _) => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inner message of an `Unavailable`, `None` for any other error.
    fn unavailable(error: StoreError) -> Option<String> {
        match error {
            StoreError::Unavailable(message) => Some(message),
            _ => None,
        }
    }

    #[test]
    fn explains_only_an_unavailable_store_and_only_once() {
        let last = LastError::default();
        let timeout = || StoreError::Unavailable("timed out".to_owned());
        assert_eq!(unavailable(last.explain(timeout())).unwrap(), "timed out");
        last.set(Some("AlertReceived(CertificateRequired)".to_owned()));
        let explained = unavailable(last.explain(timeout())).unwrap();
        assert_eq!(
            explained,
            "timed out (last connection error: AlertReceived(CertificateRequired))"
        );
        let again = last.explain(StoreError::Unavailable(explained.clone()));
        assert_eq!(unavailable(again).unwrap(), explained, "said once");
        let backend = last.explain(StoreError::Backend("NOSCRIPT".to_owned()));
        assert!(
            matches!(&backend, StoreError::Backend(m) if m == "NOSCRIPT"),
            "{backend:?}"
        );
        last.set(None);
        assert_eq!(unavailable(last.explain(timeout())).unwrap(), "timed out");
    }
}
