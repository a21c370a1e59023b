//! Canonical request paths: the one spelling of a path that routing and
//! the fingerprint compare.
//!
//! Kept apart from stage 1 (`pipeline::route`, which decides what a request
//! belongs to) because configuration checks each `path_prefix` with the
//! same rules, and the config layer must not depend on a pipeline stage.
//! Everything here is a pure function of its text argument.

use std::borrow::Cow;

/// The canonical form of a request path (see the module docs), not yet
/// case-folded; `None` when it has none: not starting with `/`, a broken
/// `%` escape, decoded bytes that are not UTF-8, or a decoded `/`, `\` or
/// control character. Such a path can select no route; only the loose
/// reading can make it `Selection::Ambiguous` (`pipeline::route`).
pub fn canonical_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut segments: Vec<Cow<'_, str>> = Vec::new();
    for raw in path.split('/') {
        let raw = raw.split(';').next().unwrap_or_default();
        let segment = decode_segment(raw)?;
        match segment.as_ref() {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    if segments.is_empty() {
        return Some("/".to_owned());
    }
    let mut out = String::with_capacity(path.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    Some(out)
}

/// The canonical form of a configured `path_prefix` (one that passed
/// [`check_prefix`]), folded when the route is not case-sensitive.
pub fn canonical_prefix(prefix: &str, fold_case: bool) -> String {
    let path = canonical_path(prefix).unwrap_or_else(|| prefix.to_owned());
    if fold_case {
        fold(&path).into_owned()
    } else {
        path
    }
}

/// Characters a `path_prefix` may hold besides letters and digits: RFC
/// 3986 path characters that need no decoding and carry no parameters.
const PREFIX_PUNCTUATION: &str = "/-._~!$&'()*+,=:@";

/// Why a configured `path_prefix` can not be a prefix, if it can not: it
/// must start with `/` and be canonical already apart from case and a
/// trailing slash (no `%` escapes, `;`, `\`, empty or dot segments), so
/// the operator's prefix means exactly what stage 1 compares with.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("{prefix:?} must start with '/'"));
    }
    if let Some(bad) = prefix
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !PREFIX_PUNCTUATION.contains(*c))
    {
        return Err(format!(
            "{prefix:?} may hold only letters, digits and {PREFIX_PUNCTUATION:?}, not {bad:?} (write the path decoded; parameters and escapes are resolved before matching)"
        ));
    }
    let inner = prefix.trim_end_matches('/');
    if inner
        .split('/')
        .skip(1)
        .any(|s| matches!(s, "" | "." | ".."))
    {
        return Err(format!(
            "{prefix:?} must not contain empty, '.' or '..' segments"
        ));
    }
    Ok(())
}

/// Case folding of the canonical form: ASCII letters to lower case; any
/// other character through upper then lower case, so characters that
/// case-insensitive frameworks equate (`ſ` and `s`, the Kelvin sign and
/// `k`) fold alike.
pub fn fold(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(text.to_ascii_lowercase())
        } else {
            Cow::Borrowed(text)
        }
    } else {
        Cow::Owned(
            text.chars()
                .flat_map(char::to_uppercase)
                .flat_map(char::to_lowercase)
                .collect(),
        )
    }
}

/// Whether `path` holds only characters every reading agrees on (ASCII
/// letters, digits, `/`, `-`, `_`): stage 1 skips the loose reading for it.
pub fn is_plain(path: &str) -> bool {
    path.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_'))
}

/// Strictly decodes one segment: `None` on a broken escape, non-UTF-8
/// bytes, or a decoded separator or control character.
fn decode_segment(raw: &str) -> Option<Cow<'_, str>> {
    let text = if raw.contains('%') {
        let bytes = raw.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut at = 0;
        while at < bytes.len() {
            if bytes[at] == b'%' {
                let high = hex_value(*bytes.get(at + 1)?)?;
                let low = hex_value(*bytes.get(at + 2)?)?;
                out.push(high << 4 | low);
                at += 3;
            } else {
                out.push(bytes[at]);
                at += 1;
            }
        }
        Cow::Owned(String::from_utf8(out).ok()?)
    } else {
        Cow::Borrowed(raw)
    };
    let separator = |c: char| c == '/' || c == '\\' || c.is_control();
    (!text.contains(separator)).then_some(text)
}

fn hex_value(byte: u8) -> Option<u8> {
    (byte as char)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn canonical_paths() {
        let table: [(&str, Option<&str>); 22] = [
            ("/notify", Some("/notify")),
            ("/notify/", Some("/notify")),
            ("//notify//x//", Some("/notify/x")),
            ("/./notify/.", Some("/notify")),
            ("/a/b/../../notify", Some("/notify")),
            ("/../../notify", Some("/notify")),
            ("/a/%2e%2E/notify", Some("/notify")),
            ("/a/..;x=1/notify", Some("/notify")),
            ("/notify;jsessionid=1/x;y", Some("/notify/x")),
            ("/%6Eotify", Some("/notify")),
            ("/No%74ify", Some("/Notify")),
            ("/notify%20", Some("/notify ")),
            ("/a%3Bb", Some("/a;b")),
            ("/100%25", Some("/100%")),
            ("/", Some("/")),
            ("/..", Some("/")),
            ("/a%2Fb", None),
            ("/a%5Cb", None),
            ("/a\\b", None),
            ("/a%00", None),
            ("/a%zz", None),
            ("/a%c0%af", None),
        ];
        for (path, expected) in table {
            assert_eq!(canonical_path(path).as_deref(), expected, "{path}");
        }
        assert_eq!(canonical_path("*"), None);
        assert_eq!(canonical_path(""), None);
        assert_eq!(canonical_path("/a%2"), None);
        assert_eq!(canonical_path("/a%"), None);
    }

    #[test]
    fn folding_equates_what_case_insensitive_frameworks_equate() {
        assert_eq!(fold("/NoTiFy"), "/notify");
        assert!(matches!(fold("/notify"), Cow::Borrowed(_)));
        assert_eq!(fold("/\u{212A}afka"), "/kafka", "Kelvin sign");
        assert_eq!(fold("/\u{17F}tatus"), "/status", "long s");
        assert_eq!(fold("/ÄÖÜ"), "/äöü");
    }

    #[test]
    fn prefixes_must_be_canonical_already() {
        for ok in [
            "/",
            "/notify",
            "/notify/",
            "/Notify",
            "/v1.0/hooks",
            "/a-b_c~d/@x:y",
        ] {
            assert_eq!(check_prefix(ok), Ok(()), "{ok}");
        }
        for bad in [
            "notify", "/a%20b", "/a;b", "/a\\b", "/a b", "/a//b", "/./a", "/a/..", "/a?b", "/a#b",
            "/ä",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
        assert_eq!(canonical_prefix("/Notify/", true), "/notify");
        assert_eq!(canonical_prefix("/Notify/", false), "/Notify");
        assert_eq!(canonical_prefix("/", true), "/");
    }

    proptest! {
    /// The canonical form is a fixed point (when it holds nothing a second
    /// decoding would change).
    #[test]
    fn canonical_paths_are_stable(path in "/[a-zA-Z0-9/.;%~ -]{0,30}") {
        if let Some(once) = canonical_path(&path) {
            prop_assert!(once.starts_with('/'));
            if !once.contains('%') && !once.contains(';') {
                prop_assert_eq!(canonical_path(&once), Some(once));
            }
        }
    }
    }
}
