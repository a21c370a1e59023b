//! Fair shares of a shared resource between peers (client addresses).
//!
//! The body budget (`[limits] max_buffered_bytes`) and the connection cap
//! (`max_connections`) protect memory, but not availability: one peer that
//! opens many connections and trickles their bodies could hold all of
//! both, and every honest sender would get 503 `over_capacity`. So no one
//! peer may hold more than [`PEER_SHARE`] of either: the rest always stays
//! for the others. A single peer (every delivery through one load
//! balancer) can still use three quarters of each; one behind a load
//! balancer is one peer, so put the budget's size where the balancer is.
//!
//! Holdings are counted per IP address in a map under a mutex, touched once
//! per body chunk and once per connection; an entry goes when its peer
//! holds nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use metrics::counter;

use crate::metrics::Description;

/// The part of a resource one peer may hold: three quarters.
pub(crate) const PEER_SHARE: (usize, usize) = (3, 4);

/// `idemgate_peer_share_refusals_total{resource}`: what a peer was refused
/// because it already held its share ([`PEER_SHARE`]).
pub(crate) const PEER_SHARE_REFUSALS: Description = Description::counter(
    "idemgate_peer_share_refusals_total",
    "Body bytes or connections refused to a peer that already held its share (label resource)",
);

/// What a peer's share is of (`resource` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// `[limits] max_buffered_bytes`.
    BodyBytes,
    /// `[limits] max_connections`.
    Connections,
}

impl Resource {
    fn label(self) -> &'static str {
        match self {
            Self::BodyBytes => "body_bytes",
            Self::Connections => "connections",
        }
    }

    /// Sets both label values' series to 0 at start-up.
    pub(crate) fn register() {
        for resource in [Self::BodyBytes, Self::Connections] {
            counter!(PEER_SHARE_REFUSALS.name, "resource" => resource.label()).absolute(0);
        }
    }
}

/// The units of a resource of `total` that no one peer may take: a
/// quarter, rounded down.
pub(crate) fn left_to_others(total: usize) -> usize {
    let (part, whole) = PEER_SHARE;
    total / whole * (whole - part)
}

/// Each peer's holding of one resource, capped at its share.
#[derive(Debug)]
pub(crate) struct PeerShares {
    resource: Resource,
    cap: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// What one holder (a body, a connection) holds of its peer's share;
/// given back when dropped.
#[derive(Debug)]
pub(crate) struct PeerHold {
    shares: Arc<PeerShares>,
    peer: IpAddr,
    amount: usize,
}

impl PeerShares {
    /// Shares of a resource of `total` units. The share is rounded up, so
    /// a resource of under four units (`max_connections = 2`) is not
    /// shared at all rather than cut for its only peer.
    pub(crate) fn new(resource: Resource, total: usize) -> Arc<Self> {
        Arc::new(Self {
            resource,
            cap: (total - left_to_others(total)).max(1),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// An empty hold for `peer`, to grow with [`PeerHold::grow`].
    pub(crate) fn hold(self: &Arc<Self>, peer: IpAddr) -> PeerHold {
        PeerHold {
            shares: Arc::clone(self),
            peer,
            amount: 0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PeerHold {
    /// Adds `more` units, unless the peer would then hold more than its
    /// share: `false` (counted), and nothing changes.
    pub(crate) fn grow(&mut self, more: usize) -> bool {
        let mut held = self.shares.lock();
        let now = held.get(&self.peer).copied().unwrap_or(0);
        let Some(after) = now.checked_add(more).filter(|a| *a <= self.shares.cap) else {
            drop(held);
            counter!(PEER_SHARE_REFUSALS.name, "resource" => self.shares.resource.label())
                .increment(1);
            return false;
        };
        held.insert(self.peer, after);
        self.amount += more;
        true
    }

    /// Gives `less` units back (a growth the shared resource then refused).
    pub(crate) fn shrink(&mut self, less: usize) {
        let less = less.min(self.amount);
        self.amount -= less;
        self.shares.release(self.peer, less);
    }
}

impl PeerShares {
    fn release(&self, peer: IpAddr, amount: usize) {
        if amount == 0 {
            return;
        }
        let mut held = self.lock();
        if let Some(now) = held.get_mut(&peer) {
            *now = now.saturating_sub(amount);
            if *now == 0 {
                held.remove(&peer);
            }
        }
    }

    /// Units `peer` holds now.
    #[cfg(test)]
    pub(crate) fn held_by(&self, peer: IpAddr) -> usize {
        self.lock().get(&peer).copied().unwrap_or(0)
    }
}

impl Drop for PeerHold {
    fn drop(&mut self) {
        self.shares.release(self.peer, self.amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn one_peer_holds_at_most_three_quarters_and_gives_it_back() {
        let shares = PeerShares::new(Resource::BodyBytes, 100);
        let mut greedy = shares.hold(ip(2));
        assert!(greedy.grow(70));
        let mut more = shares.hold(ip(2));
        assert!(more.grow(5), "75 of 100: its share, across holds");
        assert!(!more.grow(1), "a 76th unit is refused");
        let mut honest = shares.hold(ip(3));
        assert!(honest.grow(25), "the other peer still has its room");
        drop(greedy);
        assert_eq!(shares.held_by(ip(2)), 5);
        more.shrink(5);
        assert_eq!(shares.held_by(ip(2)), 0);
        drop(more);
        drop(honest);
        assert!(shares.lock().is_empty(), "entries go when nothing is held");
    }

    #[test]
    fn a_tiny_resource_is_not_cut_for_its_only_peer() {
        let shares = PeerShares::new(Resource::Connections, 1);
        let mut one = shares.hold(ip(2));
        assert!(one.grow(1));
        assert!(!one.grow(1));
        let two = PeerShares::new(Resource::Connections, 2);
        assert!(two.hold(ip(2)).grow(2), "under four units: no share");
        let eight = PeerShares::new(Resource::Connections, 8);
        let mut greedy = eight.hold(ip(2));
        assert!(
            greedy.grow(6) && !greedy.grow(1),
            "two of eight stay for others"
        );
    }
}
