//! The operator console: `GET /admin/` serves one page (HTML, a script
//! and a style sheet, all embedded in the binary from `console/`), so an
//! operator with only the admin port can see what needs a person and act
//! on it without `curl`.
//!
//! The three files are static and hold no data, so they are served
//! without the token; every call the page makes for data or an action
//! goes to the record, inbox, hot-key and info APIs with the token the
//! operator types in (kept in `sessionStorage`, sent as
//! `Authorization: Bearer …`), and is refused there as any client's
//! would be. `/admin` (no slash) redirects to `/admin/`.
//!
//! Every answer carries headers that keep the page inert outside its own
//! origin: a `Content-Security-Policy` admitting scripts, styles and
//! requests from this origin only (no inline script, no `eval`, no
//! framing, no form posts), `X-Content-Type-Options: nosniff`,
//! `X-Frame-Options: DENY`, `Referrer-Policy: no-referrer` and
//! `Cache-Control: no-store`. The script writes every value with
//! `textContent`, never as markup.

use http::{HeaderValue, Response, StatusCode, header};

use super::reply;
use crate::body::ProxyBody;

/// The page's policy: everything from this origin only, nothing inline,
/// no plugins, no framing, no form submissions, no `<base>` rewrites.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One of the console's files, or the redirect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Console {
    /// `/admin`: redirects to the page, so relative links resolve alike.
    Redirect,
    /// `/admin/`: the page.
    Page,
    /// `/admin/console.js`.
    Script,
    /// `/admin/console.css`.
    Style,
}

impl Console {
    /// The file's media type and content.
    fn file(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Redirect => None,
            Self::Page => Some((
                "text/html; charset=utf-8",
                include_str!("console/index.html"),
            )),
            Self::Script => Some((
                "text/javascript; charset=utf-8",
                include_str!("console/console.js"),
            )),
            Self::Style => Some((
                "text/css; charset=utf-8",
                include_str!("console/console.css"),
            )),
        }
    }

    /// The answer to `GET` (the caller checked the method).
    pub(crate) fn serve(self) -> Response<ProxyBody> {
        let mut response = match self.file() {
            Some((content_type, content)) => {
                reply(StatusCode::OK, content_type, content.to_owned())
            }
            None => {
                let mut moved = reply(
                    StatusCode::PERMANENT_REDIRECT,
                    "text/plain; charset=utf-8",
                    "the console is at /admin/\n".to_owned(),
                );
                moved
                    .headers_mut()
                    .insert(header::LOCATION, HeaderValue::from_static("/admin/"));
                moved
            }
        };
        let headers = response.headers_mut();
        for (name, value) in [
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy forbids inline script and style, so the page must hold
    /// none: a `<script>` without `src`, an `on…=` handler attribute or a
    /// `style=` attribute would be dead code in every browser.
    #[test]
    fn the_page_holds_no_inline_script_or_style() {
        let (_, page) = Console::Page.file().expect("a file");
        let lower = page.to_ascii_lowercase();
        for (at, _) in lower.match_indices("<script") {
            let tag = &lower[at..at + lower[at..].find('>').expect("tag closes")];
            assert!(tag.contains(" src=\"/admin/console.js\""), "{tag}");
        }
        assert!(!lower.contains(" style="), "inline style");
        assert!(!lower.contains("<style"), "inline style sheet");
        for word in lower.split(|c: char| c.is_whitespace() || c == '<') {
            assert!(
                !(word.starts_with("on") && word.contains('=')),
                "inline handler {word}"
            );
        }
        let (_, script) = Console::Script.file().expect("a file");
        assert!(!script.contains("innerHTML"), "values go in as text");
        assert!(!script.contains("eval("), "no eval under the policy");
    }
}
