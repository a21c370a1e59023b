//! The checks that compare one section of the file with another, in one
//! place: each section validator checks only its own table, and these run
//! once the tables they compare are read.
//!
//! * a route's signature against its idempotency table: signed coverage
//!   (`coverage.rs`) and the retention against the signature window;
//! * a route's `[route.inbox]` against the rest of the route: the statuses
//!   it queues against `cache_status`, its visibility timeout against the
//!   upstream timeout, and shadow mode;
//! * a route's `[route.entity]` against its signature: the entity id and
//!   state are read from signed bytes only (contract §4 rule 12);
//! * each route against the routes before it: names, shared scopes (the
//!   same entity machine on every route of a scope) and overlapping path
//!   prefixes.
//!
//! A comparison with a setting that did not parse is skipped
//! ([`Problems::push_derived`]): its stand-in value would only add a
//! second, bogus error.

use http::Method;

use super::Route;
use super::Upstream;
use super::coverage;
use super::entity_machine::Entity;
use super::idempotency::{FingerprintPart, Idempotency, Mode, UnsignedKey};
use super::inbox_rules::{Inbox, VISIBILITY_MARGIN};
use super::probe::Probe;
use super::problems::Problems;
use super::raw::format_duration;
use super::status::CacheStatus;
use super::{Segment, Selector};
use crate::path::canonical_prefix;
use crate::signature::{RequestPart, Scheme, unsigned};

/// Route `key` (`route[0]`): its key and fingerprint must rest on signed
/// parts (recording those `unsigned_key = "accept"` let through), and its
/// records must outlive the signature window.
pub(super) fn signature_and_idempotency(
    problems: &mut Problems,
    key: &str,
    (scheme, methods): (&Scheme, &[Method]),
    idempotency: &mut Idempotency,
) {
    idempotency.accepted_unsigned = coverage::check(
        problems,
        key,
        scheme,
        methods,
        idempotency,
        idempotency.unsigned_key,
    );
    if let Some(tolerance) = scheme.tolerance() {
        if idempotency.retention <= tolerance {
            problems.push_derived(
                &format!("{key}.idempotency.retention"),
                &[&format!("{key}.signature.tolerance")],
                format!(
                    "must exceed the signature tolerance ({tolerance:?}), or a captured request still inside the window could be replayed to the backend after its record expired"
                ),
            );
        }
    }
}

/// Route `key`'s entity selectors must be signed: an entity id or state
/// an attacker could vary would let a captured notice be judged as
/// another entity's, or as another state. `unsigned_key = "accept"`
/// waives it as it waives an unsigned key (recorded for start-up's WARN);
/// `scheme = "none"` routes sign nothing and are exempt, as for keys.
pub(super) fn entity_signed(
    problems: &mut Problems,
    key: &str,
    (scheme, methods): (&Scheme, &[Method]),
    entity: &Entity,
    idempotency: &mut Idempotency,
) {
    if matches!(scheme, Scheme::None) {
        return;
    }
    let parts = entity
        .id
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("id[{i}]"), s));
    let event = entity.event.iter().map(|s| ("event".to_owned(), s));
    let state = std::iter::once(("state".to_owned(), &entity.state));
    for (field, selector) in parts.chain(state).chain(event) {
        let place = (key, format!("entity.{field}"));
        let risk = "the entity's state must be decided by signed bytes only";
        require_signed(
            problems,
            place,
            (scheme, methods),
            (selector, risk),
            idempotency,
        );
    }
}

/// The signed-coverage rule for one value `selector` read at `key.field`
/// (contract §4 rule 12): unsigned, it is a problem saying `risk`, or,
/// with `unsigned_key = "accept"`, recorded for start-up's WARN.
fn require_signed(
    problems: &mut Problems,
    (key, field): (&str, String),
    (scheme, methods): (&Scheme, &[Method]),
    (selector, risk): (&Selector, &str),
    idempotency: &mut Idempotency,
) {
    let Some(why) = unsigned(scheme, methods, RequestPart::Value(selector)) else {
        return;
    };
    if idempotency.unsigned_key == UnsignedKey::Accept {
        let accepted = format!("{field} {selector} ({why})");
        idempotency.accepted_unsigned.push(accepted);
    } else {
        problems.push(
            &format!("{key}.{field}"),
            format!("{selector} is not signed: {why}; {risk} (or set unsigned_key = \"accept\" in [route.idempotency] to take that risk)"),
        );
    }
}

/// Route `key`'s probe path must read signed values only: a value an
/// attacker could change in transit would point the probe at another
/// order, whose "applied" would be replayed for this delivery.
/// `unsigned_key = "accept"` waives it as for keys and entities (recorded
/// for start-up's WARN); `scheme = "none"` routes are exempt.
pub(super) fn probe_signed(
    problems: &mut Problems,
    key: &str,
    (scheme, methods): (&Scheme, &[Method]),
    probe: &Probe,
    idempotency: &mut Idempotency,
) {
    if matches!(scheme, Scheme::None) {
        return;
    }
    for segment in &probe.path.segments {
        let Segment::Value(selector) = segment else {
            continue;
        };
        let place = (key, "probe.path".to_owned());
        let risk = "anyone who can change it in transit could point the probe at an order already paid, and its \"applied\" would be replayed for this delivery. Read a signed value";
        require_signed(
            problems,
            place,
            (scheme, methods),
            (selector, risk),
            idempotency,
        );
    }
}

/// Route `key`'s inbox against the rest of the route. An enabled inbox
/// takes the statuses it queues out of a default (not written)
/// `cache_status`; a written one must not overlap them.
pub(super) fn inbox_and_route(
    problems: &mut Problems,
    key: &str,
    inbox: &Inbox,
    (upstream, cache_status_written): (&Upstream, bool),
    idempotency: &mut Idempotency,
) {
    let inbox_key = format!("{key}.inbox");
    if cache_status_written {
        check_overlap(
            problems,
            &inbox_key,
            &inbox.on.statuses,
            &idempotency.cache_status,
        );
    } else {
        // The default ["2xx", "4xx"] was not chosen with the inbox in
        // mind (it would clash with the default "429"): what is queued is
        // simply not stored.
        subtract(&mut idempotency.cache_status, &inbox.on.statuses);
    }
    let needed = upstream.timeout.saturating_add(VISIBILITY_MARGIN);
    if inbox.visibility_timeout < needed {
        problems.push_derived(
            &format!("{inbox_key}.visibility_timeout"),
            &["upstream.timeout"],
            format!(
                "must be at least the upstream timeout ({}) plus {} ({}): a worker claims the delivery, waits up to the upstream timeout for the handler and then writes the outcome, all inside this window; with less, it gives up before sending (or another worker takes the delivery over) and the delivery is held as unknown",
                format_duration(upstream.timeout),
                format_duration(VISIBILITY_MARGIN),
                format_duration(needed),
            ),
        );
    }
    if idempotency.mode == Mode::Shadow {
        problems.push(
            &format!("{key}.idempotency.mode"),
            "\"shadow\" claims nothing, so nothing can be queued: disable the inbox (enabled = false) or use \"enforce\"",
        );
    }
}

/// An answer can not be both stored (and replayed) and queued (and
/// redelivered): every overlap between `on` and `cache_status` is a problem.
fn check_overlap(problems: &mut Problems, key: &str, on: &CacheStatus, cached: &CacheStatus) {
    // Both lists are as written (classes and single codes), so each range
    // names itself.
    let name = |&(low, high): &(u16, u16)| {
        if low == high {
            low.to_string()
        } else {
            format!("{}xx", low / 100)
        }
    };
    for queued in &on.ranges {
        let stored = cached
            .ranges
            .iter()
            .find(|(low, high)| queued.0 <= *high && *low <= queued.1);
        if let Some(stored) = stored {
            let (name, other) = (name(queued), name(stored));
            problems.push(
                &format!("{key}.on"),
                format!(
                    "{name:?} overlaps idempotency.cache_status {other:?}: an answer can not be both stored and queued"
                ),
            );
        }
    }
}

/// Takes every status `queued` covers out of `cached`.
fn subtract(cached: &mut CacheStatus, queued: &CacheStatus) {
    for &(q_low, q_high) in &queued.ranges {
        cached.ranges = cached
            .ranges
            .iter()
            .flat_map(|&(low, high)| {
                let below = (low < q_low).then(|| (low, high.min(q_low - 1)));
                let above = (high > q_high).then(|| (low.max(q_high + 1), high));
                [below, above]
            })
            .flatten()
            .filter(|(low, high)| low <= high)
            .collect();
    }
}

/// Route `key` against the routes before it: a name of its own, a scope
/// shared only with compatible fingerprints, and no prefix another route
/// already matches for the same methods.
pub(super) fn among_routes(problems: &mut Problems, key: &str, route: &Route, earlier: &[Route]) {
    if earlier.iter().any(|r| r.name == route.name) {
        problems.push(&format!("{key}.name"), "duplicate route name");
    }
    shared_scope(problems, key, route, earlier);
    let shadowed = earlier.iter().find(|r| {
        let fold = !(r.case_sensitive && route.case_sensitive);
        canonical_prefix(&r.path_prefix, fold) == canonical_prefix(&route.path_prefix, fold)
            && r.methods.iter().any(|m| route.methods.contains(m))
    });
    if let Some(other) = shadowed {
        problems.push(
            &format!("{key}.path_prefix"),
            format!(
                "route {:?} already matches {:?} for the same methods",
                other.name, route.path_prefix
            ),
        );
    }
}

/// Routes of one `scope` claim the same records, so one delivery reaching
/// two of them must get one fingerprint: every such route fingerprints
/// values only (selectors and headers, no `method`, `path`, `query` or
/// `body`, which differ between routes by construction), the same number
/// of them, compared value by value in order.
fn shared_scope(problems: &mut Problems, key: &str, route: &Route, earlier: &[Route]) {
    let scope = &route.idempotency.scope;
    let mut sharing = earlier.iter().filter(|r| r.idempotency.scope == *scope);
    let Some(other) = sharing.next() else {
        return;
    };
    let (mine, theirs) = (&route.entity, &other.entity);
    let same_entity = match (mine, theirs) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.machine.same_as(&b.machine) && a.id.len() == b.id.len() && a.retention == b.retention
        }
        _ => false,
    };
    if !same_entity {
        problems.push(
            &format!("{key}.entity"),
            format!(
                "route {:?} shares scope {scope:?}, so both must declare the same [route.entity] states, transitions, retention and number of id parts (the selectors may differ)",
                other.name
            ),
        );
    }
    // The first route of the scope is judged once, when the second joins.
    let first_join = sharing.next().is_none();
    let other_index = earlier
        .iter()
        .position(|r| std::ptr::eq(r, other))
        .expect("other is one of the earlier routes");
    // Each route's problem is reported under its own key.
    let other_key = format!("route[{other_index}].idempotency.fingerprint");
    let key = format!("{key}.idempotency.fingerprint");
    let judged = [(&key, route), (&other_key, other)];
    for (at, judged) in &judged[..if first_join { 2 } else { 1 }] {
        if let Some(part) = part_by_route(&judged.idempotency.fingerprint) {
            problems.push(
                at,
                format!(
                    "route {:?} shares scope {scope:?}, so its fingerprint must list values only (json:/…, form:…, query:…, header:…), not {part:?}, which differs between routes",
                    judged.name
                ),
            );
        }
    }
    let (mine, theirs) = (
        route.idempotency.fingerprint.len(),
        other.idempotency.fingerprint.len(),
    );
    if mine != theirs {
        problems.push(
            &key,
            format!(
                "{mine} parts, but route {:?} in scope {scope:?} lists {theirs}: the parts are compared in order",
                other.name
            ),
        );
    }
}

/// The first fingerprint part that differs between routes by
/// construction (`method`, `path`, `query`, `body`), as it is written.
fn part_by_route(parts: &[FingerprintPart]) -> Option<String> {
    parts
        .iter()
        .find(|part| {
            matches!(
                part,
                FingerprintPart::Method
                    | FingerprintPart::Path
                    | FingerprintPart::Query
                    | FingerprintPart::Body
            )
        })
        .map(ToString::to_string)
}

#[cfg(test)]
mod tests;
