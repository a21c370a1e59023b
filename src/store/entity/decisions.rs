//! The entity's decisions as counters, named once for whoever takes them:
//! the pipeline at the door (a claim judged a repeat or a refused change)
//! and an inbox worker when a held notice's turn comes
//! (`store::entity::held`). Both count into the same series.

use metrics::counter;

use super::Judgement;
use crate::metrics::Description;

/// `idemgate_entity_discrepancies_total{route, from, to}`: changes the
/// machine refused, which never reached the handler.
pub(crate) const DISCREPANCIES_TOTAL: Description = Description::counter(
    "idemgate_entity_discrepancies_total",
    "Deliveries whose state change the route's entity machine refused (never forwarded), by from and to state",
);
/// `idemgate_entity_repeats_total{route, state}`: deliveries announcing the
/// state their entity is already in, acknowledged without the handler.
pub(crate) const REPEATS_TOTAL: Description = Description::counter(
    "idemgate_entity_repeats_total",
    "Deliveries announcing the state their entity is already in, acknowledged without the handler",
);

/// How "no state yet" is named in labels, logs and problem details.
pub(crate) const NO_STATE: &str = "none";

/// Counts `judgement` on route `route` for a notice announcing `to`: a
/// refusal as a discrepancy, a repeat as a repeat.
pub(crate) fn count(route: &str, judgement: &Judgement, to: &str) {
    match judgement {
        Judgement::Refused { from } => {
            let from = from.as_deref().unwrap_or(NO_STATE).to_owned();
            counter!(DISCREPANCIES_TOTAL.name, "route" => route.to_owned(), "from" => from, "to" => to.to_owned())
                .increment(1);
        }
        Judgement::Repeat => {
            counter!(REPEATS_TOTAL.name, "route" => route.to_owned(), "state" => to.to_owned())
                .increment(1);
        }
    }
}
