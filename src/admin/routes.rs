//! Every path of the admin listener in one table: what serves it, the
//! methods it serves ([`Allow`]) and who may ask ([`Access`]).
//!
//! [`Admin::handle`](super::Admin::handle) reads a request in one order
//! for every path: the table (a miss is the 404 `not_found`), then the
//! token where the path needs one (`auth`), then the method, then the
//! endpoint, which gets the path's parameters already split out. So no
//! handler parses its own path or checks the token, and a new endpoint is
//! one row here and one arm in the dispatch.
//!
//! A route name is one path segment; a record's key value (the path form
//! of the record API) is the rest of the path, slashes included, and may
//! be empty (`/admin/records/{route}/`, refused by the record API as an
//! empty key).

use http::Method;
use matchit::Router;

use super::about::About;
use super::allow::Allow;
use super::console::Console;

/// What serves a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// `/healthz`: the process answers.
    Health,
    /// `/readyz`: the store can take claims.
    Ready,
    /// `/metrics`: the Prometheus exposition.
    Metrics,
    /// One of the console's files.
    Console(Console),
    /// `/admin/openapi.json`.
    OpenApi,
    /// `/admin/config` or `/admin/info`.
    About(About),
    /// `/admin/hot-keys`.
    HotKeys,
    /// `/admin/audit`.
    Audit,
    /// `/admin/records/{route}[/{key}]`: one record, or a listing.
    Record,
    /// `/admin/inbox/{route}[/…]`.
    Inbox(InboxPath),
    /// `/admin/entities/{route}`.
    Entity,
}

/// Which part of a route's inbox a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InboxPath {
    /// `/admin/inbox/{route}`: a page of queued or dead deliveries.
    Listing,
    /// `…/delivery`: one delivery.
    Delivery,
    /// `…/retry`: queue a dead or unknown delivery again.
    Retry,
    /// `…/drop`: resolve a delivery without sending it.
    Drop,
}

/// Who may ask for a path, and how its refusals are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Probes and scrapers: no token, and every answer is plain text,
    /// errors included, because that is what they read.
    Probe,
    /// Holds no data (the console's files, the API's description): no
    /// token.
    Open,
    /// Behind the bearer token; a method other than `GET` or `HEAD` is an
    /// action and needs a token that may act.
    Token,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AdminPath {
    /// What serves it.
    pub endpoint: Endpoint,
    /// The methods it serves; any other is a 405 naming these.
    pub allow: Allow,
    /// Who may ask.
    pub access: Access,
}

/// The table's rows: pattern (matchit syntax), endpoint, methods, access.
#[rustfmt::skip]
const ROWS: &[(&str, Endpoint, Allow, Access)] = &[
    ("/healthz",                      Endpoint::Health,                     Allow::Get,          Access::Probe),
    ("/readyz",                       Endpoint::Ready,                      Allow::Get,          Access::Probe),
    ("/metrics",                      Endpoint::Metrics,                    Allow::Get,          Access::Probe),
    ("/admin",                        Endpoint::Console(Console::Redirect), Allow::Get,          Access::Open),
    ("/admin/",                       Endpoint::Console(Console::Page),     Allow::Get,          Access::Open),
    ("/admin/console.js",             Endpoint::Console(Console::Script),   Allow::Get,          Access::Open),
    ("/admin/console.css",            Endpoint::Console(Console::Style),    Allow::Get,          Access::Open),
    ("/admin/openapi.json",           Endpoint::OpenApi,                    Allow::Get,          Access::Open),
    ("/admin/config",                 Endpoint::About(About::Config),       Allow::Get,          Access::Token),
    ("/admin/info",                   Endpoint::About(About::Info),         Allow::Get,          Access::Token),
    ("/admin/hot-keys",               Endpoint::HotKeys,                    Allow::Get,          Access::Token),
    ("/admin/audit",                  Endpoint::Audit,                      Allow::Get,          Access::Token),
    ("/admin/records/{route}",        Endpoint::Record,                     Allow::GetDelete,    Access::Token),
    ("/admin/records/{route}/",       Endpoint::Record,                     Allow::GetDelete,    Access::Token),
    ("/admin/records/{route}/{*key}", Endpoint::Record,                     Allow::GetDelete,    Access::Token),
    ("/admin/inbox/{route}",          Endpoint::Inbox(InboxPath::Listing),  Allow::Get,          Access::Token),
    ("/admin/inbox/{route}/delivery", Endpoint::Inbox(InboxPath::Delivery), Allow::Get,          Access::Token),
    ("/admin/inbox/{route}/retry",    Endpoint::Inbox(InboxPath::Retry),    Allow::Post,         Access::Token),
    ("/admin/inbox/{route}/drop",     Endpoint::Inbox(InboxPath::Drop),     Allow::Post,         Access::Token),
    ("/admin/entities/{route}",       Endpoint::Entity,                     Allow::GetPutDelete, Access::Token),
];

/// A request path found in the table, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Found<'p> {
    /// The row that matched.
    pub path: AdminPath,
    /// The `{route}` segment, raw (empty where the path names none).
    pub route: &'p str,
    /// The record key after the route (`/admin/records/{route}/{key}`),
    /// raw; `Some("")` for a trailing slash.
    pub key: Option<&'p str>,
}

/// The admin listener's paths, built once when the listener starts.
#[derive(Debug)]
pub(super) struct Table(Router<AdminPath>);

impl Table {
    /// The table of [`ROWS`]; they are constants, so a row the router
    /// refuses is a programming error the unit tests catch.
    pub(super) fn new() -> Self {
        let mut router = Router::new();
        for (pattern, endpoint, allow, access) in ROWS {
            let path = AdminPath {
                endpoint: *endpoint,
                allow: *allow,
                access: *access,
            };
            if let Err(error) = router.insert(*pattern, path) {
                panic!("admin path {pattern}: {error}");
            }
        }
        Self(router)
    }

    /// The row `path` names and its parameters, or `None` (a 404).
    pub(super) fn at<'p>(&self, path: &'p str) -> Option<Found<'p>> {
        let matched = self.0.at(path).ok()?;
        let route = matched.params.get("route").unwrap_or_default();
        let key = match matched.params.get("key") {
            Some(key) => Some(key),
            // `/admin/records/{route}/`: the key is named, and empty.
            None if matched.value.endpoint == Endpoint::Record && path.ends_with('/') => Some(""),
            None => None,
        };
        Some(Found {
            path: *matched.value,
            route,
            key,
        })
    }
}

impl Endpoint {
    /// Whether `method` on this endpoint changes state (an operator
    /// action the audit trail records), and which.
    pub(super) fn action(self, method: &Method) -> Option<super::audit::Action> {
        use super::audit::Action;
        match (self, method) {
            (Self::Record, &Method::DELETE) => Some(Action::Purge),
            (Self::Inbox(InboxPath::Retry), &Method::POST) => Some(Action::Retry),
            (Self::Inbox(InboxPath::Drop), &Method::POST) => Some(Action::Drop),
            (Self::Entity, &Method::PUT) => Some(Action::EntitySet),
            (Self::Entity, &Method::DELETE) => Some(Action::EntityClear),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(path: &str) -> Option<(Endpoint, &str, Option<&str>)> {
        let table = Table::new();
        let found = table.at(path)?;
        Some((found.path.endpoint, found.route, found.key))
    }

    #[test]
    fn every_row_is_reachable_by_its_own_shape() {
        let table = Table::new();
        for (pattern, endpoint, _, _) in ROWS {
            let concrete = pattern.replace("{route}", "pay").replace("{*key}", "k1");
            let matched = table.at(&concrete).map(|found| found.path.endpoint);
            assert_eq!(matched, Some(*endpoint), "{pattern} as {concrete}");
        }
    }

    #[test]
    fn parameters_are_split_out_raw() {
        assert_eq!(
            found("/admin/records/pay/a%2Fb/c"),
            Some((Endpoint::Record, "pay", Some("a%2Fb/c")))
        );
        assert_eq!(
            found("/admin/records/pay"),
            Some((Endpoint::Record, "pay", None))
        );
        assert_eq!(
            found("/admin/records/pay/"),
            Some((Endpoint::Record, "pay", Some("")))
        );
        assert_eq!(
            found("/admin/inbox/pay/retry"),
            Some((Endpoint::Inbox(InboxPath::Retry), "pay", None))
        );
        assert_eq!(
            found("/admin/entities/pay"),
            Some((Endpoint::Entity, "pay", None))
        );
        assert_eq!(found("/healthz"), Some((Endpoint::Health, "", None)));
    }

    #[test]
    fn what_no_row_names_is_a_miss() {
        for path in [
            "/",
            "/admin/nowhere",
            "/admin/records/",
            "/admin/inbox/pay/",
            "/admin/inbox/pay/other",
            "/admin/inbox/pay/retry/more",
            "/admin/entities/",
            "/admin/entities/pay/more",
            "/healthz/",
            "/admin/audit/x",
            "/admin/index.html",
            "/admin//",
            "/admin/console",
        ] {
            assert_eq!(found(path), None, "{path}");
        }
    }

    #[test]
    fn actions_are_the_changing_methods_of_the_action_paths() {
        use super::super::audit::Action;
        let table = Table::new();
        let action = |method: Method, path: &'static str| {
            let found = table.at(path)?;
            Some((found.path.endpoint.action(&method)?, found.route))
        };
        for (method, path, expected) in [
            (Method::DELETE, "/admin/records/pay/k1", Action::Purge),
            (Method::DELETE, "/admin/records/pay", Action::Purge),
            (Method::POST, "/admin/inbox/pay/retry", Action::Retry),
            (Method::POST, "/admin/inbox/pay/drop", Action::Drop),
            (Method::PUT, "/admin/entities/pay", Action::EntitySet),
            (Method::DELETE, "/admin/entities/pay", Action::EntityClear),
        ] {
            assert_eq!(
                action(method.clone(), path),
                Some((expected, "pay")),
                "{method} {path}"
            );
        }
        for (method, path) in [
            (Method::GET, "/admin/records/pay/k1"),
            (Method::GET, "/admin/entities/pay"),
            (Method::GET, "/admin/inbox/pay/delivery"),
            (Method::POST, "/admin/inbox/pay/delivery"),
            (Method::POST, "/admin/inbox/pay"),
            (Method::DELETE, "/admin/audit"),
        ] {
            assert_eq!(action(method.clone(), path), None, "{method} {path}");
        }
    }

    #[test]
    fn every_row_admits_get_or_post_and_probes_only_get() {
        for (pattern, _, allow, access) in ROWS {
            assert!(
                allow.admits(&Method::GET) || allow.admits(&Method::POST),
                "{pattern}"
            );
            if *access == Access::Probe {
                assert_eq!(*allow, Allow::Get, "{pattern}");
            }
        }
    }
}
