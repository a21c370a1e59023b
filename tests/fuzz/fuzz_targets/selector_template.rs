//! The small start-up parsers: `Selector::parse`, `Template::parse`, the
//! duration parser `config::raw::parse_duration`, and the routing path
//! normaliser `config::normalize_path`.
//!
//! Properties checked besides "never panics":
//! * a parsed selector prints (`Display`) as text that parses back to the
//!   same selector;
//! * a template's `needs_body` is true exactly when one of its selectors
//!   reads the body;
//! * a normalised path starts with '/' and normalising it again changes
//!   nothing, unless it still contains '%' (decoding is one level only).

#![no_main]

use idemgate::config::raw::parse_duration;
use idemgate::config::{Segment, Selector, Template, normalize_path};
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

    let normal = normalize_path(&text);
    if text.starts_with('/') && !normal.contains('%') {
        assert!(normal.starts_with('/'), "{text:?} -> {normal:?}");
        assert_eq!(normalize_path(&normal), normal, "{text:?}");
    }
});
