//! The small start-up parsers: `Selector::parse`, `Template::parse`, the
//! duration parser `config::raw::parse_duration`, and stage 1's canonical
//! path `path::canonical_path`.
//!
//! Properties checked besides "never panics":
//! * a parsed selector prints (`Display`) as text that parses back to the
//!   same selector;
//! * a template's `needs_body` is true exactly when one of its selectors
//!   reads the body;
//! * a canonical path starts with '/' and canonicalising it again changes
//!   nothing, unless it still holds '%' or ';' (decoding is one level only,
//!   and a decoded ';' would be cut as a parameter).

#![no_main]

use idemgate::config::raw::parse_duration;
use idemgate::config::{Segment, Selector, Template};
use idemgate::path::canonical_path;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);

    if let Ok(selector) = Selector::parse(&text) {
        let printed = selector.to_string();
        assert_eq!(
            Selector::parse(&printed).as_ref(),
            Ok(&selector),
            "selector {text:?} printed as {printed:?} does not parse back"
        );
    }

    if let Ok(template) = Template::parse(&text) {
        let reads_body = template
            .segments
            .iter()
            .any(|s| matches!(s, Segment::Value(sel) if sel.needs_body()));
        assert_eq!(template.needs_body(), reads_body);
    }

    let _ = parse_duration(&text);

    if let Some(normal) = canonical_path(&text) {
        assert!(normal.starts_with('/'), "{text:?} -> {normal:?}");
        if !normal.contains('%') && !normal.contains(';') {
            assert_eq!(canonical_path(&normal).as_ref(), Some(&normal), "{text:?}");
        }
    }
});
