//! Canonical request paths: the one spelling of a path that routing and
//! the fingerprint compare.
//!
//! Kept apart from stage 1 (`pipeline::route`, which decides what a request
//! belongs to) because configuration checks each `path_prefix` with the
//! same rules, and the config layer must not depend on a pipeline stage.
//! Everything here is a pure function of its text argument.
//!
//! Two readings live here. The strict one ([`canonical_path`]) decodes each
//! `%XX` once, as an RFC 3986 server does, and is what a route is selected
//! by and what the fingerprint hashes. The loose one ([`loose_text`]) is
//! what the most liberal backend might make of the same bytes: `%XX` and
//! IIS's `%uXXXX` decoded again and again until nothing changes (at most
//! [`LOOSE_DECODE_ROUNDS`] times; text still escaped at the bound is
//! reported unsettled, so stage 1 refuses it), Unicode default-ignorable
//! code points (zero-width space, joiners, bidi controls, variation
//! selectors, soft hyphen) removed, and the rest brought to compatibility
//! normal form (NFKC: a fullwidth `／` is `/`, `ｎ` is `n`, `ﬁ` is `fi`).
//! Stage 1 refuses a request whose loose reading reaches a protected route
//! that its strict reading does not select.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization as _;

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

/// Rounds of decoding the loose reading applies before it gives up: a
/// path still changing after this many is refused rather than guessed at
/// (`%25` stacked eight deep has no honest sender), and the work per
/// request stays bounded.
pub const LOOSE_DECODE_ROUNDS: usize = 8;

/// A path as the most liberal backend might read it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LooseText {
    /// The decoded, cleaned, NFKC-normalised text (lossy: bytes that are
    /// not UTF-8 become U+FFFD).
    pub text: String,
    /// `false` when the text still changed in the last allowed round: it
    /// holds escapes whose meaning the bound did not reach.
    pub settled: bool,
}

/// The loose reading of `path`: decoding rounds (see the module docs)
/// until a fixpoint, at most [`LOOSE_DECODE_ROUNDS`].
pub fn loose_text(path: &str) -> LooseText {
    let mut text = path.to_owned();
    for _ in 0..LOOSE_DECODE_ROUNDS {
        let next = loose_round(&text);
        if next == text {
            return LooseText {
                text,
                settled: true,
            };
        }
        text = next;
    }
    let settled = loose_round(&text) == text;
    LooseText { text, settled }
}

/// One round of the loose reading: `%XX` and `%uXXXX` decoded, default
/// ignorable code points dropped, NFKC applied.
fn loose_round(text: &str) -> String {
    let decoded = if text.contains('%') {
        Cow::Owned(String::from_utf8_lossy(&decode_loosely(text.as_bytes())).into_owned())
    } else {
        Cow::Borrowed(text)
    };
    if decoded.is_ascii() {
        return decoded.into_owned();
    }
    decoded
        .chars()
        .filter(|c| !is_default_ignorable(*c))
        .nfkc()
        .filter(|c| !is_default_ignorable(*c))
        .collect()
}

/// Decodes every `%XX` and IIS `%uXXXX` escape in `bytes` (an invalid code
/// unit becomes U+FFFD); anything else is copied.
fn decode_loosely(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            if let Some(byte) = hex_pair(bytes.get(at + 1..at + 3)) {
                out.push(byte);
                at += 3;
                continue;
            }
            if matches!(bytes.get(at + 1), Some(b'u' | b'U')) {
                if let Some(unit) = hex_unit(bytes.get(at + 2..at + 6)) {
                    let c = char::from_u32(unit).unwrap_or(char::REPLACEMENT_CHARACTER);
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    at += 6;
                    continue;
                }
            }
        }
        out.push(bytes[at]);
        at += 1;
    }
    out
}

/// The byte two hex digits spell.
fn hex_pair(digits: Option<&[u8]>) -> Option<u8> {
    let digits = digits?;
    Some(hex_value(digits[0])? << 4 | hex_value(digits[1])?)
}

/// The UTF-16 code unit four hex digits spell.
fn hex_unit(digits: Option<&[u8]>) -> Option<u32> {
    digits?
        .iter()
        .try_fold(0u32, |unit, d| Some(unit << 4 | u32::from(hex_value(*d)?)))
}

/// Unicode's `Default_Ignorable_Code_Point` property
/// (DerivedCoreProperties.txt): characters a renderer shows as nothing,
/// which some backends and normalising filters drop from a path.
fn is_default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
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

    #[test]
    fn the_loose_reading_decodes_until_nothing_changes() {
        let settled = |path: &str| {
            let loose = loose_text(path);
            assert!(loose.settled, "{path}");
            loose.text
        };
        assert_eq!(settled("/notify"), "/notify");
        assert_eq!(settled("/%u006Eotify"), "/notify");
        assert_eq!(settled("/%U006eotify"), "/notify");
        assert_eq!(settled("/%252525256Eotify"), "/notify");
        assert_eq!(settled("/%EF%BC%8Fnotify"), "//notify");
        assert_eq!(settled("/no%E2%80%8Btify"), "/notify");
        assert_eq!(settled("/no\u{200B}ti\u{00AD}fy\u{FEFF}"), "/notify");
        assert_eq!(settled("/%EF%BC%85%36Eotify"), "/notify", "fullwidth %");
        assert_eq!(settled("/\u{FB01}le"), "/file", "ligature");
        assert_eq!(settled("/a%zz%u12"), "/a%zz%u12", "broken escapes stay");
        assert_eq!(settled("/%uD800x"), "/\u{FFFD}x", "a lone surrogate");
        assert_eq!(settled("/%C0%AF"), "/\u{FFFD}\u{FFFD}");
        let deep = format!("/%{}41", "25".repeat(LOOSE_DECODE_ROUNDS));
        assert!(!loose_text(&deep).settled, "{deep}");
        let bound = format!("/%{}41", "25".repeat(LOOSE_DECODE_ROUNDS - 1));
        assert_eq!(settled(&bound), "/A");
    }

    proptest! {
    /// On any input the loose reading ends, and a settled reading is a
    /// fixed point: reading it again changes nothing.
    #[test]
    fn loose_readings_are_idempotent(
        path in "(/|%|%25|%u|%u00|[0-9A-Fa-f]|[a-z]|%EF%BC%8F|%E2%80%8B|\\PC){0,24}",
    ) {
        let once = loose_text(&path);
        if once.settled {
            prop_assert_eq!(loose_text(&once.text), once);
        }
    }

    /// No input makes either reading panic, and on any input a canonical
    /// form that a second decoding would not change is a fixed point.
    #[test]
    fn readings_never_panic(path in "/?(\\PC|%[0-9A-Fa-f]{2}|%u[0-9A-Fa-f]{4}){0,40}") {
        if let Some(once) = canonical_path(&path) {
            if !once.contains('%') && !once.contains(';') {
                prop_assert_eq!(canonical_path(&once), Some(once));
            }
        }
        let _ = loose_text(&path);
        let _ = check_prefix(&path);
    }
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
