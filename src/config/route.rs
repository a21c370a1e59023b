//! `[[route]]`, validated and printed: the route's own keys (name, path
//! prefix, methods, upstream) and the assembly of its tables.
//!
//! Each table is read by the module that owns it (`scheme.rs`,
//! `idempotency.rs`, `guard.rs`, `inbox_rules.rs`); the checks that compare
//! them are `cross.rs`'s, run here as soon as the tables they compare
//! are read, so a route's problems are listed in file order.

use http::Method;

use super::cross;
use super::entity_machine::entity;
use super::guard::RawGuard;
use super::guard::guards;
use super::idempotency::idempotency;
use super::inbox_rules::{Inbox, inbox};
use super::probe::probe;
use super::problems::Problems;
use super::raw::RawRoute;
use super::read::upstream_url;
use super::redact::redact_url;
use super::scheme::{scheme, to_raw as signature_to_raw};
use super::{OnUnavailable, Route, Upstream};

/// Validates route `key` (`route[0]`); `default_upstream` and
/// `store_on_unavailable` are what it inherits.
pub(super) fn route(
    problems: &mut Problems,
    key: &str,
    raw: RawRoute,
    default_upstream: &Upstream,
    store_on_unavailable: OnUnavailable,
) -> Route {
    let scope = names(problems, key, &raw);
    if let Err(problem) = crate::path::check_prefix(&raw.path_prefix) {
        problems.push(&format!("{key}.path_prefix"), problem);
    }
    let methods = methods(problems, key, raw.methods.as_deref());
    let upstream = match &raw.upstream {
        Some(url) => Upstream {
            url: upstream_url(problems, &format!("{key}.upstream"), url),
            timeout: default_upstream.timeout,
        },
        None => default_upstream.clone(),
    };
    let scheme = scheme(problems, &format!("{key}.signature"), &raw.signature);
    let mut idempotency = idempotency(
        problems,
        &format!("{key}.idempotency"),
        &raw.idempotency,
        store_on_unavailable,
        (&scheme, &methods),
        scope,
    );
    cross::signature_and_idempotency(problems, key, (&scheme, &methods), &mut idempotency);
    let guards = guards(problems, &format!("{key}.guard"), &raw.guards);
    let inbox = inbox(problems, key, raw.inbox.as_ref());
    let entity = entity(
        problems,
        key,
        raw.entity.as_ref(),
        inbox.as_ref(),
        idempotency.retention,
    );
    if let Some(entity) = &entity {
        cross::entity_signed(problems, key, (&scheme, &methods), entity, &mut idempotency);
    }
    if let Some(inbox) = &inbox {
        let cache_status_written = raw.idempotency.cache_status.is_some();
        let context = (&upstream, cache_status_written);
        cross::inbox_and_route(problems, key, inbox, context, &mut idempotency);
    }
    let has_ack = inbox.is_some() || entity.is_some();
    let probe = probe(
        problems,
        key,
        raw.probe.as_ref(),
        (upstream.timeout, idempotency.unknown_hold, has_ack),
    );
    if let Some(probe) = &probe {
        cross::probe_signed(problems, key, (&scheme, &methods), probe, &mut idempotency);
    }
    Route {
        guards,
        inbox,
        entity,
        probe,
        name: raw.name,
        path_prefix: raw.path_prefix,
        case_sensitive: raw.case_sensitive.unwrap_or(false),
        methods,
        upstream,
        scheme,
        idempotency,
    }
}

/// Checks the route's name and its scope (default: the name), both store
/// key components; returns the scope.
fn names(problems: &mut Problems, key: &str, raw: &RawRoute) -> String {
    if !is_key_word(&raw.name) {
        problems.push(
            &format!("{key}.name"),
            format!(
                "{:?} must be 1-64 characters of a-z, 0-9, '_' or '-' (it is a metric label and part of the store key)",
                raw.name
            ),
        );
    }
    // The scope defaults to the name: a bad name is the name's problem.
    let (scope, from) = match &raw.idempotency.scope {
        Some(scope) => (scope.clone(), format!("{key}.idempotency.scope")),
        None => (raw.name.clone(), format!("{key}.name")),
    };
    if !is_key_word(&scope) {
        problems.push_derived(
            &format!("{key}.idempotency.scope"),
            &[&from],
            format!("{scope:?} must be 1-64 characters of a-z, 0-9, '_' or '-' (it is part of the store key)"),
        );
    }
    scope
}

/// `methods = [...]`, default `["POST"]`, compared ignoring case.
fn methods(problems: &mut Problems, key: &str, written: Option<&[String]>) -> Vec<Method> {
    let post = ["POST".to_owned()];
    let methods = written
        .unwrap_or(&post)
        .iter()
        .filter_map(|m| {
            let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok();
            if method.is_none() {
                problems.push(
                    &format!("{key}.methods"),
                    format!("{m:?} is not an HTTP method"),
                );
            }
            method
        })
        .collect::<Vec<_>>();
    if methods.is_empty() {
        problems.push(&format!("{key}.methods"), "must list at least one method");
    }
    methods
}

/// A route name or scope: it is a metric label and part of the store key.
fn is_key_word(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 64
        && word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The route as `check-config` prints it; its upstream only where it
/// overrides `default_upstream`.
pub(super) fn to_raw(route: &Route, default_upstream: &Upstream) -> RawRoute {
    let own_upstream = route.upstream.url != default_upstream.url;
    RawRoute {
        name: route.name.clone(),
        path_prefix: route.path_prefix.clone(),
        methods: Some(route.methods.iter().map(ToString::to_string).collect()),
        case_sensitive: Some(route.case_sensitive),
        upstream: own_upstream.then(|| redact_url(&route.upstream.url.to_string())),
        signature: signature_to_raw(&route.scheme),
        idempotency: route.idempotency.to_raw(&route.scheme),
        inbox: route.inbox.as_ref().map(Inbox::to_raw),
        guards: route.guards.iter().map(RawGuard::from).collect(),
        entity: route.entity.as_ref().map(super::Entity::to_raw),
        probe: route.probe.as_ref().map(super::Probe::to_raw),
    }
}
