//! The machines idemgate ships per payment channel (`[route.entity]
//! machine = "…"`): every notice the channel documents is accepted, and
//! the entity is kept for the channel's longest documented lifecycle. A
//! setting the table writes itself wins over the machine's.
//!
//! - `alipay`: the trade notification's `trade_status` by `out_trade_no`.
//!   Every status may come first (a product without refunds sends only
//!   `TRADE_FINISHED`, and `WAIT_BUYER_PAY` notices are optional); each
//!   partial refund is another `TRADE_SUCCESS` whose `out_biz_no` is its
//!   event, a full refund closes the trade (`TRADE_CLOSED`), and
//!   `TRADE_FINISHED` arrives when the refund window (up to 12 months)
//!   ends: kept 400 days.
//! - `wechatpay-v2`: the payment result notification's `result_code` by
//!   `out_trade_no` (`FAIL` may still become `SUCCESS`; `SUCCESS` is
//!   final). Its refund notifications are refused by the signature stage
//!   (they are not signed), so they never reach a machine. WeChat Pay v3
//!   carries the order only inside its encrypted `resource`: no machine.
//! - `payment`: a generic payment, pending → success | failed,
//!   failed → success, success → refunded (terminal); the route names its
//!   own `id`, `state` and, for partial refunds, `event`.

use super::super::duration::ConfigDuration;
use super::super::problems::Problems;
use super::RawEntity;

/// The machine names, for the error that lists them.
const NAMES: [&str; 3] = ["alipay", "wechatpay-v2", "payment"];

/// `raw` with what its `machine` says filled in wherever `raw` is silent.
pub(super) fn with_machine(problems: &mut Problems, key: &str, raw: &RawEntity) -> RawEntity {
    let mut filled = raw.clone();
    let Some(name) = raw.machine.as_deref() else {
        return filled;
    };
    let machine = match name {
        "alipay" => alipay(),
        "wechatpay-v2" => wechatpay_v2(),
        "payment" => payment(),
        other => {
            problems.push(
                &format!("{key}.machine"),
                format!("{other:?} is not a machine idemgate ships; expected one of {NAMES:?}"),
            );
            return filled;
        }
    };
    if filled.id.is_empty() {
        filled.id = machine.id;
    }
    if filled.state.is_empty() {
        filled.state = machine.state;
    }
    filled.event = filled.event.or(machine.event);
    if filled.transitions.is_empty() {
        filled.transitions = machine.transitions;
    }
    filled.initial = filled.initial.or(machine.initial);
    filled.terminal = filled.terminal.or(machine.terminal);
    filled.retention = filled.retention.or(machine.retention);
    if filled.ack_status.is_none() && filled.ack_body.is_none() {
        filled.ack_status = machine.ack_status;
        filled.ack_body = machine.ack_body;
        filled.ack_content_type = filled.ack_content_type.or(machine.ack_content_type);
    }
    filled
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn alipay() -> RawEntity {
    RawEntity {
        id: strings(&["form:out_trade_no"]),
        state: "form:trade_status".into(),
        event: Some("form:out_biz_no".into()),
        transitions: strings(&[
            "WAIT_BUYER_PAY -> TRADE_SUCCESS | TRADE_FINISHED | TRADE_CLOSED",
            "TRADE_SUCCESS -> TRADE_FINISHED | TRADE_CLOSED",
        ]),
        terminal: Some(strings(&["TRADE_FINISHED", "TRADE_CLOSED"])),
        retention: Some(ConfigDuration::secs(9600 * 3600)),
        ack_status: Some(200),
        ack_body: Some("success".into()),
        ack_content_type: Some("text/plain".into()),
        ..RawEntity::default()
    }
}

fn wechatpay_v2() -> RawEntity {
    RawEntity {
        id: strings(&["xml:/xml/out_trade_no"]),
        state: "xml:/xml/result_code".into(),
        transitions: strings(&["FAIL -> SUCCESS"]),
        terminal: Some(strings(&["SUCCESS"])),
        ack_status: Some(200),
        ack_body: Some(
            "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>"
                .into(),
        ),
        ack_content_type: Some("text/xml".into()),
        ..RawEntity::default()
    }
}

fn payment() -> RawEntity {
    RawEntity {
        transitions: strings(&[
            "pending -> success | failed",
            "failed -> success",
            "success -> refunded",
        ]),
        terminal: Some(strings(&["refunded"])),
        ..RawEntity::default()
    }
}
