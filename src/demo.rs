//! `idemgate demo`: the product's promise, shown end to end on loopback.
//!
//! Payment gateways and webhook senders deliver *at least once*: they retry
//! after a lost answer, race their own retries, and retry after hanging up.
//! Passed straight to a legacy handler, each copy ships the order again.
//! This demo wires up the three parties of that story, all in this process
//! and all on `127.0.0.1` with ports chosen by the OS:
//!
//! * a **legacy handler** (a tiny hyper server) that "ships an order" for
//!   every payment notification it accepts and counts, per payment, how
//!   often it was called and how often it shipped; it can be slow, fail
//!   once, or be down for maintenance (503) for particular payments;
//! * **idemgate** itself, started through [`crate::app::start`] with an
//!   embedded store in a fresh temporary directory and two HMAC-signed
//!   routes in front of the handler: `payments`, `orders` with a
//!   durable inbox that acknowledges deliveries the handler fails and
//!   redelivers them, and `lifecycle`, whose notices must follow the
//!   payment's state machine;
//! * a **sender** that behaves like a real gateway: every retry is re-signed
//!   with a fresh timestamp, duplicates arrive in bursts, a connection is
//!   dropped mid-request, and a forger and a replayer of a stale capture try
//!   their luck.
//!
//! Each scenario uses its own payment numbers, checks what the sender got
//! and what the handler did against contract §1–§4, and becomes one row of the
//! printed table. [`run`] returns `Ok(true)` only if every row is `ok`.
//!
//! Layout: `setup` (the configuration and the temporary directory for the
//! store), `handler` (the legacy handler), `sender` (the gateway),
//! `scenarios` (the first six scenarios and the handler's quirks for them),
//! `inbox_scenario` (the seventh: the handler down, on the inbox route),
//! `entity_scenario` (the eighth: out-of-order notices on the lifecycle
//! route's state machine) and
//! `report` (the rows and everything printed). This file wires them up.

mod entity_scenario;
mod handler;
mod inbox_scenario;
mod report;
mod scenarios;
mod sender;
mod setup;

use handler::LegacyHandler;
use sender::Sender;

use crate::config::Config;

/// The secret the gateway and idemgate share.
const SECRET: &[u8] = b"demo-secret-0123456789";
/// Where the gateway delivers its notifications.
const NOTIFY_PATH: &str = "/notify/payment";
/// Where it delivers order notifications: the `orders` route, with an inbox.
const ORDER_PATH: &str = "/notify/order";
/// Where it delivers lifecycle notices: the `lifecycle` route, whose
/// `[route.entity]` enforces the payment's state machine.
const LIFECYCLE_PATH: &str = "/notify/state";
/// What the `orders` route's inbox answers for a delivery it queued.
const ACK_BODY: &str = "success";

/// Where `idemgate demo` writes idemgate's own log unless `--verbose`:
/// `idemgate-demo.log` in the temporary directory (`TMPDIR`), replaced by
/// each run, so the demo's output ends with its verdict rather than with
/// the warnings scenario 8 provokes on purpose.
pub fn log_file() -> std::path::PathBuf {
    std::env::temp_dir().join("idemgate-demo.log")
}

/// Runs the demonstration and prints its table, then its verdict, last.
/// `log` names the file idemgate's log goes to (`None`: it is on stderr),
/// for the reader.
///
/// Returns `Ok(true)` if every scenario behaved as specified, `Ok(false)`
/// if any did not, and `Err` if the demo could not run at all (a socket,
/// the temporary directory, idemgate failing to start).
pub async fn run(log: Option<&std::path::Path>) -> Result<bool, String> {
    let workdir = setup::work_dir()?;
    let handler = LegacyHandler::start(scenarios::behaviours()).await?;
    let config = Config::parse(&setup::config_text(workdir.path(), handler.addr)?)
        .map_err(|error| format!("demo configuration: {error}"))?;
    // The recorder, so the demo's admin listener exports what it counted
    // (scenario 8 reads a discrepancy back). Another recorder already in
    // this process (a test binary) leaves the demo without one.
    let metrics = crate::app::install_metrics().ok();
    let app = crate::app::start(config, metrics)
        .await
        .map_err(|error| format!("starting idemgate: {error}"))?;
    report::print_setup(&app, &handler, workdir.path());

    let sender = Sender::new(app.proxy_addr);
    let reports = scenarios::run_scenarios(&sender, &handler, app.admin_addr).await;
    drop(sender);
    app.stop().await;
    drop(handler); // aborts the handler's server task
    setup::remove(workdir); // removes the temporary directory

    let reports = reports?;
    report::print_table(&reports);
    Ok(report::print_summary(&reports, log))
}
