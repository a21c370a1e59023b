//! The accept loop shared by the proxy and admin listeners.
//!
//! hyper-util's auto builder serves HTTP/1.1 and HTTP/2 (prior knowledge)
//! on each connection. Resource limits, all from `[limits]`:
//!
//! * at most `max_connections` open connections: at the cap the loop stops
//!   accepting, so further connections wait in the kernel's listen backlog
//!   (they are not refused) until one closes;
//! * HTTP/1 request heads must arrive within `header_read_timeout`
//!   (slowloris). hyper starts that timer whenever a connection waits for a
//!   new request, so it is also the idle keep-alive timeout;
//! * at most `max_headers` header fields and `max_header_bytes` of head
//!   (hyper answers 431 beyond either).
//!
//! hyper's HTTP/1 parser refuses the classic request-smuggling shapes
//! (conflicting `Content-Length`/`Transfer-Encoding`, repeated or invalid
//! `Content-Length`, obs-fold, invalid header bytes) with 400 before any
//! handler runs; `tests/suite/hardening.rs` proves each one.
//!
//! On shutdown the listener is dropped first, so no new connection is
//! accepted, then every open connection is told to finish its in-flight
//! requests and close, within the grace period.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::body::ProxyBody;
use crate::config::Limits;

/// Serves `handler` on `listener` under `limits` until `shutdown` fires,
/// then drains open connections for at most `limits.shutdown_grace`.
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    limits: Limits,
    shutdown: CancellationToken,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(limits.max_headers)
        .max_buf_size(limits.max_header_bytes);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Out of file descriptors and the like: back off briefly.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = hyper::service::service_fn(move |request| {
            // Boxed once: the request future is large (every stage's state),
            // and hyper moves the service future around while polling it.
            let response = Box::pin(handler(request, peer));
            async move { Ok::<_, Infallible>(response.await) }
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period");
    }
}
