//! XML bodies (WeChat Pay v2 and the like) read into their leaf elements,
//! refusing everything that would let the body mean more than it says.
//!
//! A payment notification such as
//! `<xml><appid><![CDATA[wx1]]></appid><total_fee>1</total_fee></xml>` is a
//! flat record in XML clothing. [`parse`] reads it with `quick-xml` into
//! `(path, text)` pairs, one per leaf element, where the path is the chain
//! of element names from the root (`/xml/total_fee`). What it refuses, and
//! why:
//!
//! - **Any DTD** (`<!DOCTYPE`): an internal subset declares entities, which
//!   is how XXE (reading files or URLs) and "billion laughs" (exponential
//!   expansion) work. The backend's parser may expand them even if idemgate
//!   does not, so such a body never reaches it.
//! - **Any entity reference but the five predefined ones** (`&lt;` `&gt;`
//!   `&amp;` `&quot;` `&apos;`) and numeric character references: without a
//!   DTD no other entity is declared, so `&name;` is an error in the
//!   backend's parser or, worse, resolved from somewhere else.
//! - **Processing instructions** other than the leading `<?xml …?>`
//!   declaration, **mixed content** (text beside child elements), **more
//!   than one root**, **text outside the root**, **malformed or unbalanced
//!   markup** and **bytes that are not UTF-8** (a leading UTF-8 BOM is fine):
//!   parsers recover from these differently, so idemgate could read one
//!   value while the backend acts on another.
//! - **Nesting deeper than [`MAX_DEPTH`] or more than [`MAX_LEAVES`]
//!   leaves**: the work per body stays bounded whatever a sender posts.
//!
//! A leaf's value is its text after decoding the references (CDATA
//! verbatim), with leading and trailing characters up to U+0020 removed
//! ([`normalise`]: Java's `String.trim()`, which WeChat's official SDK
//! applies when it builds the map it signs). The value is normalised
//! **once, here**, and every reader takes it from [`XmlDocument`]: the
//! WeChat Pay v2 verifier signs exactly the values an `xml:` selector, a
//! key or a fingerprint reads, so `" ORDER-1"`, `"ORDER-1\n"` or
//! `<![CDATA[\tORDER-1]]>` (which verify like `ORDER-1`) can not become a
//! second key. Inner whitespace and line ends are kept as sent; other
//! Unicode spaces (U+3000, U+00A0) are part of the value, as in the SDK.
//! Attributes are checked for well-formedness (and for unknown entities)
//! but otherwise ignored: no WeChat field is an attribute. Element names are
//! compared as written, prefix included; namespaces are not resolved.

use quick_xml::Reader;
use quick_xml::events::{BytesRef, BytesStart, Event};

/// Deepest element nesting accepted (the root is depth 1). WeChat bodies
/// are two levels deep; the limit bounds the path stack a body can build.
pub const MAX_DEPTH: usize = 16;

/// Most leaf elements accepted in one body. WeChat notifications carry a
/// few dozen; the limit bounds the memory and the duplicate search.
pub const MAX_LEAVES: usize = 1000;

/// Why a body is not acceptable XML. Each refusal is named so tests and
/// logs can tell them apart; the client sees one `bad_request_body`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// The body is not UTF-8 (the only encoding idemgate reads).
    #[error("not utf-8")]
    NotUtf8,
    /// A `<!DOCTYPE …>`: DTDs declare entities (XXE, billion laughs).
    #[error("a document type declaration")]
    DocType,
    /// An entity reference other than the five predefined ones, or a
    /// character reference that names no valid character.
    #[error("an undeclared entity reference")]
    Entity,
    /// A processing instruction, or an XML declaration not at the start.
    #[error("a processing instruction")]
    ProcessingInstruction,
    /// Non-whitespace text (or CDATA, or a reference) beside child elements.
    #[error("text beside child elements")]
    MixedContent,
    /// A second root element.
    #[error("more than one root element")]
    MultipleRoots,
    /// Text, CDATA or a reference before or after the root element.
    #[error("text outside the root element")]
    TextOutsideRoot,
    /// Elements nested deeper than [`MAX_DEPTH`].
    #[error("elements nested too deep")]
    TooDeep,
    /// More than [`MAX_LEAVES`] leaf elements.
    #[error("too many elements")]
    TooMany,
    /// Anything else the XML grammar forbids: unbalanced or misnamed end
    /// tags, a bad attribute, no root at all, a truncated document.
    #[error("malformed xml")]
    Malformed,
}

/// A path named by more than one leaf: backends disagree on which one
/// counts, so idemgate reads neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the element occurs more than once")]
pub struct DuplicateElement;

/// The leaf elements of an XML body in document order: what selectors read
/// and what `fingerprint_ignore` canonicalises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlDocument {
    root: String,
    leaves: Vec<(String, String)>,
}

impl XmlDocument {
    /// Every leaf as `(path, text)`, in the order sent (the canonical form
    /// of a fingerprint sorts them itself).
    pub fn leaves(&self) -> &[(String, String)] {
        &self.leaves
    }

    /// The root element's name (`xml` for WeChat Pay), as written.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The text of the one leaf at `path` (e.g. `/xml/out_trade_no`).
    /// `Ok(None)`: no leaf has that path (also when the path names an
    /// element with children). `Err`: two leaves have it, and the backend
    /// might act on either.
    pub fn get(&self, path: &str) -> Result<Option<&str>, DuplicateElement> {
        let mut found = self.leaves.iter().filter(|(p, _)| p == path);
        let first = found.next();
        if found.next().is_some() {
            return Err(DuplicateElement);
        }
        Ok(first.map(|(_, text)| text.as_str()))
    }
}

/// An element still open while parsing.
struct Open {
    /// Length of the path string before this element's `/name` was added.
    parent_len: usize,
    /// Its text so far (references decoded, CDATA verbatim).
    text: String,
    /// Whether it has child elements.
    has_children: bool,
    /// Whether its text includes something that is never insignificant
    /// whitespace: non-whitespace, CDATA or a reference.
    significant: bool,
}

/// Parses a whole body into its leaves, refusing what the module doc lists.
pub fn parse(body: &[u8]) -> Result<XmlDocument, XmlError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let text = std::str::from_utf8(body).map_err(|_| XmlError::NotUtf8)?;
    let mut reader = Reader::from_str(text);
    let config = reader.config_mut();
    config.check_end_names = true;
    config.allow_unmatched_ends = false;
    config.allow_dangling_amp = false;
    config.check_comments = true;
    config.expand_empty_elements = false;
    config.trim_text(false);

    let mut root: Option<String> = None;
    let mut path = String::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut leaves: Vec<(String, String)> = Vec::new();
    let mut first_event = true;
    loop {
        let event = reader.read_event().map_err(|_| XmlError::Malformed)?;
        let at_start = std::mem::replace(&mut first_event, false);
        match event {
            Event::Decl(_) if at_start => {}
            Event::Decl(_) | Event::PI(_) => return Err(XmlError::ProcessingInstruction),
            Event::DocType(_) => return Err(XmlError::DocType),
            Event::Comment(_) => {}
            Event::Start(start) => {
                open(&start, &mut root, &mut path, &mut stack)?;
            }
            Event::Empty(start) => {
                open(&start, &mut root, &mut path, &mut stack)?;
                close(&mut path, &mut stack, &mut leaves)?;
            }
            Event::End(_) => close(&mut path, &mut stack, &mut leaves)?,
            Event::Text(text) => {
                let raw = text.into_inner();
                match stack.last_mut() {
                    Some(element) => {
                        element.significant |= !is_xml_whitespace(&raw);
                        element.text.push_str(&raw);
                    }
                    None if is_xml_whitespace(&raw) => {}
                    None => return Err(XmlError::TextOutsideRoot),
                }
            }
            Event::CData(data) => {
                let element = stack.last_mut().ok_or(XmlError::TextOutsideRoot)?;
                element.significant = true;
                element.text.push_str(&data.into_inner());
            }
            Event::GeneralRef(reference) => {
                let decoded = resolve(&reference)?;
                let element = stack.last_mut().ok_or(XmlError::TextOutsideRoot)?;
                element.significant = true;
                element.text.push(decoded);
            }
            Event::Eof => break,
        }
    }
    match (root, stack.is_empty()) {
        (Some(root), true) => Ok(XmlDocument { root, leaves }),
        _ => Err(XmlError::Malformed),
    }
}

/// Opens an element: checks the root rule, depth and attributes, and
/// extends the path.
fn open(
    start: &BytesStart<'_>,
    root: &mut Option<String>,
    path: &mut String,
    stack: &mut Vec<Open>,
) -> Result<(), XmlError> {
    let name = start.name();
    let name: &str = name.as_ref();
    if name.is_empty() {
        return Err(XmlError::Malformed);
    }
    match stack.last_mut() {
        Some(parent) => parent.has_children = true,
        None if root.is_some() => return Err(XmlError::MultipleRoots),
        None => *root = Some(name.to_owned()),
    }
    if stack.len() >= MAX_DEPTH {
        return Err(XmlError::TooDeep);
    }
    for attribute in start.attributes() {
        let attribute = attribute.map_err(|_| XmlError::Malformed)?;
        check_references(&attribute.value)?;
    }
    stack.push(Open {
        parent_len: path.len(),
        text: String::new(),
        has_children: false,
        significant: false,
    });
    path.push('/');
    path.push_str(name);
    Ok(())
}

/// Closes the innermost element; a leaf becomes a `(path, text)` pair.
/// The reader has already checked that the end tag names it.
fn close(
    path: &mut String,
    stack: &mut Vec<Open>,
    leaves: &mut Vec<(String, String)>,
) -> Result<(), XmlError> {
    let element = stack.pop().ok_or(XmlError::Malformed)?;
    if element.has_children {
        if element.significant {
            return Err(XmlError::MixedContent);
        }
    } else {
        if leaves.len() >= MAX_LEAVES {
            return Err(XmlError::TooMany);
        }
        let text = match normalise(&element.text) {
            same if same.len() == element.text.len() => element.text,
            trimmed => trimmed.to_owned(),
        };
        leaves.push((path.clone(), text));
    }
    path.truncate(element.parent_len);
    Ok(())
}

/// The character a reference stands for: one of the five predefined
/// entities or a character reference; anything else is refused.
fn resolve(reference: &BytesRef<'_>) -> Result<char, XmlError> {
    if reference.is_char_ref() {
        return match reference.resolve_char_ref() {
            Ok(Some(c)) if is_xml_char(c) => Ok(c),
            _ => Err(XmlError::Entity),
        };
    }
    predefined(reference).ok_or(XmlError::Entity)
}

fn predefined(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        "apos" => '\'',
        _ => return None,
    })
}

/// Refuses an attribute value whose references are not predefined or
/// numeric (attributes are ignored, but a backend would still resolve
/// them).
fn check_references(value: &str) -> Result<(), XmlError> {
    let mut rest = value;
    while let Some(at) = rest.find('&') {
        let after = &rest[at + 1..];
        let end = after.find(';').ok_or(XmlError::Malformed)?;
        let name = &after[..end];
        if !name.starts_with('#') && predefined(name).is_none() {
            return Err(XmlError::Entity);
        }
        if name.starts_with('#') {
            resolve(&BytesRef::new(name))?;
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

/// A leaf's text as every reader sees it: without the leading and trailing
/// characters up to U+0020, as Java's `String.trim()` (WeChat's SDK) has
/// it. One function, applied once in [`parse`], so a verifier and a
/// selector can not normalise differently.
pub fn normalise(text: &str) -> &str {
    text.trim_matches(|c: char| c <= '\u{20}')
}

/// The XML `S` production: space, tab, carriage return, line feed.
fn is_xml_whitespace(text: &str) -> bool {
    text.bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// XML 1.0's `Char` production, for character references.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WECHAT: &str = "<xml><appid><![CDATA[wx2421b1c4370ec43b]]></appid>\
        <mch_id><![CDATA[10000100]]></mch_id>\
        <nonce_str><![CDATA[5d2b6c2a8db53831f7eda20af46e531c]]></nonce_str>\
        <out_trade_no><![CDATA[1409811653]]></out_trade_no>\
        <result_code><![CDATA[SUCCESS]]></result_code>\
        <total_fee>1</total_fee></xml>";

    fn leaf<'a>(doc: &'a XmlDocument, path: &str) -> Option<&'a str> {
        doc.get(path).unwrap()
    }

    #[test]
    fn reads_a_wechat_notification() {
        let doc = parse(WECHAT.as_bytes()).unwrap();
        assert_eq!(doc.root(), "xml");
        assert_eq!(doc.leaves().len(), 6);
        assert_eq!(leaf(&doc, "/xml/out_trade_no"), Some("1409811653"));
        assert_eq!(leaf(&doc, "/xml/total_fee"), Some("1"));
        assert_eq!(leaf(&doc, "/xml/appid"), Some("wx2421b1c4370ec43b"));
        assert_eq!(leaf(&doc, "/xml/missing"), None);
        assert_eq!(leaf(&doc, "/xml"), None, "not a leaf");
        assert_eq!(doc.leaves()[0].0, "/xml/appid", "document order");
    }

    #[test]
    fn cdata_is_verbatim_inside_and_every_value_is_trimmed_once() {
        let doc = parse(b"<xml><a><![CDATA[ <b>&amp; ]]></a><b> 1 </b><c/><d></d></xml>").unwrap();
        assert_eq!(leaf(&doc, "/xml/a"), Some("<b>&amp;"));
        assert_eq!(leaf(&doc, "/xml/b"), Some("1"));
        assert_eq!(leaf(&doc, "/xml/c"), Some(""));
        assert_eq!(leaf(&doc, "/xml/d"), Some(""));
    }

    #[test]
    fn every_spelling_that_signs_alike_reads_alike() {
        let read = |value: &str| {
            let body = format!("<xml><out_trade_no>{value}</out_trade_no></xml>");
            parse(body.as_bytes()).unwrap().leaves()[0].1.clone()
        };
        for spelling in [
            "ORDER-1",
            " ORDER-1",
            "ORDER-1 ",
            "\n  ORDER-1\n",
            "<![CDATA[\tORDER-1]]>",
            "&#32;ORDER-1&#9;",
        ] {
            assert_eq!(read(spelling), "ORDER-1", "{spelling:?}");
        }
        // Not Java whitespace: part of the value, so it signs differently.
        assert_eq!(read("\u{3000}ORDER-1"), "\u{3000}ORDER-1");
        assert_eq!(read("OR DER-1"), "OR DER-1");
    }

    #[test]
    fn predefined_and_character_references_are_decoded() {
        let doc = parse(b"<xml><a>&lt;&gt;&amp;&quot;&apos;</a><b>&#49;&#x32;&#x4E2D;</b></xml>")
            .unwrap();
        assert_eq!(leaf(&doc, "/xml/a"), Some("<>&\"'"));
        assert_eq!(leaf(&doc, "/xml/b"), Some("12\u{4E2D}"));
    }

    #[test]
    fn unknown_entities_are_refused() {
        for body in [
            "<xml><a>&xxe;</a></xml>",
            "<xml><a>&nbsp;</a></xml>",
            "<xml><a>&#0;</a></xml>",
            "<xml><a>&#xD800;</a></xml>",
            "<xml><a b=\"&xxe;\">1</a></xml>",
        ] {
            assert_eq!(parse(body.as_bytes()), Err(XmlError::Entity), "{body}");
        }
        assert_eq!(parse(b"<xml><a>a & b</a></xml>"), Err(XmlError::Malformed));
    }

    #[test]
    fn a_dtd_is_refused_whatever_it_declares() {
        let xxe = r#"<?xml version="1.0"?>
<!DOCTYPE xml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<xml><out_trade_no>&xxe;</out_trade_no></xml>"#;
        assert_eq!(parse(xxe.as_bytes()), Err(XmlError::DocType));
        assert_eq!(
            parse(b"<!DOCTYPE xml><xml><a>1</a></xml>"),
            Err(XmlError::DocType)
        );
    }

    #[test]
    fn billion_laughs_is_refused_fast() {
        let mut body = String::from("<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [\n");
        body.push_str("<!ENTITY lol0 \"lol\">\n");
        for i in 1..10 {
            let refs = format!("&lol{};", i - 1).repeat(10);
            body.push_str(&format!("<!ENTITY lol{i} \"{refs}\">\n"));
        }
        body.push_str("]>\n<xml><a>&lol9;</a></xml>");
        let started = tokio::time::Instant::now();
        assert_eq!(parse(body.as_bytes()), Err(XmlError::DocType));
        assert!(started.elapsed() < std::time::Duration::from_millis(100));
    }

    #[test]
    fn nested_paths_and_duplicates() {
        let doc =
            parse(b"<r><a><b>1</b><c>2</c></a><a2><b>3</b></a2><d>4</d><d>5</d></r>").unwrap();
        assert_eq!(leaf(&doc, "/r/a/b"), Some("1"));
        assert_eq!(leaf(&doc, "/r/a/c"), Some("2"));
        assert_eq!(leaf(&doc, "/r/a2/b"), Some("3"));
        assert_eq!(doc.get("/r/d"), Err(DuplicateElement));
        assert_eq!(doc.root(), "r");
    }

    #[test]
    fn mixed_content_is_refused_whitespace_is_not() {
        for body in [
            "<xml>x<a>1</a></xml>",
            "<xml><a>1</a>x</xml>",
            "<xml><![CDATA[ ]]><a>1</a></xml>",
            "<xml>&amp;<a>1</a></xml>",
        ] {
            assert_eq!(
                parse(body.as_bytes()),
                Err(XmlError::MixedContent),
                "{body}"
            );
        }
        let doc = parse(b"<xml>\n  <a>1</a>\r\n\t<b> </b>\n</xml>").unwrap();
        assert_eq!(leaf(&doc, "/xml/b"), Some(""));
    }

    #[test]
    fn depth_and_leaf_limits() {
        let nested = |depth: usize| {
            let open: String = (0..depth).map(|i| format!("<e{i}>")).collect();
            let close: String = (0..depth).rev().map(|i| format!("</e{i}>")).collect();
            format!("{open}x{close}")
        };
        assert!(parse(nested(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(
            parse(nested(MAX_DEPTH + 1).as_bytes()),
            Err(XmlError::TooDeep)
        );
        let many = |n: usize| format!("<xml>{}</xml>", "<a/>".repeat(n));
        assert_eq!(
            parse(many(MAX_LEAVES).as_bytes()).unwrap().leaves().len(),
            MAX_LEAVES
        );
        assert_eq!(
            parse(many(MAX_LEAVES + 1).as_bytes()),
            Err(XmlError::TooMany)
        );
    }

    #[test]
    fn declaration_bom_comments_and_attributes() {
        let body = "\u{FEFF}<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- hi -->\
            <xml a=\"1\"><b c='&amp;'>2</b></xml>\n<!-- bye -->\n";
        let doc = parse(body.as_bytes()).unwrap();
        assert_eq!(doc.leaves(), &[("/xml/b".to_owned(), "2".to_owned())]);
    }

    #[test]
    fn malformed_documents_are_refused() {
        for (body, error) in [
            (&b""[..], XmlError::Malformed),
            (b"   ", XmlError::Malformed),
            (b"<xml><a>1</xml>", XmlError::Malformed),
            (b"<xml><a>1</a>", XmlError::Malformed),
            (b"<xml></a>", XmlError::Malformed),
            (b"</xml>", XmlError::Malformed),
            (b"<xml><a b>1</a></xml>", XmlError::Malformed),
            (b"<xml><!-- a -- b --></xml>", XmlError::Malformed),
            (b"<a>1</a><b>2</b>", XmlError::MultipleRoots),
            (b"x<a>1</a>", XmlError::TextOutsideRoot),
            (b"<a>1</a>x", XmlError::TextOutsideRoot),
            (b"<a>1</a><![CDATA[x]]>", XmlError::TextOutsideRoot),
            (b"<a>1</a>&amp;", XmlError::TextOutsideRoot),
            (
                b"<a><?php x ?><b>1</b></a>",
                XmlError::ProcessingInstruction,
            ),
            (
                b"<a>1</a><?xml version=\"1.0\"?>",
                XmlError::ProcessingInstruction,
            ),
            (
                b"\n<?xml version=\"1.0\"?><a>1</a>",
                XmlError::ProcessingInstruction,
            ),
            (b"<a>\xff</a>", XmlError::NotUtf8),
        ] {
            assert_eq!(parse(body), Err(error), "{}", String::from_utf8_lossy(body));
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics_on_bytes(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&body);
        }

        #[test]
        fn parse_never_panics_on_mutated_wechat_bodies(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8)
        ) {
            let mut body = WECHAT.as_bytes().to_vec();
            for (at, byte, kind) in edits {
                if body.is_empty() {
                    body.push(byte);
                    continue;
                }
                let i = at.index(body.len());
                match kind {
                    0 => body[i] = byte,
                    1 => body.insert(i, byte),
                    _ => { body.remove(i); }
                }
            }
            if let Ok(doc) = parse(&body) {
                prop_assert!(doc.leaves().len() <= MAX_LEAVES);
                for (path, _) in doc.leaves() {
                    prop_assert!(path.starts_with('/'));
                }
            }
        }
    }
}
