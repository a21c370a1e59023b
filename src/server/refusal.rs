//! A clear answer for a connection its peer has no share left for.
//!
//! A peer that already holds its share of `max_connections`
//! (`crate::peers`) gets no slot, but closing its next connection at once
//! would look to the sender like a network fault (a reset), not like the
//! back-pressure it is. So such a connection is answered instead: every
//! request on it gets 503 `over_capacity` with `Retry-After` and
//! `Connection: close`, the answer a sender already retries on.
//!
//! Answering must not hand the greedy peer what its share denies, so a
//! refused connection holds no slot. It holds one of a few refusal places
//! instead (as many as the connections kept for other peers) and lives at
//! most `header_read_timeout` plus [`CLOSE_GRACE`]; with every place taken,
//! a further connection is closed at once, as before.

use std::convert::Infallible;
use std::sync::Arc;

use http::header::{CONNECTION, HeaderValue};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::CLOSE_GRACE;
use crate::body::ProxyBody;
use crate::config::Limits;

/// Builds the refusal answer: a listener's own problem document, so its
/// `type` follows `problem_type_base`.
pub(crate) type Answer = Arc<dyn Fn() -> http::Response<ProxyBody> + Send + Sync>;

/// The places refused connections may take while they are answered.
#[derive(Clone)]
pub(crate) struct Refusals {
    places: Arc<Semaphore>,
    answer: Answer,
}

impl Refusals {
    /// `places` refused connections at once, each answered by `answer`.
    pub(crate) fn new(places: usize, answer: Answer) -> Self {
        Self {
            places: Arc::new(Semaphore::new(places.max(1))),
            answer,
        }
    }

    /// Answers `stream` in the background if a place is free; otherwise
    /// drops it (the peer sees the connection close).
    pub(crate) fn refuse(
        &self,
        builder: &Arc<auto::Builder<TokioExecutor>>,
        stream: TcpStream,
        limits: &Limits,
    ) {
        let Ok(place) = Arc::clone(&self.places).try_acquire_owned() else {
            return;
        };
        tokio::spawn(answer(
            Arc::clone(builder),
            stream,
            Arc::clone(&self.answer),
            limits.header_read_timeout + CLOSE_GRACE,
            place,
        ));
    }
}

/// Serves the refusal on `stream` for at most `lifetime`.
async fn answer(
    builder: Arc<auto::Builder<TokioExecutor>>,
    stream: TcpStream,
    answer: Answer,
    lifetime: std::time::Duration,
    _place: OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |_request| {
        let mut response = answer();
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    if let Ok(Err(error)) = tokio::time::timeout(lifetime, connection).await {
        tracing::debug!(error = %error, "refused connection ended with an error");
    }
}
