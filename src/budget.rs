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

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Rejection;

/// The bytes of request bodies idemgate may hold at once.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    bytes: Arc<Semaphore>,
}

/// Bytes one body holds from the [`Budget`], returned when this is dropped.
#[derive(Debug, Default)]
pub(crate) struct Reserved {
    permit: Option<OwnedSemaphorePermit>,
}

impl Budget {
    /// A budget of `total` bytes.
    pub(crate) fn new(total: u64) -> Self {
        let total = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            bytes: Arc::new(Semaphore::new(total)),
        }
    }

    /// Adds `more` bytes to what `held` holds, or refuses with 503
    /// `over_capacity` if the budget does not have them now.
    pub(crate) fn reserve(&self, held: &mut Reserved, more: usize) -> Result<(), Rejection> {
        if more == 0 {
            return Ok(());
        }
        let more = u32::try_from(more).map_err(|_| Rejection::OverCapacity)?;
        let permit = Arc::clone(&self.bytes)
            .try_acquire_many_owned(more)
            .map_err(|_| Rejection::OverCapacity)?;
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
        budget.reserve(&mut first, 60).unwrap();
        budget.reserve(&mut first, 30).unwrap();
        assert_eq!(first.bytes(), 90);
        assert_eq!(budget.available(), 10);
        let mut second = Reserved::default();
        assert_eq!(
            budget.reserve(&mut second, 11),
            Err(Rejection::OverCapacity)
        );
        assert_eq!(second.bytes(), 0, "a refused reservation holds nothing");
        budget.reserve(&mut second, 10).unwrap();
        drop(first);
        assert_eq!(budget.available(), 90);
        drop(second);
        assert_eq!(budget.available(), 100);
    }

    #[test]
    fn an_empty_chunk_never_fails() {
        let budget = Budget::new(1);
        let mut held = Reserved::default();
        budget.reserve(&mut held, 1).unwrap();
        assert_eq!(budget.reserve(&mut held, 0), Ok(()));
    }
}
