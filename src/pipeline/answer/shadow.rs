//! Shadow mode's say, in one place.
//!
//! The stages run as enforce mode would (`Pipeline::enforce`) and end in
//! either an answer that is the same in both modes — a first delivery, a
//! store outage, a body too large — or a request stopped by a rule, with
//! the ruling enforce mode answers it with. Only then does the route's
//! mode decide ([`apply_mode`]): enforce mode answers with the
//! ruling; shadow mode sends the request on as it is and notes what
//! enforce mode would have done, so an operator can watch idemgate's
//! decisions on real traffic before letting it make them. The one thing
//! shadow mode changes earlier is that a duplicate never waits for its
//! first delivery ([`patience`]): shadow mode never holds a request back.

use std::net::SocketAddr;

use http_body_util::BodyExt;

use crate::config::Mode;
use crate::error::{ProblemTypes, Reason};
use crate::pipeline::first_delivery::settle;
use crate::pipeline::metrics::Outcome;
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::upstream_calls::UpstreamCalls;
use crate::pipeline::words::{Enforcement, Finished, RequestEnd, Ruling, StoppedRequest};
use crate::record::StoredBody;
use crate::record::now_ms;

impl Ruling {
    /// The reason shadow mode notes for it: a replay is no rejection (its
    /// outcome says what it would have been).
    fn noted(&self) -> Option<Reason> {
        match self {
            Self::Refuse(rejection) => Some(rejection.reason()),
            Self::Acknowledge { noted, .. } => Some(*noted),
            Self::Replay { .. } => None,
        }
    }
}

/// Decides, by the route's mode, how a request that enforce mode has run
/// ends; shadow mode's sends go through `calls`.
pub(in crate::pipeline) async fn apply_mode(
    calls: &UpstreamCalls,
    route: &RouteRuntime,
    enforcement: Enforcement,
    peer: Option<SocketAddr>,
) -> RequestEnd {
    let (ruling, request) = match enforcement {
        Enforcement::Ended(end) => return end,
        Enforcement::Stopped { ruling, request } => (ruling, request),
    };
    let finished = match route.settings.idempotency.mode {
        Mode::Enforce => answer(calls.problem_types(), route, ruling),
        Mode::Shadow => send_on(calls, route, request, ruling.noted(), peer).await,
    };
    finished.into()
}

/// Enforce mode: the ruling is the answer.
fn answer(types: &ProblemTypes, route: &RouteRuntime, ruling: Ruling) -> Finished {
    match ruling {
        Ruling::Refuse(rejection) => Finished::rejected(rejection, types),
        Ruling::Acknowledge { answer, noted } => {
            Finished::new(Outcome::Rejected, settle::replay(&answer, types, None))
                .with_reason(noted)
        }
        Ruling::Replay {
            answer,
            answered_at_ms,
        } => {
            let age = now_ms().saturating_sub(answered_at_ms) / 1000;
            let replayed =
                Finished::new(Outcome::Replayed, settle::replay(&answer, types, Some(age)));
            if answer.body == StoredBody::TooLarge {
                route.meters.answer_not_stored(true);
                replayed.answer_not_stored()
            } else {
                replayed
            }
        }
    }
}

/// Shadow mode: sends the request on as it is, noting the refusal enforce
/// mode would have made (logged and counted). An unread request whose
/// upstream fails is answered as that failure alone.
async fn send_on(
    calls: &UpstreamCalls,
    route: &RouteRuntime,
    request: StoppedRequest,
    noted: Option<Reason>,
    peer: Option<SocketAddr>,
) -> Finished {
    let sent = match request {
        StoppedRequest::Unread(request) => {
            let upstream = &route.settings.upstream;
            let request = request.map(BodyExt::boxed);
            let sent = calls
                .pass_through_metered(&route.meters, upstream, request, peer)
                .await;
            if sent.outcome == Outcome::Rejected {
                return sent;
            }
            sent
        }
        StoppedRequest::Unclaimed(inbound) => {
            calls
                .unprotected(route, &inbound, peer, Outcome::Passthrough)
                .await
        }
        StoppedRequest::Duplicate(inbound) => {
            calls
                .unprotected(route, &inbound, peer, Outcome::ShadowDuplicate)
                .await
        }
    };
    match noted {
        Some(reason) => sent.with_reason(reason),
        None => sent,
    }
}
