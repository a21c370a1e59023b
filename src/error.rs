//! The one table that turns a refusal into an HTTP answer.
//!
//! Every stage of the pipeline that refuses a request returns a
//! [`Rejection`]. This module alone decides the status code, the `reason`
//! word (shared with the `idemgate_rejections_total` metric label) and the
//! RFC 9457 `application/problem+json` body. Nothing here ever echoes a
//! secret, a signature or request body content: the `detail` texts are fixed
//! strings chosen per variant, plus at most a configured key name or a
//! declared entity state (`[route.entity]`; only declared values match).
//!
//! The admin API's refusals are rows of the same table ([`AdminReason`]),
//! and every document's `type` is the operator's `problem_type_base`
//! followed by the reason word ([`ProblemTypes`]). docs/problems.md lists
//! every row; a test keeps it complete.

mod admin;
mod problem;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::body::ProxyBody;

pub use admin::AdminReason;
pub use problem::{PROBLEM_JSON, ProblemBaseError, ProblemTypes};

/// Why idemgate itself answered instead of the upstream.
///
/// The variants mirror the table of contract §3 one to one. Keeping them in one enum means one match decides
/// every status, reason and problem text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No route matched and `unmatched = "reject"`.
    #[error("no route matches this request")]
    RouteNotFound,
    /// The path or method is a spelling of a protected route that the
    /// canonical form can not settle (`/notify.json`, `/notify%20`, an
    /// encoded `/`): refused rather than passed through unverified.
    #[error(
        "path or method may reach a protected route under another spelling; send it as the route's own path"
    )]
    PathAmbiguous,
    /// Query parameters beside a signed body that the signature does not
    /// cover and the backend could read in place of signed ones (contract §4
    /// rule 12).
    #[error(
        "query parameters are not covered by the signature of this body; send the notification to a URL without them"
    )]
    UnsignedParameters,
    /// The body is larger than `limits.max_body_bytes`.
    #[error("request body exceeds the configured limit")]
    BodyTooLarge,
    /// The body did not arrive within `limits.body_read_timeout`.
    #[error("request body not received in time")]
    BodyTimeout,
    /// Buffering this body would take idemgate over
    /// `limits.max_buffered_bytes` (bodies of all requests at once).
    #[error("too many request bodies are being received at once; retry shortly")]
    OverCapacity,
    /// This client address already holds its share of
    /// `limits.max_connections` (`crate::peers`); the rest is kept for
    /// other senders.
    #[error("this client address holds its share of the connections; retry shortly")]
    PeerOverShare,
    /// A signature is required but none was found where the route looks.
    #[error("signature missing")]
    SignatureMissing,
    /// No configured secret produces the presented signature.
    #[error("signature invalid")]
    SignatureInvalid,
    /// The route checks a timestamp but none was found or it is not digits.
    #[error("timestamp missing or unparsable")]
    TimestampMissing,
    /// The timestamp lies outside the route's tolerance window.
    #[error("timestamp outside the allowed window")]
    TimestampOutOfWindow,
    /// A required part of the idempotency key is absent.
    #[error("idempotency key part {0} missing")]
    KeyMissing(String),
    /// A key part is empty, longer than 255 bytes or a malformed sf-string.
    #[error("idempotency key part {0} invalid")]
    KeyInvalid(String),
    /// The body could not be parsed as JSON or form data where a selector needs it.
    #[error("request body could not be parsed as {0}")]
    BadRequestBody(&'static str),
    /// A guarded business field is absent or holds a value outside the
    /// route's whitelist (named by its selector).
    #[error("field {0} missing or not an allowed value")]
    FieldInvalid(String),
    /// A field a selector reads has a rival spelling the handler's stack
    /// could read instead (a JSON key differing only in case, a form name
    /// PHP files under the same name); named by its selector.
    #[error(
        "field {0} is ambiguous: the body also carries a spelling the handler could read in its place"
    )]
    FieldAmbiguous(String),
    /// The key was used before for a request with a different fingerprint.
    #[error("idempotency key reused with a different request")]
    FingerprintMismatch,
    /// The delivery's entity may not change to the state it announces
    /// (`[route.entity]`, `on_refused = "conflict"`): a regression, or a
    /// change out of a terminal state. It never reached the handler.
    #[error("transition from {from} to {to} is not allowed")]
    TransitionRefused {
        /// The entity's current state (`none`: no state yet).
        from: String,
        /// The state the delivery announced.
        to: String,
    },
    /// The first delivery of this key is still being processed.
    #[error("first delivery still in flight")]
    InFlight {
        /// Seconds the sender should wait before retrying.
        retry_after: Duration,
    },
    /// The first delivery's outcome is unknown (upstream timed out or was cut).
    #[error("first delivery outcome unknown")]
    OutcomeUnknown {
        /// Seconds until the hold ends, as far as the store knows.
        retry_after: Duration,
    },
    /// The store is unreachable and the route fails closed.
    #[error("idempotency store unavailable")]
    StoreUnavailable {
        /// Seconds the sender should wait before retrying.
        retry_after: Duration,
    },
    /// The upstream refused or reset the connection.
    #[error("upstream connection failed")]
    UpstreamError,
    /// The upstream did not answer within `upstream.timeout`.
    #[error("upstream timed out")]
    UpstreamTimeout,
}

/// The `reason` word of a [`Rejection`]: the `reason` member of its problem
/// document and the closed label set of `idemgate_rejections_total`.
///
/// Metrics index their counters by discriminant, so [`Reason::ALL`]
/// follows the declaration order; contract §3 lists every reason in
/// pipeline order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The body exceeds `limits.max_body_bytes`.
    BodyTooLarge,
    /// The body did not arrive within `limits.body_read_timeout`.
    BodyTimeout,
    /// No signature where the route looks for one.
    SignatureMissing,
    /// No configured secret produces the presented signature.
    SignatureInvalid,
    /// The signed timestamp is absent or not digits.
    TimestampMissing,
    /// The signed timestamp lies outside the tolerance window.
    TimestampOutOfWindow,
    /// A required idempotency key part is absent.
    KeyMissing,
    /// An idempotency key part is empty, too long or malformed.
    KeyInvalid,
    /// The body could not be parsed where a selector needs it.
    BadRequestBody,
    /// A guarded business field is absent or outside its whitelist.
    FieldInvalid,
    /// The key was used before for a different request.
    FingerprintMismatch,
    /// The entity's state machine forbids the announced change.
    TransitionRefused,
    /// The first delivery of this key is still being processed.
    InFlight,
    /// The first delivery's outcome is unknown.
    OutcomeUnknown,
    /// The idempotency store is unreachable and the route fails closed.
    StoreUnavailable,
    /// The upstream refused or reset the connection.
    UpstreamError,
    /// The upstream did not answer in time.
    UpstreamTimeout,
    /// No route matched and `unmatched = "reject"`.
    RouteNotFound,
    /// Another spelling of a protected route's path or method.
    PathAmbiguous,
    /// Unsigned query parameters beside a signed body.
    UnsignedParameters,
    /// The buffered-body budget is spent.
    OverCapacity,
    /// A read field has a rival spelling.
    FieldAmbiguous,
}

impl Reason {
    /// Every reason, for pre-registering label sets.
    pub const ALL: [Self; 22] = [
        Self::BodyTooLarge,
        Self::BodyTimeout,
        Self::SignatureMissing,
        Self::SignatureInvalid,
        Self::TimestampMissing,
        Self::TimestampOutOfWindow,
        Self::KeyMissing,
        Self::KeyInvalid,
        Self::BadRequestBody,
        Self::FieldInvalid,
        Self::FingerprintMismatch,
        Self::TransitionRefused,
        Self::InFlight,
        Self::OutcomeUnknown,
        Self::StoreUnavailable,
        Self::UpstreamError,
        Self::UpstreamTimeout,
        Self::RouteNotFound,
        Self::PathAmbiguous,
        Self::UnsignedParameters,
        Self::OverCapacity,
        Self::FieldAmbiguous,
    ];

    /// The HTTP status idemgate answers with for this reason: one status
    /// per reason, so the metrics can tell from the reasons alone which
    /// status classes a rejection can produce (`status_class`).
    pub fn status(self) -> StatusCode {
        match self {
            Self::RouteNotFound => StatusCode::NOT_FOUND,
            Self::PathAmbiguous
            | Self::UnsignedParameters
            | Self::KeyMissing
            | Self::KeyInvalid
            | Self::BadRequestBody
            | Self::FieldInvalid
            | Self::FieldAmbiguous => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::OverCapacity | Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::SignatureMissing
            | Self::SignatureInvalid
            | Self::TimestampMissing
            | Self::TimestampOutOfWindow => StatusCode::UNAUTHORIZED,
            Self::FingerprintMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InFlight | Self::OutcomeUnknown | Self::TransitionRefused => StatusCode::CONFLICT,
            Self::UpstreamError => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The reason word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BodyTooLarge => "body_too_large",
            Self::BodyTimeout => "body_timeout",
            Self::SignatureMissing => "signature_missing",
            Self::SignatureInvalid => "signature_invalid",
            Self::TimestampMissing => "timestamp_missing",
            Self::TimestampOutOfWindow => "timestamp_out_of_window",
            Self::KeyMissing => "key_missing",
            Self::KeyInvalid => "key_invalid",
            Self::BadRequestBody => "bad_request_body",
            Self::FieldInvalid => "field_invalid",
            Self::FingerprintMismatch => "fingerprint_mismatch",
            Self::TransitionRefused => "transition_refused",
            Self::InFlight => "in_flight",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::StoreUnavailable => "store_unavailable",
            Self::UpstreamError => "upstream_error",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::RouteNotFound => "route_not_found",
            Self::PathAmbiguous => "path_ambiguous",
            Self::UnsignedParameters => "unsigned_parameters",
            Self::OverCapacity => "over_capacity",
            Self::FieldAmbiguous => "field_ambiguous",
        }
    }
}

/// Everything the wire and the metrics need to know about one rejection.
struct Row {
    status: StatusCode,
    reason: Reason,
    title: &'static str,
}

impl Rejection {
    fn row(&self) -> Row {
        let (reason, title) = match self {
            Self::RouteNotFound => (Reason::RouteNotFound, "No route"),
            Self::PathAmbiguous => (
                Reason::PathAmbiguous,
                "Ambiguous spelling of a protected route",
            ),
            Self::UnsignedParameters => (
                Reason::UnsignedParameters,
                "Parameters outside the signed content",
            ),
            Self::BodyTooLarge => (Reason::BodyTooLarge, "Request body too large"),
            Self::BodyTimeout => (Reason::BodyTimeout, "Request body too slow"),
            Self::OverCapacity | Self::PeerOverShare => (Reason::OverCapacity, "Over capacity"),
            Self::SignatureMissing => (Reason::SignatureMissing, "Signature missing"),
            Self::SignatureInvalid => (Reason::SignatureInvalid, "Signature invalid"),
            Self::TimestampMissing => (Reason::TimestampMissing, "Timestamp missing"),
            Self::TimestampOutOfWindow => (
                Reason::TimestampOutOfWindow,
                "Timestamp outside the allowed window",
            ),
            Self::KeyMissing(_) => (Reason::KeyMissing, "Idempotency key missing"),
            Self::KeyInvalid(_) => (Reason::KeyInvalid, "Idempotency key invalid"),
            Self::BadRequestBody(_) => (Reason::BadRequestBody, "Request body unparsable"),
            Self::FieldInvalid(_) => (Reason::FieldInvalid, "Field value not allowed"),
            Self::FieldAmbiguous(_) => (Reason::FieldAmbiguous, "Field ambiguous"),
            Self::FingerprintMismatch => (
                Reason::FingerprintMismatch,
                "Idempotency key reused for a different request",
            ),
            Self::TransitionRefused { .. } => {
                (Reason::TransitionRefused, "State transition not allowed")
            }
            Self::InFlight { .. } => (Reason::InFlight, "First delivery still in flight"),
            Self::OutcomeUnknown { .. } => (
                Reason::OutcomeUnknown,
                "Outcome of the first delivery unknown",
            ),
            Self::StoreUnavailable { .. } => {
                (Reason::StoreUnavailable, "Idempotency store unavailable")
            }
            Self::UpstreamError => (Reason::UpstreamError, "Upstream connection failed"),
            Self::UpstreamTimeout => (Reason::UpstreamTimeout, "Upstream timed out"),
        };
        Row {
            status: reason.status(),
            reason,
            title,
        }
    }

    /// The HTTP status of this rejection.
    pub fn status(&self) -> StatusCode {
        self.row().status
    }

    /// The machine-readable reason: the `reason` member of the problem body
    /// and the `reason` label of `idemgate_rejections_total`.
    pub fn reason(&self) -> Reason {
        self.row().reason
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::InFlight { retry_after }
            | Self::OutcomeUnknown { retry_after }
            | Self::StoreUnavailable { retry_after } => Some(*retry_after),
            Self::OverCapacity | Self::PeerOverShare => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// Renders the RFC 9457 problem document, its `type` under `types`,
    /// with `Retry-After` where the sender is expected to come back.
    pub fn into_response(self, types: &ProblemTypes) -> Response<ProxyBody> {
        let row = self.row();
        let mut response = types.response(
            row.status,
            row.reason.as_str(),
            row.title,
            &self.to_string(),
        );
        if let Some(wait) = self.retry_after() {
            let seconds = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The `reason` of a replay whose first answer was too large to store:
/// the stored status and headers come with this problem document instead
/// of the body (not a rejection: the delivery was processed).
pub const ANSWER_NOT_STORED: &str = "answer_not_stored";

/// The title of the `answer_not_stored` problem.
const ANSWER_NOT_STORED_TITLE: &str = "Answer not stored";

/// The problem+json body of a replay whose answer was not stored, its
/// `type` under `types`.
pub fn answer_not_stored(status: StatusCode, types: &ProblemTypes) -> Bytes {
    types.document(
        status,
        ANSWER_NOT_STORED,
        ANSWER_NOT_STORED_TITLE,
        "the first delivery was processed; its answer exceeded max_stored_answer_bytes and was not kept",
    )
}

#[cfg(test)]
mod tests;
