//! Reading the configuration text into the raw structs, with errors an
//! operator can act on.
//!
//! `#[serde(deny_unknown_fields)]` alone stops at the first unknown key and
//! names it without its place. [`parse`] instead reads the text into a
//! [`toml::Value`] (TOML syntax errors keep toml's line-and-caret message),
//! then deserializes the typed struct from that value through
//! `serde_path_to_error`, which knows the dotted path of each failure. An
//! unknown key is recorded with its path and a "did you mean" suggestion,
//! removed from the value, and the deserialization retried, so every
//! unknown key in the file is reported at once. Any other failure (a wrong
//! type, a missing key) is reported with its path and line, but only when
//! the file has no unknown key: a misspelt required key would otherwise
//! also show up as "missing".
//!
//! The mechanism is generic over the target type, so every raw struct that
//! denies unknown fields is covered without registering it here. The same
//! unknown-key answer lists every key a table takes, which is how the
//! tests derive the parser's whole key list (`schema.rs`).

use std::fmt;

use serde::de::DeserializeOwned;
use toml::Value;

/// At most this many unknown keys are collected (each costs one retry of
/// the deserialization); a file with more is not a typo.
const MAX_UNKNOWN_KEYS: usize = 100;

/// Edit distance up to which a known key is suggested for an unknown one.
const MAX_SUGGESTION_DISTANCE: usize = 3;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// A table key.
    Key(String),
    /// An array index (`[[route]]` is an array of tables).
    Index(usize),
}

/// A key path in the style of every other config error:
/// `route[0].idempotency.leese`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct KeyPath(pub(super) Vec<Step>);

impl KeyPath {
    /// The path serde_path_to_error tracked, with `key` appended.
    pub(super) fn from_serde(path: &serde_path_to_error::Path, key: Option<&str>) -> Self {
        use serde_path_to_error::Segment;
        let mut steps: Vec<Step> = path
            .iter()
            .filter_map(|segment| match segment {
                Segment::Seq { index } => Some(Step::Index(*index)),
                Segment::Map { key } | Segment::Enum { variant: key } => {
                    Some(Step::Key(key.clone()))
                }
                Segment::Unknown => None,
            })
            .collect();
        if let Some(key) = key {
            // The unknown key itself may or may not already be the last
            // segment, depending on where serde failed.
            if steps.last() != Some(&Step::Key(key.to_owned())) {
                steps.push(Step::Key(key.to_owned()));
            }
        }
        Self(steps)
    }

    /// Removes the key this path names from `value`; false when there is
    /// no such key (then retrying would loop).
    fn remove_from(&self, value: &mut Value) -> bool {
        let Some((Step::Key(last), parents)) = self.0.split_last() else {
            return false;
        };
        let mut node = value;
        for step in parents {
            let next = match (step, node) {
                (Step::Key(key), Value::Table(table)) => table.get_mut(key),
                (Step::Index(index), Value::Array(array)) => array.get_mut(*index),
                _ => None,
            };
            match next {
                Some(next) => node = next,
                None => return false,
            }
        }
        match node {
            Value::Table(table) => table.remove(last).is_some(),
            _ => false,
        }
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Index(index) => write!(f, "[{index}]")?,
                Step::Key(key) if i == 0 => f.write_str(key)?,
                Step::Key(key) => write!(f, ".{key}")?,
            }
        }
        Ok(())
    }
}

/// What serde's `unknown_field` error says: the key, and the keys valid
/// at its place.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct UnknownField {
    /// The key as written.
    pub(super) key: String,
    /// The keys the struct at its place takes, in declaration order.
    pub(super) expected: Vec<String>,
}

impl UnknownField {
    /// Reads serde's message: "unknown field `x`, expected one of `a`, `b`",
    /// "…, expected `a`" or "…, there are no fields".
    pub(super) fn parse(message: &str) -> Option<Self> {
        let rest = message.strip_prefix("unknown field `")?;
        let (key, rest) = rest.split_once('`')?;
        let expected = match rest.strip_prefix(", expected ") {
            Some(list) => list
                .strip_prefix("one of ")
                .unwrap_or(list)
                .split(", ")
                .filter_map(|name| name.strip_prefix('`')?.strip_suffix('`'))
                .map(str::to_owned)
                .collect(),
            None => Vec::new(),
        };
        Some(Self {
            key: key.to_owned(),
            expected,
        })
    }

    /// The closest valid key, when it is close enough to be a typo.
    fn suggestion(&self) -> Option<&str> {
        let key = self.key.to_ascii_lowercase();
        self.expected
            .iter()
            .map(|name| (strsim::levenshtein(&key, name), name))
            .filter(|(distance, name)| {
                *distance <= MAX_SUGGESTION_DISTANCE.min(name.len().max(key.len()) / 2)
            })
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, name)| name.as_str())
    }

    /// `route[0].idempotency.leese: unknown key; did you mean `lease`?`
    fn report(&self, path: &KeyPath) -> String {
        let mut line = format!("{path}: unknown key");
        match (self.suggestion(), self.expected.is_empty()) {
            (Some(close), _) => line.push_str(&format!("; did you mean `{close}`?")),
            (None, true) => line.push_str("; this table takes no keys"),
            (None, false) => {
                let names: Vec<String> = self.expected.iter().map(|n| format!("`{n}`")).collect();
                line.push_str(&format!("; expected one of {}", names.join(", ")));
            }
        }
        line
    }
}

/// Parses `text` as a `T`; on failure, every problem as a line prefixed by
/// its key path (see the module doc).
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<T, Vec<String>> {
    let mut value: Value = toml::from_str(text).map_err(|error| vec![error.to_string()])?;
    let mut unknown = Vec::new();
    loop {
        let error = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(parsed) if unknown.is_empty() => return Ok(parsed),
            Ok(_) => return Err(unknown),
            Err(error) => error,
        };
        let message = error.inner().message().to_owned();
        let Some(field) = UnknownField::parse(&message) else {
            if unknown.is_empty() {
                let path = KeyPath::from_serde(error.path(), None);
                return Err(vec![other_error::<T>(text, &path, &message)]);
            }
            return Err(unknown);
        };
        let path = KeyPath::from_serde(error.path(), Some(&field.key));
        unknown.push(field.report(&path));
        if unknown.len() >= MAX_UNKNOWN_KEYS || !path.remove_from(&mut value) {
            return Err(unknown);
        }
    }
}

/// A type or missing-key error, with its path and the line toml's own
/// typed parse of the text points at.
fn other_error<T: DeserializeOwned>(text: &str, path: &KeyPath, message: &str) -> String {
    let line = toml::from_str::<T>(text)
        .err()
        .and_then(|error| error.span())
        .map(|span| line_of(text, span.start));
    let located = match line {
        Some(line) => format!("{message} (line {line})"),
        None => message.to_owned(),
    };
    if path.0.is_empty() {
        located
    } else {
        format!("{path}: {located}")
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |before| before.matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawConfig;

    const BASE: &str = "[store]\nkind = \"embedded\"\npath = \"x\"\n\
                        [upstream]\nurl = \"http://127.0.0.1:1\"\n\
                        [[route]]\nname = \"a\"\npath_prefix = \"/a\"\n\
                        [route.signature]\nscheme = \"none\"\n\
                        [[route]]\nname = \"b\"\npath_prefix = \"/b\"\n\
                        [route.signature]\nscheme = \"none\"\n\
                        [route.idempotency]\nlease = \"30s\"\n";

    fn errors(text: &str) -> Vec<String> {
        parse::<RawConfig>(text).unwrap_err()
    }

    #[test]
    fn paths_print_like_every_other_config_error() {
        let path = KeyPath(vec![
            Step::Key("route".into()),
            Step::Index(0),
            Step::Key("idempotency".into()),
            Step::Key("leese".into()),
        ]);
        assert_eq!(path.to_string(), "route[0].idempotency.leese");
        assert_eq!(
            KeyPath(vec![Step::Key("colour".into())]).to_string(),
            "colour"
        );
    }

    #[test]
    fn serde_messages_are_read_in_all_three_forms() {
        let many = "unknown field `leese`, expected one of `key`, `lease`";
        assert_eq!(
            UnknownField::parse(many),
            Some(UnknownField {
                key: "leese".into(),
                expected: vec!["key".into(), "lease".into()],
            })
        );
        let one = UnknownField::parse("unknown field `nme`, expected `name`").unwrap();
        assert_eq!(one.expected, vec!["name".to_owned()]);
        let none = UnknownField::parse("unknown field `x`, there are no fields").unwrap();
        assert!(none.expected.is_empty());
        assert_eq!(UnknownField::parse("invalid type: integer `3`"), None);
    }

    #[test]
    fn close_keys_are_suggested_and_far_ones_are_not() {
        let field = |key: &str| UnknownField {
            key: key.into(),
            expected: ["lease", "retention", "wait_timeout", "key"]
                .map(str::to_owned)
                .to_vec(),
        };
        assert_eq!(field("leese").suggestion(), Some("lease"));
        assert_eq!(field("retension").suggestion(), Some("retention"));
        assert_eq!(field("Wait_Timeout").suggestion(), Some("wait_timeout"));
        assert_eq!(field("colour").suggestion(), None);
        // Short keys need a close match, not any three edits.
        assert_eq!(field("abc").suggestion(), None);
        let path = KeyPath(vec![Step::Key("x".into())]);
        assert_eq!(
            field("colour").report(&path),
            "x: unknown key; expected one of `lease`, `retention`, `wait_timeout`, `key`"
        );
    }

    #[test]
    fn every_unknown_key_is_reported_with_its_path() {
        let text = BASE
            .replace("[store]", "colour = \"blue\"\n[store]")
            .replace("path = \"x\"", "path = \"x\"\nurll = \"redis://x\"")
            .replace("lease = \"30s\"", "leese = \"30s\"\nretension = \"1h\"");
        // Sorted by serde's walk of the table, which is by key.
        let got = errors(&text);
        let want = [
            "colour: unknown key; expected one of `unmatched`, ",
            "route[1].idempotency.leese: unknown key; did you mean `lease`?",
            "route[1].idempotency.retension: unknown key; did you mean `retention`?",
            "store.urll: unknown key; did you mean `url`?",
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (got, want) in got.iter().zip(want) {
            assert!(got.starts_with(want), "{got} should start with {want}");
        }
    }

    #[test]
    fn other_errors_name_their_path_and_line_when_no_key_is_unknown() {
        let wrong_type = BASE.replace("lease = \"30s\"", "lease = 30");
        assert_eq!(
            errors(&wrong_type),
            vec![
                "route[1].idempotency.lease: invalid type: integer `30`, expected a string (line 17)"
            ]
        );
        let missing = BASE.replace("name = \"b\"\n", "");
        let got = errors(&missing).join("\n");
        assert!(got.starts_with("route[1]: missing field `name`"), "{got}");
        // With an unknown key too, only the unknown key: a misspelt
        // required key must not also be reported as missing.
        let misspelt = BASE.replace("name = \"b\"", "nmae = \"b\"");
        assert_eq!(
            errors(&misspelt),
            vec!["route[1].nmae: unknown key; did you mean `name`?"]
        );
        let syntax = errors("[store\n");
        assert!(syntax[0].contains("line 1"), "{syntax:?}");
    }
}
