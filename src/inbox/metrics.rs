//! The durable inbox's metrics (contract §7; docs/inbox.md).
//!
//! The three gauges report the **shared** backlog of the route's scope, as
//! the store holds it: every instance reports the same value, so
//! dashboards aggregate them with `max`, never `sum`. The counter is this
//! instance's own redelivery work.

use metrics::{Counter, Gauge, Unit, counter, gauge};

use super::RedeliveryResult;
use crate::metrics::{Description, at_zero};
use crate::store::inbox::{BookLine, Books};

/// `idemgate_inbox_queued{route}`: deliveries queued or being redelivered.
pub(crate) const QUEUED: Description = Description::gauge(
    "idemgate_inbox_queued",
    "Inbox deliveries queued or being redelivered (shared: aggregate with max)",
);
/// `idemgate_inbox_oldest_age_seconds{route}`: age of the oldest of them
/// (0 when none): how long a payment has waited for its handler.
pub(crate) const OLDEST_AGE: Description = Description::gauge(
    "idemgate_inbox_oldest_age_seconds",
    "Age of the oldest queued inbox delivery (shared: aggregate with max)",
)
.in_unit(Unit::Seconds);
/// `idemgate_inbox_dead{route}`: dead and unknown deliveries waiting for an
/// operator (`/admin/inbox/{route}?state=dead`).
pub(crate) const DEAD: Description = Description::gauge(
    "idemgate_inbox_dead",
    "Inbox deliveries dead or with an unknown outcome, waiting for an operator (shared: aggregate with max)",
);
/// `idemgate_inbox_redeliveries_total{route, result}`: redeliveries this
/// instance finished, by how they ended.
pub(crate) const REDELIVERIES_TOTAL: Description = Description::counter(
    "idemgate_inbox_redeliveries_total",
    "Inbox redeliveries this instance finished, by result",
);

/// `idemgate_inbox_acknowledged_total{route}`: deliveries this instance
/// queued and acknowledged. The books' `acknowledged` line lives in the
/// store and goes with it when the store loses data (a restart without
/// persistence, a restored snapshot, a failover with lag), and then the
/// books still balance; this count lives in the instance, so the books
/// growing by less than the instances acknowledged shows the loss
/// (`IdemgateInboxBooksLost`).
pub(crate) const ACKNOWLEDGED_TOTAL: Description = Description::counter(
    "idemgate_inbox_acknowledged_total",
    "Deliveries this instance queued in the inbox and acknowledged to their sender",
);

/// `idemgate_inbox_full_total{route}`: failed first deliveries not
/// acknowledged because the scope already held `max_queued` deliveries
/// (their senders got the handler's failure and retry on their own).
pub(crate) const FULL_TOTAL: Description = Description::counter(
    "idemgate_inbox_full_total",
    "Failed first deliveries not acknowledged because the inbox held max_queued deliveries",
);

/// `idemgate_inbox_repaired_total{route}`: index entries this instance's
/// repair pass put back for deliveries the scope owes (found from their
/// records' owed-set entries): each one a delivery that would otherwise
/// have waited unseen, e.g. after a Redis Cluster failover.
pub(crate) const REPAIRED_TOTAL: Description = Description::counter(
    "idemgate_inbox_repaired_total",
    "Inbox deliveries whose missing index entry this instance's repair pass put back",
);

/// `idemgate_inbox_books{route, line}`: the scope's books as the store
/// keeps them (`acknowledged`, `delivered`, `dropped`), so that
/// acknowledged = delivered + dropped + queued + dead can be checked.
/// Shared like the backlog gauges (aggregate with `max`); they only grow,
/// and survive restarts, because the store holds them.
pub(crate) const BOOKS: Description = Description::gauge(
    "idemgate_inbox_books",
    "Inbox books kept in the store: deliveries acknowledged, delivered and dropped since the scope began (shared: aggregate with max)",
);

/// The inbox's metrics, described at start-up (`app::install_metrics`).
pub(crate) const DESCRIPTIONS: &[Description] = &[
    QUEUED,
    OLDEST_AGE,
    DEAD,
    BOOKS,
    ACKNOWLEDGED_TOTAL,
    FULL_TOTAL,
    REPAIRED_TOTAL,
    REDELIVERIES_TOTAL,
];

/// One inbox route's handles, every series created at zero.
#[derive(Debug)]
pub(crate) struct InboxMetrics {
    queued: Gauge,
    oldest_age: Gauge,
    dead: Gauge,
    redeliveries: [Counter; 4],
    /// `idemgate_unknown_outcomes_total{route}`, shared with first
    /// deliveries: a redelivery whose outcome is unknown needs the same
    /// operator, and the same alert.
    unknown_outcomes: Counter,
    acknowledged: Counter,
    full: Counter,
    repaired: Counter,
    books: [Gauge; 3],
}

impl InboxMetrics {
    /// Handles for `route`.
    pub(crate) fn new(route: &str) -> Self {
        let route = route.to_owned();
        let this = Self {
            queued: gauge!(QUEUED.name, "route" => route.clone()),
            oldest_age: gauge!(OLDEST_AGE.name, "route" => route.clone()),
            dead: gauge!(DEAD.name, "route" => route.clone()),
            redeliveries: RedeliveryResult::ALL.map(|tally| {
                at_zero(counter!(REDELIVERIES_TOTAL.name, "route" => route.clone(), "result" => tally.as_str()))
            }),
            unknown_outcomes: at_zero(counter!(crate::metrics::UNKNOWN_OUTCOMES_TOTAL.name, "route" => route.clone())),
            acknowledged: at_zero(counter!(ACKNOWLEDGED_TOTAL.name, "route" => route.clone())),
            full: at_zero(counter!(FULL_TOTAL.name, "route" => route.clone())),
            repaired: at_zero(counter!(REPAIRED_TOTAL.name, "route" => route.clone())),
            books: BookLine::ALL.map(|line| gauge!(BOOKS.name, "route" => route.clone(), "line" => line.as_str())),
        };
        this.backlog(0, 0.0, 0);
        this.books(&Books::default());
        this
    }

    /// Sets the shared backlog gauges.
    pub(crate) fn backlog(&self, queued: u64, oldest_age_seconds: f64, dead: u64) {
        self.queued.set(queued as f64);
        self.oldest_age.set(oldest_age_seconds);
        self.dead.set(dead as f64);
    }

    /// Sets the books gauges from the store's books.
    pub(crate) fn books(&self, books: &Books) {
        for line in BookLine::ALL {
            self.books[line as usize].set(books.get(line) as f64);
        }
    }

    /// Counts a delivery queued and acknowledged by this instance.
    pub(crate) fn acknowledged(&self) {
        self.acknowledged.increment(1);
    }

    /// Counts a failed first delivery the full inbox did not take.
    pub(crate) fn full(&self) {
        self.full.increment(1);
    }

    /// Counts a delivery the repair pass put back into its index.
    pub(crate) fn repaired(&self) {
        self.repaired.increment(1);
    }

    /// Counts one finished redelivery.
    pub(crate) fn redelivery(&self, tally: RedeliveryResult) {
        self.redeliveries[tally as usize].increment(1);
        if tally == RedeliveryResult::Unknown {
            self.unknown_outcomes.increment(1);
        }
    }
}
