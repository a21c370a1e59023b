//! Upstream connections that acknowledge the backend's answer at once.
//!
//! Some handlers idemgate protects write an answer's head and body in two
//! `send` calls with Nagle's algorithm on (Python's `http.server` does): the
//! body then waits in the backend's kernel until the head is acknowledged.
//! On a fresh connection Linux acknowledges at once, but on a kept-alive
//! one, which sends a request after every answer, the kernel settles into
//! delayed acknowledgements (40 ms or more).
//! Behind idemgate's pooled upstream connections every first delivery to
//! such a backend took ~44 ms where the same backend answered a fresh
//! connection in under 1 ms (measured on loopback, `bench/RESULTS.md`).
//!
//! The fix is `TCP_QUICKACK`, re-armed after each write to the upstream
//! (the kernel leaves quick-ack mode again on its own): the backend's head
//! is acknowledged when idemgate reads it, and the body follows without
//! waiting. It costs one `setsockopt` per request written and one extra ACK
//! segment per answer, so a connection switches it on only once it has seen
//! the stall's signature: two reads of one answer more than [`STALL_GAP`]
//! apart. A backend that sends its answer in one write (nginx, most
//! servers) never pays; one that splits it pays one stall per pooled
//! connection, then none.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// [`HttpConnector`] whose connections switch to quick ACKs when their
/// backend needs them (module docs).
#[derive(Debug, Clone)]
pub(crate) struct QuickAckConnector {
    inner: HttpConnector,
}

impl QuickAckConnector {
    /// Wraps a configured connector.
    pub(crate) fn new(inner: HttpConnector) -> Self {
        Self { inner }
    }
}

/// A gap between two reads of one answer that only a delayed ACK explains
/// on a connection to a local backend: Linux delays ACKs by at least 40 ms.
pub(crate) const STALL_GAP: Duration = Duration::from_millis(25);

/// A connection made by [`QuickAckConnector`].
#[derive(Debug)]
pub(crate) struct QuickAckStream {
    io: TokioIo<TcpStream>,
    /// Set for good once a stall was seen: re-arm after every write.
    quick_ack: bool,
    /// When the current answer's last read returned, if any read did since
    /// the last request was written.
    last_read: Option<Instant>,
}

impl QuickAckStream {
    fn new(io: TokioIo<TcpStream>) -> Self {
        Self {
            io,
            quick_ack: false,
            last_read: None,
        }
    }

    /// Asks the kernel to acknowledge the next segments immediately. A
    /// failure only loses the optimisation (the next segments are
    /// acknowledged with the usual delay), so it is noted at debug level.
    fn rearm(&self) {
        if let Err(error) = socket2::SockRef::from(self.io.inner()).set_tcp_quickack(true) {
            tracing::debug!(%error, "TCP_QUICKACK not set: acknowledgements stay delayed");
        }
    }

    /// A write that sent something starts a new answer to watch.
    fn after_write(&mut self, written: &Poll<io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.last_read = None;
            if self.quick_ack {
                self.rearm();
            }
        }
    }

    /// Two reads of one answer [`STALL_GAP`] apart: the backend's kernel
    /// held the rest of the answer for our ACK. Switch quick ACKs on.
    fn after_read(&mut self, read: &Poll<io::Result<()>>) {
        if self.quick_ack || !matches!(read, Poll::Ready(Ok(()))) {
            return;
        }
        let now = Instant::now();
        if self
            .last_read
            .is_some_and(|previous| now.duration_since(previous) > STALL_GAP)
        {
            self.quick_ack = true;
            self.rearm();
        }
        self.last_read = Some(now);
    }
}

type Connecting =
    Pin<Box<dyn Future<Output = Result<QuickAckStream, ConnectError>> + Send + 'static>>;
type ConnectError = <HttpConnector as tower_service::Service<Uri>>::Error;

impl tower_service::Service<Uri> for QuickAckConnector {
    type Response = QuickAckStream;
    type Error = ConnectError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        Box::pin(async move { connecting.await.map(QuickAckStream::new) })
    }
}

impl Read for QuickAckStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        self.after_read(&read);
        read
    }
}

impl Write for QuickAckStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after_write(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connection for QuickAckStream {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn stream() -> (QuickAckStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (QuickAckStream::new(TokioIo::new(client)), server)
    }

    const WROTE: Poll<io::Result<usize>> = Poll::Ready(Ok(64));
    const READ: Poll<io::Result<()>> = Poll::Ready(Ok(()));

    /// A request goes out and the first bytes of its answer come back.
    fn request_and_first_read(conn: &mut QuickAckStream) {
        conn.after_write(&WROTE);
        conn.after_read(&READ);
    }

    #[tokio::test]
    async fn an_answer_read_without_a_gap_leaves_quick_acks_off() {
        let (mut conn, _server) = stream().await;
        for _ in 0..3 {
            request_and_first_read(&mut conn);
            conn.after_read(&READ);
            conn.after_read(&Poll::Pending);
        }
        assert!(!conn.quick_ack);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_between_answers_is_not_a_stall() {
        let (mut conn, _server) = stream().await;
        request_and_first_read(&mut conn);
        tokio::time::advance(STALL_GAP * 2).await;
        request_and_first_read(&mut conn);
        assert!(!conn.quick_ack, "a new request starts a new answer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gap_inside_one_answer_switches_quick_acks_on_for_good() {
        let (mut conn, _server) = stream().await;
        request_and_first_read(&mut conn);
        tokio::time::advance(STALL_GAP * 2).await;
        conn.after_read(&READ);
        assert!(conn.quick_ack);
        request_and_first_read(&mut conn);
        assert!(conn.quick_ack);
        let armed = socket2::SockRef::from(conn.io.inner())
            .tcp_quickack()
            .unwrap();
        assert!(armed, "TCP_QUICKACK is set on the socket");
    }
}
