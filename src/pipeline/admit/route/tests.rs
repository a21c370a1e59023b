//! Unit tests of stage 1: the canonical path, route selection, the
//! capture-or-refuse rule, and properties over generated spellings.

use std::fmt::Write as _;

use super::*;
use proptest::prelude::*;

fn config(extra: &str) -> Config {
    let text = format!(
        "{extra}\n[store]\nkind = \"embedded\"\npath = \"/tmp/unused.redb\"\n\
         [upstream]\nurl = \"http://127.0.0.1:1\"\n\
         [[route]]\nname = \"pay\"\npath_prefix = \"/notify\"\n\
         [route.signature]\nscheme = \"none\"\n\
         [[route]]\nname = \"refund\"\npath_prefix = \"/notify/refund\"\nmethods = [\"POST\", \"PUT\"]\n\
         [route.signature]\nscheme = \"none\"\n\
         [[route]]\nname = \"exact\"\npath_prefix = \"/Hooks/GitHub/\"\ncase_sensitive = true\nmethods = [\"GET\"]\n\
         [route.signature]\nscheme = \"none\"\n"
    );
    Config::parse(&text).expect("test config")
}

fn router() -> Router {
    Router::new(&config("").routes)
}

fn pick(router: &Router, method: &str, path: &str) -> Selection {
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    router.select(&method, path, query, &HeaderMap::new())
}

fn route_of(selection: &Selection) -> Option<(usize, &str, &str)> {
    match selection {
        Selection::Route(t) => Some((t.route, t.canonical.method.as_str(), &t.canonical.path)),
        _ => None,
    }
}

/// What one request of a table is expected to come to, so that a test
/// reads as rows of method, path and outcome.
#[derive(Debug, Clone, Copy)]
enum Expected<'a> {
    /// Handled as the route, carrying this canonical method and path.
    Canonical(usize, &'a str, &'a str),
    /// Handled as the route, whatever canonical form it carries.
    Route(usize),
    /// Refused with 400 `path_ambiguous`, counted under this route.
    Ambiguous(usize),
    /// Passed through.
    Unmatched,
}

use Expected::{Ambiguous, Canonical as Handled, Route, Unmatched};

/// Picks each row's request on `router` and checks its outcome.
fn assert_picks(router: &Router, rows: &[(&str, &str, Expected<'_>)]) {
    for &(method, path, expected) in rows {
        let selection = pick(router, method, path);
        match expected {
            Handled(route, canonical_method, canonical_path) => assert_eq!(
                route_of(&selection),
                Some((route, canonical_method, canonical_path)),
                "{method} {path}"
            ),
            Route(route) => assert_eq!(
                route_of(&selection).map(|t| t.0),
                Some(route),
                "{method} {path}"
            ),
            Ambiguous(route) => {
                assert_eq!(selection, Selection::Ambiguous { route }, "{method} {path}")
            }
            Unmatched => assert_eq!(selection, Selection::Unmatched, "{method} {path}"),
        }
    }
}

/// Checks that a POST of each of `paths` comes to the same outcome.
fn assert_posts(router: &Router, paths: &[&str], expected: Expected<'_>) {
    let rows: Vec<_> = paths.iter().map(|&path| ("POST", path, expected)).collect();
    assert_picks(router, &rows);
}

#[test]
fn longest_prefix_and_method_select_the_route() {
    assert_picks(
        &router(),
        &[
            ("POST", "/notify", Handled(0, "POST", "/notify")),
            ("POST", "/notify/pay", Handled(0, "POST", "/notify/pay")),
            (
                "POST",
                "/notify/refund/1",
                Handled(1, "POST", "/notify/refund/1"),
            ),
            ("PUT", "/notify/refund", Handled(1, "PUT", "/notify/refund")),
            ("PUT", "/notify", Unmatched),
            ("POST", "/notifyx", Unmatched),
            ("GET", "/notify", Unmatched),
            ("POST", "/", Unmatched),
        ],
    );
}

#[test]
fn the_canonical_form_settles_spellings_and_is_carried_forward() {
    let r = router();
    for (method, path) in [
        ("POST", "//notify/X"),
        ("POST", "/./notify/x"),
        ("POST", "/%6Eotify/%78"),
        ("POST", "/a/../notify/x/"),
        ("POST", "/NOTIFY;jsessionid=1/X"),
        ("post", "/Notify/x"),
        ("pOsT", "/notify//x/."),
        ("POST", "/other/..;/notify/x"),
    ] {
        assert_eq!(
            route_of(&pick(&r, method, path)),
            Some((0, "POST", "/notify/x")),
            "{method} {path}"
        );
    }
}

#[test]
fn what_the_canonical_form_can_not_settle_is_refused() {
    let r = router();
    assert_posts(
        &r,
        &[
            "/notify.json",
            "/NOTIFY.xml",
            "/notify.",
            "/notify%20",
            "/%20notify",
            "/notify%09",
            "/notify%00",
            "/notify%2F",
            "/notify%2fx",
            "/x%2F..%2Fnotify",
            "/notify%5C",
            "/notify\\",
            "/x\\..\\notify",
            "/notify%c0%af",
            "/notify%zz",
            "/notify%",
            "/notify%252e",
            "/%256Eotify",
            "/notify/../x",
            "/notify/%2e%2e/x",
            "/notify::$DATA",
            "/notify~1",
            "/notify%3Bx",
            "/notify%3Fx",
            "/%EF%BD%8Eotify",
            "/ｎotify",
            "/not%C4%B0fy",
        ],
        Ambiguous(0),
    );
    // a variant that the canonical path gives to /notify but a looser
    // reading gives to the longer /notify/refund is refused as well
    assert_posts(
        &r,
        &[
            "/notify/refund.json",
            "/notify/refund%20",
            "/notify/REFUND%2F1",
        ],
        Ambiguous(1),
    );
    // under the prefix, suffixes are the handler's business
    assert_picks(
        &r,
        &[
            ("POST", "/notify/x.json", Route(0)),
            ("POST", "/notify/a%20b", Route(0)),
        ],
    );
}

/// Spellings that only a liberal backend decodes: IIS `%uXXXX`, `%25`
/// stacked deep, compatibility forms (a fullwidth solidus or letter) and
/// default-ignorable code points (a zero-width space, a soft hyphen).
#[test]
fn unicode_iis_and_stacked_spellings_are_refused() {
    let r = router();
    assert_posts(
        &r,
        &[
            "/%u006Eotify",
            "/%U006eotify",
            "/no%u0074ify",
            "/%u002Fnotify",
            "/%252525256Eotify",
            "/%EF%BC%8Fnotify",
            "/x%EF%BC%8F..%EF%BC%8Fnotify",
            "/no%E2%80%8Btify",
            "/notify%E2%80%8B",
            "/%E2%80%8Dnotify",
            "/noti%C2%ADfy",
            "/not%EF%BB%BFify",
            "/%EF%BD%8E%EF%BD%8F%EF%BD%94%EF%BD%89%EF%BD%86%EF%BD%99",
            "/%EF%BC%85%36Eotify",
        ],
        Ambiguous(0),
    );
    // `n` escaped and then `%25`-escaped seven times over takes the eight
    // rounds the loose reading allows
    let layered = format!("/%{}6Eotify", "25".repeat(7));
    // still escaped after the last round: it may mean anything, so it is
    // refused wherever a route takes its method
    let deep = format!("/static/%{}41", "25".repeat(12));
    assert_picks(
        &r,
        &[
            ("POST", &layered, Ambiguous(0)),
            ("POST", &deep, Ambiguous(1)),
            ("DELETE", &deep, Unmatched),
            // under the prefix, such characters are the handler's business
            ("POST", "/notify/a%E2%80%8Bb", Route(0)),
            ("POST", "/static/%u0041", Unmatched),
        ],
    );
}

/// A `_method` query parameter or form field counts as an override
/// header does: it may not carry a request to a route that its real
/// method does not reach.
#[test]
fn method_parameters_are_not_a_side_door() {
    let r = router();
    assert_picks(
        &r,
        &[
            ("POST", "/Hooks/GitHub?_method=GET", Ambiguous(2)),
            ("PUT", "/notify?a=1&_method=post", Ambiguous(0)),
            ("POST", "/Hooks/GitHub?method=GET", Unmatched),
            // the route accepts the real method: handled as the route
            ("POST", "/notify/refund?_method=PUT", Route(1)),
        ],
    );
    let form = |content_type: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", content_type.parse().unwrap());
        headers
    };
    let urlencoded = form("application/x-www-form-urlencoded");
    let path = "/Hooks/GitHub";
    assert!(r.body_may_decide(&Method::POST, path, None, &urlencoded));
    assert!(r.body_may_decide(&Method::POST, path, None, &form("application/json")));
    assert!(!r.body_may_decide(&Method::POST, path, None, &form("text/plain")));
    assert!(!r.body_may_decide(&Method::POST, "/other", None, &urlencoded));
    assert_eq!(
        r.with_body(&Method::POST, path, None, &urlencoded, b"a=1&_method=GET"),
        Some(Selection::Ambiguous { route: 2 })
    );
    assert_eq!(
        r.with_body(
            &Method::POST,
            path,
            None,
            &urlencoded,
            b"a=1&_method=DELETE"
        ),
        Some(Selection::Unmatched)
    );
    assert_eq!(
        r.with_body(&Method::POST, path, None, &urlencoded, b"a=1"),
        None
    );
    let multipart = form("multipart/form-data; boundary=b");
    assert_eq!(
        r.with_body(
            &Method::POST,
            path,
            None,
            &multipart,
            b"--b\r\ncontent-disposition: form-data; name=\"_method\"\r\n\r\nGET\r\n--b--"
        ),
        Some(Selection::Ambiguous { route: 2 })
    );
}

#[test]
fn other_names_pass_through() {
    let r = router();
    assert_posts(
        &r,
        &[
            "/notifyx",
            "/notify-v2",
            "/notify_old",
            "/notif",
            "/other/notify",
            "/static/my%20file.pdf",
            "/x%2Fy",
            "/%6Eotify%2Dv2",
            "/a/../b",
        ],
        Unmatched,
    );
}

#[test]
fn case_sensitive_routes_match_their_own_case() {
    assert_picks(
        &router(),
        &[
            (
                "GET",
                "/Hooks/GitHub/x",
                Handled(2, "GET", "/Hooks/GitHub/x"),
            ),
            ("get", "//Hooks/GitHub", Route(2)),
            ("GET", "/hooks/github", Unmatched),
            ("GET", "/hooks/github.json", Unmatched),
            ("GET", "/Hooks/GitHub.json", Ambiguous(2)),
            // HEAD is served by GET handlers in most frameworks
            ("HEAD", "/Hooks/GitHub", Ambiguous(2)),
        ],
    );
}

#[test]
fn method_override_headers_are_not_a_side_door() {
    let r = router();
    let mut headers = HeaderMap::new();
    headers.insert("x-http-method-override", "post".parse().unwrap());
    assert_eq!(
        r.select(&Method::GET, "/notify", None, &headers),
        Selection::Ambiguous { route: 0 }
    );
    let mut headers = HeaderMap::new();
    headers.insert("x-method-override", " GET, PUT ".parse().unwrap());
    assert_eq!(
        r.select(&Method::POST, "/notify/refund", None, &headers),
        Selection::Route(Target {
            route: 1,
            canonical: Canonical {
                method: Method::POST,
                path: "/notify/refund".into()
            }
        }),
        "the route accepts the real method: handled as the route"
    );
    assert_eq!(
        r.select(&Method::GET, "/other", None, &headers),
        Selection::Unmatched
    );
}

#[test]
fn a_protected_root_takes_every_path_or_refuses_it() {
    let text = "[store]\nkind = \"embedded\"\npath = \"/tmp/u.redb\"\n\
                [upstream]\nurl = \"http://127.0.0.1:1\"\n\
                [[route]]\nname = \"all\"\npath_prefix = \"/\"\n[route.signature]\nscheme = \"none\"\n";
    let r = Router::new(&Config::parse(text).unwrap().routes);
    assert_picks(
        &r,
        &[
            ("POST", "/anything/at/all", Route(0)),
            ("POST", "/", Route(0)),
            ("POST", "/a%2Fb", Ambiguous(0)),
            ("POST", "*", Ambiguous(0)),
        ],
    );
}

#[test]
fn describe_shows_the_rule_on_each_route() {
    let lines = spellings_report(&config(""));
    let pay: Vec<&String> = lines.iter().filter(|l| l.starts_with("route[0]")).collect();
    assert_eq!(pay.len(), 2, "{lines:#?}");
    assert!(pay[0].starts_with("route[0] \"pay\" (POST /notify) handled as the route: /notify/x, /NOTIFY, /Notify, /notify;jsessionid=1, //notify/, /./notify, /other/../notify, /%6Eotify"), "{}", pay[0]);
    assert!(pay[0].ends_with(", post /notify"), "{}", pay[0]);
    assert_eq!(
        pay[1],
        "route[0] \"pay\" (POST /notify) refused with 400 path_ambiguous: /notify.json, /notify%20, /notify%2F, /notify%00, /notify\\, /notify/../other"
    );
    let exact: Vec<&String> = lines.iter().filter(|l| l.starts_with("route[2]")).collect();
    assert!(
        exact
            .iter()
            .any(|l| l.contains("passed through: /HOOKS/GITHUB")),
        "{exact:#?}"
    );
    let rejecting = spellings_report(&config("unmatched = \"reject\""));
    assert!(
        rejecting
            .iter()
            .any(|l| l.contains("answered 404 route_not_found: /HOOKS/GITHUB"))
    );
}

/// One way of spelling a segment that the canonical form must undo.
fn spelled(segment: &str, choices: &[u8]) -> String {
    let mut out = String::new();
    for (i, c) in segment.chars().enumerate() {
        let choice = choices.get(i).copied().unwrap_or(0);
        match choice % 4 {
            0 => out.push(c),
            1 => out.push(c.to_ascii_uppercase()),
            2 => {
                let _ = write!(out, "%{:02X}", c as u32);
            }
            _ => {
                let _ = write!(out, "%{:02x}", c as u32);
            }
        }
    }
    out
}

proptest! {
    /// Every spelling of a protected path that canonicalises onto it is
    /// handled as the route: case, escapes of each letter, `;` parameters
    /// on any segment, empty and dot segments, `..` climbing back in,
    /// trailing slashes, the method in any case.
    #[test]
    fn no_spelling_of_a_protected_path_escapes(
        letters in proptest::collection::vec(any::<u8>(), 6),
        tail_letters in proptest::collection::vec(any::<u8>(), 3),
        noise in proptest::collection::vec(0u8..6, 0..5),
        params in proptest::collection::vec(any::<bool>(), 3),
        method_case in proptest::collection::vec(any::<bool>(), 4),
        trailing in 0usize..3,
    ) {
        let mut path = String::new();
        for n in &noise {
            path.push_str(match n {
                0 => "/",
                1 => "/.",
                2 => "/other/..",
                3 => "/%2e",
                4 => "/x/%2E%2e",
                _ => "/;p=1",
            });
        }
        path.push('/');
        path.push_str(&spelled("notify", &letters));
        if params[0] { path.push_str(";jsessionid=ABC"); }
        path.push('/');
        if params[1] { path.push('/'); }
        path.push_str(&spelled("sub", &tail_letters));
        if params[2] { path.push_str(";v=2"); }
        path.push_str(&"/".repeat(trailing));
        let method: String = "post".chars().zip(&method_case)
            .map(|(c, up)| if *up { c.to_ascii_uppercase() } else { c })
            .collect();
        let selection = pick(&router(), &method, &path);
        prop_assert_eq!(
            route_of(&selection),
            Some((0, "POST", "/notify/sub")),
            "{} {}", method, path
        );
    }

    /// Whatever follows a protected prefix segment that does not continue
    /// its name is never passed through.
    #[test]
    fn suffixed_spellings_are_refused(
        suffix in "[.~:!$&'()*+,=@ %;\\\\]|%(0[0-9a-f]|1[0-9a-f]|2[0-9a-ce-f]|3[a-f]|5c|7f)",
        rest in "[a-z.]{0,6}",
        upper in any::<bool>(),
    ) {
        let prefix = if upper { "/NOTIFY" } else { "/notify" };
        let path = format!("{prefix}{suffix}{rest}");
        let selection = pick(&router(), "POST", &path);
        prop_assert_ne!(&selection, &Selection::Unmatched, "{}", path);
        if let Selection::Route(target) = &selection {
            prop_assert_eq!(target.route, 0, "{}", path);
        }
    }

    /// On any input: no panic, and a path whose canonical form lies under
    /// the protected prefix is never passed through.
    #[test]
    fn canonically_protected_paths_are_never_unmatched(
        path in "/[a-zA-Z0-9/.;%~\\\\ -]{0,24}(notify|NOTIFY|%6Eotify)[a-zA-Z0-9/.;%~\\\\ -]{0,12}",
    ) {
        let r = router();
        let selection = pick(&r, "POST", &path);
        let canonical = canonical_path(&path).map(|p| fold(&p).into_owned());
        let protected = canonical
            .as_deref()
            .is_some_and(|p| p == "/notify" || p.starts_with("/notify/"));
        if protected {
            prop_assert_ne!(selection, Selection::Unmatched, "{}", path);
        }
    }

    #[test]
    fn selection_never_panics(path in ".{0,40}", method in "[A-Za-z]{1,8}") {
        let _ = pick(&router(), &method, &path);
        let _ = canonical_path(&path);
    }

    /// Escapes, IIS escapes, stacked `%25`, fullwidth and invisible
    /// characters in any mix: no panic, and a path whose loose reading
    /// is the protected path is never passed through.
    #[test]
    fn escaped_spellings_never_pass(
        pieces in proptest::collection::vec(
            "n|o|t|i|f|y|/|%6E|%u006E|%25|%2525|%EF%BC%8F|%E2%80%8B|%EF%BD%8E|%C2%AD|%u|%|\\PC",
            0..12,
        ),
    ) {
        let path = format!("/{}", pieces.concat());
        let r = router();
        let selection = pick(&r, "POST", &path);
        let loose = crate::path::loose_text(&path);
        let segments: Vec<&str> = loose.text.split('/').filter(|s| !s.is_empty()).collect();
        if loose.settled && segments.first().is_some_and(|s| s.eq_ignore_ascii_case("notify")) {
            prop_assert_ne!(selection, Selection::Unmatched, "{}", path);
        }
    }
}
