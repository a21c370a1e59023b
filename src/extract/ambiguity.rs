//! Names a handler stack could read differently from idemgate.
//!
//! A guard, key or fingerprint reads one field; the handler behind reads
//! "the same" field through its own framework, which may match names
//! loosely: Go's `encoding/json` matches object keys to struct fields case
//! insensitively (so `{"status":"PAID","Status":"PENDING"}` is PENDING to
//! it), and PHP rewrites form names before `$_POST` sees them (`.` and
//! spaces become `_`, `name[]` and `name[x]` become an array under
//! `name`). When a body carries such a rival spelling of a field a
//! selector reads, idemgate can not know which one the handler acts on,
//! so the read is refused as ambiguous rather than guessed.

use serde_json::Value;

/// Simple case folding as Go's `strings.EqualFold` applies it (so the
/// Kelvin sign matches `k` and the long s matches `s`).
pub(crate) fn fold(name: &str) -> String {
    name.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

/// The top-level name PHP files a form parameter under: leading spaces
/// dropped, the part before a closed `[…]` kept, and in it `.`, ` ` and
/// an unclosed `[` turned into `_`.
pub(crate) fn php_name(raw: &str) -> String {
    let raw = raw.trim_start_matches(' ');
    let base = match raw.find('[') {
        Some(open) if raw[open..].contains(']') => &raw[..open],
        _ => raw,
    };
    base.chars()
        .map(|c| if matches!(c, '.' | ' ' | '[') { '_' } else { c })
        .collect()
}

/// Why a JSON read was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ambiguous;

/// The value at JSON pointer `pointer` (RFC 6901), refusing a step whose
/// object also holds another key equal to it under case folding.
pub(crate) fn json_pointer<'v>(
    root: &'v Value,
    pointer: &str,
) -> Result<Option<&'v Value>, Ambiguous> {
    if pointer.is_empty() {
        return Ok(Some(root));
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Ok(None);
    };
    let mut here = root;
    for raw in rest.split('/') {
        let token = raw.replace("~1", "/").replace("~0", "~");
        here = match here {
            Value::Object(object) => {
                let folded = fold(&token);
                if object
                    .keys()
                    .any(|key| *key != token && fold(key) == folded)
                {
                    return Err(Ambiguous);
                }
                match object.get(&token) {
                    Some(next) => next,
                    None => return Ok(None),
                }
            }
            Value::Array(items) => {
                let index = (!token.starts_with('+') && (token == "0" || !token.starts_with('0')))
                    .then(|| token.parse::<usize>().ok())
                    .flatten();
                match index.and_then(|i| items.get(i)) {
                    Some(next) => next,
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
    }
    Ok(Some(here))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_folds_case_and_two_special_letters() {
        assert_eq!(fold("Status"), fold("status"));
        assert_eq!(fold("STATUS"), fold("status"));
        assert_eq!(fold("\u{212A}ey"), fold("key"), "Kelvin sign");
        assert_eq!(fold("\u{17F}tatus"), fold("status"), "long s");
        assert_ne!(fold("status"), fold("statu"));
    }

    #[test]
    fn php_files_mangled_names_under_their_plain_name() {
        for raw in [
            "trade_status",
            "trade.status",
            "trade status",
            " trade_status",
            "trade_status[]",
            "trade_status[x]",
            "trade[status",
        ] {
            assert_eq!(php_name(raw), "trade_status", "{raw:?}");
        }
        assert_eq!(php_name("trade[status]"), "trade");
        assert_eq!(php_name("out_trade_no"), "out_trade_no");
    }

    #[test]
    fn a_pointer_step_with_a_case_rival_is_ambiguous() {
        let body: Value = serde_json::from_str(
            r#"{"status":"PAID","Status":"PENDING","a":{"B":1,"b":2},"l":[{"x":1}]}"#,
        )
        .unwrap();
        assert_eq!(json_pointer(&body, "/status"), Err(Ambiguous));
        assert_eq!(json_pointer(&body, "/a/b"), Err(Ambiguous));
        assert_eq!(json_pointer(&body, "/l/0/x"), Ok(Some(&Value::from(1))));
        assert_eq!(json_pointer(&body, "/l/00/x"), Ok(None));
        assert_eq!(json_pointer(&body, "/missing"), Ok(None));
        let plain: Value = serde_json::from_str(r#"{"status":"PAID","a/b":{"~":3}}"#).unwrap();
        assert_eq!(
            json_pointer(&plain, "/status"),
            Ok(Some(&Value::from("PAID")))
        );
        assert_eq!(json_pointer(&plain, "/a~1b/~0"), Ok(Some(&Value::from(3))));
        // Agrees with serde_json's own pointer on unambiguous bodies.
        for pointer in ["", "/status", "/a~1b", "/a~1b/~0", "/nope", "/status/0"] {
            assert_eq!(
                json_pointer(&plain, pointer),
                Ok(plain.pointer(pointer)),
                "{pointer:?}"
            );
        }
    }
}
