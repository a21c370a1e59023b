//! Stage 3b: the route's business-field guards (`[[route.guard]]`).
//!
//! Runs on a verified request, before the key is read and before any
//! store access: a delivery whose guarded field is absent (unless the guard
//! is optional) or outside its whitelist is refused with 400
//! `field_invalid` and leaves no trace, so the sender's corrected retry is
//! a first delivery. Values come from the same selector reads as keys and
//! fingerprints (`Inbound::value`), so a JSON body naming a key twice, a
//! repeated form field or a repeated XML element is 400 `bad_request_body`
//! here too, a field with a rival spelling the handler's stack could read
//! instead (`{"status":…,"Status":…}`, `trade.status`) is 400
//! `field_ambiguous`; a guarded header
//! or query parameter that occurs more than once is `field_invalid`, since
//! the guard and the handler could each read a different copy.

use crate::config::{Guard, Selector};
use crate::error::Rejection;
use crate::extract::Inbound;

/// The first guard `request` fails, as its rejection.
pub(crate) fn check(request: &Inbound, guards: &[Guard]) -> Result<(), Rejection> {
    for guard in guards {
        let value = request.value(&guard.field)?;
        if occurs_more_than_once(request, &guard.field) || !guard.admits(value.as_deref()) {
            return Err(Rejection::FieldInvalid(guard.field.to_string()));
        }
    }
    Ok(())
}

/// Whether a header or query parameter is present more than once (JSON,
/// form and XML reads refuse repeated names themselves).
pub(crate) fn occurs_more_than_once(request: &Inbound, selector: &Selector) -> bool {
    match selector {
        Selector::Header(name) => request.parts.headers.get_all(name).iter().nth(1).is_some(),
        Selector::Query(name) => request.parts.uri.query().is_some_and(|query| {
            form_urlencoded::parse(query.as_bytes())
                .filter(|(key, _)| key == name)
                .nth(1)
                .is_some()
        }),
        Selector::Json(_) | Selector::Form(_) | Selector::Xml(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Selector;

    fn request(body: &str) -> Inbound {
        let (parts, ()) = http::Request::post("/notify")
            .header("content-type", "application/json")
            .body(())
            .unwrap()
            .into_parts();
        Inbound::new(parts, bytes::Bytes::from(body.to_owned()))
    }

    fn status_guard(optional: bool) -> Guard {
        Guard {
            field: Selector::parse("json:/status").unwrap(),
            one_of: vec!["TRADE_SUCCESS".into(), "1".into(), "true".into()],
            optional,
        }
    }

    #[test]
    fn only_whitelisted_text_passes() {
        let guards = [status_guard(false)];
        for body in [
            r#"{"status":"TRADE_SUCCESS"}"#,
            r#"{"status":1}"#,
            r#"{"status":true}"#,
        ] {
            assert_eq!(check(&request(body), &guards), Ok(()), "{body}");
        }
        for body in [
            r#"{"status":"trade_success"}"#,
            r#"{"status":"TRADE_SUCCESS "}"#,
            r#"{"status":"WAIT_BUYER_PAY"}"#,
            r#"{"status":1.0}"#,
            r#"{"status":null}"#,
            r#"{"status":["TRADE_SUCCESS"]}"#,
            r#"{"other":"TRADE_SUCCESS"}"#,
        ] {
            assert_eq!(
                check(&request(body), &guards),
                Err(Rejection::FieldInvalid("json:/status".into())),
                "{body}"
            );
        }
        assert_eq!(
            check(
                &request(r#"{"status":"x","status":"TRADE_SUCCESS"}"#),
                &guards
            ),
            Err(Rejection::BadRequestBody("json that names each key once")),
        );
    }

    #[test]
    fn a_repeated_header_or_query_parameter_fails_its_guard() {
        let guards = |field: &str| {
            [Guard {
                field: Selector::parse(field).unwrap(),
                one_of: vec!["PAID".into()],
                optional: false,
            }]
        };
        let build = |target: &str, statuses: &[&str]| {
            let mut builder = http::Request::post(target);
            for status in statuses {
                builder = builder.header("x-status", *status);
            }
            let (parts, ()) = builder.body(()).unwrap().into_parts();
            Inbound::new(parts, bytes::Bytes::new())
        };
        let header = guards("header:X-Status");
        assert_eq!(check(&build("/n", &["PAID"]), &header), Ok(()));
        assert!(check(&build("/n", &["PAID", "WAIT"]), &header).is_err());
        assert!(check(&build("/n", &["PAID", "PAID"]), &header).is_err());
        let query = guards("query:status");
        assert_eq!(check(&build("/n?status=PAID", &[]), &query), Ok(()));
        assert!(check(&build("/n?status=PAID&status=WAIT", &[]), &query).is_err());
    }

    #[test]
    fn an_optional_guard_admits_an_absent_field_only() {
        let guards = [status_guard(true)];
        assert_eq!(check(&request("{}"), &guards), Ok(()));
        assert!(check(&request(r#"{"status":"no"}"#), &guards).is_err());
    }
}
