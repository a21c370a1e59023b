//! The last connection error of the store's pool, so that a Redis that
//! refuses the connection itself (a TLS handshake that fails: an unknown
//! CA, a certificate for another name, a client certificate Redis requires
//! but did not get) says why at start-up and in `/readyz`, where a command
//! would only report that it timed out.
//!
//! fred reports connection errors on an event stream, not to the command
//! that waits for the connection; this listens to it for every client of
//! the pool and forgets the error once a connection succeeds.
//!
//! A `rediss://` URL pointed at a plain (non-TLS) port fails in a way
//! fred only reports as a timeout: the server waits for a command line
//! that the TLS greeting never ends. So a failed TLS connection asks that
//! port once in plain RESP (`PING`), and a server that answers is named
//! as one that speaks no TLS there.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fred::prelude::{EventInterface as _, Pool, Server};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::store::StoreError;

/// What a plain port behind a TLS URL is called.
const PLAIN_PORT: &str = "answers plain Redis, not TLS";

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
                on_error.failed(error.to_string());
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

    /// A failed connection attempt: its error, unless it is the timeout a
    /// plain port behind a TLS URL gives, already named better.
    fn failed(&self, error: String) {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let named = last.as_deref().is_some_and(|l| l.contains(PLAIN_PORT));
        if !(named && error.contains("Timeout")) {
            *last = Some(error);
        }
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
    /// not mend by itself), else a warning. `tls_hosts` are the URL's
    /// hosts when it asks for TLS: one that answers plain RESP is named
    /// (module docs), here and in `/readyz` until a connection succeeds.
    pub(super) async fn log_unreachable(&self, tls_hosts: &[Server]) {
        for server in tls_hosts {
            if speaks_plain_resp(server).await {
                self.set(Some(format!(
                    "{}:{} {PLAIN_PORT}, but the URL says rediss://: use redis://, or the \
                     server's tls-port",
                    server.host, server.port
                )));
                break;
            }
        }
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

/// Whether `server` answers a plain `PING` with a RESP reply (`+PONG`, or
/// an error such as `-NOAUTH`): a port without TLS. Bounded to 500 ms.
async fn speaks_plain_resp(server: &Server) -> bool {
    let address = format!("{}:{}", server.host, server.port);
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(&address).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 8];
        let read = stream.read(&mut reply).await.ok()?;
        Some(read > 0 && matches!(reply[0], b'+' | b'-'))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), ask).await,
        Ok(Some(true))
    )
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

    #[test]
    fn a_named_plain_port_outlives_the_timeouts_it_causes() {
        let last = LastError::default();
        last.set(Some(format!("127.0.0.1:6379 {PLAIN_PORT}")));
        last.failed("Timeout Error: Request timed out.".to_owned());
        assert!(last.get().unwrap().contains(PLAIN_PORT));
        last.failed("IO Error: connection refused".to_owned());
        assert_eq!(last.get().unwrap(), "IO Error: connection refused");
    }
}
