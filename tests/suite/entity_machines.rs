//! The machines idemgate ships per channel (`[route.entity] machine`),
//! against the channel's own notices: the Alipay vectors the Alipay SDK
//! signed and verified (`tests/vectors/payments`) for one trade, paid,
//! then refunded twice in part, each notice retried under a new notify id.

use crate::support::*;

/// The Alipay vectors of trade `ORDER-2023-0001`, in the order Alipay
/// sends them, and whether each reaches the handler.
const LIFECYCLE: [(&str, bool); 5] = [
    ("alipay-paid", true),
    // The same TRADE_SUCCESS retried (under a new notify_id).
    ("alipay-paid-retry", false),
    // A partial refund: TRADE_SUCCESS again, with out_biz_no REFUND-0001-1.
    ("alipay-refund-1", true),
    ("alipay-refund-1-retry", false),
    // A second partial refund: another out_biz_no, another change.
    ("alipay-refund-2", true),
];

async fn alipay_machine_accepts_the_trades_notices(kind: StoreKind) {
    let upstream = Upstream::start().await;
    let (store, _redis, _dir) = fresh_store(kind);
    let paid = payment_vector("alipay-paid");
    let signature = payment_signature("alipay", &[right_credential(&paid)], "");
    let text = format!(
        "{}[[route]]\nname = \"alipay\"\npath_prefix = \"{}\"\n[route.signature]\n{signature}\n[route.entity]\nmachine = \"alipay\"\n",
        base_sections(&store, &upstream.url()),
        paid.prefix()
    );
    let gate = Gate::start(&text).await;
    for (name, forwarded) in LIFECYCLE {
        let vector = payment_vector(name);
        let answer = send(
            "POST",
            &gate.url(&vector.path),
            &vector.header_list(),
            vector.body.clone(),
        )
        .await;
        assert_eq!(answer.status, 200, "{name}: {answer:?}");
        // A retry shares its first notice's key under the Alipay preset: a
        // replay. A new change (a refund) is forwarded, not taken for a
        // repeat of TRADE_SUCCESS.
        let replayed = if forwarded { "false" } else { "true" };
        assert_eq!(answer.replayed(), Some(replayed), "{name}");
    }
    let forwarded = LIFECYCLE.iter().filter(|(_, f)| *f).count();
    assert_eq!(
        upstream.calls(),
        forwarded,
        "each change once, every retry acknowledged"
    );
    gate.stop().await;
}

#[tokio::test]
async fn alipay_machine_accepts_the_trades_notices_on_redis() {
    alipay_machine_accepts_the_trades_notices(StoreKind::Redis).await;
}

#[tokio::test]
async fn alipay_machine_accepts_the_trades_notices_on_the_embedded_store() {
    alipay_machine_accepts_the_trades_notices(StoreKind::Embedded).await;
}

#[test]
fn machines_fill_what_the_table_leaves_out_and_unknown_ones_are_refused() {
    let base = base_sections(
        "kind = \"embedded\"\npath = \"/tmp/unused.redb\"",
        "http://127.0.0.1:1",
    );
    let route = |entity: &str| {
        format!(
            "{base}[[route]]\nname = \"r\"\npath_prefix = \"/\"\n[route.signature]\nscheme = \"none\"\n[route.entity]\n{entity}\n"
        )
    };
    let alipay = idemgate::config::Config::parse(&route("machine = \"alipay\"")).unwrap();
    let entity = alipay.routes[0].entity.as_ref().unwrap();
    assert_eq!(entity.state.to_string(), "form:trade_status");
    assert_eq!(
        entity.event.as_ref().unwrap().to_string(),
        "form:out_biz_no"
    );
    assert!(
        entity.machine.allows(None, "TRADE_FINISHED"),
        "a product without refunds"
    );
    assert!(
        entity.machine.allows(Some("TRADE_SUCCESS"), "TRADE_CLOSED"),
        "a full refund"
    );
    assert!(!entity.machine.allows(Some("TRADE_CLOSED"), "TRADE_SUCCESS"));
    assert!(
        entity.retention >= std::time::Duration::from_secs(365 * 24 * 3600),
        "the refund window"
    );
    // The table's own settings win.
    let mine = idemgate::config::Config::parse(&route(
        "machine = \"alipay\"\nretention = \"800h\"\nstate = \"form:status\"",
    ))
    .unwrap();
    let entity = mine.routes[0].entity.as_ref().unwrap();
    assert_eq!(entity.state.to_string(), "form:status");
    assert_eq!(entity.retention, std::time::Duration::from_secs(800 * 3600));
    let wechat = idemgate::config::Config::parse(&route("machine = \"wechatpay-v2\"")).unwrap();
    let entity = wechat.routes[0].entity.as_ref().unwrap();
    assert!(entity.machine.allows(Some("FAIL"), "SUCCESS"));
    assert!(!entity.machine.allows(Some("SUCCESS"), "FAIL"));
    // The generic machine needs the route's own selectors.
    let generic = idemgate::config::Config::parse(&route("machine = \"payment\"")).unwrap_err();
    assert!(generic.to_string().contains("entity.id"), "{generic}");
    let v3 = idemgate::config::Config::parse(&route("machine = \"wechatpay-v3\"")).unwrap_err();
    assert!(v3.to_string().contains("entity.machine"), "{v3}");
}

#[tokio::test]
async fn wechatpay_v2_machine_takes_the_sdks_payment_notices() {
    let upstream = Upstream::start().await;
    let (store, _redis, _dir) = fresh_store(StoreKind::Redis);
    let first = payment_vector("wxv2-md5");
    let signature = payment_signature("wechatpay-v2", &[right_credential(&first)], "");
    let text = format!(
        "{}[[route]]\nname = \"wechat\"\npath_prefix = \"{}\"\n[route.signature]\n{signature}\n[route.entity]\nmachine = \"wechatpay-v2\"\n",
        base_sections(&store, &upstream.url()),
        first.prefix()
    );
    let gate = Gate::start(&text).await;
    // Two orders paid, one of them notified twice (a genuine retry).
    for (name, replayed) in [
        ("wxv2-md5", "false"),
        ("wxv2-hmac", "false"),
        ("wxv2-hmac-retry", "true"),
    ] {
        let vector = payment_vector(name);
        let answer = send(
            "POST",
            &gate.url(&vector.path),
            &vector.header_list(),
            vector.body.clone(),
        )
        .await;
        assert_eq!(
            (answer.status, answer.replayed()),
            (200, Some(replayed)),
            "{name}: {answer:?}"
        );
    }
    assert_eq!(upstream.calls(), 2);
    gate.stop().await;
}
