//! The operator console at `/admin/` (docs/console.md): its files and
//! headers over plain HTTP, then the operator's jobs in a real headless
//! Chromium ([`Browser`]): the token prompt, an unknown outcome found and
//! purged (and the next delivery forwarded), dead deliveries retried and
//! dropped, and values from the wire shown as text, never as markup.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{TOKEN, admin, times_out_to_unknown, with_admin};
use crate::support::*;

/// A key value that would be an element if the page took it for markup.
const MARKUP_ID: &str = "<img src=x id=xss-key>";
/// A handler answer that would be an element likewise.
const MARKUP_ANSWER: &str = "<b id=\"xss-answer\">handler down</b>";

async fn embedded_gate(admin_section: bool) -> (tempfile::TempDir, Upstream, Gate) {
    let (dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let text = config_text(&store, &upstream.url(), "");
    let text = if admin_section {
        with_admin(&text)
    } else {
        text
    };
    (dir, upstream, Gate::start(&text).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_without_the_token_under_a_strict_policy() {
    let (_dir, _upstream, gate) = embedded_gate(true).await;
    for (path, media) in [
        ("/admin/", "text/html"),
        ("/admin/console.js", "text/javascript"),
        ("/admin/console.css", "text/css"),
    ] {
        let answer = admin(&gate, "GET", path, None).await;
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
        let header = |name: &str| answer.header(name).unwrap_or_default().to_owned();
        assert!(header("content-type").starts_with(media), "{path}");
        let policy = header("content-security-policy");
        assert!(policy.starts_with("default-src 'self';"), "{policy}");
        for directive in [
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "form-action 'none'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert!(!policy.contains("unsafe"), "{policy}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("cache-control"), "no-store", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
    }
    let page = admin(&gate, "GET", "/admin/", None).await;
    let page = String::from_utf8_lossy(&page.body);
    assert!(page.contains("<script src=\"/admin/console.js\""), "{page}");
    assert!(page.contains("type=\"password\""), "the token prompt");

    let moved = admin(&gate, "GET", "/admin", None).await;
    assert_eq!(
        (moved.status, moved.header("location")),
        (308, Some("/admin/"))
    );
    let refused = admin(&gate, "POST", "/admin/", Some(TOKEN)).await;
    assert_eq!(
        (refused.status, refused.header("allow")),
        (405, Some("GET"))
    );
    // The page is open; the data it shows is not.
    assert_eq!(admin(&gate, "GET", "/admin/info", None).await.status, 401);
    gate.stop().await;
}

/// Types `token` into the prompt and submits it.
pub(super) async fn sign_in(browser: &Browser, token: &str) {
    browser
        .type_into("#login:not([hidden]) #token", token)
        .await;
    browser.click("#sign-in").await;
}

/// The number of times the page has drawn the routes.
async fn loads(browser: &Browser) -> u64 {
    browser
        .client
        .execute("return Number(document.body.dataset.loads || 0);", vec![])
        .await
        .ok()
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// Clicks Refresh and waits for the page to draw again.
async fn refresh(browser: &Browser) {
    let before = loads(browser).await;
    browser.click("#refresh").await;
    let deadline = Instant::now() + PAGE_LIMIT;
    while loads(browser).await <= before {
        assert!(Instant::now() < deadline, "the page did not refresh");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An unknown outcome on a probe route shows its pending probe: the
/// handler is asked in about 35 s (`start_after`), none asked yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_unknown_outcome_shows_its_pending_probe() {
    let Some(browser) = Browser::start("console probe").await else {
        return;
    };
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let probe = "\n[route.probe]\npath = \"/orders/{json:/id}\"\nhandler_deadline = \"35s\"\n";
    let text = times_out_to_unknown(&redis, &upstream) + probe;
    let gate = Gate::start(&with_admin(&text)).await;
    assert_eq!(
        deliver(&gate.url("/notify"), &payment("probe-console"))
            .await
            .status,
        504
    );
    browser.open_console(gate.admin).await;
    sign_in(&browser, TOKEN).await;
    let row = "[data-route='pay'] [data-panel='unknown'] tr[data-kind='unknown']";
    browser.until_text(row, "probe: 0 asked, next in").await;
    browser.screenshot("console-probe").await;
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_console_asks_for_the_token_and_purges_an_unknown_outcome() {
    let Some(browser) = Browser::start("console purge").await else {
        return;
    };
    // Without [admin] token the page says the API is off, and asks nothing.
    let (_dir, _plain_upstream, plain) = embedded_gate(false).await;
    browser.open_console(plain.admin).await;
    browser
        .until_text("#message", "admin API is disabled")
        .await;
    assert_eq!(browser.count("#login:not([hidden])").await, 0);
    plain.stop().await;

    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let gate = Gate::start(&with_admin(&times_out_to_unknown(&redis, &upstream))).await;
    let console = format!("http://{}/admin/", gate.admin);
    browser
        .client
        .goto(&console)
        .await
        .expect("open the console");
    browser
        .until_text("#message", "Enter the admin token")
        .await;
    browser.screenshot("console-token").await;

    sign_in(&browser, "not-the-token").await;
    browser.until_text("#message", "token was refused").await;
    assert_eq!(browser.count("section.route").await, 0);

    sign_in(&browser, TOKEN).await;
    browser.find("section.route[data-route='pay']").await;
    browser
        .until_text(
            "[data-route='pay'] [data-panel='unknown']",
            "No unknown outcomes",
        )
        .await;

    // A delivery whose outcome turns unknown, under a key that is markup.
    let body = payment(MARKUP_ID);
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 504);
    let blocked = deliver(&gate.url("/notify"), &body).await;
    assert_eq!(blocked.reason().as_deref(), Some("outcome_unknown"));
    let record = admin(
        &gate,
        "GET",
        "/admin/records/pay?key=%3Cimg%20src%3Dx%20id%3Dxss-key%3E",
        Some(TOKEN),
    )
    .await;
    let record: serde_json::Value = serde_json::from_slice(&record.body).expect("a record");
    assert_eq!(record["state"], "unknown", "{record}");
    let hash = record["key_hash"].as_str().expect("key hash").to_owned();

    refresh(&browser).await;
    let row = format!("[data-panel='unknown'] tr[data-kind='unknown'][data-hash='{hash}']");
    let shown = browser.find(&row).await.text().await.expect("row text");
    assert!(shown.contains(&hash[..16]), "{shown}");
    // The key value, as the text it is.
    assert!(shown.contains(MARKUP_ID), "{shown}");
    assert_eq!(browser.count("#xss-key").await, 0, "a key became markup");
    browser.screenshot("console-overview").await;

    // One click to the record, then the purge behind a confirmation.
    browser
        .click(&format!("{row} button[data-action='detail']"))
        .await;
    browser
        .until_text("#detail tr[data-field='state'] td", "unknown")
        .await;
    browser.screenshot("console-record").await;
    browser
        .click("#detail-actions button[data-action='purge']")
        .await;
    // Dismissed, nothing happens.
    // The question says what a purge does in the state shown.
    let asked = browser.answer_confirmation(false).await;
    assert!(
        asked.contains("UNKNOWN") && asked.contains("It shows state unknown"),
        "{asked}"
    );
    assert_eq!(
        admin(
            &gate,
            "GET",
            &format!("/admin/records/pay?hash={hash}"),
            Some(TOKEN)
        )
        .await
        .status,
        200,
        "a dismissed confirmation purges nothing"
    );
    browser
        .click("#detail-actions button[data-action='purge']")
        .await;
    let asked = browser.accept_confirmation().await;
    assert!(asked.contains(&hash), "{asked}");
    browser.until_text("#message", "Record purged").await;
    browser.until_gone(&row).await;
    // The purge is in the audit trail the page shows, with its token and
    // the state it found and left; the dismissed one is not.
    let audit = "[data-section='audit'] tr[data-kind='audit']";
    let entry = browser.until_text(audit, "purge").await;
    assert!(
        entry.contains(&hash) && entry.contains("admin") && entry.contains("unknown → absent"),
        "{entry}"
    );
    assert_eq!(browser.count(audit).await, 1, "one action was asked for");

    // The next delivery of that key is a first delivery.
    let next = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((next.status, next.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2, "the upstream saw the delivery again");
    assert_eq!(id_of(&upstream.bodies()[1]), MARKUP_ID);

    browser.click("#sign-out").await;
    browser.until_text("#message", "Token forgotten").await;
    browser.stop().await;
    gate.stop().await;
}

/// The inbox route: one redelivery 100 ms after the live attempt, then dead.
fn dying_inbox(store: &str, upstream: &str) -> String {
    with_admin(&format!(
        "{}\n[route.inbox]\nack_body = \"queued\"\nbackoff = \"100ms\"\nmax_backoff = \"100ms\"\nmax_attempts = 1\nvisibility_timeout = \"10s\"\n",
        config_text(store, upstream, "")
    ))
}

/// The key hashes the inbox lists under `state`.
async fn listed(gate: &Gate, state: &str) -> Vec<String> {
    let page = admin(
        gate,
        "GET",
        &format!("/admin/inbox/pay?state={state}"),
        Some(TOKEN),
    )
    .await;
    let page: serde_json::Value = serde_json::from_slice(&page.body).expect("a listing");
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|item| item["key_hash"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_dead_deliveries_are_shown_retried_and_dropped() {
    let Some(browser) = Browser::start("console inbox").await else {
        return;
    };
    let failing = Arc::new(AtomicBool::new(true));
    let down = Arc::clone(&failing);
    let upstream = Upstream::scripted(move |_, _| {
        if down.load(Ordering::SeqCst) {
            Reply {
                body: Some(Bytes::from_static(MARKUP_ANSWER.as_bytes())),
                ..Reply::status(500)
            }
        } else {
            Reply::ok()
        }
    })
    .await;
    let (_dir, store) = temp_embedded_store();
    let gate = Gate::start(&dying_inbox(&store, &upstream.url())).await;
    for id in ["dead-1", "dead-2"] {
        assert_eq!(
            deliver(&gate.url("/notify"), &payment(id)).await.status,
            200
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while listed(&gate, "dead").await.len() < 2 {
        assert!(Instant::now() < deadline, "the deliveries never died");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = upstream.calls();

    browser.open_console(gate.admin).await;
    sign_in(&browser, TOKEN).await;
    let dead = "[data-route='pay'] [data-panel='dead'] tr[data-kind='dead']";
    browser.find(dead).await;
    assert_eq!(browser.count(dead).await, 2);
    browser
        .until_text("[data-panel='queued'] .summary", "0 queued")
        .await;
    browser.screenshot("console-inbox").await;

    // The handler's answer is shown as the text it is.
    let first = browser.find(dead).await;
    let hash = first.attr("data-hash").await.expect("attr").expect("hash");
    browser
        .click(&format!(
            "{dead}[data-hash='{hash}'] button[data-action='detail']"
        ))
        .await;
    browser
        .until_text(
            "#detail tr[data-field='last_answer.body'] td",
            MARKUP_ANSWER,
        )
        .await;
    assert_eq!(
        browser.count("#xss-answer").await,
        0,
        "an answer became markup"
    );
    browser.screenshot("console-delivery").await;

    // Retry from the detail: sent once more, delivered this time.
    failing.store(false, Ordering::SeqCst);
    browser
        .click("#detail-actions button[data-action='retry']")
        .await;
    assert!(browser.accept_confirmation().await.contains("Retry"));
    browser.until_text("#message", "one more attempt").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while upstream.calls() == calls {
        assert!(Instant::now() < deadline, "the retry was never sent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Drop the other from its row.
    let other = listed(&gate, "dead")
        .await
        .into_iter()
        .find(|h| *h != hash)
        .expect("the other dead delivery");
    browser
        .click(&format!(
            "{dead}[data-hash='{other}'] button[data-action='drop']"
        ))
        .await;
    assert!(browser.accept_confirmation().await.contains("Drop"));
    browser.until_text("#message", "Delivery dropped").await;
    browser.until_gone(dead).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(upstream.calls(), calls + 1, "only the retried one was sent");
    browser.stop().await;
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_entity_shows_its_state_and_history() {
    let Some(browser) = Browser::start("console entity").await else {
        return;
    };
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(
        &redis_store(&redis),
        &upstream.url(),
        crate::entity::MACHINE,
    );
    let gate = Gate::start(&with_admin(&text)).await;
    let url = gate.url("/notify");
    let order = "<b id=xss-entity>o</b>";
    let notice = |id, status| crate::entity::notice(id, order, status);
    assert_eq!(deliver(&url, &notice("n1", "success")).await.status, 200);
    assert_eq!(deliver(&url, &notice("n2", "failed")).await.status, 200);

    browser.open_console(gate.admin).await;
    sign_in(&browser, TOKEN).await;
    let panel = "[data-route='pay'] [data-panel='entity']";
    browser.type_into(&format!("{panel} input"), order).await;
    browser
        .click(&format!("{panel} button[data-action='entity']"))
        .await;
    browser
        .until_text("#detail tr[data-field='state'] td", "success")
        .await;
    browser
        .until_text("#detail tr[data-field='counts.refused'] td", "1")
        .await;
    let refused = browser
        .until_text("#entity-history tr[data-kind='refused']", "failed")
        .await;
    assert!(refused.contains("success"), "{refused}");
    let applied = browser
        .find("#entity-history tr[data-kind='applied']")
        .await
        .attr("data-delivery")
        .await
        .expect("attribute")
        .expect("a delivery");
    let record = admin(
        &gate,
        "GET",
        &format!(
            "/admin/records/pay?hash={}",
            applied.replace('{', "%7B").replace('}', "%7D")
        ),
        Some(TOKEN),
    )
    .await;
    assert_eq!(record.status, 200, "{record:?}");
    assert_eq!(browser.count("#xss-entity").await, 0, "an id became markup");
    browser.screenshot("console-entity").await;
    browser.stop().await;
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_held_entity_is_listed_and_set_from_what_it_shows() {
    let Some(browser) = Browser::start("console held entity").await else {
        return;
    };
    let redis = RedisServer::start();
    // The success's call times out: its outcome is unknown and holds the
    // entity (the handler did apply it).
    let upstream = Upstream::slow_first(Duration::from_millis(800)).await;
    let extra = format!("unknown_hold = \"10m\"\n{}", crate::entity::MACHINE);
    let text = config_text(&redis_store(&redis), &upstream.url(), &extra)
        .replace("timeout = \"5s\"", "timeout = \"200ms\"");
    let gate = Gate::start(&with_admin(&text)).await;
    let url = gate.url("/notify");
    let notice = crate::entity::notice("h1", "o-held", "success");
    assert_eq!(deliver(&url, &notice).await.status, 504);

    browser.open_console(gate.admin).await;
    sign_in(&browser, TOKEN).await;
    let panel = "[data-route='pay'] [data-panel='held']";
    browser
        .until_text(&format!("{panel} tr[data-kind='held']"), "success")
        .await;
    browser
        .click(&format!("{panel} button[data-action='entity-detail']"))
        .await;
    browser
        .until_text("#detail tr[data-field='pending.to'] td", "success")
        .await;
    browser
        .click("#detail button[data-action='entity-set']")
        .await;
    let asked = browser.answer_prompt("success").await;
    assert!(asked.contains("pending"), "{asked}");
    browser.until_text("#message", "set to success").await;
    let view = admin(&gate, "GET", "/admin/entities/pay?id=o-held", Some(TOKEN)).await;
    let view: serde_json::Value = serde_json::from_slice(&view.body).unwrap();
    assert_eq!(view["state"], "success", "{view}");
    assert!(view["pending"].is_null(), "{view}");
    assert_eq!(view["history"][0]["kind"], "set");
    browser
        .until_text(&format!("{panel} p.note"), "No entity is held")
        .await;
    browser.screenshot("console-held-entity").await;
    browser.stop().await;
    gate.stop().await;
}
