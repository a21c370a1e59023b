//! What a request's end is, counted and logged once.
//!
//! Every request ends in exactly one [`Finished`]: its outcome, its answer
//! and what the log line says about it. [`Finished::record`] consumes it,
//! counting the request in its route's metrics and writing the one
//! `request` log line, so no request is counted or logged twice. Fields
//! that do not apply (no rejection reason, no key, no upstream answer) are
//! left out of the line rather than logged empty; durations are integer
//! microseconds.
//!
//! [`Settled`] is how a first delivery's claim was settled, as the log
//! line reports it (docs/operations.md "Logs").

use http::Response;

use crate::body::ProxyBody;
use crate::error::{ANSWER_NOT_STORED, ProblemTypes, Reason, Rejection};
use crate::hot_keys::{RouteHotKeys, Sighting};
use crate::pipeline::first_delivery::persist::Persisted;
use crate::pipeline::metrics::{Outcome, RouteMetrics};
use crate::pipeline::{first_delivery::settle, trace};
use crate::record::{Record, RecordState};
use crate::upstream::{self, ForwardError};

use crate::pipeline::words::{Finished, Labels, LogReason, Origin, RequestEnd, Settled};

/// The target of the request line: the module it was logged from before
/// it moved here, kept so `RUST_LOG` filters and log queries keep working.
const LOG_TARGET: &str = "idemgate::pipeline";

impl LogReason {
    /// The word the log line shows.
    pub(in crate::pipeline) fn as_str(self) -> &'static str {
        match self {
            Self::Rejection(reason) => reason.as_str(),
            Self::AnswerNotStored => ANSWER_NOT_STORED,
        }
    }
}

impl Settled {
    /// The word the log line shows.
    fn as_str(self) -> &'static str {
        match self {
            Self::NotClaimed => "not_claimed",
            Self::Stored => "stored",
            Self::Released => "released",
            Self::Unknown => "unknown",
            Self::Queued => "queued",
            Self::Held => "held",
        }
    }

    /// What one completed store attempt of `record` achieved.
    pub(in crate::pipeline) fn after_persist(record: &Record, done: &Persisted) -> Self {
        match (done, &record.state) {
            (Persisted::Stored(_), RecordState::Completed(_) | RecordState::Acknowledged(_)) => {
                Self::Stored
            }
            _ => Self::Unknown,
        }
    }
}

impl RequestEnd {
    /// Labels an unrecorded end with what is known about the delivery; a
    /// recorded one was logged with the same labels already.
    pub(in crate::pipeline) fn labelled(self, labels: Labels) -> Self {
        match self {
            Self::Unrecorded(finished) => Self::Unrecorded(finished.labelled(labels)),
            recorded @ Self::Recorded(_) => recorded,
        }
    }
}

impl Finished {
    /// An end with this outcome and answer; nothing noted yet.
    pub(in crate::pipeline) fn new(outcome: Outcome, response: Response<ProxyBody>) -> Self {
        Self {
            outcome,
            response,
            reason: None,
            labels: Labels::default(),
            upstream_status: None,
            settled: Settled::NotClaimed,
        }
    }

    /// A rejection idemgate answers itself.
    pub(in crate::pipeline) fn rejected(rejection: Rejection, types: &ProblemTypes) -> Self {
        let reason = rejection.reason();
        Self::new(Outcome::Rejected, rejection.into_response(types))
            .with_reason_note(LogReason::Rejection(reason))
    }

    /// A passthrough answered by the upstream: the answer is its own.
    pub(in crate::pipeline) fn passed_through(response: Response<ProxyBody>) -> Self {
        let status = response.status().as_u16();
        Self::new(Outcome::Passthrough, response).with_upstream_status(Some(status))
    }

    /// The answer to a forwarded request: the upstream's, or idemgate's
    /// 502/504 when the upstream failed (outcome unchanged: it was sent).
    pub(in crate::pipeline) fn upstream(
        outcome: Outcome,
        result: Result<upstream::UpstreamAnswer, ForwardError>,
        types: &ProblemTypes,
    ) -> Self {
        let status = settle::upstream_status(&result);
        let finished = match result {
            Ok(answer) => Self::new(outcome, settle::live(answer)),
            Err(error) => {
                let rejection = error.rejection();
                let reason = rejection.reason();
                Self::new(outcome, rejection.into_response(types)).with_reason(reason)
            }
        };
        finished.with_upstream_status(status)
    }

    /// Notes the rejection this request was answered with (or, in shadow
    /// mode, would have been): logged and counted.
    pub(in crate::pipeline) fn with_reason(self, reason: Reason) -> Self {
        self.with_reason_note(LogReason::Rejection(reason))
    }

    fn with_reason_note(mut self, note: LogReason) -> Self {
        self.reason = Some(note);
        self
    }

    /// Notes a replay whose answer was not stored: logged only.
    pub(in crate::pipeline) fn answer_not_stored(self) -> Self {
        self.with_reason_note(LogReason::AnswerNotStored)
    }

    /// Notes the upstream's status, if it answered.
    pub(in crate::pipeline) fn with_upstream_status(mut self, status: Option<u16>) -> Self {
        self.upstream_status = status;
        self
    }

    /// Notes how the claim was settled.
    pub(in crate::pipeline) fn settled(mut self, settled: Settled) -> Self {
        self.settled = settled;
        self
    }

    /// Notes what is known about the delivery.
    pub(in crate::pipeline) fn labelled(mut self, labels: Labels) -> Self {
        self.labels = labels;
        self
    }

    /// Counts and logs the request in `meters` (and, for a delivery of a
    /// known key, in the route's `hot_keys`), and hands back its answer.
    pub(in crate::pipeline) fn record(
        self,
        meters: &RouteMetrics,
        hot_keys: Option<&RouteHotKeys>,
        origin: &Origin,
    ) -> Response<ProxyBody> {
        let route = meters.name();
        let elapsed = origin.started.elapsed();
        meters.request(self.outcome, self.response.status(), elapsed);
        let rejection = match self.reason {
            Some(LogReason::Rejection(reason)) => Some(reason),
            _ => None,
        };
        if let Some(reason) = rejection {
            meters.rejection(reason);
        }
        if let (Some(table), Some(digest)) = (hot_keys, &self.labels.key_digest) {
            table.observe(
                *digest,
                Sighting {
                    outcome: self.outcome.as_str(),
                    reason: self.reason.map(LogReason::as_str),
                    duplicate: is_duplicate(self.outcome, rejection),
                },
            );
        }
        let span_end = trace::SpanEnd {
            route,
            outcome: self.outcome.as_str(),
            reason: self.reason.map(LogReason::as_str),
            key_hash: self.labels.key_hash.as_deref(),
            secret_index: self.labels.secret_index,
            status: self.response.status().as_u16(),
        };
        let trace_id = trace::finish(&tracing::Span::current(), &span_end);
        tracing::info!(
            target: LOG_TARGET,
            route,
            method = origin.method.as_str(),
            path = origin.path.as_str(),
            peer = origin.peer.map(tracing::field::display),
            outcome = self.outcome.as_str(),
            reason = self.reason.map(LogReason::as_str),
            key = self.labels.key_hash.as_deref(),
            secret_index = self.labels.secret_index,
            first_trace = self.labels.first_trace.map(tracing::field::display),
            status = self.response.status().as_u16(),
            upstream_status = self.upstream_status,
            settled = self.settled.as_str(),
            latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            trace_id,
            "request"
        );
        self.response
    }
}

/// Whether a delivery counts as a duplicate of its key in the hot-key
/// table: a delivery of a key already claimed, that is a replay (or, in
/// shadow mode, one enforce would have stopped), or a 409
/// `in_flight`/`outcome_unknown` or 422 `fingerprint_mismatch`.
fn is_duplicate(outcome: Outcome, rejection: Option<Reason>) -> bool {
    matches!(outcome, Outcome::Replayed | Outcome::ShadowDuplicate)
        || matches!(
            rejection,
            Some(Reason::InFlight | Reason::OutcomeUnknown | Reason::FingerprintMismatch)
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Fingerprint, OwnerToken, StoredBody, StoredResponse};
    use crate::store::{Completion, StoreError};

    fn claimed() -> Record {
        Record::in_flight(OwnerToken([1; 16]), Fingerprint([2; 32]), None)
    }

    fn completed() -> Record {
        claimed().with_state(RecordState::Completed(StoredResponse {
            status: 200,
            headers: Vec::new(),
            body: StoredBody::TooLarge,
        }))
    }

    #[test]
    fn only_a_stored_answer_is_settled_as_stored() {
        let unknown = claimed().with_state(RecordState::Unknown);
        let gave_up = || Persisted::GaveUp(StoreError::Unavailable("down".to_owned()));
        for (record, done, settled) in [
            (
                completed(),
                Persisted::Stored(Completion::Stored),
                Settled::Stored,
            ),
            (
                completed(),
                Persisted::Stored(Completion::StoredInFreeKey),
                Settled::Stored,
            ),
            (completed(), Persisted::TakenOver, Settled::Unknown),
            (completed(), gave_up(), Settled::Unknown),
            (
                unknown.clone(),
                Persisted::Stored(Completion::Stored),
                Settled::Unknown,
            ),
            (unknown, gave_up(), Settled::Unknown),
        ] {
            assert_eq!(Settled::after_persist(&record, &done), settled, "{done:?}");
        }
    }

    /// Replays and the 409/422 answers for a claimed key are duplicates;
    /// a first delivery or another rejection is not.
    #[test]
    fn duplicates_are_deliveries_of_a_claimed_key() {
        let cases: [(Outcome, Option<Reason>, bool); 8] = [
            (Outcome::Forwarded, None, false),
            (Outcome::Replayed, None, true),
            (Outcome::ShadowDuplicate, Some(Reason::InFlight), true),
            (Outcome::Rejected, Some(Reason::InFlight), true),
            (Outcome::Rejected, Some(Reason::OutcomeUnknown), true),
            (Outcome::Rejected, Some(Reason::FingerprintMismatch), true),
            (Outcome::Rejected, Some(Reason::StoreUnavailable), false),
            (Outcome::Forwarded, Some(Reason::UpstreamTimeout), false),
        ];
        for (outcome, rejection, duplicate) in cases {
            assert_eq!(
                is_duplicate(outcome, rejection),
                duplicate,
                "{outcome:?} {rejection:?}"
            );
        }
    }

    #[test]
    fn words_are_the_documented_ones() {
        let words: Vec<_> = [
            Settled::NotClaimed,
            Settled::Stored,
            Settled::Released,
            Settled::Unknown,
            Settled::Queued,
        ]
        .map(Settled::as_str)
        .into();
        assert_eq!(
            words,
            ["not_claimed", "stored", "released", "unknown", "queued"]
        );
    }
}
