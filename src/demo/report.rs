//! The report: one [`Report`] per scenario (what was sent, what the handler
//! did, what the sender got, and every deviation from the specification)
//! and the printed output built from them — the setup lines, the table and
//! the closing summary line.
//!
//! The scenarios only record expectations here; how results are shown is
//! decided in one place.

use std::path::Path;

use super::handler::LegacyHandler;
use super::sender::Seen;
use super::{ACK_BODY, LIFECYCLE_PATH, NOTIFY_PATH, ORDER_PATH};
use crate::app::RunningApp;

/// One row of the table: what was sent, what the handler did, what the
/// sender got, and every way that differed from the specification.
pub(super) struct Report {
    title: &'static str,
    sent: usize,
    calls: u32,
    shipped: u32,
    pub(super) seen: Vec<Seen>,
    problems: Vec<String>,
}

impl Report {
    pub(super) fn new(
        title: &'static str,
        handler: &LegacyHandler,
        id: &str,
        seen: Vec<Seen>,
    ) -> Self {
        Self::for_payments(title, handler, &[id], seen)
    }

    /// A row for a scenario with several payments: the handler's counts
    /// are their sums.
    pub(super) fn for_payments(
        title: &'static str,
        handler: &LegacyHandler,
        ids: &[&str],
        seen: Vec<Seen>,
    ) -> Self {
        let (calls, shipped) = ids
            .iter()
            .map(|id| handler.counts(id))
            .fold((0, 0), |(c, s), (calls, shipped)| (c + calls, s + shipped));
        Self {
            title,
            sent: seen.len(),
            calls,
            shipped,
            seen,
            problems: Vec::new(),
        }
    }

    fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Notes `problem` unless `holds`.
    pub(super) fn expect(&mut self, holds: bool, problem: impl FnOnce() -> String) {
        if !holds {
            self.problems.push(problem());
        }
    }

    /// The handler was called `calls` times and shipped `shipped` orders.
    pub(super) fn expect_backend(&mut self, calls: u32, shipped: u32) {
        let (seen_calls, seen_shipped) = (self.calls, self.shipped);
        self.expect(seen_calls == calls, || {
            format!("expected {calls} backend call(s), saw {seen_calls}")
        });
        self.expect(seen_shipped == shipped, || {
            format!("expected {shipped} order(s) shipped, saw {seen_shipped}")
        });
    }

    /// Answer `index` has this status and `Idempotent-Replayed` value.
    pub(super) fn expect_answer(&mut self, index: usize, status: u16, replayed: bool) {
        let got = self.seen.get(index).map(Seen::label);
        let matches = self
            .seen
            .get(index)
            .and_then(Seen::answer)
            .is_some_and(|a| a.status == status && a.replayed == Some(replayed));
        self.expect(matches, || {
            let want = if replayed { "replayed" } else { "forwarded" };
            format!(
                "delivery {}: expected {status} {want}, got {got:?}",
                index + 1
            )
        });
    }

    /// The answers, from the first on, have these statuses and
    /// `Idempotent-Replayed` values.
    pub(super) fn expect_answers(&mut self, answers: &[(u16, bool)]) {
        for (index, &(status, replayed)) in answers.iter().enumerate() {
            self.expect_answer(index, status, replayed);
        }
    }

    /// Answer `index` is idemgate's own problem+json with this status and reason.
    pub(super) fn expect_rejection(&mut self, index: usize, status: u16, reason: &str) {
        let got = self.seen.get(index).map(Seen::label);
        let matches = self
            .seen
            .get(index)
            .and_then(Seen::answer)
            .is_some_and(|a| a.status == status && a.reason.as_deref() == Some(reason));
        self.expect(matches, || {
            format!(
                "delivery {}: expected {status} {reason}, got {got:?}",
                index + 1
            )
        });
    }

    /// Every answer at `indices` has exactly the body of answer `first`.
    pub(super) fn expect_same_body(
        &mut self,
        first: usize,
        indices: impl IntoIterator<Item = usize>,
    ) {
        let body_at = |i: usize| self.seen.get(i).and_then(Seen::answer).map(|a| &a.body);
        let Some(reference) = body_at(first) else {
            self.problems
                .push(format!("delivery {}: no answer to compare with", first + 1));
            return;
        };
        let differing: Vec<usize> = indices
            .into_iter()
            .filter(|&i| body_at(i) != Some(reference))
            .map(|i| i + 1)
            .collect();
        self.expect(differing.is_empty(), || {
            format!(
                "deliveries {differing:?}: body differs from delivery {}",
                first + 1
            )
        });
    }
}

pub(super) fn print_setup(app: &RunningApp, handler: &LegacyHandler, workdir: &Path) {
    println!("idemgate demo: an at-least-once sender, idemgate, and a legacy handler");
    println!(
        "  legacy handler   http://{} (ships an order per accepted SUCCESS notice)",
        handler.addr
    );
    println!("  idemgate proxy   http://{}{NOTIFY_PATH}", app.proxy_addr);
    println!("                   http://{}{ORDER_PATH}", app.proxy_addr);
    println!(
        "                   http://{}{LIFECYCLE_PATH}",
        app.proxy_addr
    );
    println!("  idemgate admin   http://{}/metrics", app.admin_addr);
    println!(
        "  embedded store   {}",
        workdir.join("idemgate.redb").display()
    );
    println!(
        "  route payments   hex HMAC-SHA256 of the body, 5 min window, key = paymentNo + status"
    );
    println!(
        "  route orders     signed the same way, with an inbox: acknowledges {ACK_BODY:?} \
         when the handler fails, redelivers every 300ms-1s"
    );
    println!(
        "  route lifecycle  signed the same way, key = notifyId, [route.entity] on paymentNo: \
         PENDING -> SUCCESS | FAILED | CANCELLED, FAILED -> SUCCESS, SUCCESS -> REFUNDED"
    );
    println!();
}

/// `1 x a, 2 x b` style summary of the answers, in order of first appearance.
fn answer_counts(seen: &[Seen]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for label in seen.iter().map(Seen::label) {
        match counts.iter_mut().find(|(l, _)| *l == label) {
            Some((_, count)) => *count += 1,
            None => counts.push((label, 1)),
        }
    }
    counts
        .into_iter()
        .map(|(label, count)| match count {
            1 => label,
            _ => format!("{count} x {label}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn print_table(reports: &[Report]) {
    let header = [
        "#",
        "scenario",
        "sent",
        "backend calls",
        "orders shipped",
        "idemgate answered",
        "verdict",
    ];
    let rows: Vec<[String; 7]> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            [
                (i + 1).to_string(),
                r.title.to_owned(),
                r.sent.to_string(),
                r.calls.to_string(),
                r.shipped.to_string(),
                answer_counts(&r.seen),
                if r.ok() { "ok" } else { "FAILED" }.to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let numeric = [true, false, true, true, true, false, false];
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .zip(numeric)
            .map(|((cell, width), right)| {
                if right {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(&header.map(str::to_owned));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", rule.join("  "));
    for row in &rows {
        line(row);
    }
    println!();
    println!("forwarded:     the handler's live answer (Idempotent-Replayed: false)");
    println!(
        "replayed:      idemgate's stored copy of it, byte for byte (Idempotent-Replayed: true)"
    );
    println!(
        "acknowledged:  idemgate's {ACK_BODY:?} for a delivery it queued and redelivers itself"
    );
    println!(
        "ack replayed:  the same acknowledgement for a copy (Idempotent-Replayed: true), or for a"
    );
    println!("               notice its payment's state machine refuses or repeats (scenario 8)");
    println!("401 …:         idemgate's problem+json rejection; the handler never saw the request");
    for (i, report) in reports.iter().enumerate() {
        for problem in &report.problems {
            println!("  scenario {}: {problem}", i + 1);
        }
    }
}

/// Prints where idemgate's log went, then the verdict, last; returns
/// whether every scenario was ok.
pub(super) fn print_summary(reports: &[Report], log: Option<&Path>) -> bool {
    let sent: usize = reports.iter().map(|r| r.sent).sum();
    let calls: u32 = reports.iter().map(|r| r.calls).sum();
    let shipped: u32 = reports.iter().map(|r| r.shipped).sum();
    let failed = reports.iter().filter(|r| !r.ok()).count();
    println!();
    if let Some(log) = log {
        println!(
            "idemgate's own log (warnings and errors; `idemgate demo --verbose` shows it here): {}",
            log.display()
        );
    }
    if failed == 0 {
        println!(
            "all {} scenarios ok: {sent} deliveries sent, {calls} reached the handler, \
             {shipped} orders shipped (one per genuine payment), nothing shipped twice",
            reports.len()
        );
    } else {
        println!(
            "{failed} of {} scenarios FAILED: {sent} deliveries sent, {calls} reached the handler, \
             {shipped} orders shipped",
            reports.len()
        );
    }
    failed == 0
}
