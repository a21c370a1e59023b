//! The API's JSON as text for people. Each view reads the fields the API
//! documents (src/admin.rs, src/admin/*.rs) and shows any other field it
//! does not know after them, so a newer server loses nothing on an older
//! CLI. `--json` bypasses all of this.

use serde_json::{Map, Value};

use super::table::{cell, columns, duration, fields, relative};

/// How one field's value reads: by its name, since the API's names say
/// what their milliseconds are.
fn field_text(name: &str, value: &Value, now_ms: u64) -> String {
    let ms = value.as_u64();
    match (name, ms) {
        ("age_ms" | "ttl_ms" | "uptime_ms", Some(ms)) => duration(ms),
        (name, Some(ms)) if name.ends_with("_ms") => relative(ms, now_ms),
        (_, _) => match value {
            Value::Bool(true) => "yes".to_owned(),
            Value::Bool(false) => "no".to_owned(),
            other => cell(Some(other)),
        },
    }
}

/// A field's name for people: the unit suffix goes, its value already
/// reads as a duration or a time (`age_ms` → `age`).
fn label(name: &str) -> String {
    name.trim_end_matches("_ms")
        .trim_end_matches("_unix")
        .to_owned()
}

/// An object's fields as `name  value` lines: `order` first, then the
/// rest alphabetically; nested objects flattened as `parent.child`.
fn object_fields(object: &Map<String, Value>, order: &[&str], now_ms: u64) -> String {
    let mut names: Vec<&str> = order
        .iter()
        .copied()
        .filter(|n| object.contains_key(*n))
        .collect();
    let mut rest: Vec<&str> = object
        .keys()
        .map(String::as_str)
        .filter(|n| !order.contains(n))
        .collect();
    rest.sort_unstable();
    names.extend(rest);
    let mut pairs = Vec::new();
    for name in names {
        match &object[name] {
            Value::Object(inner) => {
                let mut keys: Vec<&String> = inner.keys().collect();
                keys.sort_unstable();
                for key in keys {
                    let full = format!("{name}.{key}");
                    pairs.push((label(&full), field_text(&full, &inner[key], now_ms)));
                }
            }
            value => pairs.push((label(name), field_text(name, value, now_ms))),
        }
    }
    fields(&pairs)
}

fn as_object(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// `records get`: one record.
pub(crate) fn record(view: &Value, now_ms: u64) -> String {
    const ORDER: [&str; 11] = [
        "route",
        "key_hash",
        "state",
        "age_ms",
        "ttl_ms",
        "status",
        "body_bytes",
        "body_stored",
        "inbox_stage",
        "attempts",
        "fingerprint",
    ];
    object_fields(&as_object(view), &ORDER, now_ms)
}

/// `inbox show|retry|drop`: one delivery.
pub(crate) fn delivery(view: &Value, now_ms: u64) -> String {
    const ORDER: [&str; 12] = [
        "route",
        "key_hash",
        "state",
        "attempts",
        "attempt_limit",
        "age_ms",
        "next_due_ms",
        "visible_again_ms",
        "changed_ms",
        "last_error",
        "last_answer",
        "ack_status",
    ];
    object_fields(&as_object(view), &ORDER, now_ms)
}

/// `entity`: the entity's fields, then its history as a table, newest
/// first, each row naming the delivery `records get --hash` shows.
pub(crate) fn entity(view: &Value, now_ms: u64) -> String {
    const ORDER: [&str; 10] = [
        "route", "scope", "entity", "id", "state", "since_ms", "pending", "held", "counts",
        "ttl_ms",
    ];
    let mut object = as_object(view);
    let history = object.remove("history");
    let mut out = object_fields(&object, &ORDER, now_ms);
    let rows: Vec<Vec<String>> = history
        .as_ref()
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|t| {
            vec![
                cell(t.get("kind")),
                cell(t.get("from")),
                cell(t.get("to")),
                cell(t.get("delivery")),
                t["at_ms"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |at| relative(at, now_ms)),
            ]
        })
        .collect();
    out.push('\n');
    if rows.is_empty() {
        out.push_str("no transitions\n");
    } else {
        out.push_str(&columns(&["KIND", "FROM", "TO", "DELIVERY", "AT"], &rows));
    }
    out
}

/// The items of a listing page.
fn items(page: &Value) -> &[Value] {
    page["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `records list`: the rows of one page.
pub(crate) fn record_rows(page: &Value) -> Vec<Vec<String>> {
    items(page)
        .iter()
        .map(|item| {
            let mut state = cell(item.get("state"));
            if item["past_lease"] == Value::Bool(true) {
                state.push_str(" (past lease)");
            }
            vec![
                cell(item.get("key_hash")),
                cell(item.get("key")),
                state,
                item["age_ms"].as_u64().map_or_else(|| "-".into(), duration),
                item["ttl_ms"].as_u64().map_or_else(|| "-".into(), duration),
                cell(item.get("status")),
                cell(item.get("trace_id")),
            ]
        })
        .collect()
}

/// The header of `records list`.
pub(crate) const RECORD_HEADER: [&str; 7] = [
    "KEY HASH", "KEY", "STATE", "AGE", "TTL", "STATUS", "TRACE ID",
];

/// `held`: the rows of one page, each entity with what holds it.
pub(crate) fn held_rows(page: &Value) -> Vec<Vec<String>> {
    items(page)
        .iter()
        .map(|item| {
            let pending = &item["pending"];
            vec![
                cell(item.get("entity")),
                cell(item.get("state")),
                cell(pending.get("to")),
                cell(pending.get("delivery")),
                item["held"]
                    .as_array()
                    .map_or_else(|| "0".into(), |held| held.len().to_string()),
            ]
        })
        .collect()
}

/// The header of `held`.
pub(crate) const HELD_HEADER: [&str; 5] = [
    "ENTITY",
    "STATE",
    "PENDING TO",
    "PENDING DELIVERY",
    "WAITING",
];

/// `inbox list`: the rows of one page.
pub(crate) fn delivery_rows(page: &Value, now_ms: u64) -> Vec<Vec<String>> {
    items(page)
        .iter()
        .map(|item| {
            let next = ["next_due_ms", "visible_again_ms"]
                .iter()
                .find_map(|name| item[*name].as_u64())
                .map_or_else(|| "-".into(), |at| relative(at, now_ms));
            let attempts = match (item["attempts"].as_u64(), item["attempt_limit"].as_u64()) {
                (Some(done), Some(limit)) => format!("{done}/{limit}"),
                (Some(done), None) => done.to_string(),
                _ => "-".into(),
            };
            vec![
                cell(item.get("key_hash")),
                cell(item.get("state")),
                attempts,
                item["age_ms"].as_u64().map_or_else(|| "-".into(), duration),
                next,
                cell(item.get("last_error")),
            ]
        })
        .collect()
}

/// The header of `inbox list`.
pub(crate) const DELIVERY_HEADER: [&str; 6] =
    ["KEY HASH", "STATE", "ATTEMPTS", "AGE", "NEXT", "LAST ERROR"];

/// `audit`: the rows of one page, the states as `found → left`.
pub(crate) fn audit_rows(page: &Value, now_ms: u64) -> Vec<Vec<String>> {
    items(page)
        .iter()
        .map(|item| {
            let mut states = format!("{} → {}", cell(item.get("before")), cell(item.get("after")));
            if item["expected"].is_string() && item["expected"] != item["before"] {
                states.push_str(&format!(" (saw {})", cell(item.get("expected"))));
            }
            vec![
                cell(item.get("id")),
                item["at_ms"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |at| relative(at, now_ms)),
                cell(item.get("token")),
                cell(item.get("action")),
                cell(item.get("route")),
                cell(item.get("target")),
                states,
                cell(item.get("outcome")),
            ]
        })
        .collect()
}

/// The header of `audit`.
pub(crate) const AUDIT_HEADER: [&str; 8] = [
    "ID", "WHEN", "TOKEN", "ACTION", "ROUTE", "TARGET", "STATE", "OUTCOME",
];

/// A listing for people: the table, or a line saying it is empty (or,
/// while a cursor remains, that none was found yet), and how to get the
/// next page when there is one.
pub(crate) fn listing(
    header: &[&str],
    rows: &[Vec<String>],
    what: &str,
    next_cursor: Option<&Value>,
) -> String {
    let more = next_cursor.filter(|c| !c.is_null());
    let mut out = if rows.is_empty() && more.is_some() {
        format!("no {what} in the part walked so far; the walk is not finished\n")
    } else if rows.is_empty() {
        format!("no {what}\n")
    } else {
        columns(header, rows)
    };
    if let Some(cursor) = more {
        out.push_str(&format!(
            "more: --cursor {} (or --all)\n",
            cell(Some(cursor))
        ));
    }
    out
}

/// `hot-keys`.
pub(crate) fn hot_keys(view: &Value, now_ms: u64) -> String {
    let mut rows = Vec::new();
    for route in view["routes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        for key in route["keys"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            rows.push(vec![
                cell(route.get("route")),
                cell(key.get("key")),
                cell(key.get("deliveries")),
                cell(key.get("duplicates")),
                cell(key.get("last_outcome")),
                cell(key.get("last_reason")),
                key["last_seen_unix_ms"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |at| relative(at, now_ms)),
            ]);
        }
    }
    let window = cell(view.get("window_seconds"));
    let mut out = format!("window: {window}s\n");
    if rows.is_empty() {
        out.push_str("no keys delivered in the window\n");
    } else {
        out.push_str(&columns(
            &[
                "ROUTE",
                "KEY HASH",
                "DELIVERIES",
                "DUPLICATES",
                "LAST OUTCOME",
                "LAST REASON",
                "LAST SEEN",
            ],
            &rows,
        ));
    }
    out
}

/// `info`.
pub(crate) fn info(view: &Value, now_ms: u64) -> String {
    let store = &view["store"];
    let ready = match store["ready"].as_bool() {
        Some(true) => "yes".to_owned(),
        Some(false) => format!("NO: {}", cell(store.get("problem"))),
        None => "-".to_owned(),
    };
    let started = match (
        view["started_at_unix_ms"].as_u64(),
        view["uptime_ms"].as_u64(),
    ) {
        (Some(at), Some(up)) => format!("{} (up {})", relative(at, now_ms), duration(up)),
        _ => "-".to_owned(),
    };
    let mut pairs = vec![
        ("version".into(), cell(view.get("version"))),
        ("revision".into(), cell(view.get("revision"))),
        ("started".into(), started),
        ("store".into(), cell(store.get("kind"))),
        ("store location".into(), cell(store.get("location"))),
        ("store ready".into(), ready),
    ];
    // The embedded store's check of its whole file.
    if let Some(integrity) = store["integrity"].as_str() {
        pairs.push(("store integrity".into(), integrity.to_owned()));
    }
    let mut out = fields(&pairs);
    let rows: Vec<Vec<String>> = view["routes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|route| {
            let methods = route["methods"]
                .as_array()
                .map(|m| {
                    m.iter()
                        .map(|v| cell(Some(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "-".into());
            vec![
                cell(route.get("name")),
                cell(route.get("path_prefix")),
                methods,
                cell(route.get("upstream")),
                field_text("inbox", &route["inbox"], now_ms),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&columns(
        &["ROUTE", "PATH PREFIX", "METHODS", "UPSTREAM", "INBOX"],
        &rows,
    ));
    out
}

/// A refusal for people: `error: <title>: <detail> (reason <reason>, HTTP
/// <status>)`; an answer that is no problem document shows its status and
/// the start of its body.
pub(crate) fn refusal(status: u16, body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(problem) if problem.get("reason").is_some() || problem.get("title").is_some() => {
            format!(
                "error: {}: {} (reason {}, HTTP {status})",
                cell(problem.get("title")),
                cell(problem.get("detail")),
                cell(problem.get("reason")),
            )
        }
        _ => {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            format!(
                "error: HTTP {status}: {} (is this the admin listener?)",
                super::table::single_line(text.trim())
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_as_labelled_fields_in_the_api_order() {
        let view = serde_json::json!({
            "age_ms": 342, "fingerprint": "8f9e", "key_hash": "5260", "route": "pay",
            "state": "unknown", "ttl_ms": 599_851, "newer_field": true,
        });
        assert_eq!(
            record(&view, 0),
            "route        pay\nkey_hash     5260\nstate        unknown\nage          342ms\n\
             ttl          9m59s\nfingerprint  8f9e\nnewer_field  yes\n"
        );
    }

    #[test]
    fn a_delivery_flattens_its_parts_and_times_read_relative() {
        let view = serde_json::json!({
            "key_hash": "01e8", "state": "dead", "changed_ms": 9_000,
            "last_answer": { "status": 503 }, "request": { "method": "POST" },
        });
        assert_eq!(
            delivery(&view, 10_000),
            "key_hash            01e8\nstate               dead\nchanged             1s ago\n\
             last_answer.status  503\nrequest.method      POST\n"
        );
    }

    #[test]
    fn a_listing_says_when_it_is_empty_and_where_the_next_page_is() {
        let page = serde_json::json!({ "items": [], "next_cursor": null });
        let rows = record_rows(&page);
        assert_eq!(
            listing(&RECORD_HEADER, &rows, "unknown records", None),
            "no unknown records\n"
        );
        let page = serde_json::json!({ "items": [
            { "key_hash": "ab", "key": null, "state": "in_flight", "age_ms": 61_000,
              "ttl_ms": null, "status": null, "trace_id": "4bf9", "past_lease": true }
        ] });
        let rows = record_rows(&page);
        assert_eq!(
            rows[0],
            [
                "ab",
                "-",
                "in_flight (past lease)",
                "1m01s",
                "-",
                "-",
                "4bf9"
            ]
        );
        let next = Value::from("c2");
        assert!(
            listing(&RECORD_HEADER, &rows, "x", Some(&next))
                .ends_with("more: --cursor c2 (or --all)\n")
        );
        // Never "none" while a cursor remains.
        assert_eq!(
            listing(&RECORD_HEADER, &[], "unknown records", Some(&next)),
            "no unknown records in the part walked so far; the walk is not finished\n\
             more: --cursor c2 (or --all)\n"
        );
    }

    #[test]
    fn a_refusal_names_title_detail_and_reason() {
        let problem = br#"{"title":"No record","detail":"no record under this key","reason":"record_not_found","status":404}"#;
        assert_eq!(
            refusal(404, problem),
            "error: No record: no record under this key (reason record_not_found, HTTP 404)"
        );
        assert!(refusal(502, b"<html>bad gateway</html>").contains("is this the admin listener?"));
    }
}
