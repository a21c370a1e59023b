//! `Config::parse` on arbitrary text: TOML parsing, every validation rule,
//! selector/template/duration parsing inside routes, secret resolution, and
//! on success the start-up warnings, the route description and route
//! selection.
//!
//! Bytes are converted lossily to UTF-8, as a config file would be read
//! with replacement characters. Secrets are resolved for real
//! (`literal:`, `env:`, `file:`), as at start-up.

#![no_main]

use http::{HeaderMap, Method};
use idemgate::config::Config;
use idemgate::pipeline::admit::route::{Router, spellings_report};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(config) = Config::parse(&text) else {
        return;
    };
    let _ = config.warnings();
    let _ = spellings_report(&config);
    let router = Router::new(&config.routes);
    let headers = HeaderMap::new();
    for route in &config.routes {
        // Every route must be reachable at its own prefix for one of its
        // methods, unless a longer prefix (or the same one, for other
        // methods) takes over; select must simply not panic.
        for method in &route.methods {
            let _ = router.select(method, &route.path_prefix, None, &headers);
            let _ = router.select(
                method,
                &format!("{}/x/../%2e/", route.path_prefix),
                Some("_method=PUT"),
                &headers,
            );
        }
        let _ = route.scheme.secret_count();
        let _ = route.scheme.tolerance();
    }
    let _ = router.select(&Method::POST, "/", None, &headers);
});
