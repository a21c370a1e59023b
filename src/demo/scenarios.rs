//! The first six scenarios, each an at-least-once misbehaviour of a real
//! gateway, with the payment number and timings it uses and what the contract
//! §1–§4 says must come of it; the seventh (the handler down, on the
//! `orders` route's inbox) lives in [`super::inbox_scenario`].
//!
//! Each scenario drives the [`Sender`], reads the [`LegacyHandler`]'s counts
//! and returns a [`Report`]; adding or changing a scenario touches only this
//! file (and [`behaviours`] if the handler must misbehave for it).

use std::collections::HashMap;
use std::time::Duration;

use super::handler::{Behaviour, LegacyHandler};
use super::report::Report;
use super::sender::{Answer, Delivery, Seen, Sender};
use super::{SECRET, entity_scenario, inbox_scenario};

/// What the forger signs with.
const FORGED_SECRET: &[u8] = b"guessed-secret";

/// Payment numbers, one per scenario, so the handler's counts stay apart.
const RETRIES_ID: &str = "PAY-1001";
const BURST_ID: &str = "PAY-1002";
const HANGUP_ID: &str = "PAY-1003";
const FLAKY_ID: &str = "PAY-1004";
const FORGED_ID: &str = "PAY-1005";
const STALE_ID: &str = "PAY-1006";

/// Copies in the concurrent burst.
const BURST_SIZE: usize = 10;
/// How long the handler works on the burst's payment, so the copies overlap.
const BURST_WORK: Duration = Duration::from_millis(300);
/// How long the handler works on the hang-up scenario's payment.
const HANGUP_WORK: Duration = Duration::from_secs(1);
/// The longest the impatient sender waits for the handler to start work
/// before it drops its connection (it drops it as soon as the work starts,
/// however loaded the machine: a fixed delay could fall before the claim).
const HANGUP_AFTER_AT_MOST: Duration = Duration::from_secs(3);
/// When it retries, counted from the hang-up: after the handler finished.
const HANGUP_RETRY_AFTER: Duration = Duration::from_millis(1_400);
/// How old the captured, replayed delivery is (tolerance is 5 minutes).
const STALE_AGE: Duration = Duration::from_secs(600);

/// The per-payment quirks of the legacy handler.
pub(super) fn behaviours() -> HashMap<&'static str, Behaviour> {
    let mut behaviours = HashMap::from([
        (BURST_ID, Behaviour::Slow(BURST_WORK)),
        (HANGUP_ID, Behaviour::Slow(HANGUP_WORK)),
        (FLAKY_ID, Behaviour::FailFirst),
    ]);
    behaviours.extend(inbox_scenario::behaviours());
    behaviours
}

/// The scenarios, in order; each one's report, or the first
/// infrastructure failure.
pub(super) async fn run_scenarios(
    sender: &Sender,
    handler: &LegacyHandler,
    admin: std::net::SocketAddr,
) -> Result<Vec<Report>, String> {
    Ok(vec![
        sequential_retries(sender, handler).await?,
        concurrent_burst(sender, handler).await?,
        hang_up_mid_request(sender, handler).await?,
        failure_then_success(sender, handler).await?,
        forged_delivery(sender, handler).await?,
        stale_delivery(sender, handler).await?,
        inbox_scenario::handler_down(sender, handler).await?,
        entity_scenario::out_of_order(sender, handler, admin).await?,
    ])
}

/// 1. The gateway did not see the answer and retries twice, each retry
///    re-signed: one shipment, the first answer live, the rest replays.
async fn sequential_retries(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let seen = sender.in_turn(|| Delivery::fresh(RETRIES_ID), 3).await?;
    let mut report = Report::new("sequential retries", handler, RETRIES_ID, seen);
    report.expect_backend(1, 1);
    report.expect_answers(&[(200, false), (200, true), (200, true)]);
    report.expect_same_body(0, [1, 2]);
    Ok(report)
}

/// 2. Ten copies race each other while the handler is busy: one shipment,
///    one live answer, nine replays of it.
async fn concurrent_burst(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let seen = sender.burst(&Delivery::fresh(BURST_ID), BURST_SIZE).await?;
    let mut report = Report::new("10 concurrent duplicates", handler, BURST_ID, seen);
    report.expect_backend(1, 1);
    let answers: Vec<&Answer> = report.seen.iter().filter_map(Seen::answer).collect();
    let all_ok = answers.len() == BURST_SIZE && answers.iter().all(|a| a.status == 200);
    let live = answers.iter().filter(|a| a.replayed == Some(false)).count();
    let replays = answers.iter().filter(|a| a.replayed == Some(true)).count();
    report.expect(all_ok, || format!("expected {BURST_SIZE} x 200"));
    report.expect(live == 1 && replays == BURST_SIZE - 1, || {
        format!(
            "expected 1 forwarded and {} replayed, saw {live} and {replays}",
            BURST_SIZE - 1
        )
    });
    report.expect_same_body(0, 1..BURST_SIZE);
    Ok(report)
}

/// 3. The gateway gives up as soon as the handler has started its second
///    of work, then retries: the work was not cancelled, and the retry gets
///    its answer without a second shipment.
async fn hang_up_mid_request(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let working = async {
        let started = tokio::time::Instant::now();
        while handler.counts(HANGUP_ID).0 == 0 && started.elapsed() < HANGUP_AFTER_AT_MOST {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let first = sender.hang_up(&Delivery::fresh(HANGUP_ID), working).await?;
    tokio::time::sleep(HANGUP_RETRY_AFTER).await;
    let retry = sender.send(&Delivery::fresh(HANGUP_ID)).await?;
    let mut report = Report::new(
        "hang-up mid-request, retry",
        handler,
        HANGUP_ID,
        vec![first, retry],
    );
    report.expect_backend(1, 1);
    report.expect_answer(1, 200, true);
    let shipped_this = report
        .seen
        .get(1)
        .and_then(Seen::answer)
        .and_then(|a| serde_json::from_slice::<serde_json::Value>(&a.body).ok())
        .is_some_and(|body| body.get("shipped").and_then(|v| v.as_str()) == Some(HANGUP_ID));
    report.expect(shipped_this, || {
        "the replay is not the handler's answer for this payment".to_owned()
    });
    Ok(report)
}

/// 4. The handler fails once: the 500 is passed through and leaves no
///    trace, the retry is forwarded and ships, a third copy is a replay.
async fn failure_then_success(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let seen = sender.in_turn(|| Delivery::fresh(FLAKY_ID), 3).await?;
    let mut report = Report::new("500 once, then retries", handler, FLAKY_ID, seen);
    report.expect_backend(2, 1);
    report.expect_answers(&[(500, false), (200, false), (200, true)]);
    report.expect_same_body(1, [2]);
    Ok(report)
}

/// 5. A delivery signed with the wrong secret: 401, the handler untouched.
async fn forged_delivery(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let forged = Delivery::new(FORGED_ID, FORGED_SECRET, Duration::ZERO);
    let seen = vec![sender.send(&forged).await?];
    let mut report = Report::new("forged signature", handler, FORGED_ID, seen);
    report.expect_backend(0, 0);
    report.expect_rejection(0, 401, "signature_invalid");
    Ok(report)
}

/// 6. A correctly signed capture replayed ten minutes later: 401, the
///    handler untouched.
async fn stale_delivery(sender: &Sender, handler: &LegacyHandler) -> Result<Report, String> {
    let stale = Delivery::new(STALE_ID, SECRET, STALE_AGE);
    let seen = vec![sender.send(&stale).await?];
    let mut report = Report::new("stale timestamp (10 min old)", handler, STALE_ID, seen);
    report.expect_backend(0, 0);
    report.expect_rejection(0, 401, "timestamp_out_of_window");
    Ok(report)
}
