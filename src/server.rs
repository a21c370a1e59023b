//! The accept loop shared by the proxy and admin listeners.
//!
//! hyper-util's auto builder serves HTTP/1.1 and HTTP/2 (prior knowledge)
//! on each connection; HTTP/1 header reads are bounded by
//! `header_read_timeout` (slowloris). On shutdown the listener is dropped
//! first, so no new connection is accepted, then every open connection is
//! told to finish its in-flight requests and close, within the grace
//! period.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::pipeline::forward::ProxyBody;

/// Serves `handler` on `listener` until `shutdown` fires, then drains open
/// connections for at most `grace`.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    header_read_timeout: Duration,
    shutdown: CancellationToken,
    grace: Duration,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    loop {
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
            let response = handler(request, peer);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period");
    }
}
