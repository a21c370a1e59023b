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
    pub(super) fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `error` with the last connection error appended, when there is one
    /// and `error` does not already say it.
    pub(super) fn explain(&self, error: String) -> String {
        match self.get() {
            Some(cause) if !error.contains(&cause) => {
                format!("{error} (last connection error: {cause})")
            }
            _ => error,
        }
    }
}
