//! [`Problems`]: every configuration error found, each prefixed by the key
//! it is about (`route[0].idempotency.lease: …`), so a file's mistakes are
//! all reported at once rather than one per run.
//!
//! A leaf: it imports no other config module, so every section validator
//! can use it without pulling in the others. The typed readers that push
//! onto it (durations, word choices, addresses) are `read.rs`'s.

use std::fmt;

/// Collects errors with their key paths, and the keys whose value is not
/// the file's (the reader left it out or stood in for it), which get no
/// further problem.
#[derive(Debug, Default)]
pub(super) struct Problems(pub(super) Vec<String>, Vec<String>);

impl Problems {
    /// Records `message` as a problem of `key`, unless `key`'s value is a
    /// stand-in: the reader reported it already, and its stand-in's
    /// problems would not be the file's.
    pub(super) fn push(&mut self, key: &str, message: impl fmt::Display) {
        if !self.stands_in(key) {
            self.0.push(format!("{key}: {message}"));
        }
    }

    /// Marks `key` (and everything under it) as holding a value that is
    /// not the file's.
    pub(super) fn stand_in(&mut self, key: String) {
        self.1.push(key);
    }

    /// Whether `key` is, or lies under, a key marked by [`Self::stand_in`].
    fn stands_in(&self, key: &str) -> bool {
        self.1.iter().any(|marked| {
            key.strip_prefix(marked.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
    }

    /// Whether `key` already has a problem, e.g. its value did not parse
    /// and a stand-in is in its place.
    pub(super) fn failed(&self, key: &str) -> bool {
        self.stands_in(key)
            || self.0.iter().any(|problem| {
                problem
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.starts_with(": "))
            })
    }

    /// Pushes a problem found by comparing `key` with other settings,
    /// unless `key` or one of `inputs` already failed: the stand-in value
    /// of a key that did not parse would make the comparison a second,
    /// bogus error.
    pub(super) fn push_derived(&mut self, key: &str, inputs: &[&str], message: impl fmt::Display) {
        if !self.failed(key) && !inputs.iter().any(|input| self.failed(input)) {
            self.push(key, message);
        }
    }

    /// The value of `result`, or `None` with its error recorded for `key`.
    pub(super) fn take<T>(&mut self, key: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.push(key, e)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_problem_waits_for_its_inputs_to_parse() {
        let mut problems = Problems::default();
        problems.push("a.lease", "bad");
        assert!(problems.failed("a.lease"));
        assert!(!problems.failed("a.lea"), "a key, not a prefix of one");
        problems.push_derived("a.retention", &["a.lease"], "must exceed lease");
        problems.push_derived("a.lease", &[], "second problem");
        assert_eq!(problems.0, ["a.lease: bad"]);
        problems.push_derived("a.retention", &["a.tolerance"], "must exceed tolerance");
        assert_eq!(problems.take::<u8>("a.x", Err("no".into())), None);
        assert_eq!(
            problems.0,
            [
                "a.lease: bad",
                "a.retention: must exceed tolerance",
                "a.x: no"
            ]
        );
    }

    #[test]
    fn a_stand_in_key_gets_no_further_problem() {
        let mut problems = Problems::default();
        problems.push("route[0].name", "missing");
        problems.stand_in("route[0].name".to_owned());
        problems.stand_in("admin.tokens".to_owned());
        problems.push("route[0].name", "must not be empty");
        problems.push("admin.tokens[1].token", "is not set");
        problems.push("route[0].names", "a key, not a prefix of one");
        assert!(problems.failed("admin.tokens[0].scope"));
        problems.push_derived("route[0].idempotency.scope", &["route[0].name"], "bad");
        assert_eq!(
            problems.0,
            [
                "route[0].name: missing",
                "route[0].names: a key, not a prefix of one"
            ]
        );
    }
}
