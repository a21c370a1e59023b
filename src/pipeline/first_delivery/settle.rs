//! Stage 7: decide what the store keeps, and shape the answer.
//!
//! [`claim_action`] maps the upstream result to a store action (contract §4):
//! an answer whose status is in `cache_status` is completed for
//! `retention`; any other answer and a refused connection release the
//! claim; a timeout or a connection broken mid-exchange records the outcome
//! as unknown for `unknown_hold` (or releases it with
//! `on_upstream_timeout = "release"`).
//!
//! An answer larger than `max_stored_answer_bytes` is completed without
//! its body ([`StoredBody::TooLarge`]): its duplicates never execute again,
//! and their replay is the stored status and headers with an
//! `answer_not_stored` problem+json body instead.
//!
//! [`live`] and [`replay`] build the two kinds of answer; both carry
//! `Idempotent-Replayed`, and a replay is the stored status, headers and
//! body byte for byte.

use http::{HeaderName, HeaderValue, Response, StatusCode, header};

use crate::body::{ProxyBody, full};
use crate::config::{Idempotency, OnUpstreamTimeout};
use crate::error::{ProblemTypes, answer_not_stored};
use crate::record::{Record, RecordState, StoredBody, StoredResponse};
use crate::upstream::{self, ForwardError, UpstreamAnswer};

/// Header telling the sender whether it got a replay.
pub(crate) const REPLAYED_HEADER: &str = "idempotent-replayed";

/// What the store should do with a claim once the upstream call ended.
#[derive(Debug)]
pub(crate) enum ClaimAction {
    /// Keep this record (completed, or unknown) for the given TTL.
    Keep(Record, std::time::Duration),
    /// Delete the claim: the next retry is a first delivery.
    Release,
}

/// Chooses the store action for an upstream result (see module docs). An
/// answer equal to the route's acknowledgement `ack` is kept as a compact
/// marker (`crate::record::AckMarker`).
pub(crate) fn claim_action(
    result: &Result<UpstreamAnswer, ForwardError>,
    claimed: &Record,
    rules: &Idempotency,
    ack: Option<&StoredResponse>,
) -> ClaimAction {
    match result {
        Ok(answer) if rules.cache_status.contains(answer.status.as_u16()) => ClaimAction::Keep(
            claimed
                .with_state(RecordState::Completed(upstream::stored(answer)))
                .compacted(ack),
            rules.retention,
        ),
        Ok(_) | Err(ForwardError::Refused) => ClaimAction::Release,
        Err(ForwardError::Broken | ForwardError::Timeout) => match rules.on_upstream_timeout {
            OnUpstreamTimeout::Hold => {
                ClaimAction::Keep(claimed.with_state(RecordState::Unknown), rules.unknown_hold)
            }
            OnUpstreamTimeout::Release => ClaimAction::Release,
        },
    }
}

fn mark(response: &mut Response<ProxyBody>, replayed: bool) {
    response.headers_mut().insert(
        HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static(if replayed { "true" } else { "false" }),
    );
}

/// The upstream's answer as is, marked as not replayed.
pub(crate) fn live(answer: UpstreamAnswer) -> Response<ProxyBody> {
    let mut response = Response::new(answer.body.into_proxy_body());
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    mark(&mut response, false);
    response
}

/// The acknowledgement of a delivery just queued in the inbox: the ack
/// its copies will get replayed, marked as not replayed.
pub(crate) fn acknowledged(ack: &StoredResponse, types: &ProblemTypes) -> Response<ProxyBody> {
    let mut response = replay(ack, types, None);
    mark(&mut response, false);
    response
}

/// Headers that describe a body: a replay without the stored body drops
/// them and describes its problem document instead.
fn describes_body(name: &HeaderName) -> bool {
    [
        header::CONTENT_TYPE,
        header::CONTENT_ENCODING,
        header::CONTENT_LENGTH,
        header::CONTENT_RANGE,
        header::ETAG,
    ]
    .contains(name)
}

/// A stored answer, marked as replayed; one not stored is described by a
/// problem document typed under `types`. `age_secs`, the seconds since it
/// was stored, becomes its `Age` header (RFC 9111 §5.1), added to any
/// `Age` the upstream itself sent.
pub(crate) fn replay(
    stored: &StoredResponse,
    types: &ProblemTypes,
    age_secs: Option<u64>,
) -> Response<ProxyBody> {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match &stored.body {
        StoredBody::Kept(bytes) => bytes.clone(),
        StoredBody::TooLarge => answer_not_stored(status, types),
    };
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let kept = matches!(stored.body, StoredBody::Kept(_));
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            if kept || !describes_body(&name) {
                response.headers_mut().append(name, value);
            }
        }
    }
    if !kept {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
    }
    if let Some(age_secs) = age_secs {
        set_age(response.headers_mut(), age_secs);
    }
    mark(&mut response, true);
    response
}

/// Sets `Age` to `age_secs` plus the upstream's own `Age`, if it sent a
/// valid one (an invalid one is replaced: it told the sender nothing).
fn set_age(headers: &mut http::HeaderMap, age_secs: u64) {
    let upstream = headers
        .get(header::AGE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(0);
    headers.insert(
        header::AGE,
        HeaderValue::from(upstream.saturating_add(age_secs)),
    );
}

/// The upstream's status in a forward's result, if it answered: what the
/// log line says the handler answered, whatever was settled.
pub(crate) fn upstream_status(result: &Result<UpstreamAnswer, ForwardError>) -> Option<u16> {
    result.as_ref().ok().map(|answer| answer.status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Fingerprint, OwnerToken};
    use crate::upstream::{AnswerBody, stored};
    use bytes::Bytes;
    use http::HeaderMap;
    use http_body_util::BodyExt;

    fn rules() -> Idempotency {
        crate::config::test_route("").idempotency
    }

    fn answer(status: u16) -> UpstreamAnswer {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert("content-length", HeaderValue::from_static("7"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        UpstreamAnswer {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: AnswerBody::Buffered(Bytes::from_static(b"success")),
        }
    }

    fn claimed() -> Record {
        Record::in_flight(OwnerToken([1; 16]), Fingerprint([2; 32]), None)
    }

    #[test]
    fn statuses_and_failures_map_to_store_actions() {
        let rules = rules();
        assert!(
            matches!(claim_action(&Ok(answer(200)), &claimed(), &rules, None), ClaimAction::Keep(r, ttl)
            if matches!(r.state, RecordState::Completed(_)) && ttl == rules.retention)
        );
        assert!(matches!(
            claim_action(&Ok(answer(404)), &claimed(), &rules, None),
            ClaimAction::Keep(..)
        ));
        assert!(matches!(
            claim_action(&Ok(answer(500)), &claimed(), &rules, None),
            ClaimAction::Release
        ));
        assert!(matches!(
            claim_action(&Err(ForwardError::Refused), &claimed(), &rules, None),
            ClaimAction::Release
        ));
        for error in [ForwardError::Broken, ForwardError::Timeout] {
            assert!(
                matches!(claim_action(&Err(error), &claimed(), &rules, None), ClaimAction::Keep(r, ttl)
                if r.state == RecordState::Unknown && ttl == rules.unknown_hold)
            );
        }
        let mut releasing = rules;
        releasing.on_upstream_timeout = OnUpstreamTimeout::Release;
        assert!(matches!(
            claim_action(&Err(ForwardError::Timeout), &claimed(), &releasing, None),
            ClaimAction::Release
        ));
    }

    #[tokio::test]
    async fn replay_is_exact() {
        let original = answer(201);
        let stored = stored(&original);
        let response = replay(&stored, &ProblemTypes::default(), None);
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()[REPLAYED_HEADER], "true");
        let cookies: Vec<_> = response.headers().get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(response.headers()["content-type"], "text/plain");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, Bytes::from_static(b"success"));
    }

    #[tokio::test]
    async fn an_answer_too_large_to_store_replays_its_head_and_a_problem() {
        let mut original = answer(200);
        original.body = AnswerBody::Streaming(full(Bytes::from_static(b"huge")));
        let stored = stored(&original);
        assert_eq!(stored.body, StoredBody::TooLarge);
        let rules = rules();
        assert!(
            matches!(claim_action(&Ok(original), &claimed(), &rules, None), ClaimAction::Keep(r, _)
            if matches!(&r.state, RecordState::Completed(s) if s.body == StoredBody::TooLarge))
        );
        let response = replay(&stored, &ProblemTypes::default(), None);
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[REPLAYED_HEADER], "true");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(response.headers().get_all("set-cookie").iter().count(), 2);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["reason"], "answer_not_stored");
        assert_eq!(problem["status"], 200);
    }
}
