//! The seventh scenario, on the `orders` route and its durable inbox: the
//! handler is down for maintenance while the gateway delivers orders, and
//! every order still ships exactly once when it comes back.
//!
//! Apart from the other six because it is the only one that waits for
//! idemgate's own background redeliveries rather than for an answer.

use std::time::Duration;

use tokio::time::Instant;

use super::handler::{Behaviour, LegacyHandler};
use super::report::Report;
use super::sender::{Delivery, Seen, Sender};
use super::{ACK_BODY, ORDER_PATH};

/// The orders delivered while the handler is down, one payment number each.
const ORDER_IDS: [&str; 5] = ["PAY-2001", "PAY-2002", "PAY-2003", "PAY-2004", "PAY-2005"];
/// Copies of each order the gateway sends while the handler is down: the
/// delivery and one retry.
const COPIES_WHILE_DOWN: usize = 2;
/// How long the handler stays down after the last copy, so idemgate's
/// redeliveries (every 300 ms at first) meet the 503 too.
const DOWN_FOR: Duration = Duration::from_millis(1_000);
/// How long the scenario waits for every order to ship once the handler
/// is back (the backoff is capped at 1 s, so this is generous).
const SHIP_WITHIN: Duration = Duration::from_secs(10);
/// How often it looks at the handler's counts meanwhile.
const POLL_EVERY: Duration = Duration::from_millis(100);
/// How long it keeps watching after the last order shipped, so a second
/// shipment would show.
const WATCH_AFTER: Duration = Duration::from_millis(1_500);

/// The handler's quirk for this scenario: down for its orders.
pub(super) fn behaviours() -> impl Iterator<Item = (&'static str, Behaviour)> {
    ORDER_IDS.into_iter().map(|id| (id, Behaviour::Maintenance))
}

/// 7. The handler is down (503): every copy of every order is acknowledged
///    with `success` at once, nothing ships; when the handler is back,
///    idemgate's redeliveries ship each order exactly once, and a later
///    copy is still acknowledged without shipping again.
pub(super) async fn handler_down(
    sender: &Sender,
    handler: &LegacyHandler,
) -> Result<Report, String> {
    let order = |id| Delivery::fresh(id).to(ORDER_PATH);
    let mut seen = Vec::new();
    for id in ORDER_IDS {
        seen.extend(sender.in_turn(|| order(id), COPIES_WHILE_DOWN).await?);
    }
    tokio::time::sleep(DOWN_FOR).await;
    let shipped_while_down = shipped(handler);
    handler.end_maintenance();

    let deadline = Instant::now() + SHIP_WITHIN;
    while !all_shipped(handler) && Instant::now() < deadline {
        tokio::time::sleep(POLL_EVERY).await;
    }
    let all_shipped_in_time = all_shipped(handler);
    tokio::time::sleep(WATCH_AFTER).await;
    for id in ORDER_IDS {
        seen.push(sender.send(&order(id)).await?);
    }

    let mut report = Report::for_payments(
        "handler down: acked, ships once when back",
        handler,
        &ORDER_IDS,
        seen,
    );
    let while_down = ORDER_IDS.len() * COPIES_WHILE_DOWN;
    for index in 0..report.seen.len() {
        let first_copy = index < while_down && index % COPIES_WHILE_DOWN == 0;
        report.expect_answer(index, 200, !first_copy);
        let is_ack = report
            .seen
            .get(index)
            .and_then(Seen::answer)
            .is_some_and(|a| a.is_ack());
        report.expect(is_ack, || {
            format!("delivery {}: expected the ack {ACK_BODY:?}", index + 1)
        });
    }
    report.expect(shipped_while_down == 0, || {
        format!("{shipped_while_down} order(s) shipped while the handler was down")
    });
    report.expect(all_shipped_in_time, || {
        format!("not every order shipped within {SHIP_WITHIN:?} of the handler's return")
    });
    for id in ORDER_IDS {
        let (calls, shipped) = handler.counts(id);
        report.expect(shipped == 1, || {
            format!("{id}: expected 1 order shipped, saw {shipped}")
        });
        // The live call that met the 503, and the redelivery that shipped.
        report.expect(calls >= 2, || {
            format!("{id}: expected at least 2 backend calls, saw {calls}")
        });
    }
    Ok(report)
}

/// Orders of this scenario shipped so far.
fn shipped(handler: &LegacyHandler) -> u32 {
    ORDER_IDS.iter().map(|id| handler.counts(id).1).sum()
}

/// Whether every order of this scenario has shipped.
fn all_shipped(handler: &LegacyHandler) -> bool {
    ORDER_IDS.iter().all(|id| handler.counts(id).1 > 0)
}
