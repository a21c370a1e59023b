//! Stage 7: decide what the store keeps, and shape the answer.
//!
//! [`settlement`] maps the upstream result to a store action (SPEC §4):
//! an answer whose status is in `cache_status` is completed for
//! `retention`; any other answer and a refused connection release the
//! claim; a timeout or a connection broken mid-exchange records the outcome
//! as unknown for `unknown_hold` (or releases it with
//! `on_upstream_timeout = "release"`).
//!
//! [`live`] and [`replay`] build the two kinds of answer; both carry
//! `Idempotent-Replayed`, and a replay is the stored status, headers and
//! body byte for byte.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode, header};

use super::forward::{ForwardError, ProxyBody, UpstreamAnswer, full};
use crate::config::{Idempotency, OnUpstreamTimeout};
use crate::error::Rejection;
use crate::record::{Record, RecordState, StoredResponse};

/// Header telling the sender whether it got a replay.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// What the store should do with a claim once the upstream call ended.
#[derive(Debug)]
pub enum Settlement {
    /// Keep this record (completed, or unknown) for the given TTL.
    Keep(Record, std::time::Duration),
    /// Delete the claim: the next retry is a first delivery.
    Release,
}

/// Chooses the store action for an upstream result (see module docs).
pub fn settlement(
    result: &Result<UpstreamAnswer, ForwardError>,
    claimed: &Record,
    rules: &Idempotency,
) -> Settlement {
    match result {
        Ok(answer) if rules.cache_status.contains(answer.status.as_u16()) => Settlement::Keep(
            claimed.with_state(RecordState::Completed(stored(answer))),
            rules.retention,
        ),
        Ok(_) | Err(ForwardError::Refused) => Settlement::Release,
        Err(ForwardError::Broken | ForwardError::Timeout) => match rules.on_upstream_timeout {
            OnUpstreamTimeout::Hold => {
                Settlement::Keep(claimed.with_state(RecordState::Unknown), rules.unknown_hold)
            }
            OnUpstreamTimeout::Release => Settlement::Release,
        },
    }
}

/// The storable form of an answer. `Content-Length` is left out: hyper
/// recomputes the same value from the body on replay.
pub fn stored(answer: &UpstreamAnswer) -> StoredResponse {
    let headers = answer
        .headers
        .iter()
        .filter(|(name, _)| *name != header::CONTENT_LENGTH)
        .map(|(name, value)| {
            (
                Bytes::copy_from_slice(name.as_str().as_bytes()),
                Bytes::copy_from_slice(value.as_bytes()),
            )
        })
        .collect();
    StoredResponse {
        status: answer.status.as_u16(),
        headers,
        body: answer.body.clone(),
    }
}

/// The rejection a failed upstream call answers with.
pub fn failure(error: ForwardError) -> Rejection {
    match error {
        ForwardError::Refused | ForwardError::Broken => Rejection::UpstreamError,
        ForwardError::Timeout => Rejection::UpstreamTimeout,
    }
}

fn mark(response: &mut Response<ProxyBody>, replayed: bool) {
    response.headers_mut().insert(
        HeaderName::from_static(REPLAYED_HEADER),
        HeaderValue::from_static(if replayed { "true" } else { "false" }),
    );
}

/// The upstream's answer as is, marked as not replayed.
pub fn live(answer: UpstreamAnswer) -> Response<ProxyBody> {
    let mut response = Response::new(full(answer.body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    mark(&mut response, false);
    response
}

/// A stored answer, marked as replayed.
pub fn replay(stored: &StoredResponse) -> Response<ProxyBody> {
    let mut response = Response::new(full(stored.body.clone()));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            response.headers_mut().append(name, value);
        }
    }
    mark(&mut response, true);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Fingerprint, OwnerToken};
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
            body: Bytes::from_static(b"success"),
        }
    }

    fn claimed() -> Record {
        Record::in_flight(OwnerToken([1; 16]), Fingerprint([2; 32]))
    }

    #[test]
    fn statuses_and_failures_map_to_store_actions() {
        let rules = rules();
        assert!(
            matches!(settlement(&Ok(answer(200)), &claimed(), &rules), Settlement::Keep(r, ttl)
            if matches!(r.state, RecordState::Completed(_)) && ttl == rules.retention)
        );
        assert!(matches!(
            settlement(&Ok(answer(404)), &claimed(), &rules),
            Settlement::Keep(..)
        ));
        assert!(matches!(
            settlement(&Ok(answer(500)), &claimed(), &rules),
            Settlement::Release
        ));
        assert!(matches!(
            settlement(&Err(ForwardError::Refused), &claimed(), &rules),
            Settlement::Release
        ));
        for error in [ForwardError::Broken, ForwardError::Timeout] {
            assert!(
                matches!(settlement(&Err(error), &claimed(), &rules), Settlement::Keep(r, ttl)
                if r.state == RecordState::Unknown && ttl == rules.unknown_hold)
            );
        }
        let mut releasing = rules.clone();
        releasing.on_upstream_timeout = OnUpstreamTimeout::Release;
        assert!(matches!(
            settlement(&Err(ForwardError::Timeout), &claimed(), &releasing),
            Settlement::Release
        ));
    }

    #[tokio::test]
    async fn replay_is_exact() {
        let original = answer(201);
        let stored = stored(&original);
        let response = replay(&stored);
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()[REPLAYED_HEADER], "true");
        let cookies: Vec<_> = response.headers().get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(response.headers()["content-type"], "text/plain");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, original.body);
    }
}
