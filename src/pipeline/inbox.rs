//! Stage 7 for a route with `[route.inbox]`: a first delivery whose live
//! call failed as `on` lists is handed to [`crate::inbox`] instead of being
//! released, and the sender gets the ack.

use super::Pipeline;
use super::forward::{ForwardError, UpstreamAnswer};
use crate::inbox::NotQueued;
use crate::record::{StoredRequest, StoredResponse};
use crate::store::Lease;

impl Pipeline {
    /// Queues a failed first delivery in its route's inbox, if the route
    /// has one and `on` lists the failure; returns the ack to answer with.
    /// `None`: settle the claim as usual (also when queueing failed, so a
    /// sender is never acknowledged for a delivery the store does not hold).
    pub(super) async fn queue(
        &self,
        index: usize,
        lease: &Lease,
        kept: Option<StoredRequest>,
        result: &Result<UpstreamAnswer, ForwardError>,
    ) -> Option<StoredResponse> {
        let request = kept.filter(|_| self.inboxes.wants(index, result))?;
        match self.inboxes.enqueue(index, lease, request, result).await {
            Ok(queued) => {
                if queued.held {
                    self.meters[index].unknown_outcome();
                }
                Some(queued.ack)
            }
            Err(error @ NotQueued::Full { .. }) => {
                tracing::warn!(
                    route = self.config.routes[index].name,
                    key = lease.key().hash(),
                    %error,
                    "inbox full: the delivery is not acknowledged; the sender gets the handler's failure and keeps its own retries"
                );
                None
            }
            Err(NotQueued::Store(error)) => {
                tracing::error!(
                    route = self.config.routes[index].name,
                    key = lease.key().hash(),
                    %error,
                    "could not queue the delivery in the inbox; the sender gets the handler's failure"
                );
                None
            }
        }
    }
}
