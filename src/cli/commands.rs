//! Each admin subcommand as its request(s) to the admin API, and what is
//! printed from the answer.

use http::{Method, StatusCode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use super::args::{
    AdminArgs, AdminCommand, EntityCorrection, InboxCommand, Page, RecordsCommand, SeenState,
    Target,
};
use super::http::{AdminClient, Answer};
use super::{CliError, render};
use crate::time::now_ms;

/// Everything but RFC 3986's unreserved characters is escaped in a path
/// segment or a query value (so `+`, `&`, `/` and `%` in a key stay theirs).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

/// `?hash=…` or `?key=…` (and `&entity=…`), as the record and inbox APIs
/// take it.
fn target_query(target: &Target) -> String {
    let mut query = match (&target.named.hash, &target.named.key) {
        (Some(hash), _) => format!("hash={}", encode(hash)),
        (None, Some(key)) => format!("key={}", encode(key)),
        // clap's rules make exactly one of them present.
        (None, None) => String::new(),
    };
    if let Some(entity) = &target.entity {
        query.push_str(&format!("&entity={}", encode(entity)));
    }
    query
}

/// What an answer becomes for people.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Record,
    Delivery,
    Entity,
    HotKeys,
    Info,
    /// Text as it came (`/admin/config` is TOML).
    Text,
}

impl Shape {
    /// A field every answer of this shape has.
    fn required_field(self) -> &'static str {
        match self {
            Self::Record | Self::Delivery => "key_hash",
            Self::Entity => "entity",
            Self::HotKeys | Self::Info => "routes",
            Self::Text => "",
        }
    }
}

/// Runs the command `args` names against `client`, giving `out` the text
/// to print, in pieces (a long `--all` listing prints as its pages come in
/// with `--json`).
pub(crate) async fn execute(
    client: &AdminClient,
    args: &AdminArgs,
    out: &mut dyn FnMut(&str),
) -> Result<(), CliError> {
    let (method, path, shape) = match &args.command {
        AdminCommand::Records(RecordsCommand::Get { route, target }) => (
            Method::GET,
            format!("/admin/records/{}?{}", encode(route), target_query(target)),
            Shape::Record,
        ),
        AdminCommand::Records(RecordsCommand::Purge {
            route,
            target,
            state,
        }) => {
            let path = format!(
                "/admin/records/{}?{}&expect_state={}",
                encode(route),
                target_query(target),
                state.as_str()
            );
            let answer = accepted(client.call(Method::DELETE, &path).await?)?;
            if !args.json {
                out(&purged(route, target, *state));
            } else if !answer.body.is_empty() {
                out(&with_newline(&answer.body));
            }
            return Ok(());
        }
        AdminCommand::Records(RecordsCommand::List { route, state, page }) => {
            let base = format!("/admin/records/{}?state={}", encode(route), state.as_str());
            let what = format!("{} records on route {route}", state.as_str());
            return listing(client, args.json, &base, page, Listing::Records, &what, out).await;
        }
        AdminCommand::Inbox(InboxCommand::List { route, state, page }) => {
            let base = format!("/admin/inbox/{}?state={}", encode(route), state.as_str());
            let what = format!("{} deliveries on route {route}", state.as_str());
            return listing(client, args.json, &base, page, Listing::Inbox, &what, out).await;
        }
        AdminCommand::Held { route, page } => {
            let base = format!("/admin/entities/{}?state=held", encode(route));
            let what = format!("held entities on route {route}");
            return listing(
                client,
                args.json,
                &base,
                page,
                Listing::Entities,
                &what,
                out,
            )
            .await;
        }
        AdminCommand::Audit { page } => {
            let what = "operator actions in the audit trail";
            return listing(
                client,
                args.json,
                "/admin/audit",
                page,
                Listing::Audit,
                what,
                out,
            )
            .await;
        }
        AdminCommand::Inbox(InboxCommand::Show { route, target }) => (
            Method::GET,
            format!(
                "/admin/inbox/{}/delivery?{}",
                encode(route),
                target_query(target)
            ),
            Shape::Delivery,
        ),
        AdminCommand::Inbox(InboxCommand::Retry {
            route,
            target,
            state,
        }) => (
            Method::POST,
            format!(
                "/admin/inbox/{}/retry?{}&expect_state={}",
                encode(route),
                target_query(target),
                state.as_str()
            ),
            Shape::Delivery,
        ),
        AdminCommand::Inbox(InboxCommand::Drop {
            route,
            target,
            state,
        }) => (
            Method::POST,
            format!(
                "/admin/inbox/{}/drop?{}&expect_state={}",
                encode(route),
                target_query(target),
                state.as_str()
            ),
            Shape::Delivery,
        ),
        AdminCommand::Entity {
            route,
            id,
            hash,
            correction,
        } => {
            let mut path = match (hash, id) {
                (Some(hash), _) => {
                    format!("/admin/entities/{}?hash={}", encode(route), encode(hash))
                }
                (None, id) => format!(
                    "/admin/entities/{}?id={}",
                    encode(route),
                    encode(id.as_deref().unwrap_or_default())
                ),
            };
            let method = correction_query(correction, &mut path);
            (method, path, Shape::Entity)
        }
        AdminCommand::HotKeys { route } => (
            Method::GET,
            match route {
                Some(route) => format!("/admin/hot-keys?route={}", encode(route)),
                None => "/admin/hot-keys".to_owned(),
            },
            Shape::HotKeys,
        ),
        AdminCommand::Config => (Method::GET, "/admin/config".to_owned(), Shape::Text),
        AdminCommand::Info => (Method::GET, "/admin/info".to_owned(), Shape::Info),
    };
    let answer = accepted(client.call(method, &path).await?)?;
    if args.json || matches!(shape, Shape::Text) {
        out(&with_newline(&answer.body));
        return Ok(());
    }
    let view = json_of(&answer, shape.required_field())?;
    let now = now_ms();
    out(&match shape {
        Shape::Record => render::record(&view, now),
        Shape::Delivery => render::delivery(&view, now),
        Shape::Entity => render::entity(&view, now),
        Shape::HotKeys => render::hot_keys(&view, now),
        Shape::Info => render::info(&view, now),
        Shape::Text => with_newline(&answer.body),
    });
    Ok(())
}

/// The method of an `admin entity` call, and the query of its correction
/// appended to `path`: `PUT` for `--set`, `DELETE` for `--clear`, else a
/// `GET`. `none` says "nothing" for the state and pending delivery seen.
fn correction_query(correction: &EntityCorrection, path: &mut String) -> Method {
    let method = match (&correction.set, correction.clear) {
        (Some(state), _) => {
            path.push_str(&format!("&state={}", encode(state)));
            Method::PUT
        }
        (None, true) => Method::DELETE,
        (None, false) => return Method::GET,
    };
    let seen = |value: &Option<String>| match value.as_deref() {
        None | Some("none") => String::new(),
        Some(text) => encode(text),
    };
    path.push_str(&format!(
        "&expect_state={}&expect_pending={}",
        seen(&correction.expect_state),
        seen(&correction.expect_pending)
    ));
    if let Some(operator) = &correction.operator {
        path.push_str(&format!("&operator={}", encode(operator)));
    }
    method
}

/// How many pages without a row a listing without `--all` follows before
/// it says what it walked so far and where to go on.
const EMPTY_PAGES_FOLLOWED: usize = 100;

/// The listings the CLI pages through.
#[derive(Debug, Clone, Copy)]
enum Listing {
    Records,
    Inbox,
    Entities,
    Audit,
}

/// One page, or with `--all` every page from the first, following
/// `next_cursor`. `--json` prints each page's document on its own line
/// as it arrives; people get one table, with a row the API repeated (a
/// Redis keyspace shrinking during the walk) shown once, and without
/// `--all` the pages that found nothing are followed (up to
/// [`EMPTY_PAGES_FOLLOWED`]) so that "no …" is said only of a whole walk.
async fn listing(
    client: &AdminClient,
    json: bool,
    base: &str,
    page: &Page,
    kind: Listing,
    what: &str,
    out: &mut dyn FnMut(&str),
) -> Result<(), CliError> {
    let mut cursor: Option<String> = page.cursor.clone();
    let mut rows = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let now = now_ms();
    let mut pages = 0;
    loop {
        pages += 1;
        let mut path = base.to_owned();
        let mut add = |pair: String| {
            path.push(if path.contains('?') { '&' } else { '?' });
            path.push_str(&pair);
        };
        if let Some(limit) = page.limit {
            add(format!("limit={limit}"));
        }
        if let Some(cursor) = &cursor {
            add(format!("cursor={}", encode(cursor)));
        }
        let answer = accepted(client.call(Method::GET, &path).await?)?;
        let document = json_of(&answer, "items")?;
        if json {
            out(&with_newline(&answer.body));
        } else {
            let page_rows = match kind {
                Listing::Records => render::record_rows(&document),
                Listing::Inbox => render::delivery_rows(&document, now),
                Listing::Entities => render::held_rows(&document),
                Listing::Audit => render::audit_rows(&document, now),
            };
            // The first column names the item: key hash, entity or entry id.
            rows.extend(
                page_rows
                    .into_iter()
                    .filter(|row| seen.insert(row[0].clone())),
            );
        }
        let next = match &document["next_cursor"] {
            Value::Null => None,
            Value::String(text) => Some(text.clone()),
            other => Some(other.to_string()),
        };
        let follow = page.all || (!json && rows.is_empty() && pages < EMPTY_PAGES_FOLLOWED);
        match next {
            Some(next) if follow => {
                if cursor.as_deref() == Some(next.as_str()) {
                    return Err(CliError::Unreachable(format!(
                        "the API gave the same cursor twice ({next}); stopping"
                    )));
                }
                cursor = Some(next);
            }
            next => {
                if !json {
                    let header: &[&str] = match kind {
                        Listing::Records => &render::RECORD_HEADER,
                        Listing::Inbox => &render::DELIVERY_HEADER,
                        Listing::Entities => &render::HELD_HEADER,
                        Listing::Audit => &render::AUDIT_HEADER,
                    };
                    let next = next.map(Value::String);
                    out(&render::listing(header, &rows, what, next.as_ref()));
                }
                return Ok(());
            }
        }
    }
}

/// A 2xx answer through; any other is the API's refusal.
fn accepted(answer: Answer) -> Result<Answer, CliError> {
    if answer.status.is_success() {
        return Ok(answer);
    }
    let mut message = render::refusal(answer.status.as_u16(), &answer.body);
    if answer.status == StatusCode::UNAUTHORIZED {
        message.push_str(
            "\nhint: the token comes from --token-file, IDEMGATE_ADMIN_TOKEN or the config's [admin] token",
        );
    }
    Err(CliError::Refused {
        message,
        body: answer.body,
    })
}

/// The answer's JSON object, which must hold `field` (every view of the
/// API has one it cannot lack), or why it is not the admin API's: a
/// proxy port or another service answers too, and an empty table would
/// hide that.
fn json_of(answer: &Answer, field: &str) -> Result<Value, CliError> {
    match serde_json::from_slice::<Value>(&answer.body) {
        Ok(view) if view.get(field).is_some() => Ok(view),
        _ => Err(CliError::Unreachable(format!(
            "HTTP {} with no {field:?} in its JSON: is this the admin listener?",
            answer.status.as_u16()
        ))),
    }
}

fn with_newline(body: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(body).into_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// What `records purge` tells people: what was purged, and what its next
/// delivery does.
fn purged(route: &str, target: &Target, state: SeenState) -> String {
    let named = match (&target.named.hash, &target.named.key) {
        (Some(hash), _) => format!("hash {hash}"),
        (None, Some(key)) => format!("key {}", super::table::single_line(key)),
        (None, None) => String::new(),
    };
    let next = match state {
        SeenState::Completed | SeenState::Inbox => {
            "its next delivery is forwarded and runs again: the handler had already done it"
        }
        _ => "its next delivery is forwarded",
    };
    format!(
        "purged the {} record of {named} on route {route}: {next}\n",
        state.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Named;

    #[test]
    fn keys_are_escaped_so_the_api_reads_them_back_unchanged() {
        let target = Target {
            named: Named {
                hash: None,
                key: Some("a b+c/d&e=%".to_owned()),
            },
            entity: None,
        };
        assert_eq!(target_query(&target), "key=a%20b%2Bc%2Fd%26e%3D%25");
        let target = Target {
            named: Named {
                hash: Some("AB".to_owned()),
                key: None,
            },
            entity: None,
        };
        assert_eq!(target_query(&target), "hash=AB");
        let target = Target {
            named: Named {
                hash: None,
                key: Some("n 1".to_owned()),
            },
            entity: Some("o/1".to_owned()),
        };
        assert_eq!(target_query(&target), "key=n%201&entity=o%2F1");
        assert_eq!(encode("évt_1-x.y~z"), "%C3%A9vt_1-x.y~z");
    }
}
