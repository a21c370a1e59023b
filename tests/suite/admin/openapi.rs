//! The admin API's OpenAPI document (`docs/admin-openapi.json`, served at
//! `/admin/openapi.json`) against the running router, both ways:
//!
//! - every documented path and method answers with a documented status,
//!   never "no such endpoint" or 405; every other method is a 405 whose
//!   `Allow` lists exactly the documented ones;
//! - every documented query parameter is taken (never "unknown query
//!   parameter"), and an undocumented one is refused where the operation
//!   has any;
//! - every path literal in the admin module tree is a documented path or
//!   a prefix of one, so a route added to the router without the document
//!   fails here.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::{TOKEN, admin, with_admin};
use crate::support::*;

const DOCUMENT: &str = include_str!("../../../docs/admin-openapi.json");

/// Every method the walk tries on every path.
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];

/// The reasons that would mean the router does not know the operation.
const UNROUTED: [&str; 2] = ["not_found", "method_not_allowed"];

fn document() -> Value {
    serde_json::from_str(DOCUMENT).expect("the document is JSON")
}

/// A concrete path for a template: the test config's route and a key.
fn concrete(template: &str) -> String {
    template
        .replace("{route}", "pay")
        .replace("{key}", "order-1")
}

/// The methods a path item documents, upper case.
fn documented_methods(item: &Value) -> BTreeSet<String> {
    item.as_object()
        .expect("a path item is an object")
        .keys()
        .filter(|key| *key != "parameters")
        .map(|key| key.to_ascii_uppercase())
        .collect()
}

fn documented_statuses(operation: &Value) -> BTreeSet<u16> {
    operation["responses"]
        .as_object()
        .expect("an operation has responses")
        .keys()
        .map(|code| code.parse().expect("a numeric status"))
        .collect()
}

/// The operation's query parameters: (name, example value).
fn query_parameters(operation: &Value) -> Vec<(String, String)> {
    let Some(parameters) = operation["parameters"].as_array() else {
        return Vec::new();
    };
    parameters
        .iter()
        .filter(|parameter| parameter["in"] == "query")
        .map(|parameter| {
            let example = match &parameter["example"] {
                Value::String(text) => text.clone(),
                Value::Null => "x".to_owned(),
                other => other.to_string(),
            };
            (parameter["name"].as_str().unwrap().to_owned(), example)
        })
        .collect()
}

/// A gate with the token, an inbox on its route and hot keys on, so every
/// documented operation exists.
async fn full_gate() -> (RedisServer, Upstream, Gate) {
    redis_gate_edited(Upstream::start().await, "", |text| {
        with_admin(&format!("{text}\n[route.inbox]\nack_body = \"success\"\n"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_served_without_the_token_as_the_repository_keeps_it() {
    let (_redis, _upstream, gate) = full_gate().await;
    let answer = admin(&gate, "GET", "/admin/openapi.json", None).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.body, DOCUMENT.as_bytes());
    let served = document();
    let default_admin = idemgate::config::DEFAULT_ADMIN_ADDR;
    assert_eq!(
        served["servers"][0]["url"],
        format!("http://{default_admin}"),
        "the document names the default admin address"
    );
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_answers_as_documented_and_nothing_else_does() {
    let (_redis, _upstream, gate) = full_gate().await;
    let document = document();
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 10, "the document lists the API");
    for (template, item) in paths {
        let path = concrete(template);
        let allowed = documented_methods(item);
        for method in METHODS {
            let answer = admin(&gate, method, &path, Some(TOKEN)).await;
            let seen = format!("{method} {template}: {answer:?}");
            if !allowed.contains(method) {
                assert_eq!(answer.status, 405, "{seen}");
                let allow: BTreeSet<String> = answer
                    .header("allow")
                    .unwrap_or_default()
                    .split(", ")
                    .map(str::to_owned)
                    .collect();
                assert_eq!(allow, allowed, "{seen}");
                continue;
            }
            let operation = &item[method.to_ascii_lowercase()];
            let statuses = documented_statuses(operation);
            assert!(statuses.contains(&answer.status), "{seen}");
            let reason = answer.reason();
            assert!(
                !UNROUTED.contains(&reason.as_deref().unwrap_or_default()),
                "{seen}"
            );
            let parameters = query_parameters(operation);
            for (name, example) in &parameters {
                let with = format!("{path}?{name}={example}");
                let answer = admin(&gate, method, &with, Some(TOKEN)).await;
                let seen = format!("{method} {with}: {answer:?}");
                assert!(statuses.contains(&answer.status), "{seen}");
                let detail = String::from_utf8_lossy(&answer.body).into_owned();
                assert!(!detail.contains("unknown query parameter"), "{seen}");
            }
            if !parameters.is_empty() {
                let with = format!("{path}?undocumented=1");
                let answer = admin(&gate, method, &with, Some(TOKEN)).await;
                assert_eq!(answer.status, 400, "{method} {with}: {answer:?}");
                assert!(statuses.contains(&400), "{method} {template} documents 400");
            }
        }
    }
    gate.stop().await;
}

/// The string literals in a Rust source that start with `/`, outside
/// comment lines and the unit tests (which name paths that must not exist),
/// with the routing table's catch-all `{*key}` written as the document's
/// `{key}`.
fn path_literals(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let served = source.split("#[cfg(test)]").next().unwrap_or_default();
    for line in served.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("\"/") {
            let after = &rest[start + 1..];
            let Some(end) = after.find('"') else { break };
            found.push(after[..end].replace("{*", "{"));
            rest = &after[end + 1..];
        }
    }
    found
}

fn admin_sources(dir: &Path, into: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("src/admin is readable") {
        let path = entry.unwrap().path();
        if path.is_dir() {
            admin_sources(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            into.push((path.display().to_string(), text));
        }
    }
}

#[test]
fn every_path_the_router_names_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![(
        "src/admin.rs".to_owned(),
        std::fs::read_to_string(root.join("src/admin.rs")).unwrap(),
    )];
    admin_sources(&root.join("src/admin"), &mut sources);
    let document = document();
    let documented: Vec<&String> = document["paths"].as_object().unwrap().keys().collect();
    let mut checked = 0;
    for (file, source) in &sources {
        for literal in path_literals(source) {
            let covered = documented
                .iter()
                .any(|path| *path == &literal || path.starts_with(literal.as_str()));
            assert!(
                covered,
                "{file}: {literal:?} is not in docs/admin-openapi.json"
            );
            checked += 1;
        }
    }
    assert!(checked >= 8, "the router's paths were found ({checked})");
}

/// The admin URLs a console file names (in quotes or template literals),
/// with `${enc(route)}` written as the document's `{route}`.
fn console_calls(source: &str) -> Vec<String> {
    let mut calls = Vec::new();
    for quote in ['"', '\'', '`'] {
        let opener = format!("{quote}/admin");
        let mut rest = source;
        while let Some(start) = rest.find(&opener) {
            let after = &rest[start + 1..];
            let end = after.find(quote).unwrap_or(after.len());
            calls.push(after[..end].replace("${enc(route)}", "{route}"));
            rest = &after[end..];
        }
    }
    calls
}

#[test]
fn every_call_the_console_makes_is_documented_with_its_parameters() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/admin/console");
    let document = document();
    let paths = document["paths"].as_object().unwrap();
    let mut checked = 0;
    for file in ["console.js", "index.html"] {
        let source = std::fs::read_to_string(root.join(file)).unwrap();
        for call in console_calls(&source) {
            let (path, query) = call.split_once('?').unwrap_or((&call, ""));
            let item = paths
                .get(path)
                .unwrap_or_else(|| panic!("{file}: {path} is not in docs/admin-openapi.json"));
            let names: BTreeSet<String> = item
                .as_object()
                .unwrap()
                .iter()
                .filter(|(method, _)| *method != "parameters")
                .flat_map(|(_, operation)| query_parameters(operation))
                .map(|(name, _)| name)
                .collect();
            for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                let name = pair.split('=').next().unwrap_or_default();
                assert!(
                    names.contains(name),
                    "{file}: {call}: ?{name}= is undocumented"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "the console's calls were found ({checked})");
}
