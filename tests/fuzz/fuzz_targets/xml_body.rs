//! `extract::xml::parse` on arbitrary bytes: the XML body reader behind
//! `xml:/path` selectors (WeChat Pay v2 notifications), which must refuse
//! DTDs and undeclared entities and never panic on what a sender posts.
//!
//! Properties checked besides "never panics":
//! * parsing is deterministic (same bytes, same result);
//! * a parsed document has at most `MAX_LEAVES` leaves, each path starts
//!   with `/` and the root's name, has no empty step and at most
//!   `MAX_DEPTH` steps;
//! * `XmlDocument::get` on a leaf's path gives that text when the path
//!   occurs once and `DuplicateElement` when it occurs more often, and
//!   `Inbound::value` of the selector `xml:<path>` agrees with it;
//! * an accepted body never starts (after a BOM and whitespace) with a
//!   document type declaration.

#![no_main]

use bytes::Bytes;
use idemgate::config::Selector;
use idemgate::error::Rejection;
use idemgate::extract::Inbound;
use idemgate::extract::xml::{DuplicateElement, MAX_DEPTH, MAX_LEAVES, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let result = parse(data);
    assert_eq!(result, parse(data), "parse is not deterministic");
    if idemgate_fuzz::debug() {
        eprintln!("{result:?}");
    }
    let Ok(doc) = result else { return };
    let start = data
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(data)
        .trim_ascii_start();
    assert!(!start.starts_with(b"<!DOCTYPE"), "a DTD was accepted");
    assert!(doc.leaves().len() <= MAX_LEAVES);
    let root = format!("/{}", doc.root());
    let inbound = Inbound::new(
        http::Request::new(()).into_parts().0,
        Bytes::copy_from_slice(data),
    );
    for (path, text) in doc.leaves() {
        assert!(path.starts_with(&root), "{path} outside {root}");
        assert!(!path[1..].split('/').any(str::is_empty), "{path}");
        assert!(path.matches('/').count() <= MAX_DEPTH, "{path}");
        let count = doc.leaves().iter().filter(|(p, _)| p == path).count();
        let read = inbound.value(&Selector::Xml(path.clone()));
        if count == 1 {
            assert_eq!(doc.get(path), Ok(Some(text.as_str())));
            assert_eq!(read.unwrap().as_deref(), Some(text.as_bytes()));
        } else {
            assert_eq!(doc.get(path), Err(DuplicateElement));
            assert_eq!(
                read.map(|_| ()),
                Err(Rejection::BadRequestBody("xml with the element once"))
            );
        }
    }
});
