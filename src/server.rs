//! The accept loop shared by the proxy and admin listeners.
//!
//! hyper-util's auto builder serves HTTP/1.1 and HTTP/2 (prior knowledge)
//! on each connection. Resource limits, all from `[limits]`:
//!
//! * at most `max_connections` open connections: at the cap the loop stops
//!   accepting, so further connections wait in the kernel's listen backlog
//!   (they are not refused) until one closes; one client address may hold
//!   at most its share of them (`crate::peers`), beyond which a connection
//!   is answered 503 `over_capacity` without taking a slot ([`refusal`]).
//!   The admin listener instead ([`Crowding::EvictSilent`]) has no shares
//!   and, when full, closes the oldest connection that has not yet sent a
//!   request head for each new one ([`silent`]): its clients speak at
//!   once, so a flood of idle sockets can not keep a liveness probe out;
//! * every connection must start its first request within
//!   `header_read_timeout` of accept, and is closed after `idle_timeout`
//!   with no request open ([`progress`]): a silent socket, an HTTP/2
//!   preface with nothing after it or an idle keep-alive connection can not
//!   hold a slot. Closing is graceful first (HTTP/2 GOAWAY, HTTP/1 close
//!   after the current exchange) and forced [`CLOSE_GRACE`] later;
//! * HTTP/1 request heads must also arrive within `header_read_timeout`
//!   once hyper starts reading them (slowloris);
//! * at most `max_headers` header fields and `max_header_bytes` of head
//!   (hyper answers 431 beyond either; HTTP/2 header lists likewise);
//! * HTTP/2 streams per connection are tied to the body budget: at most
//!   `max_buffered_bytes / max_body_bytes` (1 to 100), with flow-control
//!   windows of [`STREAM_WINDOW`] per stream and [`CONNECTION_WINDOW`] per
//!   connection, so one connection can not park more bodies than the
//!   budget holds (`crate::budget` bounds the bytes themselves).
//!
//! hyper's HTTP/1 parser refuses the classic request-smuggling shapes
//! (conflicting `Content-Length`/`Transfer-Encoding`, repeated or invalid
//! `Content-Length`, obs-fold, invalid header bytes) with 400 before any
//! handler runs; `tests/suite/hardening.rs` proves each one.
//!
//! On shutdown the listener is dropped first, so no new connection is
//! accepted, then every open connection is told to finish its in-flight
//! requests and close, within the grace period.

mod progress;
mod refusal;
mod silent;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::body::ProxyBody;
use crate::config::Limits;
use crate::peers::{PeerHold, PeerShares, Resource};
use progress::{Bounds, Open, Progress};
pub(crate) use refusal::Answer;
use refusal::Refusals;
use silent::{Silent, Waiting};

/// How long a connection told to close for idleness may take to do so
/// before it is dropped: long enough for a GOAWAY or a `Connection: close`
/// to reach a cooperative peer, short enough that a peer which ignores it
/// frees its slot promptly.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// HTTP/2 flow-control window per stream: what a peer may send on one
/// stream before idemgate has read it.
pub(crate) const STREAM_WINDOW: u32 = 256 * 1024;

/// HTTP/2 flow-control window per connection, across its streams.
pub(crate) const CONNECTION_WINDOW: u32 = 1024 * 1024;

/// Streams per HTTP/2 connection at most, however large the budget.
const MOST_STREAMS: u64 = 100;

/// Concurrent HTTP/2 streams one connection may open: as many full-size
/// bodies as the process-wide budget holds, between 1 and
/// [`MOST_STREAMS`].
pub(crate) fn streams_per_connection(limits: &Limits) -> u32 {
    let bodies = limits.max_buffered_bytes / limits.max_body_bytes.max(1);
    u32::try_from(bodies.clamp(1, MOST_STREAMS)).unwrap_or(1)
}

/// The two ends of the connection a request came on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addrs {
    /// The client's address.
    pub(crate) peer: SocketAddr,
    /// The address it connected to (a listener on `0.0.0.0` knows which
    /// of its addresses only per connection): what the admin listener
    /// accepts in `Host` without being told.
    pub(crate) local: Option<SocketAddr>,
}

/// What a listener does when connections crowd it.
#[derive(Clone)]
pub(crate) enum Crowding {
    /// The proxy: one peer holds at most its share of `max_connections`
    /// (beyond it, a connection is answered with this 503); at the cap new
    /// connections wait in the kernel's backlog.
    Share(Answer),
    /// The admin listener: no shares; when every slot is taken, a new
    /// connection closes the oldest one that has not yet sent a request
    /// head ([`silent`]), so a flood of idle sockets can not keep a
    /// liveness probe or a scrape out.
    EvictSilent,
}

/// Serves `handler` on `listener` under `limits` until `shutdown` fires,
/// then drains open connections for at most `limits.shutdown_grace`;
/// `crowding` says how a crowd of connections is met.
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    crowding: Crowding,
    limits: Limits,
    shutdown: CancellationToken,
) where
    H: Fn(Request<Incoming>, Addrs) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let builder = Arc::new(builder(&limits));
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let shares = PeerShares::new(Resource::Connections, limits.max_connections);
    let refusals = match &crowding {
        Crowding::Share(over_share) => Some(Refusals::new(
            crate::peers::left_to_others(limits.max_connections),
            Arc::clone(over_share),
        )),
        Crowding::EvictSilent => None,
    };
    let silent = Arc::new(Silent::default());
    loop {
        // Sharing: a slot before accepting, so a full listener leaves new
        // connections in the backlog. Evicting: after, making room.
        let early = match crowding {
            Crowding::Share(_) => tokio::select! {
                () = shutdown.cancelled() => break,
                slot = Arc::clone(&slots).acquire_owned() => Some(slot.expect("the semaphore is never closed")),
            },
            Crowding::EvictSilent => None,
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
        let slot = match early {
            Some(slot) => slot,
            None => match room(&slots, &silent, &shutdown).await {
                Some(slot) => slot,
                None => break,
            },
        };
        // No one peer may hold every connection (`crate::peers`).
        let mut share = shares.hold(peer.ip());
        let waiting = match &refusals {
            Some(refusals) => {
                if !share.grow(1) {
                    tracing::debug!(%peer, "connection refused: its peer holds its share of max_connections");
                    drop(slot);
                    refusals.refuse(&builder, stream, &limits);
                    continue;
                }
                None
            }
            None => Some(silent.enter()),
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on an accepted connection");
        }
        connections.spawn(connection(
            Arc::clone(&builder),
            stream,
            peer,
            handler.clone(),
            Accepted {
                slot,
                share,
                waiting,
                limits: limits.clone(),
                shutdown: shutdown.clone(),
            },
        ));
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(limits.shutdown_grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period");
    }
}

/// A slot for a connection just accepted by an evicting listener: a free
/// one, or the one the oldest silent connection gives back when told to
/// close (waited for, like any slot, when none is silent); `None` on
/// shutdown.
async fn room(
    slots: &Arc<Semaphore>,
    silent: &Silent,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = Arc::clone(slots).try_acquire_owned() {
        return Some(slot);
    }
    if silent.evict_oldest() {
        tracing::debug!("listener full: the oldest silent connection is closed to make room");
    }
    tokio::select! {
        () = shutdown.cancelled() => None,
        slot = Arc::clone(slots).acquire_owned() => Some(slot.expect("the semaphore is never closed")),
    }
}

/// The hyper builder every connection of a listener is served with.
fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(limits.max_headers)
        .max_buf_size(limits.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(streams_per_connection(limits))
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// What a connection takes from the accept loop: its slot (freed when it
/// ends), the limits and the shutdown signal.
struct Accepted {
    slot: OwnedSemaphorePermit,
    /// Its place in its peer's share of the connections.
    share: PeerHold,
    /// On an evicting listener, its place among the silent connections.
    waiting: Option<Waiting>,
    limits: Limits,
    shutdown: CancellationToken,
}

/// Why a connection is being closed by idemgate rather than by its peer.
#[derive(Debug, Clone, Copy)]
enum Closing {
    /// No request within the bounds of [`progress`].
    Stalled,
    /// idemgate is shutting down.
    Shutdown,
    /// Silent on a full evicting listener: closed to make room.
    Evicted,
}

/// Serves one connection until it ends, it stalls, or shutdown, and frees
/// its slot.
async fn connection<H, F>(
    builder: Arc<auto::Builder<TokioExecutor>>,
    stream: TcpStream,
    peer: SocketAddr,
    handler: H,
    accepted: Accepted,
) where
    H: Fn(Request<Incoming>, Addrs) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let Accepted {
        slot,
        share,
        waiting,
        limits,
        shutdown,
    } = accepted;
    let waiting = waiting.map(Arc::new);
    let addrs = Addrs {
        peer,
        local: stream.local_addr().ok(),
    };
    let progress = Progress::accepted();
    let service = {
        let progress = Arc::clone(&progress);
        let waiting = waiting.clone();
        hyper::service::service_fn(move |request| {
            if let Some(waiting) = &waiting {
                waiting.spoke();
            }
            let open = progress.open();
            // Boxed once: the request future is large (every stage's state),
            // and hyper moves the service future around while polling it.
            let response = Box::pin(handler(request, addrs));
            async move {
                let response = response.await;
                Ok::<_, Infallible>(response.map(|body| Watched { body, _open: open }))
            }
        })
    };
    let bounds = Bounds {
        first_request: limits.header_read_timeout,
        idle: limits.idle_timeout,
    };
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let closing = tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
            return;
        }
        () = progress.stalled(bounds) => Closing::Stalled,
        () = shutdown.cancelled() => Closing::Shutdown,
        () = evicted(waiting.as_deref()) => Closing::Evicted,
    };
    if let Closing::Evicted = closing {
        tracing::debug!(%peer, "silent connection closed to make room");
        drop((slot, share));
        return;
    }
    connection.as_mut().graceful_shutdown();
    let grace = match closing {
        Closing::Stalled | Closing::Evicted => CLOSE_GRACE,
        Closing::Shutdown => limits.shutdown_grace,
    };
    if tokio::time::timeout(grace, connection).await.is_err() {
        tracing::debug!(%peer, ?closing, "connection dropped: it did not close in time");
    }
    drop((slot, share));
}

/// Resolves when `waiting` is evicted; never without one.
async fn evicted(waiting: Option<&Waiting>) {
    match waiting {
        Some(waiting) => waiting.evicted().await,
        None => std::future::pending().await,
    }
}

/// An answer's body that keeps its request open ([`Open`]) until hyper has
/// written it all or given up on it, so a long streamed answer is not
/// taken for an idle connection.
struct Watched {
    body: ProxyBody,
    _open: Open,
}

impl Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn limits(body: u64, buffered: u64) -> Limits {
        let mut limits = Config::parse(crate::config::tests::MINIMAL).unwrap().limits;
        limits.max_body_bytes = body;
        limits.max_buffered_bytes = buffered;
        limits
    }

    #[test]
    fn streams_per_connection_are_the_bodies_the_budget_holds() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(streams_per_connection(&limits(MIB, 64 * MIB)), 64);
        assert_eq!(streams_per_connection(&limits(MIB, MIB)), 1);
        assert_eq!(streams_per_connection(&limits(64 * 1024, 64 * MIB)), 100);
        assert_eq!(streams_per_connection(&limits(MIB, 3 * MIB / 2)), 1);
    }
}
