//! The process-wide bound on buffered request bodies.
//!
//! Every protected request is read whole before it is verified, so
//! `max_body_bytes` bounds one request, not the process: HTTP/2 multiplies
//! it by the streams of every connection, and a peer that sends all but
//! the last byte of each body holds that memory for `body_read_timeout`.
//! The budget makes the bound global. Bytes are reserved as they arrive
//! (not as a `Content-Length` promises them, which would let an idle peer
//! reserve what it never sends) and returned when the body is dropped,
//! wherever in the pipeline that happens. A body that can not get its next
//! bytes is refused at once with 503 `over_capacity` and `Retry-After`:
//! waiting for budget would let the peers that hold it decide who is
//! served, while senders retry a 503 by design.
//!
//! It sits below the pipeline, beside [`crate::body`], because the body it
//! accounts for travels in [`crate::extract::Inbound`] through every stage.
//!
//! No one peer may hold more than its share of the budget
//! ([`crate::peers`]), so one slow or greedy peer can not starve the rest:
//! a body whose peer holds its share already is refused the same way.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Rejection;
use crate::peers::{PeerHold, PeerShares, Resource};

/// The bytes of request bodies idemgate may hold at once.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    bytes: Arc<Semaphore>,
    /// What each peer holds of it.
    peers: Arc<PeerShares>,
}

/// Bytes one body holds from the [`Budget`], returned when this is dropped.
#[derive(Debug, Default)]
pub(crate) struct Reserved {
    permit: Option<OwnedSemaphorePermit>,
    /// The same bytes in the sending peer's share (boxed: every body
    /// travels in every stage's types, which this would otherwise widen).
    peer: Option<Box<PeerHold>>,
}

impl Budget {
    /// A budget of `total` bytes.
    pub(crate) fn new(total: u64) -> Self {
        let total = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            bytes: Arc::new(Semaphore::new(total)),
            peers: PeerShares::new(Resource::BodyBytes, total),
        }
    }

    /// Adds `more` bytes to what `held` holds for a body from `peer`, or
    /// refuses with 503 `over_capacity` if the budget does not have them
    /// now, or the peer already holds its share.
    pub(crate) fn reserve(
        &self,
        held: &mut Reserved,
        more: usize,
        peer: Option<IpAddr>,
    ) -> Result<(), Rejection> {
        if more == 0 {
            return Ok(());
        }
        let more_permits = u32::try_from(more).map_err(|_| Rejection::OverCapacity)?;
        if let Some(peer) = peer {
            let share = held
                .peer
                .get_or_insert_with(|| Box::new(self.peers.hold(peer)));
            if !share.grow(more) {
                return Err(Rejection::OverCapacity);
            }
        }
        let Ok(permit) = Arc::clone(&self.bytes).try_acquire_many_owned(more_permits) else {
            if let Some(share) = &mut held.peer {
                share.shrink(more);
            }
            return Err(Rejection::OverCapacity);
        };
        match &mut held.permit {
            Some(existing) => existing.merge(permit),
            slot @ None => *slot = Some(permit),
        }
        Ok(())
    }

    /// Bytes not held by any body right now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

impl Reserved {
    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_back_when_the_body_is_dropped() {
        let budget = Budget::new(100);
        let mut first = Reserved::default();
        budget.reserve(&mut first, 60, None).unwrap();
        budget.reserve(&mut first, 30, None).unwrap();
        assert_eq!(first.bytes(), 90);
        assert_eq!(budget.available(), 10);
        let mut second = Reserved::default();
        assert_eq!(
            budget.reserve(&mut second, 11, None),
            Err(Rejection::OverCapacity)
        );
        assert_eq!(second.bytes(), 0, "a refused reservation holds nothing");
        budget.reserve(&mut second, 10, None).unwrap();
        drop(first);
        assert_eq!(budget.available(), 90);
        drop(second);
        assert_eq!(budget.available(), 100);
    }

    #[test]
    fn an_empty_chunk_never_fails() {
        let budget = Budget::new(1);
        let mut held = Reserved::default();
        budget.reserve(&mut held, 1, None).unwrap();
        assert_eq!(budget.reserve(&mut held, 0, None), Ok(()));
    }

    #[test]
    fn one_peer_leaves_a_quarter_to_the_others() {
        let budget = Budget::new(100);
        let greedy_ip = IpAddr::from([127, 0, 0, 2]);
        let greedy = Some(greedy_ip);
        let honest = Some(IpAddr::from([127, 0, 0, 3]));
        let mut bodies: Vec<Reserved> = (0..75).map(|_| Reserved::default()).collect();
        for body in &mut bodies {
            budget.reserve(body, 1, greedy).unwrap();
        }
        let mut one_more = Reserved::default();
        assert_eq!(
            budget.reserve(&mut one_more, 1, greedy),
            Err(Rejection::OverCapacity)
        );
        let mut theirs = Reserved::default();
        budget.reserve(&mut theirs, 25, honest).unwrap();
        assert_eq!(budget.available(), 0);
        let mut refused = Reserved::default();
        assert_eq!(
            budget.reserve(&mut refused, 1, Some(IpAddr::from([127, 0, 0, 4]))),
            Err(Rejection::OverCapacity),
            "the whole budget is spent"
        );
        drop(refused);
        assert_eq!(
            budget.peers.held_by(IpAddr::from([127, 0, 0, 4])),
            0,
            "a refusal holds nothing"
        );
        drop(bodies);
        assert_eq!(budget.peers.held_by(greedy_ip), 0);
        budget.reserve(&mut one_more, 50, greedy).unwrap();
    }
}
