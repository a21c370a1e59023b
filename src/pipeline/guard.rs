//! Stage 3b: the route's business-field guards (`[[route.guard]]`).
//!
//! Runs on a verified request, before the key is read and before any
//! store access: a delivery whose guarded field is absent (unless the guard
//! is optional) or outside its whitelist is refused with 400
//! `field_invalid` and leaves no trace, so the sender's corrected retry is
//! a first delivery. Values come from the same selector reads as keys and
//! fingerprints (`Inbound::value`), so a JSON body naming a key twice or a
//! repeated form field is 400 `bad_request_body` here too.

use crate::config::Guard;
use crate::error::Rejection;
use crate::extract::Inbound;

/// The first guard `request` fails, as its rejection.
pub(crate) fn check(request: &Inbound, guards: &[Guard]) -> Result<(), Rejection> {
    for guard in guards {
        let value = request.value(&guard.field)?;
        if !guard.admits(value.as_deref()) {
            return Err(Rejection::FieldInvalid(guard.field.to_string()));
        }
    }
    Ok(())
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
    fn an_optional_guard_admits_an_absent_field_only() {
        let guards = [status_guard(true)];
        assert_eq!(check(&request("{}"), &guards), Ok(()));
        assert!(check(&request(r#"{"status":"no"}"#), &guards).is_err());
    }
}
