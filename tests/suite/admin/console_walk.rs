//! The console's listings in a real headless Chromium while the store walk
//! is not finished: "nothing" is said only of a whole walk.

use std::time::Duration;

use idemgate::pipeline::admit::identify::hash_key_parts;
use idemgate::record::{Fingerprint, OwnerToken, Record};

use super::console::sign_in;
use super::{TOKEN, times_out_to_unknown, with_admin};
use crate::support::*;

/// 8,000 healthy claims and no unknown outcome: the eleven pages the panel
/// follows examine part of them, so it must say the walk goes on (and
/// offer More), never "No unknown outcomes" nor a bare empty table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_unfinished_walk_is_not_called_empty() {
    let Some(browser) = Browser::start("console unfinished walk").await else {
        return;
    };
    let redis = RedisServer::start();
    // Claimed with a 1 ms hold: in flight for their whole minute of TTL.
    let healthy = Record::in_flight(OwnerToken([5; 16]), Fingerprint([6; 32]), None)
        .with_hold(Duration::from_millis(1))
        .encode()
        .unwrap();
    let records: Vec<(String, Vec<u8>)> = (0..8_000)
        .map(|n| {
            let hash = hex::encode(hash_key_parts([format!("healthy-{n}").as_bytes()]));
            (format!("idemgate:pay:{hash}"), healthy.to_vec())
        })
        .collect();
    redis.write_many(&records, 60_000, &[]);
    let upstream = Upstream::start().await;
    let gate = Gate::start(&with_admin(&times_out_to_unknown(&redis, &upstream))).await;
    browser.open_console(gate.admin).await;
    sign_in(&browser, TOKEN).await;
    let panel = "[data-route='pay'] [data-panel='unknown']";
    browser
        .until_text(
            &format!("{panel} [data-walk='unfinished']"),
            "the walk is not finished",
        )
        .await;
    let text = browser.find(panel).await.text().await.expect("panel text");
    assert!(!text.contains("No unknown outcomes"), "{text}");
    assert_eq!(
        browser
            .count(&format!("{panel} button[data-action='more']:not([hidden])"))
            .await,
        1
    );
    assert_eq!(
        browser.count(&format!("{panel} table:not([hidden])")).await,
        0
    );
    browser.screenshot("console-unfinished-walk").await;
    gate.stop().await;
}

/// Signed in with a read-only token (`[[admin.tokens]] scope = "read"`),
/// the console shows an unknown outcome but offers no action on it, and
/// says why; the operator's token still gets the Purge button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_read_only_token_is_offered_no_action() {
    let Some(browser) = Browser::start("console read-only token").await else {
        return;
    };
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let text = with_admin(&times_out_to_unknown(&redis, &upstream))
        + "[[admin.tokens]]\nname = \"viewer\"\ntoken = \"literal:viewer-token-0001\"\n";
    let gate = Gate::start(&text).await;
    assert_eq!(
        deliver(&gate.url("/notify"), &payment("p-view"))
            .await
            .status,
        504
    );
    let row = "[data-route='pay'] [data-panel='unknown'] tr[data-kind='unknown']";
    for (token, buttons, says) in [
        (
            "viewer-token-0001",
            0,
            "token viewer (read only: no actions)",
        ),
        (TOKEN, 1, "token admin"),
    ] {
        browser.open_console(gate.admin).await;
        browser
            .client
            .execute("sessionStorage.clear(); location.reload();", vec![])
            .await
            .expect("sign out");
        sign_in(&browser, token).await;
        browser.until_text(row, "p-view").await;
        browser.until_text("#instance", says).await;
        assert_eq!(
            browser
                .count(&format!("{row} button[data-action='purge']"))
                .await,
            buttons,
            "{token}"
        );
    }
    gate.stop().await;
}
