//! The words the pipeline's stages share, defined in one leaf every stage
//! may import: what enforce mode made of a request ([`Enforcement`]: an
//! end, or a request stopped by a rule with the [`Ruling`] enforce mode
//! answers it with), and how a request ends ([`Finished`], counted and
//! logged once; [`RequestEnd`]; the log line's [`Labels`], [`Origin`],
//! [`Settled`] and [`LogReason`]). What the words do lives with the stage
//! that does it: `report.rs` counts and logs, `shadow.rs` applies the
//! route's mode.

use std::net::SocketAddr;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::body::ProxyBody;
use crate::error::{Reason, Rejection};
use crate::extract::Inbound;
use crate::hot_keys::KeyId;
use crate::pipeline::metrics::Outcome;
use crate::record::{StoredResponse, TraceContext};

/// What enforce mode makes of a request to a protected route.
#[expect(
    clippy::large_enum_variant,
    reason = "built and moved once per request; boxing would allocate for every duplicate"
)]
pub(super) enum Enforcement {
    /// The same end in either mode.
    Ended(RequestEnd),
    /// Stopped by a rule: enforce mode answers with the ruling, shadow
    /// mode sends the request on.
    Stopped {
        ruling: Ruling,
        request: StoppedRequest,
    },
}

impl From<Finished> for Enforcement {
    fn from(finished: Finished) -> Self {
        Self::Ended(finished.into())
    }
}

/// What enforce mode answers a stopped request with.
pub(super) enum Ruling {
    /// This rejection.
    Refuse(Rejection),
    /// An answer idemgate gives in the handler's place although the
    /// request is refused (a discrepancy acknowledged so the sender stops,
    /// `crate::pipeline::admit::entity`): counted as a rejection for `noted`.
    Acknowledge {
        /// The acknowledgement.
        answer: StoredResponse,
        /// The rejection it stands for.
        noted: Reason,
    },
    /// The first delivery's stored answer, stored at `answered_at_ms`.
    Replay {
        /// The answer.
        answer: StoredResponse,
        /// When it was stored (unix ms): the replay's `Age`.
        answered_at_ms: u64,
    },
}

/// A stopped request, as shadow mode sends it on.
pub(super) enum StoppedRequest {
    /// Stage 1 could not settle its path: the body is still unread and is
    /// streamed on as it is.
    Unread(Request<Incoming>),
    /// Refused before the claim (verify, guard, identify): not known to be a
    /// duplicate.
    Unclaimed(Inbound),
    /// The claim found a record: a duplicate.
    Duplicate(Inbound),
}

/// The `reason=` of a request's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LogReason {
    /// A rejection, enforced or (in shadow mode) the one enforce would
    /// have made: counted in `idemgate_rejections_total`.
    Rejection(Reason),
    /// A replay whose first answer was not stored: logged, but not counted
    /// as a rejection (the delivery was processed).
    AnswerNotStored,
}

/// How a request's claim was settled, as its log line says (`settled=`).
///
/// The rule: it is what the store held for the key when the sender was
/// answered, that is after the one store attempt made before answering
/// ([`crate::pipeline::Forwarder::settle_once`]). Retries that store an answer later
/// ([`crate::pipeline::Forwarder::keep_storing`]) log their own end on a line of
/// their own; the request line keeps saying what the first attempt did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Settled {
    /// No claim was taken: refused before or at the claim, a replay or a
    /// refused duplicate, passthrough, shadow mode's sends, or a
    /// fail-open store outage.
    #[default]
    NotClaimed,
    /// The answer was stored: duplicates get it replayed.
    Stored,
    /// The claim was released (or had already lapsed): the next delivery
    /// runs again.
    Released,
    /// The key holds no stored answer and was not released: an outcome
    /// recorded as unknown (upstream timeout with `on_upstream_timeout =
    /// "hold"`), a release or store attempt that failed (retries may store
    /// the answer later), or a claim lost before its answer was stored.
    Unknown,
    /// Queued in the route's inbox; the sender got the ack.
    Queued,
    /// Held in the route's inbox behind its busy entity, not forwarded
    /// yet; the sender got the ack.
    Held,
}

/// What a request's log line says about the delivery, once it is known.
#[derive(Debug, Clone, Default)]
pub(super) struct Labels {
    /// The key hash the admin API takes.
    pub(super) key_hash: Option<String>,
    /// The key `key_hash` spells, for the route's hot keys.
    pub(super) key_digest: Option<KeyId>,
    /// Index of the secret that verified the delivery.
    pub(super) secret_index: Option<usize>,
    /// A duplicate's first delivery's trace context, from its record.
    pub(super) first_trace: Option<TraceContext>,
}

/// Where a request came from and when, known from its first byte: the
/// log line's `method`, `path`, `peer` and latency.
#[derive(Debug, Clone)]
pub(super) struct Origin {
    /// The canonical method for a routed request, else as sent.
    pub(super) method: Method,
    /// The canonical path stage 1 computed, else the path as sent; never
    /// the query.
    pub(super) path: String,
    /// The sender's socket address.
    pub(super) peer: Option<SocketAddr>,
    /// When the request arrived.
    pub(super) started: Instant,
}

/// How one request ended, not yet counted and logged. [`Finished::record`]
/// consumes it, so no request is counted twice.
pub(super) struct Finished {
    pub(super) outcome: Outcome,
    pub(super) response: Response<ProxyBody>,
    pub(super) reason: Option<LogReason>,
    pub(super) labels: Labels,
    /// The upstream's status, when the request was forwarded and answered.
    pub(super) upstream_status: Option<u16>,
    /// How its claim was settled, as the log line says.
    pub(super) settled: Settled,
}

/// A request's end as `handle` receives it.
pub(super) enum RequestEnd {
    /// Still to be counted and logged.
    Unrecorded(Finished),
    /// Counted and logged already, by a detached first delivery (so a
    /// sender's hang-up can not lose the count): only the answer is left.
    Recorded(Response<ProxyBody>),
}

impl From<Finished> for RequestEnd {
    fn from(finished: Finished) -> Self {
        Self::Unrecorded(finished)
    }
}
