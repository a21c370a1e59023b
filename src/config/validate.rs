//! Turning a [`RawConfig`] into a [`Config`]: the validation plumbing.
//!
//! Owns [`Problems`] (errors collected with their key paths, so every
//! mistake in a file is reported at once), the small shared checks
//! (addresses, upstream URLs, `on_unavailable`) and the top-level
//! `TryFrom`, which hands each section to the module that owns it.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;

use super::choice::Choice;
use super::hot_keys::hot_keys;
use super::otel::tracing;
use super::raw::{self, RawConfig, parse_duration};
use super::route::{check_shared_scope, route};
use super::store::store_config;
use super::{
    Config, ConfigError, Limits, Listen, OnUnavailable, Route, Secret, Unmatched, Upstream,
    redact_url,
};
use crate::error::ProblemTypes;
use crate::path::canonical_prefix;

/// More worker threads than this is a typo, not a machine.
const MAX_WORKER_THREADS: usize = 1024;

/// Collects errors with their key paths.
#[derive(Default)]
pub(super) struct Problems(pub(super) Vec<String>);

impl Problems {
    pub(super) fn push(&mut self, key: &str, message: impl fmt::Display) {
        self.0.push(format!("{key}: {message}"));
    }

    /// Whether `key` already has a problem, e.g. its value did not parse
    /// and a stand-in is in its place.
    pub(super) fn failed(&self, key: &str) -> bool {
        self.0.iter().any(|problem| {
            problem
                .strip_prefix(key)
                .is_some_and(|rest| rest.starts_with(": "))
        })
    }

    /// Pushes a problem found by comparing `key` with other settings,
    /// unless `key` or one of `inputs` already failed: the stand-in value
    /// of a key that did not parse would make the comparison a second,
    /// bogus error.
    pub(super) fn push_derived(&mut self, key: &str, inputs: &[&str], message: impl fmt::Display) {
        if !self.failed(key) && !inputs.iter().any(|input| self.failed(input)) {
            self.push(key, message);
        }
    }

    pub(super) fn take<T>(&mut self, key: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.push(key, e)).ok()
    }

    pub(super) fn duration(&mut self, key: &str, text: Option<&str>, default: &str) -> Duration {
        self.take(
            key,
            parse_duration(text.unwrap_or(default)).map_err(|e| e.to_string()),
        )
        .unwrap_or(Duration::from_secs(1))
    }

    /// Like [`Self::duration`], with the default already a `Duration`.
    pub(super) fn duration_or(
        &mut self,
        key: &str,
        text: Option<&str>,
        default: Duration,
    ) -> Duration {
        match text {
            None => default,
            Some(text) => self.duration(key, Some(text), ""),
        }
    }

    /// The value `text` names, `default` when it is absent; an unknown
    /// word is a problem that lists the valid ones.
    pub(super) fn choice<T: Choice>(&mut self, key: &str, text: Option<&str>, default: T) -> T {
        let Some(text) = text else { return default };
        if let Some(value) = T::from_name(text) {
            return value;
        }
        let names: Vec<String> = T::NAMES.iter().map(|(n, _)| format!("{n:?}")).collect();
        self.push(
            key,
            format!(
                "{text:?} is not valid; expected one of {}",
                names.join(", ")
            ),
        );
        default
    }
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Self, ConfigError> {
        let mut problems = Problems::default();
        let unmatched = problems.choice("unmatched", raw.unmatched.as_deref(), Unmatched::Forward);
        let problem_types = match raw.problem_type_base.as_deref() {
            None => ProblemTypes::default(),
            Some(base) => problems
                .take(
                    "problem_type_base",
                    ProblemTypes::new(base).map_err(|e| e.to_string()),
                )
                .unwrap_or_default(),
        };
        let listen = Listen {
            proxy: socket(
                &mut problems,
                "listen.proxy",
                raw.listen.proxy,
                raw::DEFAULT_PROXY_ADDR,
            ),
            admin: socket(
                &mut problems,
                "listen.admin",
                raw.listen.admin,
                raw::DEFAULT_ADMIN_ADDR,
            ),
        };
        let limits = Limits {
            max_body_bytes: raw
                .limits
                .max_body_bytes
                .unwrap_or(raw::DEFAULT_MAX_BODY_BYTES),
            header_read_timeout: problems.duration(
                "limits.header_read_timeout",
                raw.limits.header_read_timeout.as_deref(),
                raw::DEFAULT_HEADER_READ_TIMEOUT,
            ),
            shutdown_grace: problems.duration(
                "limits.shutdown_grace",
                raw.limits.shutdown_grace.as_deref(),
                raw::DEFAULT_SHUTDOWN_GRACE,
            ),
            body_read_timeout: problems.duration(
                "limits.body_read_timeout",
                raw.limits.body_read_timeout.as_deref(),
                raw::DEFAULT_BODY_READ_TIMEOUT,
            ),
            idle_timeout: problems.duration(
                "limits.idle_timeout",
                raw.limits.idle_timeout.as_deref(),
                raw::DEFAULT_IDLE_TIMEOUT,
            ),
            max_buffered_bytes: raw
                .limits
                .max_buffered_bytes
                .unwrap_or(raw::DEFAULT_MAX_BUFFERED_BYTES),
            max_connections: raw
                .limits
                .max_connections
                .unwrap_or(raw::DEFAULT_MAX_CONNECTIONS),
            max_headers: raw.limits.max_headers.unwrap_or(raw::DEFAULT_MAX_HEADERS),
            max_header_bytes: raw
                .limits
                .max_header_bytes
                .unwrap_or(raw::DEFAULT_MAX_HEADER_BYTES),
            max_waiting_per_key: raw
                .limits
                .max_waiting_per_key
                .unwrap_or(raw::DEFAULT_MAX_WAITING_PER_KEY),
            max_stored_answer_bytes: raw
                .limits
                .max_stored_answer_bytes
                .unwrap_or(raw::DEFAULT_MAX_STORED_ANSWER_BYTES),
            replay_cache_bytes: raw
                .limits
                .replay_cache_bytes
                .unwrap_or(raw::DEFAULT_REPLAY_CACHE_BYTES),
            worker_threads: match raw
                .limits
                .worker_threads
                .unwrap_or(raw::DEFAULT_WORKER_THREADS)
            {
                0 => std::thread::available_parallelism().map_or(1, usize::from),
                threads => threads,
            },
        };
        if limits.worker_threads > MAX_WORKER_THREADS {
            problems.push(
                "limits.worker_threads",
                format!("must be at most {MAX_WORKER_THREADS}"),
            );
        }
        for (key, value, least) in [
            ("limits.max_connections", limits.max_connections, 1),
            ("limits.max_headers", limits.max_headers, 1),
            ("limits.max_header_bytes", limits.max_header_bytes, 8192),
        ] {
            if value < least {
                problems.push(key, format!("must be at least {least}"));
            }
        }
        if limits.body_read_timeout.is_zero() {
            problems.push("limits.body_read_timeout", "must be greater than zero");
        }
        if limits.header_read_timeout.is_zero() {
            problems.push("limits.header_read_timeout", "must be greater than zero");
        }
        if limits.idle_timeout.is_zero() {
            problems.push("limits.idle_timeout", "must be greater than zero");
        }
        if limits.max_body_bytes == 0 {
            problems.push("limits.max_body_bytes", "must be at least 1");
        }
        if limits.max_buffered_bytes < limits.max_body_bytes {
            problems.push(
                "limits.max_buffered_bytes",
                format!(
                    "must be at least limits.max_body_bytes ({}), or no body of the largest accepted size could ever be read",
                    limits.max_body_bytes
                ),
            );
        }
        if limits.max_buffered_bytes > raw::MAX_BUFFERED_BYTES {
            problems.push(
                "limits.max_buffered_bytes",
                format!("must be at most {}", raw::MAX_BUFFERED_BYTES),
            );
        }
        if limits.max_stored_answer_bytes > raw::MAX_STORED_ANSWER_BYTES {
            problems.push(
                "limits.max_stored_answer_bytes",
                format!("must be at most {}", raw::MAX_STORED_ANSWER_BYTES),
            );
        }
        if limits.replay_cache_bytes > raw::MAX_REPLAY_CACHE_BYTES {
            problems.push(
                "limits.replay_cache_bytes",
                format!("must be at most {}", raw::MAX_REPLAY_CACHE_BYTES),
            );
        }
        let store = store_config(&mut problems, &raw.store, limits.worker_threads);
        let on_unavailable = on_unavailable(
            &mut problems,
            "store.on_unavailable",
            raw.store.on_unavailable.as_deref(),
            OnUnavailable::Reject,
        );
        let upstream = Upstream {
            url: upstream_url(&mut problems, "upstream.url", &raw.upstream.url),
            timeout: problems.duration(
                "upstream.timeout",
                raw.upstream.timeout.as_deref(),
                raw::DEFAULT_UPSTREAM_TIMEOUT,
            ),
        };
        if upstream.timeout.is_zero() {
            problems.push("upstream.timeout", "must be greater than zero");
        }
        if store.command_timeout.is_zero() {
            problems.push("store.command_timeout", "must be greater than zero");
        }
        let admin_token = raw
            .admin
            .token
            .as_deref()
            .and_then(|spec| problems.take("admin.token", Secret::resolve(spec)));
        let secrets_watch = Some(problems.duration(
            "secrets.watch_interval",
            raw.secrets.watch_interval.as_deref(),
            raw::DEFAULT_WATCH_INTERVAL,
        ))
        .filter(|interval| !interval.is_zero());
        let hot_keys = hot_keys(&mut problems, &raw.hot_keys);

        let tracing = tracing(&mut problems, raw.tracing);
        let mut routes: Vec<Route> = Vec::new();
        for (index, raw_route) in raw.routes.into_iter().enumerate() {
            let key = format!("route[{index}]");
            if let Some(route) = route(&mut problems, &key, raw_route, &upstream, on_unavailable) {
                if routes.iter().any(|r| r.name == route.name) {
                    problems.push(&format!("{key}.name"), "duplicate route name");
                }
                check_shared_scope(&mut problems, &key, &route, &routes);
                let shadowed = routes.iter().find(|r| {
                    let fold = !(r.case_sensitive && route.case_sensitive);
                    canonical_prefix(&r.path_prefix, fold)
                        == canonical_prefix(&route.path_prefix, fold)
                        && r.methods.iter().any(|m| route.methods.contains(m))
                });
                if let Some(other) = shadowed {
                    problems.push(
                        &format!("{key}.path_prefix"),
                        format!(
                            "route {:?} already matches {:?} for the same methods",
                            other.name, route.path_prefix
                        ),
                    );
                }
                routes.push(route);
            }
        }
        if problems.0.is_empty() {
            Ok(Self {
                unmatched,
                listen,
                limits,
                store,
                upstream,
                on_unavailable,
                admin_token,
                problem_types,
                secrets_watch,
                hot_keys,
                routes,
                tracing,
            })
        } else {
            Err(ConfigError(problems.0))
        }
    }
}

fn socket(problems: &mut Problems, key: &str, text: Option<String>, default: &str) -> SocketAddr {
    let text = text.unwrap_or_else(|| default.to_owned());
    problems
        .take(
            key,
            text.parse()
                .map_err(|_| format!("{text:?} is not an address such as \"127.0.0.1:8080\"")),
        )
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

pub(super) fn upstream_url(problems: &mut Problems, key: &str, text: &str) -> Uri {
    let parsed = text.parse::<Uri>().ok().filter(|uri| {
        uri.scheme_str() == Some("http") && uri.authority().is_some() && uri.query().is_none()
    });
    match parsed {
        Some(uri) => uri,
        None => {
            problems.push(
                key,
                format!(
                    "{:?} is not an http:// base URL such as \"http://127.0.0.1:3000\"",
                    redact_url(text)
                ),
            );
            Uri::from_static("http://127.0.0.1:1")
        }
    }
}

pub(super) fn on_unavailable(
    problems: &mut Problems,
    key: &str,
    text: Option<&str>,
    default: OnUnavailable,
) -> OnUnavailable {
    problems.choice(key, text, default)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::tests::MINIMAL;

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
        let err = Config::parse(&with("5000")).unwrap_err().0.join("\n");
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
        let err = Config::parse(&with("idle_timeout = \"0s\""))
            .unwrap_err()
            .0
            .join("\n");
        assert!(
            err.contains("limits.idle_timeout: must be greater than zero"),
            "{err}"
        );
        let err = Config::parse(&with(
            "max_body_bytes = 2097152\nmax_buffered_bytes = 1048576",
        ))
        .unwrap_err()
        .0
        .join("\n");
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
    fn ambiguous_or_ineffective_settings_are_errors() {
        // The same prefix twice, also when it differs only in case and a
        // trailing slash (prefixes match case-insensitively by default).
        for prefix in ["/notify", "/Notify/"] {
            let twice = format!(
                "{MINIMAL}\n[[route]]\nname = \"other\"\npath_prefix = \"{prefix}\"\n[route.signature]\nscheme = \"none\"\n"
            );
            let err = Config::parse(&twice).unwrap_err().0.join("\n");
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
