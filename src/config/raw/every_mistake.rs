//! Property test of the reader as a whole: any handful of settings given a
//! value no setting takes (`[true]`: a list, but of booleans) is reported
//! in one run, each under its own key (or the table it makes wrong), and
//! the reader never panics or loops. Test-only.

use proptest::prelude::*;
use toml::Value;

use super::RawConfig;
use super::schema::key_paths;
use crate::config::Config;
use crate::config::tests::MINIMAL;

/// Every leaf setting the parser takes, dotted (`route.idempotency.lease`).
fn leaves() -> Vec<String> {
    let all = key_paths::<RawConfig>();
    all.iter()
        .filter(|path| {
            let below = format!("{path}.");
            !all.iter().any(|other| other.starts_with(&below))
        })
        .cloned()
        .collect()
}

/// Sets `dotted` in `value` to `item`, going into the first element of a
/// list of tables and making the tables that are not there.
fn set(value: &mut Value, dotted: &str, item: Value) {
    let mut node = value;
    let keys: Vec<&str> = dotted.split('.').collect();
    for (depth, key) in keys.iter().enumerate() {
        if let Value::Array(items) = node {
            node = &mut items[0];
        }
        let Value::Table(table) = node else { return };
        if depth + 1 == keys.len() {
            table.insert((*key).to_owned(), item);
            return;
        }
        node = table
            .entry((*key).to_owned())
            .or_insert_with(|| Value::Table(toml::Table::new()));
    }
}

/// `route[0].guard[0].field` → `route.guard.field`.
fn undotted(key: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for c in key.chars() {
        match c {
            '[' => skipping = true,
            ']' => skipping = false,
            c if !skipping => out.push(c),
            _ => {}
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_setting_given_a_wrong_type_is_reported_in_one_run(
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..6)
    ) {
        let leaves = leaves();
        let mut value: Value = toml::from_str(MINIMAL).unwrap();
        let wrong = Value::Array(vec![Value::Boolean(true)]);
        let picked: Vec<&String> = picks.iter().map(|pick| pick.get(&leaves)).collect();
        for path in &picked {
            set(&mut value, path, wrong.clone());
        }
        let text = toml::to_string(&value).unwrap();
        let Err(problems) = Config::parse(&text) else {
            panic!("[true] fits no setting, yet this read:\n{text}");
        };
        let problems = problems.0;
        let keys: Vec<String> = problems
            .iter()
            .filter_map(|line| line.split_once(": ").map(|(key, _)| undotted(key)))
            .collect();
        for path in picked {
            let named = keys.iter().any(|key| {
                path == key || path.strip_prefix(key.as_str()).is_some_and(|rest| rest.starts_with('.'))
            });
            prop_assert!(named, "{path} is not named in {problems:#?}\nfor\n{text}");
        }
    }
}
