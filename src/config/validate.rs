//! Turning a parsed [`RawConfig`] into a [`Config`]: the validation driver.
//!
//! Hands each section to the module that owns it, in file order, reads the
//! few small top-level ones itself (`unmatched`, `problem_type_base`,
//! `[listen]`, `[upstream]`, `[admin]`, `[secrets]`), runs the checks
//! between routes (`cross.rs`) and returns every [`Problems`] entry at once.

use super::admin_tokens::admin_tokens;
use super::cross;
use super::hot_keys::hot_keys;
use super::limits::limits;
use super::otel::tracing;
use super::problems::Problems;
use super::raw::strict::Parsed;
use super::raw::{self, RawConfig, RawRoute, RawUpstream};
use super::read::upstream_url;
use super::route::route;
use super::store::store_config;
use super::{Config, ConfigError, OnUnavailable, Route, Secret, Strength, Unmatched, Upstream};
use crate::error::ProblemTypes;

impl Config {
    /// Validates what the parser read, starting from the problems it found
    /// (a refused value, a missing required key) and judging nothing more
    /// of the keys whose value is a default or a stand-in.
    pub(super) fn validate(parsed: Parsed<RawConfig>) -> Result<Self, ConfigError> {
        let Parsed {
            value: raw,
            refused,
            stand_ins,
        } = parsed;
        let mut problems = Problems::default();
        for (key, message) in refused {
            problems.push(&key, message);
        }
        for key in stand_ins {
            problems.stand_in(key);
        }
        let unmatched = raw.unmatched.unwrap_or(Unmatched::Forward);
        let problem_types = problem_types(&mut problems, raw.problem_type_base.as_deref());
        let listen = raw.listen;
        let limits = limits(&mut problems, raw.limits);
        let store = store_config(
            &mut problems,
            &raw.store,
            limits.worker_threads,
            limits.max_stored_answer_bytes,
        );
        let on_unavailable = raw.store.on_unavailable.unwrap_or(OnUnavailable::Reject);
        let upstream = upstream(&mut problems, &raw.upstream);
        let admin_token = raw.admin.token.as_deref().and_then(|spec| {
            let token = Secret::resolve(spec).and_then(|token| {
                token
                    .require(Strength::BEARER)
                    .map_err(|why| format!("the token {why}"))
            });
            problems.take("admin.token", token)
        });
        let admin_tokens = admin_tokens(&mut problems, raw.admin.tokens, admin_token.as_ref());
        let admin_hosts = admin_hosts(&mut problems, raw.admin.allowed_hosts.as_deref());
        let audit_retention = raw
            .admin
            .audit_retention
            .unwrap_or(raw::DEFAULT_AUDIT_RETENTION)
            .get();
        if audit_retention.is_zero() {
            problems.push("admin.audit_retention", "must be greater than zero");
        }
        let secrets_watch = Some(
            raw.secrets
                .watch_interval
                .unwrap_or(raw::DEFAULT_WATCH_INTERVAL)
                .get(),
        )
        .filter(|interval| !interval.is_zero());
        let hot_keys = hot_keys(&mut problems, raw.hot_keys);
        let tracing = tracing(&mut problems, raw.tracing);
        let routes = routes(&mut problems, raw.routes, &upstream, on_unavailable);
        if !problems.0.is_empty() {
            return Err(ConfigError(problems.0));
        }
        Ok(Self {
            unmatched,
            listen,
            limits,
            store,
            upstream,
            on_unavailable,
            admin_token,
            admin_tokens,
            admin_hosts,
            audit_retention,
            problem_types,
            secrets_watch,
            hot_keys,
            routes,
            tracing,
        })
    }
}

/// `problem_type_base`, default the `urn:idemgate:problem:` URN.
fn problem_types(problems: &mut Problems, base: Option<&str>) -> ProblemTypes {
    match base {
        None => ProblemTypes::default(),
        Some(base) => problems
            .take(
                "problem_type_base",
                ProblemTypes::new(base).map_err(|e| e.to_string()),
            )
            .unwrap_or_default(),
    }
}

/// `[upstream]`: the default upstream of every route.
fn upstream(problems: &mut Problems, raw: &RawUpstream) -> Upstream {
    let upstream = Upstream {
        url: upstream_url(problems, "upstream.url", &raw.url),
        timeout: raw.timeout.unwrap_or(raw::DEFAULT_UPSTREAM_TIMEOUT).get(),
    };
    if upstream.timeout.is_zero() {
        problems.push("upstream.timeout", "must be greater than zero");
    }
    upstream
}

/// Every `[[route]]`, each checked against the ones before it.
fn routes(
    problems: &mut Problems,
    raw: Vec<RawRoute>,
    upstream: &Upstream,
    on_unavailable: OnUnavailable,
) -> Vec<Route> {
    let mut routes: Vec<Route> = Vec::with_capacity(raw.len());
    for (index, raw_route) in raw.into_iter().enumerate() {
        let key = format!("route[{index}]");
        let route = route(problems, &key, raw_route, upstream, on_unavailable);
        cross::among_routes(problems, &key, &route, &routes);
        routes.push(route);
    }
    routes
}

/// `[admin] allowed_hosts`: bare host names or IP addresses (no port,
/// scheme or path; an IPv6 address with or without brackets), lower-cased.
fn admin_hosts(problems: &mut Problems, hosts: Option<&[String]>) -> Vec<String> {
    let mut kept = Vec::new();
    for host in hosts.unwrap_or_default() {
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let is_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
        if is_name || name.parse::<std::net::IpAddr>().is_ok() {
            kept.push(name.to_ascii_lowercase());
        } else {
            problems.push(
                "admin.allowed_hosts",
                format!("{host:?} is not a host name or address (no port, scheme or path)"),
            );
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::{MINIMAL, problems_of};

    #[test]
    fn worker_threads_default_to_one_and_size_the_redis_pool() {
        let config = Config::parse(MINIMAL).unwrap();
        assert_eq!(config.limits.worker_threads, 1);
        assert_eq!(config.store.connections, 1);
        let with = |threads: &str| {
            MINIMAL.replace(
                "[store]",
                &format!("[limits]\nworker_threads = {threads}\n[store]"),
            )
        };
        let config = Config::parse(&with("3")).unwrap();
        assert_eq!(
            (config.limits.worker_threads, config.store.connections),
            (3, 3)
        );
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(
            Config::parse(&with("0")).unwrap().limits.worker_threads,
            cpus
        );
        let err = problems_of(&with("5000"));
        assert!(
            err.contains("limits.worker_threads: must be at most 1024"),
            "{err}"
        );
    }

    #[test]
    fn transport_bounds_default_and_refuse_what_could_never_work() {
        let config = Config::parse(MINIMAL).unwrap();
        assert_eq!(config.limits.idle_timeout.as_secs(), 10);
        assert_eq!(config.limits.max_buffered_bytes, 64 * 1024 * 1024);
        let with = |lines: &str| MINIMAL.replace("[store]", &format!("[limits]\n{lines}\n[store]"));
        let err = problems_of(&with("idle_timeout = \"0s\""));
        assert!(
            err.contains("limits.idle_timeout: must be greater than zero"),
            "{err}"
        );
        let err = problems_of(&with(
            "max_body_bytes = 2097152\nmax_buffered_bytes = 1048576",
        ));
        assert!(
            err.contains(
                "limits.max_buffered_bytes: must be at least limits.max_body_bytes (2097152)"
            ),
            "{err}"
        );
        let config = Config::parse(&with("max_buffered_bytes = 1048576")).unwrap();
        assert_eq!(
            config.limits.max_buffered_bytes,
            config.limits.max_body_bytes
        );
    }

    #[test]
    fn errors_name_their_keys_and_are_all_reported() {
        let text = MINIMAL
            .replace(
                "lease = \"30s\"",
                "lease = \"30 parsecs\"\nretention = \"1m\"",
            )
            .replace("kind = \"embedded\"", "kind = \"memcached\"");
        let err = Config::parse(&text).unwrap_err();
        let joined = err.0.join("\n");
        assert!(joined.contains("route[0].idempotency.lease:"), "{joined}");
        assert!(
            joined.contains("route[0].idempotency.retention: must exceed"),
            "{joined}"
        );
        assert!(joined.contains("store.kind:"), "{joined}");
    }

    #[test]
    fn missing_env_secret_is_named() {
        let text = MINIMAL.replace(
            "literal:old-secret-0123456789",
            "env:IDEMGATE_TEST_SURELY_UNSET",
        );
        let err = Config::parse(&text).unwrap_err();
        assert!(
            err.0[0].starts_with("route[0].signature.secrets[1]: environment variable"),
            "{err}"
        );
    }

    #[test]
    fn admin_host_names_are_bare_names_or_addresses() {
        let with = |hosts: &str| format!("{MINIMAL}\n[admin]\nallowed_hosts = [{hosts}]\n");
        let config = Config::parse(&with("\"Admin.Pay.svc\", \"10.0.0.7\", \"[::1]\"")).unwrap();
        assert_eq!(config.admin_hosts, ["admin.pay.svc", "10.0.0.7", "::1"]);
        for bad in ["\"a.b:8790\"", "\"http://a.b\"", "\"a.b/x\"", "\"\""] {
            let err = Config::parse(&with(bad)).unwrap_err();
            assert!(
                err.0[0].starts_with("admin.allowed_hosts: "),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn ambiguous_or_ineffective_settings_are_errors() {
        // The same prefix twice, also when it differs only in case and a
        // trailing slash (prefixes match case-insensitively by default).
        for prefix in ["/notify", "/Notify/"] {
            let twice = format!(
                "{MINIMAL}\n[[route]]\nname = \"other\"\npath_prefix = \"{prefix}\"\n[route.signature]\nscheme = \"none\"\n"
            );
            let err = problems_of(&twice);
            assert!(
                err.contains("route[1].path_prefix: route \"payments\" already matches"),
                "{prefix}: {err}"
            );
        }
        let zero = MINIMAL.replace("[upstream]", "[upstream]\ntimeout = \"0ms\"");
        assert!(Config::parse(&zero).unwrap_err().0[0].starts_with("upstream.timeout"));
        let empty = MINIMAL.replace("lease = \"30s\"", "cache_status = []");
        assert!(Config::parse(&empty).unwrap_err().0[0].contains("cache_status"));
    }

    #[test]
    fn a_setting_that_failed_to_parse_causes_no_second_error() {
        // Before: the stand-in value of the bad setting (1s) was compared
        // with the others, adding a bogus "retention: must exceed the
        // signature tolerance (1s)" or "(300s)".
        for (from, to, only) in [
            (
                "tolerance = \"5m\"",
                "tolerance = \"1.5h\"",
                "route[0].signature.tolerance: \"1.5h\": fractions are not supported, write 90m",
            ),
            (
                "lease = \"30s\"",
                "lease = \"30s\"\nretention = \"1.5h\"",
                "route[0].idempotency.retention: \"1.5h\": fractions are not supported, write 90m",
            ),
        ] {
            let text = MINIMAL
                .replace(from, to)
                .replace(
                    "lease = \"30s\"",
                    "lease = \"200ms\"\nwait_timeout = \"100ms\"",
                )
                .replace(
                    "[route.idempotency]",
                    "[route.idempotency]\nretention = \"500ms\"",
                );
            let text = if to.contains("retention") {
                text.replace("retention = \"500ms\"\n", "")
            } else {
                text
            };
            let err = Config::parse(&text).unwrap_err().0;
            assert_eq!(err, vec![only.to_owned()], "{to}");
        }
    }
}
