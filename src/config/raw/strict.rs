//! Reading the configuration text into the raw structs, with errors an
//! operator can act on.
//!
//! `#[serde(deny_unknown_fields)]` alone stops at the first unknown key and
//! names it without its place, and serde stops at the first value it
//! refuses. [`parse`] instead reads the text into a [`toml::Value`] (TOML
//! syntax errors keep toml's line-and-caret message), then deserializes the
//! typed struct from that value through `serde_path_to_error`, which knows
//! the dotted path of each failure, and after each failure mends the key it
//! names (left out or stood in for) and tries again:
//!
//! * an unknown key is recorded with its path and a "did you mean"
//!   suggestion; any unknown key fails the parse, all of them reported;
//! * a refused value (a wrong TOML type, a duration or a word that does
//!   not parse: the typed settings refuse their own text) is recorded with
//!   its path and left out, so its default stands in, and the parse goes
//!   on; the validator starts from these problems ([`Parsed`]), so a whole
//!   file's mistakes are reported in one run;
//! * a missing required key is recorded (unless its value was the one
//!   refused: then the refusal says it) and a stand-in put in its place
//!   (an empty string, 0, false, an empty list or table: the first serde
//!   takes), and the parse goes on;
//! * the validator is told which keys hold a default or a stand-in
//!   ([`Parsed::stand_ins`]) and judges nothing about them, so no
//!   mistake is reported twice. With an unknown key, only the unknown keys
//!   are reported (a misspelt required key is also "missing").
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

    /// The table holding the key this path names, with that key; `None`
    /// when the path does not end in a key or its table is not there.
    fn parent_in<'v>(&'v self, value: &'v mut Value) -> Option<(&'v mut toml::Table, &'v str)> {
        let (Step::Key(last), parents) = self.0.split_last()? else {
            return None;
        };
        let mut node = value;
        for step in parents {
            node = match (step, node) {
                (Step::Key(key), Value::Table(table)) => table.get_mut(key)?,
                (Step::Index(index), Value::Array(array)) => array.get_mut(*index)?,
                _ => return None,
            };
        }
        match node {
            Value::Table(table) => Some((table, last.as_str())),
            _ => None,
        }
    }

    /// Removes the key this path names from `value`; false when there is
    /// no such key (then retrying would loop).
    fn remove_from(&self, value: &mut Value) -> bool {
        self.parent_in(value)
            .is_some_and(|(table, key)| table.remove(key).is_some())
    }

    /// Puts `item` under the key this path names in `value`; false when
    /// its table is not there.
    fn put_into(&self, value: &mut Value, item: Value) -> bool {
        self.parent_in(value)
            .map(|(table, key)| table.insert(key.to_owned(), item))
            .is_some()
    }

    /// This path with `key` appended.
    fn child(&self, key: &str) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Key(key.to_owned()));
        Self(steps)
    }

    /// Whether this path is `other` or lies inside it.
    fn within(&self, other: &Self) -> bool {
        self.0.starts_with(&other.0)
    }
}

impl KeyPath {
    /// The setting this path is in: a list element's path names its list
    /// (`methods[1]` → `methods`), which is what is left out when it is
    /// refused. The root (a problem with the whole file) stays empty.
    fn setting(mut self) -> Self {
        while matches!(self.0.last(), Some(Step::Index(_))) && self.0.len() > 1 {
            self.0.pop();
        }
        self
    }

    /// The line `text` writes this path's value on, read from toml's
    /// spanned parse of the text.
    fn line_in(&self, text: &str) -> Option<usize> {
        use toml::de::{DeTable, DeValue};
        let root = DeTable::parse(text).ok()?;
        let mut span = root.span();
        let mut node = DeValue::Table(root.into_inner());
        for step in &self.0 {
            let next = match (step, &node) {
                (Step::Key(key), DeValue::Table(table)) => table
                    .iter()
                    .find(|(name, _)| name.get_ref().as_ref() == key.as_str())
                    .map(|(_, value)| value.clone()),
                (Step::Index(index), DeValue::Array(items)) => items.get(*index).cloned(),
                _ => None,
            }?;
            span = next.span();
            node = next.into_inner();
        }
        Some(line_of(text, span.start))
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

/// What [`parse`] read: the typed file, the problems found reading it,
/// and the settings whose value is not the file's. The validator starts
/// from these problems and says nothing more about those settings, so a
/// check of a default or a stand-in never becomes a second error.
#[derive(Debug)]
pub(crate) struct Parsed<T> {
    /// The file, refused keys left out, missing required keys stood in for.
    pub(crate) value: T,
    /// `(key, message)` for each refused value and each missing required
    /// key, in the order serde met them.
    pub(crate) refused: Vec<(String, String)>,
    /// The keys left out or stood in for.
    pub(crate) stand_ins: Vec<String>,
}

/// Stand-ins for a required key the file lacks (or whose value was
/// refused), tried in turn until serde takes one: every setting is a
/// string, a number, a boolean, a list or a table.
fn stand_in(turn: usize) -> Option<Value> {
    match turn {
        0 => Some(Value::String(String::new())),
        1 => Some(Value::Integer(0)),
        2 => Some(Value::Boolean(false)),
        3 => Some(Value::Array(Vec::new())),
        4 => Some(Value::Table(toml::Table::new())),
        _ => None,
    }
}

/// Deserialization attempts at most: each leaves out or stands in for one
/// key, so a file would need hundreds of mistakes to reach it.
const MAX_TRIES: usize = 1_000;

/// Parses `text` as a `T`. Unknown keys fail the parse, every one reported
/// (see the module doc). A value serde refuses (a wrong type, a duration
/// or a word that does not parse) is reported and left out, so its default
/// stands in; a required key that is missing (or was left out) is reported
/// unless its refusal already was, and a stand-in takes its place. Either
/// way the parse goes on, and every such mistake is reported in one run
/// beside every rule the validator finds broken.
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<Parsed<T>, Vec<String>> {
    let mut value: Value = toml::from_str(text).map_err(|error| vec![error.to_string()])?;
    let mut reading = Reading::default();
    for _ in 0..MAX_TRIES {
        let error = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(parsed) => return reading.finish(parsed),
            Err(error) => error,
        };
        let message = error.inner().message().to_owned();
        let goes_on = if let Some(field) = UnknownField::parse(&message) {
            let path = KeyPath::from_serde(error.path(), Some(&field.key));
            reading.unknown.push(field.report(&path));
            reading.unknown.len() < MAX_UNKNOWN_KEYS && path.remove_from(&mut value)
        } else {
            let path = KeyPath::from_serde(error.path(), None);
            match missing_field(&message) {
                Some(field) => reading.missing(text, (&path, field), &message, &mut value),
                None => reading.refuse(text, path, &message, &mut value),
            }
        };
        if !goes_on {
            break;
        }
    }
    Err(reading.failed())
}

/// What a parse has found so far.
#[derive(Debug, Default)]
struct Reading {
    /// Each unknown key's report.
    unknown: Vec<String>,
    /// `(key, message)` of each refused value and missing required key.
    refused: Vec<(String, String)>,
    /// Keys whose refused value was left out.
    left_out: Vec<KeyPath>,
    /// Keys a stand-in fills, with the turn of the stand-in in place.
    stood: Vec<(KeyPath, usize)>,
}

impl Reading {
    /// A value serde refused at `path`: reported and left out, unless it
    /// is a stand-in, which then makes way for the next one.
    fn refuse(&mut self, text: &str, path: KeyPath, message: &str, value: &mut Value) -> bool {
        let setting = path.setting();
        if let Some((stood, turn)) = self.stood.iter_mut().find(|(at, _)| *at == setting) {
            *turn += 1;
            return stand_in(*turn).is_some_and(|item| stood.put_into(value, item));
        }
        self.refused
            .push((setting.to_string(), located(text, &setting, message)));
        let removed = setting.remove_from(value);
        self.left_out.push(setting);
        removed && self.refused.len() < MAX_UNKNOWN_KEYS
    }

    /// The required `field` missing from the table at `table`: reported,
    /// unless it is missing because its value was left out or it belongs
    /// to a stand-in, and stood in for.
    fn missing(
        &mut self,
        text: &str,
        (table, field): (&KeyPath, &str),
        message: &str,
        value: &mut Value,
    ) -> bool {
        let key = table.child(field);
        let explained =
            self.left_out.contains(&key) || self.stood.iter().any(|(stood, _)| table.within(stood));
        if !explained {
            self.refused
                .push((table.to_string(), located(text, table, message)));
        }
        let placed = stand_in(0).is_some_and(|item| key.put_into(value, item));
        self.stood.push((key, 0));
        placed && self.refused.len() < MAX_UNKNOWN_KEYS
    }

    /// The file as read: the unknown keys fail it; otherwise the problems
    /// go to the validator with the keys it must not judge.
    fn finish<T>(self, value: T) -> Result<Parsed<T>, Vec<String>> {
        if !self.unknown.is_empty() {
            return Err(self.unknown);
        }
        let stand_ins = self
            .left_out
            .iter()
            .chain(self.stood.iter().map(|(key, _)| key))
            .map(KeyPath::to_string)
            .collect();
        Ok(Parsed {
            value,
            refused: self.refused,
            stand_ins,
        })
    }

    /// The report of a parse that could not go on: the unknown keys when
    /// there are any (a misspelt required key is also "missing", which
    /// would only repeat it), else every problem found.
    fn failed(self) -> Vec<String> {
        if !self.unknown.is_empty() {
            return self.unknown;
        }
        self.refused
            .into_iter()
            .map(|(key, message)| {
                if key.is_empty() {
                    message
                } else {
                    format!("{key}: {message}")
                }
            })
            .collect()
    }
}

/// The field serde's "missing field `x`" names.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// `message`, with the line of the value at `path` when the message is
/// serde's own type complaint: a typed setting's own message quotes the
/// text it refused, and needs no line.
fn located(text: &str, path: &KeyPath, message: &str) -> String {
    let serde_own = ["invalid type", "invalid length", "missing field"]
        .iter()
        .any(|start| message.starts_with(start));
    match serde_own.then(|| path.line_in(text)).flatten() {
        Some(line) => format!("{message} (line {line})"),
        None => message.to_owned(),
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

    /// Every problem the parser itself reports: a failed parse's, or the
    /// values a parse that went on refused.
    fn errors(text: &str) -> Vec<String> {
        match parse::<RawConfig>(text) {
            Ok(parsed) => parsed
                .refused
                .into_iter()
                .map(|(key, message)| format!("{key}: {message}"))
                .collect(),
            Err(errors) => errors,
        }
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
    fn every_refused_value_is_reported_and_the_parse_goes_on() {
        let text = BASE
            .replace(
                "[upstream]",
                "[limits]\nidle_timeout = \"10\"\nmax_headers = \"many\"\n[upstream]",
            )
            .replace("lease = \"30s\"", "lease = \"1.5h\"\nwait_timeout = 5");
        let parsed = parse::<RawConfig>(&text).expect("refused values leave a file to validate");
        let refused: Vec<String> = parsed.refused.iter().map(|(key, _)| key.clone()).collect();
        assert_eq!(
            refused,
            [
                "limits.idle_timeout",
                "limits.max_headers",
                "route[1].idempotency.lease",
                "route[1].idempotency.wait_timeout",
            ]
        );
        assert!(
            parsed.refused[0].1.contains("\"10\" has no unit"),
            "{:?}",
            parsed.refused
        );
        assert!(
            parsed.refused[1].1.ends_with("(line 6)"),
            "{:?}",
            parsed.refused
        );
        assert_eq!(
            parsed.value.limits.idle_timeout,
            crate::config::Limits::default().idle_timeout,
            "left out: its default stands in"
        );
        // An unknown key after a refused value is still found.
        let both = text.replace("wait_timeout = 5", "wait_timeout = 5\nleese = \"1s\"");
        assert_eq!(
            errors(&both),
            ["route[1].idempotency.leese: unknown key; did you mean `lease`?"]
        );
        // A required key whose value was refused is not also "missing".
        let required = BASE.replace("name = \"b\"", "name = 2");
        assert_eq!(
            errors(&required),
            ["route[1].name: invalid type: integer `2`, expected a string (line 12)"]
        );
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
