//! Stage 3: authenticate the delivery and check its freshness.
//!
//! This is the only place a [`Verified`] can be made, so unverified bytes
//! can not reach the store or, in enforce mode, the upstream. It is pure
//! computation: a forged or stale request causes no store access, no
//! upstream call and no side effect (contract §1 stage 3).
//!
//! A signature that holds is not yet enough: query parameters beside the
//! signed body that the backend could read in place of signed ones are
//! refused here too (400 `unsigned_parameters`, [`crate::pipeline::admit::parameters`]), so a
//! [`Verified`] request carries nothing unsigned a backend would merge in.

use crate::config::Route;
use crate::error::Rejection;
use crate::extract::Inbound;
use crate::pipeline::admit::parameters;
use crate::signature::{self, Authenticity};

/// A request whose signature and timestamp checked out.
#[derive(Debug)]
pub struct Verified {
    inbound: Inbound,
    authenticity: Authenticity,
}

impl Verified {
    /// The buffered request.
    pub fn inbound(&self) -> &Inbound {
        &self.inbound
    }

    /// The buffered request, for the one forward of a first delivery.
    pub fn into_inbound(self) -> Inbound {
        self.inbound
    }

    /// Which secret verified it, and the id it signed.
    pub fn authenticity(&self) -> &Authenticity {
        &self.authenticity
    }
}

/// A request that failed verification, handed back so shadow mode can
/// still forward it.
#[derive(Debug)]
pub struct Unverified {
    /// The request as received.
    pub inbound: Inbound,
    /// Why it failed.
    pub rejection: Rejection,
}

/// Verifies `inbound` under `route`'s scheme at `now_ms`, then refuses
/// unsigned parameters beside its signed content.
pub fn verify(inbound: Inbound, route: &Route, now_ms: u64) -> Result<Verified, Box<Unverified>> {
    let verified = signature::verify(&route.scheme, &inbound, now_ms).and_then(|authenticity| {
        parameters::check_query(&route.scheme, &inbound).map(|()| authenticity)
    });
    match verified {
        Ok(authenticity) => Ok(Verified {
            inbound,
            authenticity,
        }),
        Err(rejection) => Err(Box::new(Unverified { inbound, rejection })),
    }
}
