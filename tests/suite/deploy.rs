//! The files operators deploy with: `config/deploy/` (Kubernetes, Compose,
//! Prometheus for Compose, systemd), the `Dockerfile`, the licences and the
//! changelog. Each file is parsed the way its consumer parses it, and every
//! idemgate configuration embedded in them is run through the real binary
//! (`check-config`, and `serve` for the probe paths).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use idemgate::config::raw::parse_duration;
use serde::Deserialize;
use serde_yaml::Value as Yaml;

use crate::support::{Proc, free_port, http_get_blocking, repo_path};

const BIN: &str = env!("CARGO_BIN_EXE_idemgate");
const PROXY_PORT: u16 = 8080;
const ADMIN_PORT: u16 = 8790;
/// Where the image (Dockerfile `ENV IDEMGATE_CONFIG`) and the manifests put
/// the configuration.
const CONFIG_PATH: &str = "/etc/idemgate/idemgate.toml";

mod compose;
mod container;
mod dockerfile;
mod kubernetes;
mod kustomize;
mod licences;
mod schema;

use dockerfile::dockerfile_user;
mod systemd;

// ---- files ----------------------------------------------------------------

fn read(relative: &str) -> String {
    let path = repo_path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every non-empty document of a (multi-document) YAML file.
fn yaml_documents(relative: &str) -> Vec<Yaml> {
    let text = read(relative);
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| Yaml::deserialize(document).unwrap_or_else(|e| panic!("{relative}: {e}")))
        .filter(|document| !document.is_null())
        .collect()
}

fn yaml_file(relative: &str) -> Yaml {
    let mut documents = yaml_documents(relative);
    assert_eq!(documents.len(), 1, "{relative}: expected one YAML document");
    documents.remove(0)
}

/// `value` at a dotted path of mapping keys; panics naming the path.
fn at<'a>(value: &'a Yaml, path: &str) -> &'a Yaml {
    path.split('.').fold(value, |current, key| {
        current
            .get(key)
            .unwrap_or_else(|| panic!("no {key:?} (of {path:?}) in {current:?}"))
    })
}

/// The string under one key that may itself contain dots
/// (`idemgate.toml`, `prometheus.io/path`).
fn str_field<'a>(value: &'a Yaml, key: &str) -> &'a str {
    value
        .get(key)
        .and_then(Yaml::as_str)
        .unwrap_or_else(|| panic!("no string {key:?} in {value:?}"))
}

fn str_at<'a>(value: &'a Yaml, path: &str) -> &'a str {
    at(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string: {:?}", at(value, path)))
}

fn seq_at<'a>(value: &'a Yaml, path: &str) -> &'a [Yaml] {
    at(value, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("{path} is not a list: {:?}", at(value, path)))
}

/// A YAML scalar as text (strings as is, numbers and booleans written out).
fn scalar(value: &Yaml) -> String {
    match value {
        Yaml::String(text) => text.clone(),
        Yaml::Number(number) => number.to_string(),
        Yaml::Bool(flag) => flag.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// A command written as a YAML list or as one string.
fn words(value: &Yaml) -> Vec<String> {
    match value {
        Yaml::Sequence(items) => items.iter().map(scalar).collect(),
        Yaml::String(text) => text.split_whitespace().map(str::to_owned).collect(),
        other => panic!("not a command: {other:?}"),
    }
}

// ---- idemgate configurations ------------------------------------------------

/// An idemgate configuration found in a deployment file.
struct GateConfig {
    origin: String,
    text: String,
    toml: toml::Value,
}

impl GateConfig {
    fn new(origin: &str, text: &str) -> Self {
        let toml = toml::from_str::<toml::Table>(text)
            .map(toml::Value::Table)
            .unwrap_or_else(|e| panic!("{origin}: not TOML: {e}"));
        Self {
            origin: origin.to_owned(),
            text: text.to_owned(),
            toml,
        }
    }

    fn str(&self, path: &str) -> Option<&str> {
        path.split('.')
            .try_fold(&self.toml, |value, key| value.get(key))
            .and_then(toml::Value::as_str)
    }

    fn required(&self, path: &str) -> &str {
        self.str(path)
            .unwrap_or_else(|| panic!("{}: no {path}", self.origin))
    }

    fn duration(&self, path: &str, default: &str) -> Duration {
        let text = self.str(path).unwrap_or(default);
        parse_duration(text).unwrap_or_else(|e| panic!("{}: {path}: {e}", self.origin))
    }

    fn shutdown_grace(&self) -> Duration {
        self.duration("limits.shutdown_grace", "30s")
    }

    fn listen(&self, which: &str) -> SocketAddr {
        let key = format!("listen.{which}");
        self.required(&key)
            .parse()
            .unwrap_or_else(|e| panic!("{}: {key}: {e}", self.origin))
    }

    /// Every secret source written in the file (`env:`, `file:`, `literal:`).
    fn secret_sources(&self) -> Vec<String> {
        fn walk(value: &toml::Value, found: &mut Vec<String>) {
            match value {
                toml::Value::String(text)
                    if ["env:", "file:", "literal:"]
                        .iter()
                        .any(|scheme| text.starts_with(scheme)) =>
                {
                    found.push(text.clone());
                }
                toml::Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
                toml::Value::Table(table) => table.values().for_each(|item| walk(item, found)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        walk(&self.toml, &mut found);
        found
    }

    /// The environment variables its `env:NAME` secrets read.
    fn env_names(&self) -> BTreeSet<String> {
        self.secret_sources()
            .iter()
            .filter_map(|source| source.strip_prefix("env:"))
            .map(str::to_owned)
            .collect()
    }

    /// Deployment files carry no inline secret: every one comes from the
    /// environment, and there is at least one (the signature secret).
    fn assert_secrets_from_environment(&self) {
        let sources = self.secret_sources();
        assert!(!sources.is_empty(), "{}: no secrets", self.origin);
        for source in &sources {
            assert!(
                source.starts_with("env:"),
                "{}: secret {source:?} is not read from the environment",
                self.origin
            );
        }
    }

    fn write_to(&self, dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("idemgate.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `idemgate check-config` with the referenced secrets set to dummies:
    /// exit 0, no warnings. Without them it must fail and name each one
    /// (so the file really reads them from the environment).
    fn assert_passes_check_config(&self) {
        let dir = tempfile::tempdir().unwrap();
        let path = self.write_to(dir.path(), &self.text);
        let names = self.env_names();

        let mut without = Command::new(BIN);
        without
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .env_remove("IDEMGATE_CONFIG");
        for name in &names {
            without.env_remove(name);
        }
        let output = without.output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: check-config without the secrets should fail with exit 2",
            self.origin
        );
        let errors = String::from_utf8_lossy(&output.stderr);
        for name in &names {
            assert!(errors.contains(name.as_str()), "{}: {errors}", self.origin);
        }

        let mut with = Command::new(BIN);
        with.arg("check-config")
            .arg("--config")
            .arg(&path)
            .env_remove("IDEMGATE_CONFIG");
        for name in &names {
            with.env(name, format!("dummy-value-for-{name}"));
        }
        let output = with.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{}: check-config failed:\n{stdout}\n{stderr}",
            self.origin
        );
        assert!(stdout.contains("configuration is valid"), "{stdout}");
        let warnings: Vec<&str> = stdout
            .lines()
            .filter(|line| line.starts_with("# warning:"))
            .collect();
        assert!(
            warnings.is_empty(),
            "{}: a deployment example should not trigger start-up warnings: {warnings:?}",
            self.origin
        );
    }

    /// A container or pod sidecar: both listeners on every interface, on the
    /// ports the manifests publish; fed from the environment.
    fn assert_container_ready(&self) {
        assert_eq!(
            self.listen("proxy"),
            SocketAddr::from(([0, 0, 0, 0], PROXY_PORT)),
            "{}",
            self.origin
        );
        assert_eq!(
            self.listen("admin"),
            SocketAddr::from(([0, 0, 0, 0], ADMIN_PORT)),
            "{}",
            self.origin
        );
        assert_eq!(self.required("store.kind"), "redis", "{}", self.origin);
        self.assert_secrets_from_environment();
        // A call in flight at SIGTERM can finish within the grace period
        // (one cut by the shutdown is an unknown outcome).
        assert!(
            self.duration("upstream.timeout", "30s") < self.shutdown_grace(),
            "{}: upstream.timeout should be below limits.shutdown_grace",
            self.origin
        );
    }

    /// The same file with its listeners (and store) moved to free loopback
    /// ports, so that the real binary can serve it here.
    fn local_copy(&self, proxy: SocketAddr, admin: SocketAddr, store_port: u16) -> String {
        let mut toml = self.toml.clone();
        let table = toml.as_table_mut().unwrap();
        let listen = table
            .get_mut("listen")
            .and_then(toml::Value::as_table_mut)
            .unwrap();
        listen.insert("proxy".into(), proxy.to_string().into());
        listen.insert("admin".into(), admin.to_string().into());
        let store = table
            .get_mut("store")
            .and_then(toml::Value::as_table_mut)
            .unwrap();
        store.insert(
            "url".into(),
            format!("redis://127.0.0.1:{store_port}/0").into(),
        );
        toml::to_string(&toml).unwrap()
    }
}

fn url_host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = authority
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{url}: no port"));
    (host.to_owned(), port.parse().unwrap())
}

// ---- a running idemgate -----------------------------------------------------

/// Serves `config` (listeners moved to loopback, store unreachable) and
/// checks what the orchestrator sees: /healthz 200 (liveness), /readyz 503
/// while the store is down (readiness), /metrics, and `idemgate
/// healthcheck` (the image's HEALTHCHECK) exit 0.
fn assert_probe_paths_served(config: &GateConfig, liveness: &str, readiness: &str, metrics: &str) {
    let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let dir = tempfile::tempdir().unwrap();
    let path = config.write_to(dir.path(), &config.local_copy(proxy, admin, free_port()));
    let log_path = dir.path().join("idemgate.log");
    let secrets: Vec<(String, String)> = config
        .env_names()
        .into_iter()
        .map(|name| {
            let value = format!("dummy-value-for-{name}");
            (name, value)
        })
        .collect();

    let _running = Proc::spawn_logged(
        "idemgate",
        Command::new(BIN)
            .arg("serve")
            .env("IDEMGATE_CONFIG", &path)
            .envs(secrets.iter().map(|(k, v)| (k, v))),
        std::fs::File::create(&log_path).unwrap(),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((200, _)) = http_get_blocking(admin, liveness) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {liveness} never answered 200 on the admin listener:\n{}",
            config.origin,
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let (status, answer) = http_get_blocking(admin, readiness).expect("readiness answers");
    assert_eq!(
        status, 503,
        "{}: {readiness} with the store down should be 503:\n{answer}",
        config.origin
    );
    let (status, answer) = http_get_blocking(admin, metrics).expect("metrics answers");
    assert_eq!(status, 200, "{}: {metrics}:\n{answer}", config.origin);
    assert!(answer.contains("idemgate_build_info"), "{answer}");

    assert_healthcheck_passes(&path, &secrets);
}

/// `idemgate healthcheck` (the image's `HEALTHCHECK`) with the config at
/// `path` and the environment a deployment gives it exits 0.
fn assert_healthcheck_passes<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
    path: &Path,
    env: &[(K, V)],
) {
    let health = Command::new(BIN)
        .arg("healthcheck")
        .env("IDEMGATE_CONFIG", path)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        health.status.success(),
        "idemgate healthcheck: {}",
        String::from_utf8_lossy(&health.stderr)
    );
}
