//! The eighth scenario, on the `lifecycle` route and its `[route.entity]`:
//! the gateway sends each payment's notices out of order, every one with
//! its own notify id, so deduplicating by key alone would let them all
//! through. The payment's state machine decides instead.
//!
//! Apart from the other scenarios because it reads idemgate's own count of
//! discrepancies from the admin listener.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::handler::LegacyHandler;
use super::report::Report;
use super::sender::{Delivery, Seen, Sender};

/// A success, then a failure notice that arrives after it.
const SUCCEEDED: &str = "PAY-3001";
/// A failure, then the customer pays again: a success, and a second
/// notice of that success.
const PAID_AGAIN: &str = "PAY-3002";
/// A cancellation, then a success that arrives after it.
const CANCELLED: &str = "PAY-3003";

/// 8. Out-of-order notices for three payments on the lifecycle route:
///    a failure after the success is acknowledged and never reaches the
///    handler; a success after a failure ships once (its second notice is
///    a repeat, acknowledged); a success after the cancellation is a
///    discrepancy, acknowledged, counted, never shipped.
pub(super) async fn out_of_order(
    sender: &Sender,
    handler: &LegacyHandler,
    admin: SocketAddr,
) -> Result<Report, String> {
    let notices = [
        (SUCCEEDED, "N-1", "SUCCESS"),
        (SUCCEEDED, "N-2", "FAILED"),
        (PAID_AGAIN, "N-3", "FAILED"),
        (PAID_AGAIN, "N-4", "SUCCESS"),
        (PAID_AGAIN, "N-5", "SUCCESS"),
        (CANCELLED, "N-6", "PENDING"),
        (CANCELLED, "N-7", "CANCELLED"),
        (CANCELLED, "N-8", "SUCCESS"),
    ];
    let mut seen: Vec<Seen> = Vec::with_capacity(notices.len());
    for (id, notify_id, status) in notices {
        seen.push(
            sender
                .send(&Delivery::notice(id, notify_id, status))
                .await?,
        );
    }
    let discrepancies = discrepancies(admin, "CANCELLED", "SUCCESS").await?;

    let mut report = Report::for_payments(
        "out-of-order notices: state machine holds",
        handler,
        &[SUCCEEDED, PAID_AGAIN, CANCELLED],
        seen,
    );
    // Forwarded: N-1, N-3, N-4, N-6, N-7. Acknowledged without the
    // handler (the ack, marked replayed): N-2, N-5, N-8.
    for (index, forwarded) in [true, false, true, true, false, true, true, false]
        .into_iter()
        .enumerate()
    {
        report.expect_answer(index, 200, !forwarded);
        let is_ack = report
            .seen
            .get(index)
            .and_then(Seen::answer)
            .is_some_and(|a| a.is_ack());
        report.expect(forwarded != is_ack, || {
            let what = if forwarded {
                "the handler's answer"
            } else {
                "the ack"
            };
            format!("notice {}: expected {what}", index + 1)
        });
    }
    for (id, calls, shipped) in [(SUCCEEDED, 1, 1), (PAID_AGAIN, 2, 1), (CANCELLED, 2, 0)] {
        let (seen_calls, seen_shipped) = handler.counts(id);
        report.expect((seen_calls, seen_shipped) == (calls, shipped), || {
            format!("{id}: expected {calls} call(s) and {shipped} shipment(s), saw {seen_calls} and {seen_shipped}")
        });
    }
    // Without a recorder (the demo run inside a test binary that has one
    // of its own) nothing is exported to read back.
    if let Some(counted) = discrepancies {
        report.expect(counted == 1.0, || {
            format!("expected 1 CANCELLED -> SUCCESS discrepancy counted, saw {counted}")
        });
    }
    Ok(report)
}

/// `idemgate_entity_discrepancies_total` of the lifecycle route for
/// `from` → `to`, read from the admin listener's `/metrics`; `None` when
/// nothing is exported (no recorder).
async fn discrepancies(admin: SocketAddr, from: &str, to: &str) -> Result<Option<f64>, String> {
    let mut stream = tokio::net::TcpStream::connect(admin)
        .await
        .map_err(|error| format!("admin listener: {error}"))?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes())
        .await
        .map_err(|error| format!("admin listener: {error}"))?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .await
        .map_err(|error| format!("admin listener: {error}"))?;
    let labels = [
        "route=\"lifecycle\"".to_owned(),
        format!("from=\"{from}\""),
        format!("to=\"{to}\""),
    ];
    let series: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("idemgate_entity_discrepancies_total{"))
        .filter_map(|rest| rest.split_once("} "))
        .collect();
    if series.is_empty() {
        return Ok(None);
    }
    let matching = series.iter().find(|(set, _)| {
        labels
            .iter()
            .all(|label| set.split(',').any(|l| l == label))
    });
    Ok(Some(
        matching
            .and_then(|(_, value)| value.trim().parse().ok())
            .unwrap_or(0.0),
    ))
}
