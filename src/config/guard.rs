//! `[[route.guard]]`: business fields a delivery must carry an allowed
//! value in, checked after the signature and before anything is claimed.
//!
//! A payment callback that verifies can still say the wrong thing: a
//! `trade_status` of `WAIT_BUYER_PAY` or `TRADE_CLOSED` that a legacy
//! handler misreads as paid. A guard names one field and the exact values
//! it may hold; anything else is refused with 400 `field_invalid` before
//! the key is even read, so a refused callback leaves nothing in the store
//! and its corrected retry is handled as a first delivery.

use serde::{Deserialize, Serialize};

use super::Selector;
use super::problems::Problems;

/// One `[[route.guard]]`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawGuard {
    /// Selector of the guarded field.
    pub field: String,
    /// Its allowed values, compared exactly as text.
    pub one_of: Vec<String>,
    /// Whether an absent field passes (default false).
    pub optional: Option<bool>,
}

/// One validated `[[route.guard]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// Where the value is read.
    pub field: Selector,
    /// The values it may hold, compared exactly as text (a JSON number or
    /// boolean by its JSON text): no trimming, no case folding.
    pub one_of: Vec<String>,
    /// Whether an absent field passes (default: it is refused).
    pub optional: bool,
}

impl Guard {
    /// Whether `value` (absent: `None`) passes this guard.
    pub fn admits(&self, value: Option<&[u8]>) -> bool {
        match value {
            None => self.optional,
            Some(value) => self
                .one_of
                .iter()
                .any(|allowed| allowed.as_bytes() == value),
        }
    }
}

impl From<&Guard> for RawGuard {
    /// The guard as `check-config` prints it.
    fn from(guard: &Guard) -> Self {
        Self {
            field: guard.field.to_string(),
            one_of: guard.one_of.clone(),
            optional: Some(guard.optional),
        }
    }
}

/// Validates the `[[route.guard]]` tables under `key` (`route[0].guard`).
pub(super) fn guards(problems: &mut Problems, key: &str, raw: &[RawGuard]) -> Vec<Guard> {
    raw.iter()
        .enumerate()
        .filter_map(|(i, guard)| {
            let key = format!("{key}[{i}]");
            if guard.one_of.is_empty() {
                problems.push(
                    &format!("{key}.one_of"),
                    "must list at least one allowed value",
                );
            }
            let field = problems.take(&format!("{key}.field"), Selector::parse(&guard.field))?;
            Some(Guard {
                field,
                one_of: guard.one_of.clone(),
                optional: guard.optional.unwrap_or(false),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::MINIMAL;

    fn with_guard(guard: &str) -> Result<Config, String> {
        Config::parse(&format!("{MINIMAL}\n[[route.guard]]\n{guard}\n")).map_err(|e| e.0.join("\n"))
    }

    #[test]
    fn guards_read_exact_values_and_name_their_key_in_errors() {
        let config = with_guard("field = \"json:/status\"\none_of = [\"PAID\", \"1\"]").unwrap();
        let guard = &config.routes[0].guards[0];
        assert!(guard.admits(Some(b"PAID")));
        assert!(guard.admits(Some(b"1")));
        for refused in [&b"paid"[..], b"PAID ", b" PAID", b"", b"1.0"] {
            assert!(!guard.admits(Some(refused)), "{refused:?}");
        }
        assert!(!guard.admits(None), "absent is refused unless optional");
        let optional =
            with_guard("field = \"header:X-Status\"\none_of = [\"ok\"]\noptional = true").unwrap();
        assert!(optional.routes[0].guards[0].admits(None));

        let errors = with_guard("field = \"body:/x\"\none_of = []").unwrap_err();
        assert!(errors.contains("route[0].guard[0].one_of: "), "{errors}");
        assert!(errors.contains("route[0].guard[0].field: "), "{errors}");
        let unknown = with_guard("field = \"json:/a\"\none_of = [\"x\"]\nvalues = [\"y\"]");
        assert!(unknown.unwrap_err().contains("values"));
    }
}
