//! The effective configuration, printed as TOML by `check-config`.
//!
//! Every setting is written out, defaults included, in the same schema the
//! file is read with ([`RawConfig`]), so operators can diff two
//! deployments' output and feed it back to `check-config`. Nothing secret
//! is printed: secrets appear as their source (`env:NAME`, `file:PATH`,
//! `literal:<redacted>`) and URLs go through [`redact_url`].

use std::time::Duration;

use super::choice::Choice;
use super::raw::{
    RawAdmin, RawConfig, RawGuard, RawIdempotency, RawInbox, RawLimits, RawListen, RawRoute,
    RawSecrets, RawSignature, RawStore, RawUpstream, format_duration,
};
use super::{
    Config, HmacScheme, Inbox, KeyPart, Preset, PresetKind, Route, Scheme, Secret, StoreBackend,
    redact_url,
};

impl Config {
    /// The effective configuration as a TOML document (see the module docs).
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.effective())
            .unwrap_or_else(|error| format!("# the configuration could not be printed: {error}\n"))
    }

    fn effective(&self) -> RawConfig {
        let store = &self.store;
        let redis = matches!(store.backend, StoreBackend::Redis { .. });
        let (kind, url, path) = match &store.backend {
            StoreBackend::Redis { url } => ("redis", Some(redact_url(url)), None),
            StoreBackend::Embedded { path } => ("embedded", None, Some(path.display().to_string())),
        };
        RawConfig {
            unmatched: Some(self.unmatched.name().to_owned()),
            problem_type_base: Some(self.problem_types.base().to_owned()),
            listen: RawListen {
                proxy: Some(self.listen.proxy.to_string()),
                admin: Some(self.listen.admin.to_string()),
            },
            limits: RawLimits {
                max_body_bytes: Some(self.limits.max_body_bytes),
                header_read_timeout: Some(format_duration(self.limits.header_read_timeout)),
                shutdown_grace: Some(format_duration(self.limits.shutdown_grace)),
                body_read_timeout: Some(format_duration(self.limits.body_read_timeout)),
                idle_timeout: Some(format_duration(self.limits.idle_timeout)),
                max_buffered_bytes: Some(self.limits.max_buffered_bytes),
                max_connections: Some(self.limits.max_connections),
                max_headers: Some(self.limits.max_headers),
                max_header_bytes: Some(self.limits.max_header_bytes),
                max_waiting_per_key: Some(self.limits.max_waiting_per_key),
                max_stored_answer_bytes: Some(self.limits.max_stored_answer_bytes),
                replay_cache_bytes: Some(self.limits.replay_cache_bytes),
                worker_threads: Some(self.limits.worker_threads),
            },
            store: RawStore {
                kind: kind.to_owned(),
                url,
                path,
                key_prefix: Some(store.key_prefix.clone()),
                command_timeout: Some(format_duration(store.command_timeout)),
                on_unavailable: Some(self.on_unavailable.name().to_owned()),
                min_replicas_ack: redis.then(|| store.replica_ack.map_or(0, |ack| ack.replicas)),
                replica_ack_timeout: store.replica_ack.map(|ack| format_duration(ack.timeout)),
                allow_eviction: redis.then_some(store.allow_eviction),
                username: store.username.as_ref().map(|s| s.source().to_owned()),
                password: store.password.as_ref().map(|s| s.source().to_owned()),
            },
            upstream: RawUpstream {
                url: redact_url(&self.upstream.url.to_string()),
                timeout: Some(format_duration(self.upstream.timeout)),
            },
            admin: RawAdmin {
                token: self.admin_token.as_ref().map(|t| t.source().to_owned()),
            },
            secrets: RawSecrets {
                watch_interval: Some(format_duration(
                    self.secrets_watch.unwrap_or(Duration::ZERO),
                )),
            },
            hot_keys: self.hot_keys.to_raw(),
            tracing: self.tracing.as_ref().map(super::Tracing::raw),
            routes: self.routes.iter().map(|route| self.route(route)).collect(),
        }
    }

    fn route(&self, route: &Route) -> RawRoute {
        let own_upstream = route.upstream.url != self.upstream.url;
        RawRoute {
            name: route.name.clone(),
            path_prefix: route.path_prefix.clone(),
            methods: Some(route.methods.iter().map(ToString::to_string).collect()),
            case_sensitive: Some(route.case_sensitive),
            upstream: own_upstream.then(|| redact_url(&route.upstream.url.to_string())),
            signature: signature(&route.scheme),
            idempotency: idempotency(route),
            inbox: route.inbox.as_ref().map(inbox),
            guards: route
                .guards
                .iter()
                .map(|guard| RawGuard {
                    field: guard.field.to_string(),
                    one_of: guard.one_of.clone(),
                    optional: Some(guard.optional),
                })
                .collect(),
        }
    }
}

fn sources(secrets: &[Secret]) -> Vec<String> {
    secrets.iter().map(|s| s.source().to_owned()).collect()
}

fn signature(scheme: &Scheme) -> RawSignature {
    let mut raw = RawSignature {
        scheme: String::new(),
        secrets: Vec::new(),
        algorithm: None,
        signature: None,
        encoding: None,
        prefix: None,
        message: None,
        timestamp: None,
        timestamp_unit: None,
        tolerance: None,
        public_keys: Vec::new(),
        public_url: None,
        allow_rsa1: None,
    };
    match scheme {
        Scheme::None => raw.scheme = "none".to_owned(),
        Scheme::Hmac(hmac) => hmac_signature(&mut raw, hmac),
        Scheme::Preset(preset) => preset_signature(&mut raw, preset),
    }
    raw
}

fn hmac_signature(raw: &mut RawSignature, hmac: &HmacScheme) {
    raw.scheme = "hmac".to_owned();
    raw.secrets = sources(&hmac.secrets);
    raw.algorithm = Some(hmac.algorithm.name().to_owned());
    raw.signature = Some(hmac.signature.to_string());
    raw.encoding = Some(hmac.encoding.name().to_owned());
    raw.prefix = Some(hmac.prefix.clone());
    raw.message = Some(hmac.message.to_string());
    if let Some(rule) = &hmac.timestamp {
        raw.timestamp = Some(rule.selector.to_string());
        raw.timestamp_unit = Some(rule.unit.name().to_owned());
        raw.tolerance = Some(format_duration(rule.tolerance));
    }
}

fn preset_signature(raw: &mut RawSignature, preset: &Preset) {
    raw.scheme = preset.kind.name().to_owned();
    raw.secrets = sources(&preset.keys);
    raw.public_keys = preset.public_keys.sources();
    raw.public_url.clone_from(&preset.public_url);
    raw.allow_rsa1 = (preset.kind == PresetKind::Alipay).then_some(preset.allow_rsa1);
    raw.tolerance = preset.tolerance.map(format_duration);
}

fn idempotency(route: &Route) -> RawIdempotency {
    let policy = &route.idempotency;
    // A preset's own key (which may be the signed message id, a part no
    // selector can name) is what an absent `key` means, so it is left out.
    let preset_default = match &route.scheme {
        Scheme::Preset(preset) => Some(vec![preset.kind.default_key()]),
        _ => None,
    };
    let key = policy
        .key
        .as_ref()
        .filter(|parts| Some(*parts) != preset_default.as_ref())
        .map(|parts| parts.iter().map(KeyPart::to_string).collect());
    RawIdempotency {
        key,
        require_key: Some(policy.require_key),
        fingerprint: Some(policy.fingerprint.iter().map(ToString::to_string).collect()),
        fingerprint_ignore: Some(
            policy
                .fingerprint_ignore
                .iter()
                .map(ToString::to_string)
                .collect(),
        ),
        lease: Some(format_duration(policy.lease)),
        retention: Some(format_duration(policy.retention)),
        on_in_flight: Some(policy.on_in_flight.name().to_owned()),
        wait_timeout: Some(format_duration(policy.wait_timeout)),
        cache_status: Some(policy.cache_status.names()),
        on_upstream_timeout: Some(policy.on_upstream_timeout.name().to_owned()),
        unknown_hold: Some(format_duration(policy.unknown_hold)),
        mode: Some(policy.mode.name().to_owned()),
        scope: Some(policy.scope.clone()),
        on_unavailable: Some(policy.on_unavailable.name().to_owned()),
        unsigned_key: Some(policy.unsigned_key.name().to_owned()),
    }
}

fn inbox(inbox: &Inbox) -> RawInbox {
    RawInbox {
        enabled: Some(true),
        on: Some(inbox.on.names()),
        ack_status: Some(inbox.ack.status),
        ack_body: Some(String::from_utf8_lossy(&inbox.ack.body).into_owned()),
        ack_content_type: inbox.ack.content_type.clone(),
        max_attempts: Some(inbox.max_attempts),
        backoff: Some(format_duration(inbox.backoff)),
        max_backoff: Some(format_duration(inbox.max_backoff)),
        concurrency: Some(inbox.concurrency),
        visibility_timeout: Some(format_duration(inbox.visibility_timeout)),
        delivered_status: Some(inbox.delivered.names()),
        max_queued: Some(inbox.max_queued),
        repair_every: Some(format_duration(inbox.repair_every)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key every scheme accepts, `whsec_` decoding included.
    const KEY: &str = "literal:whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    /// `text` with every secret source replaced by [`KEY`], so it loads
    /// without the environment and files it names.
    fn with_literal_secrets(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find(['"', '\'']) {
            out.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            let quoted = rest.split(['"', '\'']).next().unwrap_or_default();
            if ["env:", "file:", "literal:"]
                .iter()
                .any(|source| quoted.starts_with(source))
            {
                out.push_str(KEY);
                rest = &rest[quoted.len()..];
            }
        }
        out.push_str(rest);
        out
    }

    /// Printing is a fixed point: the output loads, and prints the same.
    fn assert_round_trip(name: &str, text: &str) -> String {
        let config =
            Config::parse(&with_literal_secrets(text)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let printed = config.to_toml();
        // Passwords print redacted; put one back so the URL loads again.
        let reloadable = with_literal_secrets(&printed).replace(":<redacted>@", ":pw@");
        let again = Config::parse(&reloadable)
            .unwrap_or_else(|e| panic!("{name}: the printed config does not load: {e}\n{printed}"));
        assert_eq!(again.to_toml(), printed, "{name}");
        printed
    }

    #[test]
    fn shipped_examples_print_as_loadable_toml() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for file in [
            "config/idemgate.toml",
            "config/quickstart.toml",
            "config/embedded.toml",
            "config/deploy/compose-idemgate.toml",
        ] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let printed = assert_round_trip(file, &text);
            assert!(!printed.contains("MfKQ9r8"), "{file}: a secret printed");
            assert!(printed.contains("literal:<redacted>"), "{file}:\n{printed}");
        }
    }

    /// `name = …`: a commented-out setting, not prose.
    fn is_setting(line: &str) -> bool {
        line.split_once(" = ").is_some_and(|(name, _)| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
    }

    #[test]
    fn the_shipped_inbox_example_loads_once_uncommented() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/idemgate.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let mut inside = false;
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                inside |= line == "# [route.inbox]";
                let setting = line
                    .strip_prefix("# ")
                    .filter(|rest| inside && (rest.starts_with('[') || is_setting(rest)));
                inside &= !line.starts_with("# visibility_timeout");
                setting.map_or(line, |rest| rest).to_owned()
            })
            .collect();
        let text = lines
            .join("\n")
            .replace("env:", "literal:secret-for-tests-");
        let err = Config::parse(&text).unwrap_err().0.join("\n");
        assert_eq!(
            err,
            "route[0].inbox.on: \"429\" overlaps idempotency.cache_status \"4xx\": an answer can not be both stored and queued"
        );
        let text = text.replace("on = [\"5xx\", \"429\", \"refused\"]", "on = [\"5xx\"]");
        let inbox = Config::parse(&text).unwrap().routes[0]
            .inbox
            .clone()
            .unwrap();
        assert_eq!(&inbox.ack.body[..], b"success");
        assert_eq!(inbox.on.names(), ["5xx"]);
    }

    #[test]
    fn every_setting_is_printed_with_its_default() {
        let text = r#"
            [store]
            kind = "redis"
            url = "redis://app:hunter2@127.0.0.1:6379/0"
            [upstream]
            url = "http://127.0.0.1:3000"
            [admin]
            token = "env:ADMIN_TOKEN"
            [[route]]
            name = "pay"
            path_prefix = "/notify"
            upstream = "http://user:pw@127.0.0.1:3001"
            [route.signature]
            scheme = "hmac"
            secrets = ["env:PAY"]
            signature = "header:X-Signature"
            message = "{timestamp}.{json:/id}.{{literal}}"
            timestamp = "header:X-Timestamp"
            [route.idempotency]
            key = ["json:/id"]
            cache_status = ["2xx", "404"]
            [route.inbox]
            on = ["5xx", "429", "timeout"]
            ack_body = "success"
            [[route.guard]]
            field = "json:/status"
            one_of = ["PAID", "1"]
            [[route]]
            name = "events"
            path_prefix = "/events"
            [route.signature]
            scheme = "standard-webhooks"
            secrets = ["env:EVENTS"]
        "#;
        let printed = assert_round_trip("inline", text);
        for expected in [
            "unmatched = \"forward\"",
            "url = \"redis://app:<redacted>@127.0.0.1:6379/0\"",
            "upstream = \"http://user:<redacted>@127.0.0.1:3001/\"",
            "token = \"literal:<redacted>\"",
            "worker_threads = 1",
            "[secrets]\nwatch_interval = \"10s\"",
            "command_timeout = \"250ms\"",
            "timeout = \"30s\"",
            "message = \"{timestamp}.{json:/id}.{{literal}}\"",
            "timestamp = \"header:x-timestamp\"",
            "tolerance = \"5m\"",
            "retention = \"24h\"",
            "cache_status = [\"2xx\", \"404\"]",
            "fingerprint = [\"method\", \"path\", \"body\"]",
            "scheme = \"standard-webhooks\"",
            "[route.inbox]\nenabled = true\non = [\"5xx\", \"429\", \"timeout\"]\nack_status = 200\nack_body = \"success\"\nack_content_type = \"text/plain\"\nmax_attempts = 12\nbackoff = \"30s\"\nmax_backoff = \"1h\"\nconcurrency = 4\nvisibility_timeout = \"1m\"",
            "[[route.guard]]\nfield = \"json:/status\"\none_of = [\"PAID\", \"1\"]\noptional = false",
            "[hot_keys]\nenabled = true\nk = 10\nwindow = \"1m\"",
        ] {
            assert!(printed.contains(expected), "{expected} in:\n{printed}");
        }
        assert!(!printed.contains("hunter2") && !printed.contains(":pw@"));
        // The standard-webhooks route keeps its signed-id key by leaving
        // `key` out; the hmac route prints its own.
        assert_eq!(printed.matches("key = [").count(), 1, "{printed}");
        // Only the route that has an inbox prints one.
        assert_eq!(printed.matches("[route.inbox]").count(), 1, "{printed}");
    }
}
