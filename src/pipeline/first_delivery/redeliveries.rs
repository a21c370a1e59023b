//! Probes of inbox redeliveries whose outcome is unknown (`crate::inbox::probe`
//! moves the delivery; this asks the handler). The probe path is rendered
//! from the request the inbox kept, exactly as from a live delivery; a
//! value that could reach another resource means no probe, and the
//! delivery waits for the operator as without one.

use std::sync::Arc;

use metrics::counter;
use tracing::Instrument as _;

use crate::config::Upstream;
use crate::extract::Inbound;
use crate::inbox::RouteInbox;
use crate::inbox::probe::{ProbeEnd, TakenDelivery};
use crate::pipeline::Forwarder;
use crate::pipeline::first_delivery::probe_runner::{ask, jitter};
use crate::pipeline::probe::{RESOLUTIONS_TOTAL, Reading, classify, render};
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::trace;

impl Forwarder {
    /// One probe of the unknown redelivery `taken` of `route` (which has an
    /// inbox and a probe), settled through the inbox.
    pub(in crate::pipeline) async fn probe_redelivery(
        &self,
        route: &RouteRuntime,
        inbox: &Arc<RouteInbox>,
        taken: TakenDelivery,
    ) {
        let Some(probe) = &route.settings.probe else {
            return;
        };
        let name = route.name();
        let key = taken.key.hash().to_owned();
        let entry = taken.entry();
        let attempt = entry.probes;
        let spent = attempt >= probe.max_attempts;
        let target = entry
            .request
            .to_parts()
            .map(|parts| Inbound::new(parts, entry.request.body.clone()))
            .ok_or(crate::pipeline::probe::Skip::Absent)
            .and_then(|request| render(probe, &request));
        let target = match target {
            Ok(target) => target,
            Err(skip) => {
                skip.count(name, &key);
                let end = ProbeEnd::Undecided {
                    last: format!("no probe: {skip}"),
                    next: None,
                };
                self.settle_redelivery(route, inbox, &taken, end).await;
                return;
            }
        };
        let span = trace::probe(self.tracing, name, &key, taken.record.trace.as_ref());
        let upstream = Upstream {
            url: route.settings.upstream.url.clone(),
            timeout: probe.timeout,
        };
        let answer = tokio::select! {
            answer = ask(self, &upstream, probe, &target).instrument(span) => answer,
            () = self.grace_over.cancelled() => return,
        };
        let (end, result) = match answer.map(|answer| (answer.status, classify(probe, answer))) {
            Ok((_, Reading::Applied(answer))) => (ProbeEnd::Applied(answer), Some("applied")),
            Ok((_, Reading::NotApplied)) => (ProbeEnd::NotApplied, Some("not_applied")),
            Ok((status, Reading::Undecided)) => (
                ProbeEnd::Undecided {
                    last: format!("status {status}: can not tell"),
                    next: (!spent).then(|| probe.retry_every + jitter(probe.retry_every)),
                },
                spent.then_some("undecided"),
            ),
            Err(error) => (
                ProbeEnd::Undecided {
                    last: format!("error: {error}"),
                    next: (!spent).then(|| probe.retry_every + jitter(probe.retry_every)),
                },
                spent.then_some("error"),
            ),
        };
        tracing::info!(
            route = name,
            key,
            attempt,
            ?end,
            "inbox: probe of an unknown redelivery"
        );
        if self.settle_redelivery(route, inbox, &taken, end).await {
            if let Some(result) = result {
                counter!(RESOLUTIONS_TOTAL.name, "route" => name.to_owned(), "result" => result)
                    .increment(1);
            }
        }
    }

    /// Writes a probe's end through the inbox; whether it was written.
    async fn settle_redelivery(
        &self,
        route: &RouteRuntime,
        inbox: &Arc<RouteInbox>,
        taken: &TakenDelivery,
        end: ProbeEnd,
    ) -> bool {
        let key = taken.key.hash();
        match self.inboxes.settle_probe(inbox, taken, end).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    route = route.name(),
                    key,
                    "inbox: a probed delivery changed meanwhile; nothing written"
                );
                false
            }
            Err(error) => {
                tracing::error!(route = route.name(), key, %error, "inbox: the probe's answer was not stored; the delivery is probed again when its lease ends");
                false
            }
        }
    }
}
