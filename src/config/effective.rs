//! The effective configuration, printed as TOML by `check-config`.
//!
//! Every setting is written out, defaults included, in the same schema the
//! file is read with ([`RawConfig`]), so operators can diff two
//! deployments' output and feed it back to `check-config`. A typed section
//! (`[limits]`, `[hot_keys]`) is its own printer: serde writes the very struct it read.
//! The others print themselves beside their validator (`route::to_raw`,
//! `StoreConfig::to_raw`, …), so reading and printing a setting sit
//! together; this file puts the sections together and prints the few small
//! top-level ones. Nothing
//! secret is printed: secrets appear as their source (`env:NAME`,
//! `file:PATH`, `literal:<redacted>`) and URLs go through [`redact_url`].

use super::admin_tokens::RawAdminToken;
use super::raw::{RawAdmin, RawConfig, RawSecrets, RawUpstream};
use super::redact::redact_url;
use super::route;
use super::{Config, Tracing};

impl Config {
    /// The effective configuration as a TOML document (see the module docs).
    pub fn to_toml(&self) -> String {
        toml::to_string(&self.effective())
            .unwrap_or_else(|error| format!("# the configuration could not be printed: {error}\n"))
    }

    fn effective(&self) -> RawConfig {
        RawConfig {
            unmatched: Some(self.unmatched),
            problem_type_base: Some(self.problem_types.base().to_owned()),
            listen: self.listen.clone(),
            limits: self.limits.clone(),
            store: self.store.to_raw(self.on_unavailable),
            upstream: RawUpstream {
                url: redact_url(&self.upstream.url.to_string()),
                timeout: Some(self.upstream.timeout.into()),
            },
            admin: RawAdmin {
                token: self.admin_token.as_ref().map(|t| t.source().to_owned()),
                allowed_hosts: Some(self.admin_hosts.clone()),
                audit_retention: Some(self.audit_retention.into()),
                tokens: Some(
                    self.admin_tokens
                        .iter()
                        .map(|named| RawAdminToken {
                            name: named.name.clone(),
                            token: named.secret.source().to_owned(),
                            scope: Some(named.scope),
                        })
                        .collect(),
                ),
            },
            secrets: RawSecrets {
                watch_interval: Some(self.secrets_watch.unwrap_or_default().into()),
            },
            hot_keys: self.hot_keys.clone(),
            tracing: self.tracing.as_ref().map(Tracing::to_raw),
            routes: self
                .routes
                .iter()
                .map(|r| route::to_raw(r, &self.upstream))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::problems_of;

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
        let err = problems_of(&text);
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
