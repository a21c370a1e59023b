//! Stage 1: the route a request belongs to, decided on one canonical path.
//!
//! Backends disagree about what a path means: servlet containers drop `;`
//! parameters, many frameworks match paths case-insensitively, some accept
//! format suffixes (`/notify.json`), decode `%2F` or treat `\` as `/`. A
//! request that the backend routes to a protected handler but idemgate
//! takes for "no route" would be passed through unverified, so stage 1
//! follows one rule (contract §4 rule 9): **handle it as the route, or refuse
//! it, never pass it through.**
//!
//! * **Canonical path** ([`crate::path::canonical_path`]): `;` parameters cut from every
//!   segment, every `%XX` decoded (the result must be UTF-8 without `/`,
//!   `\` or control characters), empty and `.` segments dropped, `..`
//!   removing the segment before it, no trailing slash; letters folded to
//!   lower case unless the route says `case_sensitive = true`. A prefix
//!   matches on whole segments and the longest one wins. Methods compare
//!   ignoring case (`post` is `POST`).
//! * **Capture or refuse.** A *looser* reading finds what the canonical
//!   form can not settle: `%XX` and IIS `%uXXXX` decoded repeatedly until
//!   nothing changes (a path still escaped after
//!   [`crate::path::LOOSE_DECODE_ROUNDS`] rounds counts as reaching every
//!   route), default-ignorable code points (zero-width space, …) removed
//!   and the text compared under Unicode compatibility normalisation (NFKC:
//!   `／` is `/`), `\`, `%2F` and undecodable bytes as separators, whitespace and control characters
//!   trimmed from segments, `..` both applied and left alone, a non-ASCII
//!   character standing for any letter, and a prefix segment followed by
//!   anything but a letter, digit, `-` or `_` (`/notify.json`,
//!   `/notify%20`, `/notify::$DATA`); methods named by a method-override
//!   header or a `_method` query parameter count too, and `HEAD` counts as
//!   `GET`. A `_method` field of a form body (or top-level member of a
//!   JSON body, which Laravel reads as input) counts the same way, once the
//!   body is read ([`Router::with_body`]): the pipeline reads the body of
//!   an otherwise unmatched such request first when the field could
//!   reach a route ([`Router::body_may_decide`]), and re-checks a routed
//!   one before it is verified. When that reading
//!   reaches a route the canonical path does not select (or a longer one
//!   than it selects), the request is [`Selection::Ambiguous`]: 400
//!   `path_ambiguous`.
//!
//! The request itself is forwarded exactly as sent; the canonical path and
//! method are only compared with routes and hashed into the fingerprint
//! ([`Canonical`]), so spellings of one request are one delivery.

use std::fmt::Write as _;

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, Method};

use crate::config::{Config, Route, Unmatched};
use crate::path::{LooseText, canonical_path, canonical_prefix, fold, is_plain, loose_text};
use crate::pipeline::admit::parameters::{self, BodyOverride};

/// Headers that frameworks (Rails, Laravel, ASP.NET, Express's
/// method-override) read as the "real" method of a request: a request
/// carrying one that names a protected method is not passed through.
/// Parsed names, so looking them up on every request does not parse them.
pub const METHOD_OVERRIDE_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-http-method-override"),
    HeaderName::from_static("x-http-method"),
    HeaderName::from_static("x-method-override"),
];

/// The request as a protected route sees it: what the fingerprint's
/// `method` and `path` parts hash, so spellings of one request agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// The route's own spelling of the method (`post` arrives, `POST` here).
    pub method: Method,
    /// The canonical path, case-folded unless the route is case-sensitive.
    pub path: String,
}

/// A request selected for a protected route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<R = usize> {
    /// The route: what the router was built with for it (the pipeline's
    /// per-route runtime; its position in `Config::routes` for
    /// [`Router::new`]).
    pub route: R,
    /// The canonical method and path.
    pub canonical: Canonical,
}

/// What stage 1 decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection<R = usize> {
    /// Handle the request as this route: verify, claim, forward once.
    Route(Target<R>),
    /// A looser reading of the request reaches `route`, which the
    /// canonical path does not select: refuse with 400 `path_ambiguous`.
    Ambiguous {
        /// The route it may reach (the label its rejection is counted under).
        route: R,
    },
    /// No protected route is near: `unmatched` decides.
    Unmatched,
}

/// One route's prefix in the form stage 1 compares with, and the route
/// it stands for.
#[derive(Debug, Clone)]
struct Prefix<R> {
    /// Canonical prefix, folded unless case-sensitive; `/` for the root.
    path: String,
    /// Its segments (none for the root).
    segments: Vec<String>,
    case_sensitive: bool,
    methods: Vec<Method>,
    /// What a selection of this prefix hands over.
    route: R,
}

impl<R> Prefix<R> {
    fn method(&self, method: &str) -> Option<&Method> {
        self.methods
            .iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(method))
    }

    /// Whether a canonical path (folded as this prefix is) lies under it.
    fn covers(&self, path: &str) -> bool {
        self.path == "/"
            || path
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Whether a loose reading's segments reach this prefix.
    fn near(&self, segments: &[String]) -> bool {
        segments.len() >= self.segments.len()
            && self
                .segments
                .iter()
                .zip(segments)
                .all(|(want, got)| loosely_equal(got, want, self.case_sensitive))
    }
}

/// The routes in the form stage 1 compares with, built once at start-up,
/// each with what a selection hands over (`R`).
#[derive(Debug, Clone)]
pub struct Router<R = usize> {
    prefixes: Vec<Prefix<R>>,
}

impl Router {
    /// The router of `routes`, a selection naming a route by its position
    /// (what `check-config`'s report and the tests compare).
    pub fn new(routes: &[Route]) -> Self {
        Self::of(
            routes
                .iter()
                .enumerate()
                .map(|(index, route)| (route, index)),
        )
    }
}

impl<R: Clone> Router<R> {
    /// Canonicalises every route's prefix once, so selecting allocates
    /// nothing per route; a selection hands over the route's `R`.
    pub fn of<'a>(routes: impl IntoIterator<Item = (&'a Route, R)>) -> Self {
        let prefixes = routes
            .into_iter()
            .map(|(route, handed)| {
                let path = canonical_prefix(&route.path_prefix, !route.case_sensitive);
                Prefix {
                    segments: path
                        .split('/')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    path,
                    case_sensitive: route.case_sensitive,
                    methods: route.methods.clone(),
                    route: handed,
                }
            })
            .collect();
        Self { prefixes }
    }

    /// Stage 1: the route of a request with this method, path (the
    /// request target's path, as received), query and headers.
    pub fn select(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Selection<R> {
        self.decide(method, path, &method_overrides(headers, query))
    }

    /// Whether the `_method` field of a form (or JSON) body could turn
    /// stage 1's answer for this request into a refusal: it has such a
    /// content type and naming some route's method would make it ambiguous. The
    /// pipeline then reads the body of an unmatched request before passing
    /// it through ([`Router::with_body`]).
    pub fn body_may_decide(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> bool {
        if !parameters::may_carry_method(headers) {
            return false;
        }
        let mut overrides = method_overrides(headers, query);
        overrides.extend(self.all_methods());
        matches!(
            self.decide(method, path, &overrides),
            Selection::Ambiguous { .. }
        )
    }

    /// Stage 1 again, once the body is read: the selection with the
    /// `_method` fields of a form body counted as overrides too; `None`
    /// when the body has none (the selection stands).
    pub fn with_body(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Option<Selection<R>> {
        // The body first: without a `_method` field the selection stands,
        // and the headers are not looked at a second time.
        let mut overrides: Vec<Cow<'_, str>> = match parameters::body_overrides(headers, body) {
            BodyOverride::None => return None,
            BodyOverride::Methods(methods) => methods.into_iter().map(Cow::Owned).collect(),
            BodyOverride::Any => self.all_methods().collect(),
        };
        overrides.extend(method_overrides(headers, query));
        Some(self.decide(method, path, &overrides))
    }

    /// Every method some route accepts.
    fn all_methods(&self) -> impl Iterator<Item = Cow<'_, str>> {
        self.prefixes
            .iter()
            .flat_map(|prefix| prefix.methods.iter().map(|m| Cow::Borrowed(m.as_str())))
    }

    /// The selection of a request whose method may also be any of
    /// `overrides`.
    fn decide(&self, method: &Method, path: &str, overrides: &[Cow<'_, str>]) -> Selection<R> {
        let strict = canonical_path(path).and_then(|exact| self.strict(method, &exact));
        if overrides.is_empty() && method != Method::HEAD && is_plain(path) {
            // Letters, digits, '-', '_' and '/' only, and no other method
            // to consider: no looser reading differs from the canonical one.
            return strict.map_or(Selection::Unmatched, |(_, target)| Selection::Route(target));
        }
        let mut methods = vec![method.as_str()];
        if method == Method::HEAD {
            methods.push(Method::GET.as_str());
        }
        methods.extend(overrides.iter().map(AsRef::as_ref));
        let readings = loose_readings(path);
        let selected = strict.as_ref().map(|(position, _)| *position);
        let floor = selected.map_or(0, |i| self.prefixes[i].path.len());
        let conflict = self
            .prefixes
            .iter()
            .enumerate()
            .filter(|(index, prefix)| {
                Some(*index) != selected
                    && prefix.path.len() >= floor
                    && methods.iter().any(|m| prefix.method(m).is_some())
                    && readings
                        .as_ref()
                        .is_none_or(|r| r.iter().any(|segments| prefix.near(segments)))
            })
            .max_by_key(|(_, prefix)| prefix.path.len());
        match (conflict, strict) {
            (Some((_, prefix)), _) => Selection::Ambiguous {
                route: prefix.route.clone(),
            },
            (None, Some((_, target))) => Selection::Route(target),
            (None, None) => Selection::Unmatched,
        }
    }

    /// The longest prefix covering the canonical path among the routes
    /// accepting the method, with its position among the prefixes.
    fn strict(&self, method: &Method, exact: &str) -> Option<(usize, Target<R>)> {
        let folded = fold(exact);
        let (index, prefix, method) = self
            .prefixes
            .iter()
            .enumerate()
            .filter_map(|(index, prefix)| {
                let path = if prefix.case_sensitive {
                    exact
                } else {
                    &folded
                };
                let method = prefix.method(method.as_str())?;
                prefix.covers(path).then_some((index, prefix, method))
            })
            .max_by_key(|(_, prefix, _)| prefix.path.len())?;
        let path = if prefix.case_sensitive {
            exact.to_owned()
        } else {
            folded.into_owned()
        };
        Some((
            index,
            Target {
                route: prefix.route.clone(),
                canonical: Canonical {
                    method: method.clone(),
                    path,
                },
            },
        ))
    }
}

/// The values of method-override headers (trimmed, comma lists split) and
/// of `_method` query parameters.
fn method_overrides<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Vec<Cow<'a, str>> {
    let mut overrides: Vec<Cow<'a, str>> = METHOD_OVERRIDE_HEADERS
        .iter()
        .flat_map(|name| headers.get_all(name))
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(Cow::Borrowed)
        .collect();
    overrides.extend(parameters::query_overrides(query));
    overrides
}

/// The loose readings of a path ([`loose_text`]): its segments with `..`
/// applied, and with `..` left in place (a backend that does not resolve
/// them routes `/notify/../x` under `/notify`). `None` when the path is
/// still escaped after the last decoding round: it may mean anything.
fn loose_readings(path: &str) -> Option<[Vec<String>; 2]> {
    let LooseText { text, settled } = loose_text(path);
    if !settled {
        return None;
    }
    let mut resolved: Vec<String> = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    let separator = |c: char| matches!(c, '/' | '\\' | char::REPLACEMENT_CHARACTER);
    for raw in text.split(separator) {
        let segment = raw
            .split(';')
            .next()
            .unwrap_or_default()
            .trim_matches(|c: char| c.is_whitespace() || c.is_control());
        match segment {
            "" | "." => {}
            ".." => {
                resolved.pop();
                kept.push(segment.to_owned());
            }
            _ => {
                resolved.push(segment.to_owned());
                kept.push(segment.to_owned());
            }
        }
    }
    Some([resolved, kept])
}

/// Whether a loose segment may name the prefix segment `want`: it starts
/// with it (a non-ASCII character standing for any character; ASCII
/// letters compared ignoring case unless case-sensitive), and what
/// follows, if anything, does not continue a name (a letter, digit, `-`
/// or `_`): `notify.json`, `notify::$DATA` and `notify~1` may all be
/// `notify`; `notifyx` and `notify-v2` are other names.
fn loosely_equal(got: &str, want: &str, case_sensitive: bool) -> bool {
    let mut chars = got.chars();
    for expected in want.chars() {
        let Some(c) = chars.next() else {
            return false;
        };
        let same = c == expected
            || !c.is_ascii()
            || (!case_sensitive && c.eq_ignore_ascii_case(&expected));
        if !same {
            return false;
        }
    }
    chars
        .next()
        .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
}

/// What each protected route handles, refuses and lets pass, shown on
/// concrete spellings run through [`Router::select`]: printed by
/// `check-config` and logged at start-up, so an operator sees the rule
/// applied to their own prefixes.
pub fn spellings_report(config: &Config) -> Vec<String> {
    let router = Router::new(&config.routes);
    let headers = HeaderMap::new();
    let mut lines = Vec::new();
    for (index, route) in config.routes.iter().enumerate() {
        let methods: Vec<&str> = route.methods.iter().map(Method::as_str).collect();
        let head = format!(
            "route[{index}] {:?} ({} {})",
            route.name,
            methods.join(","),
            route.path_prefix
        );
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (method, target) in spellings(route) {
            let (path, query) = match target.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (target.as_str(), None),
            };
            let group = match router.select(&method, path, query, &headers) {
                Selection::Route(t) if t.route == index => "handled as the route".to_owned(),
                Selection::Route(t) => format!(
                    "handled as route[{}] {:?}",
                    t.route, config.routes[t.route].name
                ),
                Selection::Ambiguous { .. } => "refused with 400 path_ambiguous".to_owned(),
                Selection::Unmatched if config.unmatched == Unmatched::Forward => {
                    "passed through".to_owned()
                }
                Selection::Unmatched => "answered 404 route_not_found".to_owned(),
            };
            let shown = if method == route.methods[0] {
                target
            } else {
                format!("{method} {target}")
            };
            match groups.iter_mut().find(|(name, _)| *name == group) {
                Some((_, items)) => items.push(shown),
                None => groups.push((group, vec![shown])),
            }
        }
        for (group, items) in groups {
            lines.push(format!("{head} {group}: {}", items.join(", ")));
        }
    }
    lines
}

/// Spellings of a route's prefix an attacker would try, in display order.
fn spellings(route: &Route) -> Vec<(Method, String)> {
    let Some(method) = route.methods.first().cloned() else {
        return Vec::new();
    };
    let p = route.path_prefix.trim_end_matches('/');
    let capitalised: String = p
        .split('/')
        .map(|segment| {
            let mut chars = segment.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("/");
    let encoded_first = match p.rsplit_once('/') {
        Some((head, last)) if last.starts_with(|c: char| c.is_ascii_alphanumeric()) => {
            let mut out = format!("{head}/");
            write!(out, "%{:02X}", last.as_bytes()[0])
                .expect("writing a number into a String cannot fail");
            out.push_str(&last[1..]);
            out
        }
        _ => String::new(),
    };
    let lower_method = Method::from_bytes(method.as_str().to_ascii_lowercase().as_bytes())
        .unwrap_or_else(|_| method.clone());
    let targets = [
        format!("{p}/x"),
        p.to_ascii_uppercase(),
        capitalised,
        format!("{p};jsessionid=1"),
        format!("/{p}/"),
        format!("/.{p}"),
        format!("/other/..{p}"),
        encoded_first,
        format!("{p}.json"),
        format!("{p}%20"),
        format!("{p}%2F"),
        format!("{p}%00"),
        format!("{p}\\"),
        format!("{p}/../other"),
    ];
    let mut out: Vec<(Method, String)> = Vec::new();
    for target in targets {
        if target.starts_with('/') && !out.iter().any(|(_, t)| *t == target) {
            out.push((method.clone(), target));
        }
    }
    if lower_method != method {
        let target = if p.is_empty() { "/" } else { p };
        out.push((lower_method, target.to_owned()));
    }
    out
}

#[cfg(test)]
mod tests;
