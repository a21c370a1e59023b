//! Helpers shared by the fuzz targets in `fuzz_targets/`.
//!
//! The request targets (`signature_headers`, `key_fingerprint`) read their
//! input as a small text format, so seeds are easy to write by hand and
//! libFuzzer's byte mutations stay meaningful:
//!
//! ```text
//! POST /hook?q=1 1700000000000        <- method, URI, now (unix ms)
//! webhook-id: msg_1                    <- header lines, any name, any count
//! webhook-signature: v1,AAAA
//!                                      <- empty line
//! {"body":"bytes, anything"}           <- the rest is the body, raw
//! ```
//!
//! Every part is lenient: a missing or unparsable method, URI or time falls
//! back to `POST`, `/` and [`DEFAULT_NOW_MS`]; a header line whose name
//! `http::HeaderName` or whose value `http::HeaderValue::from_bytes` rejects
//! is skipped (a real server would never hand such a header on). Headers
//! are appended, so repeated names reach the parsers as repeated headers.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Uri};
use idemgate::extract::Inbound;

/// The time used when the request line gives none (2023-11-14T22:13:20Z).
pub const DEFAULT_NOW_MS: u64 = 1_700_000_000_000;

/// A fuzz input decoded as a request.
pub struct FuzzRequest {
    /// The buffered request, as the pipeline would see it.
    pub inbound: Inbound,
    /// The verification time.
    pub now_ms: u64,
    /// Every header value that made it into the request, by name, in order.
    pub header_values: Vec<(HeaderName, Vec<u8>)>,
}

/// Decodes the text format described in the module docs.
pub fn request(data: &[u8]) -> FuzzRequest {
    let (head, body) = match find(data, b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &b""[..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let request_line = lines.next().unwrap_or_default();
    let mut words = request_line
        .split(|b| *b == b' ')
        .filter(|word| !word.is_empty());
    let method = words
        .next()
        .and_then(|m| Method::from_bytes(m).ok())
        .unwrap_or(Method::POST);
    let uri = words
        .next()
        .and_then(|u| Uri::try_from(u).ok())
        .unwrap_or_else(|| Uri::from_static("/"));
    let now_ms = words
        .next()
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.trim_ascii_end().parse().ok())
        .unwrap_or(DEFAULT_NOW_MS);

    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    let mut header_values = Vec::new();
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let Ok(name) = HeaderName::from_bytes(line[..colon].trim_ascii()) else {
            continue;
        };
        let raw = &line[colon + 1..];
        let raw = raw.strip_prefix(b" ").unwrap_or(raw);
        let Ok(value) = HeaderValue::from_bytes(raw) else {
            continue;
        };
        header_values.push((name.clone(), raw.to_vec()));
        parts.headers.append(name, value);
    }
    FuzzRequest {
        inbound: Inbound::new(parts, Bytes::copy_from_slice(body)),
        now_ms,
        header_values,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The TOML head every fuzz configuration shares: an embedded store that is
/// never opened and an upstream that is never called.
pub const CONFIG_HEAD: &str = r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "embedded"
path = "fuzz-never-opened.redb"

[upstream]
url = "http://127.0.0.1:1"
"#;

/// Parses `CONFIG_HEAD` followed by `routes`; panics with the errors if the
/// fuzz configuration itself is wrong (a harness bug, found on the first
/// input).
pub fn config(routes: &str) -> idemgate::config::Config {
    let text = format!("{CONFIG_HEAD}\n{routes}");
    match idemgate::config::Config::parse(&text) {
        Ok(config) => config,
        Err(e) => panic!("the fuzz harness's own configuration is invalid: {e}"),
    }
}

/// Whether `IDEMGATE_FUZZ_DEBUG` is set: the targets then print what each
/// input did (which scheme verified, which key was computed), for checking
/// seeds and reading a reproduced crash. Off while fuzzing.
pub fn debug() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("IDEMGATE_FUZZ_DEBUG").is_some())
}

/// Verifies `req` under every route of `config`, printing each result when
/// [`debug`] is on, and returns the routes that verified with what they
/// proved. Checks the property every scheme shares: the key index names a
/// configured key.
pub fn verified<'a>(
    config: &'a idemgate::config::Config,
    req: &FuzzRequest,
) -> Vec<(
    &'a idemgate::config::Route,
    idemgate::signature::Authenticity,
)> {
    let mut verified = Vec::new();
    for route in &config.routes {
        let result = idemgate::signature::verify(&route.scheme, &req.inbound, req.now_ms);
        if debug() {
            eprintln!("{}: {result:?}", route.name);
        }
        let Ok(authenticity) = result else {
            continue;
        };
        let index = authenticity
            .secret_index
            .expect("every fuzzed scheme has keys");
        assert!(index < route.scheme.secret_count(), "{}", route.name);
        verified.push((route, authenticity));
    }
    verified
}

/// One fuzz route, as the targets list them: name, path prefix, signature
/// scheme, `literal:` secrets (empty for schemes keyed otherwise) and the
/// TOML lines that follow in `[route.signature]` (and any table after it).
/// A tuple, so each target's routes read as a table of what differs.
pub type Route<'a> = (&'a str, &'a str, &'a str, &'a [&'a str], &'a str);

/// The `[[route]]` tables of `routes`, ready for [`config`]: the table heads
/// and `name`/`path_prefix`/`scheme`/`secrets` lines every route repeats are
/// written here once.
pub fn routes(routes: &[Route]) -> String {
    let mut toml = String::new();
    for (name, path_prefix, scheme, secrets, rest) in routes {
        toml.push_str(&format!(
            "\n[[route]]\nname = \"{name}\"\npath_prefix = \"{path_prefix}\"\n\
             [route.signature]\nscheme = \"{scheme}\"\n"
        ));
        if !secrets.is_empty() {
            let list: Vec<String> = secrets.iter().map(|s| format!("\"literal:{s}\"")).collect();
            toml.push_str(&format!("secrets = [{}]\n", list.join(", ")));
        }
        toml.push_str(rest);
        toml.push('\n');
    }
    toml
}
