//! The parser's schema, derived from the raw structs themselves, and the
//! checks that hold the other places a setting appears to it.
//!
//! A setting is declared once, as a field of a raw struct (with its doc
//! comment and, in `raw.rs`, its default). [`key_paths`] reads the whole
//! key list back out of those structs: it asks the strict parser about a
//! key no struct has, at every table, and the unknown-key answer lists the
//! keys that table takes (serde's own list, the one `strict.rs` suggests
//! from), so the list is never written a second time. From it:
//!
//! * the annotated reference, `config/idemgate.toml`, must document
//!   exactly the keys the parser takes, table by table, `[[route]]`'s
//!   sub-tables included;
//! * `check-config` must be able to print every one of them
//!   (`crate::config::effective`).
//!
//! Test-only: nothing at run time needs the list.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use toml::Value;

use super::strict::{KeyPath, Step, UnknownField};

/// A key no raw struct has: asking for it makes serde list the ones the
/// table at its place does have.
const NO_SUCH_KEY: &str = "zz_no_such_key";

/// Every key `T` takes, as a dotted path (`store.kind`, `route.guard.field`:
/// an array of tables is named without its index), tables included.
pub(super) fn key_paths<T: DeserializeOwned>() -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    walk::<T>(&mut Vec::new(), &mut paths);
    paths
}

/// Records the keys of the table at `at` (known to be one) and walks into
/// those that are tables or arrays of tables themselves.
fn walk<T: DeserializeOwned>(at: &mut Vec<Step>, paths: &mut BTreeSet<String>) {
    let Some(keys) = table_keys::<T>(at) else {
        return;
    };
    for key in keys {
        at.push(Step::Key(key));
        paths.insert(dotted(at));
        if table_keys::<T>(at).is_some() {
            walk::<T>(at, paths);
        } else {
            at.push(Step::Index(0));
            if table_keys::<T>(at).is_some() {
                walk::<T>(at, paths);
            }
            at.pop();
        }
        at.pop();
    }
}

/// The keys the table at `at` takes, or `None` when there is no table
/// there (the value at `at` is a string, a list of strings, …).
fn table_keys<T: DeserializeOwned>(at: &[Step]) -> Option<Vec<String>> {
    let mut value = Value::Table(
        [(NO_SUCH_KEY.to_owned(), Value::Integer(0))]
            .into_iter()
            .collect(),
    );
    for step in at.iter().rev() {
        value = match step {
            Step::Key(key) => Value::Table([(key.clone(), value)].into_iter().collect()),
            Step::Index(_) => Value::Array(vec![value]),
        };
    }
    let error = serde_path_to_error::deserialize::<_, T>(value).err()?;
    let field = UnknownField::parse(error.inner().message())?;
    let mut probed = at.to_vec();
    probed.push(Step::Key(NO_SUCH_KEY.to_owned()));
    let answered = KeyPath::from_serde(error.path(), Some(&field.key));
    if field.key != NO_SUCH_KEY || answered.0 != probed {
        return None;
    }
    // serde lists two keys as "`a` or `b`", which the strict parser's
    // reading keeps as one entry `a` or `b`.
    let keys = field
        .expected
        .iter()
        .flat_map(|entry| entry.split("` or `"))
        .map(str::to_owned)
        .collect();
    Some(keys)
}

/// `route.signature.scheme`: the path without array indices.
fn dotted(at: &[Step]) -> String {
    let keys: Vec<&str> = at
        .iter()
        .filter_map(|step| match step {
            Step::Key(key) => Some(key.as_str()),
            Step::Index(_) => None,
        })
        .collect();
    keys.join(".")
}

/// The keys a TOML document sets (tables included), named like
/// [`key_paths`].
fn keys_of(value: &Value) -> BTreeSet<String> {
    fn visit(value: &Value, at: &str, keys: &mut BTreeSet<String>) {
        match value {
            Value::Table(table) => {
                for (key, value) in table {
                    let path = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    keys.insert(path.clone());
                    visit(value, &path, keys);
                }
            }
            Value::Array(items) => {
                for item in items.iter().filter(|item| item.is_table()) {
                    visit(item, at, keys);
                }
            }
            _ => {}
        }
    }
    let mut keys = BTreeSet::new();
    visit(value, "", &mut keys);
    keys
}

/// The keys the annotated reference documents, each under the table
/// header above it: set (`key = …`) or commented out (`# key = …`), and
/// every table header, set or commented out (`# [route.inbox]`).
/// Prose never starts a comment with `word = ` (a lower-case key name),
/// so it is not mistaken for a key.
fn documented_keys(text: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut table = String::new();
    for line in text.lines() {
        let line = line.strip_prefix("# ").unwrap_or(line);
        if let Some(header) = table_header(line) {
            table = header.to_owned();
            keys.insert(table.clone());
        } else if let Some((name, _)) = line.split_once(" = ")
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            keys.insert(if table.is_empty() {
                name.to_owned()
            } else {
                format!("{table}.{name}")
            });
        }
    }
    keys
}

/// `route.signature` for a line `[route.signature]` or `[[route]]` alone.
fn table_header(line: &str) -> Option<&str> {
    let line = line.trim_end();
    let name = line
        .strip_prefix("[[")
        .and_then(|rest| rest.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[')?.strip_suffix(']'))?;
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.');
    valid.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::raw::RawConfig;

    /// Both ways: what one side has and the other lacks.
    fn differences(parser: &BTreeSet<String>, other: &BTreeSet<String>) -> String {
        let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
            a.difference(b).cloned().collect::<Vec<_>>().join(", ")
        };
        format!(
            "only the parser: [{}]; only the other side: [{}]",
            only(parser, other),
            only(other, parser)
        )
    }

    #[test]
    fn the_walk_finds_every_table_and_its_keys() {
        let paths = key_paths::<RawConfig>();
        for expected in [
            "unmatched",
            "store.kind",
            "tracing.queue_size",
            "route",
            "route.signature.public_keys",
            "route.idempotency.unsigned_key",
            "route.inbox.repair_every",
            "route.guard.one_of",
        ] {
            assert!(paths.contains(expected), "{expected} in {paths:?}");
        }
        // A list of strings or of key entries is a key, not a table.
        assert!(
            !paths
                .iter()
                .any(|p| p.starts_with("route.signature.secrets."))
        );
        assert!(
            !paths
                .iter()
                .any(|p| p.starts_with("route.signature.public_keys."))
        );
    }

    #[test]
    fn the_reference_documents_exactly_the_parsers_keys() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/idemgate.toml");
        let documented = documented_keys(&std::fs::read_to_string(path).unwrap());
        let parser = key_paths::<RawConfig>();
        assert_eq!(
            parser,
            documented,
            "config/idemgate.toml and the raw structs disagree: {}",
            differences(&parser, &documented)
        );
    }

    #[test]
    fn the_documentation_check_reads_keys_under_their_table() {
        let text = "unmatched = \"forward\"  # default\n# Prose = not a key\n\
                    [store]\nkind = \"redis\"\n# path = \"x\"\n#   \"redis\"  a server\n\
                    # [[route.guard]]\n# field = \"json:/a\"\n# [route.signature] and more\n";
        let keys: Vec<String> = documented_keys(text).into_iter().collect();
        assert_eq!(
            keys,
            [
                "route.guard",
                "route.guard.field",
                "store",
                "store.kind",
                "store.path",
                "unmatched"
            ]
        );
    }

    /// A file that sets every key some variant reads: a Redis store with
    /// every option, an `hmac` route with every table, and the presets
    /// that read `public_keys`, `public_url`, `allow_rsa1` and a window.
    const EVERY_VARIANT: [&str; 2] = [
        r#"
        [store]
        kind = "redis"
        url = "rediss://127.0.0.1:6379/0"
        username = "literal:app"
        password = "literal:pw"
        min_replicas_ack = 1
        tls_ca_file = "@ROOT@/tests/vectors/keys/wechatpay-1.cert.pem"
        tls_cert_file = "@ROOT@/tests/vectors/keys/wechatpay-1.cert.pem"
        tls_key_file = "@ROOT@/tests/vectors/keys/wechatpay-1.key.pem"
        [upstream]
        url = "http://127.0.0.1:3000"
        [admin]
        token = "literal:token"
        audit_retention = "30d"
        [[admin.tokens]]
        name = "viewer"
        token = "literal:viewer-token"
        [tracing]
        otlp_endpoint = "http://127.0.0.1:4318"
        service_name = "idemgate-a"
        [[route]]
        name = "pay"
        path_prefix = "/notify"
        upstream = "http://127.0.0.1:3001"
        [route.signature]
        scheme = "hmac"
        secrets = ["literal:s3cret-0123456789abcdef"]
        signature = "header:X-Signature"
        timestamp = "json:/ts"
        [route.idempotency]
        key = ["json:/id"]
        [route.inbox]
        ack_body = "success"
        [[route.guard]]
        field = "json:/status"
        one_of = ["PAID"]
        [route.entity]
        machine = "payment"
        id = ["json:/id"]
        state = "json:/status"
        event = "json:/refund"
        transitions = ["PENDING -> PAID"]
        initial = ["PENDING"]
        terminal = ["PAID"]
        ack_status = 200
        ack_body = "ok"
        [route.probe]
        path = "/orders/{json:/id}"
        method = "GET"
        headers = ["X-Probe: 1"]
        handler_deadline = "1s"
        field = "json:/state"
        applied = ["PAID"]
        not_applied = ["NONE"]
        "#,
        r#"
        [store]
        kind = "embedded"
        path = "/tmp/unused.redb"
        [upstream]
        url = "http://127.0.0.1:3000"
        [[route]]
        name = "alipay"
        path_prefix = "/alipay"
        [route.signature]
        scheme = "alipay"
        public_keys = ["file:tests/vectors/keys/alipay-1.pub.pem"]
        [[route]]
        name = "twilio"
        path_prefix = "/twilio"
        [route.signature]
        scheme = "twilio"
        secrets = ["literal:twilio-token-0123456789abcdef"]
        public_url = "https://hooks.example.com"
        "#,
    ];

    #[test]
    fn check_config_can_print_every_key_the_parser_takes() {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut printed = BTreeSet::new();
        for text in EVERY_VARIANT {
            let text = text
                .replace("file:tests/", &format!("file:{root}/tests/"))
                .replace("@ROOT@", root);
            let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
            let output: Value = toml::from_str(&config.to_toml()).unwrap();
            printed.extend(keys_of(&output));
        }
        let parser = key_paths::<RawConfig>();
        assert_eq!(parser, printed, "{}", differences(&parser, &printed));
    }
}
