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
const ADMIN_PORT: u16 = 9090;
/// Where the image (Dockerfile `ENV IDEMGATE_CONFIG`) and the manifests put
/// the configuration.
const CONFIG_PATH: &str = "/etc/idemgate/idemgate.toml";

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
            .filter(|line| line.starts_with("warning:"))
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

    let health = Command::new(BIN)
        .arg("healthcheck")
        .env("IDEMGATE_CONFIG", &path)
        .envs(secrets.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        health.status.success(),
        "idemgate healthcheck: {}",
        String::from_utf8_lossy(&health.stderr)
    );
}

// ---- Kubernetes ---------------------------------------------------------------

const KUBERNETES: &str = "config/deploy/kubernetes.yaml";

struct Kubernetes {
    documents: Vec<Yaml>,
}

impl Kubernetes {
    fn load() -> Self {
        let documents = yaml_documents(KUBERNETES);
        for document in &documents {
            str_at(document, "apiVersion");
            str_at(document, "kind");
            str_at(document, "metadata.name");
        }
        Self { documents }
    }

    fn all(&self, kind: &str) -> Vec<&Yaml> {
        self.documents
            .iter()
            .filter(|document| str_at(document, "kind") == kind)
            .collect()
    }

    fn one(&self, kind: &str) -> &Yaml {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "{KUBERNETES}: expected one {kind}");
        found[0]
    }

    fn pod(&self) -> &Yaml {
        at(self.one("Deployment"), "spec.template.spec")
    }

    fn containers(&self) -> &[Yaml] {
        seq_at(self.pod(), "containers")
    }

    fn idemgate(&self) -> &Yaml {
        self.containers()
            .iter()
            .find(|container| str_at(container, "name") == "idemgate")
            .expect("a container named idemgate")
    }

    fn config(&self) -> GateConfig {
        let text = str_field(at(self.config_map(), "data"), "idemgate.toml");
        GateConfig::new(&format!("{KUBERNETES} ConfigMap"), text)
    }

    fn config_map(&self) -> &Yaml {
        let name = self.config_volume_source();
        self.all("ConfigMap")
            .into_iter()
            .find(|map| str_at(map, "metadata.name") == name)
            .unwrap_or_else(|| panic!("no ConfigMap {name:?}"))
    }

    /// (volume name, ConfigMap name) of the volume holding the config file.
    fn config_volume_source(&self) -> &str {
        let (volume, _) = self.config_mount();
        let volume = seq_at(self.pod(), "volumes")
            .iter()
            .find(|v| str_at(v, "name") == volume)
            .unwrap_or_else(|| panic!("no volume {volume:?}"));
        str_at(volume, "configMap.name")
    }

    /// The idemgate container's mount that holds IDEMGATE_CONFIG, and the
    /// file's path inside the volume.
    fn config_mount(&self) -> (&str, String) {
        let config_path = env_value(self.idemgate(), "IDEMGATE_CONFIG")
            .expect("IDEMGATE_CONFIG set on the idemgate container");
        for mount in seq_at(self.idemgate(), "volumeMounts") {
            let mount_path = str_at(mount, "mountPath");
            let name = str_at(mount, "name");
            if let Some(sub_path) = mount.get("subPath").and_then(Yaml::as_str) {
                if mount_path == config_path {
                    return (name, sub_path.to_owned());
                }
            } else if let Some(file) = config_path
                .strip_prefix(mount_path)
                .and_then(|rest| rest.strip_prefix('/'))
            {
                return (name, file.to_owned());
            }
        }
        panic!("no volume mounted at {config_path}");
    }

    fn port_number(&self, container: &Yaml, port: &Yaml) -> u16 {
        if let Some(number) = port.as_u64() {
            return u16::try_from(number).unwrap();
        }
        let name = port.as_str().unwrap();
        let declared = seq_at(container, "ports")
            .iter()
            .find(|p| p.get("name").and_then(Yaml::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no port named {name:?}"));
        u16::try_from(at(declared, "containerPort").as_u64().unwrap()).unwrap()
    }
}

fn env_entry<'a>(container: &'a Yaml, name: &str) -> Option<&'a Yaml> {
    container
        .get("env")?
        .as_sequence()?
        .iter()
        .find(|entry| entry.get("name").and_then(Yaml::as_str) == Some(name))
}

fn env_value<'a>(container: &'a Yaml, name: &str) -> Option<&'a str> {
    env_entry(container, name)?.get("value")?.as_str()
}

fn container_ports(container: &Yaml) -> BTreeSet<u16> {
    seq_at(container, "ports")
        .iter()
        .map(|port| u16::try_from(at(port, "containerPort").as_u64().unwrap()).unwrap())
        .collect()
}

/// CPU in cores: "50m", "0.5", "1".
fn cpu(quantity: &Yaml) -> f64 {
    let text = scalar(quantity);
    match text.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().unwrap() / 1000.0,
        None => text.parse().unwrap(),
    }
}

/// Memory in bytes: "64Mi", "1Gi", "128M", "1000".
fn memory(quantity: &Yaml) -> f64 {
    let text = scalar(quantity);
    let units: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, factor) in units {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().unwrap() * factor;
        }
    }
    text.parse().unwrap()
}

#[test]
fn kubernetes_has_config_map_secret_and_deployment() {
    let k8s = Kubernetes::load();
    for kind in ["ConfigMap", "Secret", "Deployment"] {
        assert!(!k8s.all(kind).is_empty(), "{KUBERNETES}: no {kind}");
    }
    // The pod template carries the labels the selector selects.
    let deployment = k8s.one("Deployment");
    let selector = at(deployment, "spec.selector.matchLabels")
        .as_mapping()
        .unwrap();
    let labels = at(deployment, "spec.template.metadata.labels");
    for (key, value) in selector {
        assert_eq!(labels.get(key), Some(value), "selector label {key:?}");
    }
}

#[test]
fn kubernetes_idemgate_is_a_sidecar_of_the_handler() {
    let k8s = Kubernetes::load();
    let config = k8s.config();
    let idemgate = k8s.idemgate();
    assert_eq!(
        container_ports(idemgate),
        BTreeSet::from([PROXY_PORT, ADMIN_PORT]),
        "idemgate container ports"
    );
    assert!(str_at(idemgate, "image").contains("idemgate"));
    if let Some(args) = idemgate.get("args") {
        assert_eq!(words(args), ["serve"]);
    }

    // The upstream is another container of the same pod, on loopback.
    let (host, port) = url_host_port(config.required("upstream.url"));
    assert_eq!(host, "127.0.0.1", "the handler is reached inside the pod");
    let handler = k8s
        .containers()
        .iter()
        .find(|c| str_at(c, "name") != "idemgate" && container_ports(c).contains(&port))
        .unwrap_or_else(|| panic!("no other container of the pod declares port {port}"));
    assert!(!str_at(handler, "image").contains("idemgate"));

    // Senders reach idemgate's proxy port, never the handler's.
    for service in k8s.all("Service") {
        for service_port in seq_at(service, "spec.ports") {
            let target = k8s.port_number(idemgate, at(service_port, "targetPort"));
            assert_eq!(target, PROXY_PORT, "Service targets the proxy port");
        }
    }
}

#[test]
fn kubernetes_probes_use_the_admin_listener() {
    let k8s = Kubernetes::load();
    let idemgate = k8s.idemgate();
    for (probe, expected) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = at(idemgate, &format!("{probe}.httpGet"));
        assert_eq!(str_at(get, "path"), expected, "{probe} path");
        assert_eq!(
            k8s.port_number(idemgate, at(get, "port")),
            ADMIN_PORT,
            "{probe} port"
        );
    }
    assert_eq!(k8s.config().listen("admin").port(), ADMIN_PORT);
}

#[test]
fn kubernetes_probe_paths_are_served_by_the_binary() {
    let k8s = Kubernetes::load();
    let idemgate = k8s.idemgate();
    let liveness = str_at(idemgate, "livenessProbe.httpGet.path");
    let readiness = str_at(idemgate, "readinessProbe.httpGet.path");
    let annotations = at(k8s.one("Deployment"), "spec.template.metadata.annotations");
    let metrics = str_field(annotations, "prometheus.io/path");
    assert_probe_paths_served(&k8s.config(), liveness, readiness, metrics);
}

#[test]
fn kubernetes_resources_are_bounded() {
    let k8s = Kubernetes::load();
    for container in k8s.containers() {
        let name = str_at(container, "name");
        let requests = at(container, "resources.requests");
        let limits = at(container, "resources.limits");
        assert!(
            cpu(at(requests, "cpu")) <= cpu(at(limits, "cpu")),
            "{name}: cpu request above limit"
        );
        assert!(
            memory(at(requests, "memory")) <= memory(at(limits, "memory")),
            "{name}: memory request above limit"
        );
    }
    let idemgate = at(k8s.idemgate(), "resources");
    assert!(cpu(at(idemgate, "requests.cpu")) > 0.0);
    assert!(memory(at(idemgate, "limits.memory")) >= 64.0 * 1024.0 * 1024.0);
}

#[test]
fn kubernetes_idemgate_runs_locked_down() {
    let k8s = Kubernetes::load();
    let pod = k8s.pod().get("securityContext");
    let container = at(k8s.idemgate(), "securityContext");
    // The container's setting wins over the pod's.
    let effective = |key: &str| container.get(key).or_else(|| pod?.get(key));
    assert_eq!(
        effective("runAsNonRoot").and_then(Yaml::as_bool),
        Some(true),
        "runAsNonRoot"
    );
    if let Some(user) = effective("runAsUser") {
        assert_ne!(user.as_u64(), Some(0), "runAsUser");
        assert_eq!(
            user.as_u64().map(|u| u.to_string()),
            Some(dockerfile_user().0),
            "runAsUser should be the image's user"
        );
    }
    assert_eq!(
        container
            .get("readOnlyRootFilesystem")
            .and_then(Yaml::as_bool),
        Some(true)
    );
    assert_eq!(
        container
            .get("allowPrivilegeEscalation")
            .and_then(Yaml::as_bool),
        Some(false)
    );
    assert_ne!(
        container.get("privileged").and_then(Yaml::as_bool),
        Some(true)
    );
    let dropped: Vec<String> = seq_at(container, "capabilities.drop")
        .iter()
        .map(scalar)
        .collect();
    assert!(dropped.iter().any(|c| c == "ALL"), "{dropped:?}");
    assert!(
        container
            .get("capabilities")
            .and_then(|c| c.get("add"))
            .is_none(),
        "no capability added back"
    );
}

#[test]
fn kubernetes_config_is_valid_and_wired() {
    let k8s = Kubernetes::load();
    let config = k8s.config();
    config.assert_passes_check_config();
    config.assert_container_ready();
    let (host, port) = url_host_port(config.required("store.url"));
    assert!(config.required("store.url").starts_with("redis"));
    assert!(
        !host.is_empty() && host != "127.0.0.1",
        "Redis is a Service"
    );
    assert_eq!(port, 6379);

    // IDEMGATE_CONFIG names the ConfigMap's key, mounted.
    let idemgate = k8s.idemgate();
    assert_eq!(env_value(idemgate, "IDEMGATE_CONFIG"), Some(CONFIG_PATH));
    let (volume, file) = k8s.config_mount();
    let volume = seq_at(k8s.pod(), "volumes")
        .iter()
        .find(|v| str_at(v, "name") == volume)
        .unwrap();
    let key = match volume.get("configMap").and_then(|c| c.get("items")) {
        Some(items) => {
            let item = items
                .as_sequence()
                .unwrap()
                .iter()
                .find(|item| str_at(item, "path") == file)
                .unwrap_or_else(|| panic!("no item with path {file:?}"));
            str_at(item, "key").to_owned()
        }
        None => file,
    };
    assert_eq!(key, "idemgate.toml");

    // Every env:NAME secret comes from the Secret, never from a plain value.
    let secret = k8s.one("Secret");
    let secret_name = str_at(secret, "metadata.name");
    let secret_keys: BTreeSet<String> = ["stringData", "data"]
        .iter()
        .filter_map(|field| secret.get(*field)?.as_mapping())
        .flat_map(|map| map.keys().map(scalar))
        .collect();
    for name in config.env_names() {
        let entry = env_entry(idemgate, &name)
            .unwrap_or_else(|| panic!("{name} is not set on the idemgate container"));
        assert!(entry.get("value").is_none(), "{name} is written inline");
        let reference = at(entry, "valueFrom.secretKeyRef");
        assert_eq!(str_at(reference, "name"), secret_name, "{name}");
        let key = str_at(reference, "key");
        assert!(
            secret_keys.contains(key),
            "{name}: key {key:?} not in the Secret"
        );
    }
}

#[test]
fn kubernetes_grace_period_covers_the_drain() {
    let k8s = Kubernetes::load();
    let grace = at(k8s.pod(), "terminationGracePeriodSeconds")
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    // A preStop sleep runs before SIGTERM, inside the same grace period.
    let pre_stop = k8s
        .idemgate()
        .get("lifecycle")
        .and_then(|l| l.get("preStop"))
        .map_or(0, |hook| {
            if let Some(seconds) = hook.get("sleep").and_then(|s| s.get("seconds")) {
                return seconds.as_u64().unwrap();
            }
            let command = words(at(hook, "exec.command"));
            assert!(command[0].ends_with("sleep"), "{command:?}");
            command[1].parse().unwrap()
        });
    let shutdown_grace = k8s.config().shutdown_grace();
    assert!(
        Duration::from_secs(grace) > shutdown_grace + Duration::from_secs(pre_stop),
        "terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop}s + shutdown_grace {shutdown_grace:?}"
    );
}

#[test]
fn kubernetes_pods_are_scraped_on_the_admin_port() {
    let k8s = Kubernetes::load();
    let annotations = at(k8s.one("Deployment"), "spec.template.metadata.annotations");
    assert_eq!(str_field(annotations, "prometheus.io/scrape"), "true");
    assert_eq!(
        str_field(annotations, "prometheus.io/port"),
        ADMIN_PORT.to_string()
    );
    assert_eq!(str_field(annotations, "prometheus.io/path"), "/metrics");
}

// ---- Docker Compose -----------------------------------------------------------

const COMPOSE: &str = "config/deploy/docker-compose.yml";
const COMPOSE_PROMETHEUS: &str = "config/deploy/compose-prometheus.yml";

fn compose_dir() -> PathBuf {
    repo_path("config/deploy")
}

struct Compose {
    file: Yaml,
}

/// A short-syntax or long-syntax volume.
struct Mount {
    source: PathBuf,
    target: String,
    read_only: bool,
}

impl Compose {
    fn load() -> Self {
        Self {
            file: yaml_file(COMPOSE),
        }
    }

    fn service(&self, name: &str) -> &Yaml {
        at(&self.file, &format!("services.{name}"))
    }

    fn environment(&self, service: &str) -> BTreeMap<String, String> {
        match self.service(service).get("environment") {
            None => BTreeMap::new(),
            Some(Yaml::Mapping(map)) => map
                .iter()
                .map(|(k, v)| {
                    (
                        scalar(k),
                        if v.is_null() {
                            String::new()
                        } else {
                            scalar(v)
                        },
                    )
                })
                .collect(),
            Some(Yaml::Sequence(items)) => items
                .iter()
                .map(|item| {
                    let text = scalar(item);
                    let (k, v) = text.split_once('=').unwrap_or((&text, ""));
                    (k.to_owned(), v.to_owned())
                })
                .collect(),
            Some(other) => panic!("environment: {other:?}"),
        }
    }

    /// Container ports published by `service`.
    fn published(&self, service: &str) -> BTreeSet<u16> {
        seq_at(self.service(service), "ports")
            .iter()
            .map(|port| match port {
                Yaml::Mapping(_) => u16::try_from(at(port, "target").as_u64().unwrap()).unwrap(),
                other => {
                    let text = scalar(other);
                    let text = text.split('/').next().unwrap();
                    text.rsplit(':').next().unwrap().parse().unwrap()
                }
            })
            .collect()
    }

    /// Bind mounts of `service` (named volumes are skipped).
    fn mounts(&self, service: &str) -> Vec<Mount> {
        seq_at(self.service(service), "volumes")
            .iter()
            .filter_map(|volume| {
                let (source, target, read_only) = match volume {
                    Yaml::Mapping(_) => (
                        str_at(volume, "source").to_owned(),
                        str_at(volume, "target").to_owned(),
                        volume.get("read_only").and_then(Yaml::as_bool) == Some(true),
                    ),
                    other => {
                        let text = scalar(other);
                        let parts: Vec<&str> = text.split(':').collect();
                        (
                            parts[0].to_owned(),
                            parts[1].to_owned(),
                            parts
                                .get(2)
                                .is_some_and(|mode| mode.split(',').any(|m| m == "ro")),
                        )
                    }
                };
                let is_path = source.starts_with('.') || source.starts_with('/');
                is_path.then(|| Mount {
                    source: compose_dir().join(source),
                    target,
                    read_only,
                })
            })
            .collect()
    }

    fn mount_at(&self, service: &str, target: &str) -> Mount {
        self.mounts(service)
            .into_iter()
            .find(|mount| mount.target == target)
            .unwrap_or_else(|| panic!("{service}: nothing mounted at {target}"))
    }

    fn command(&self, service: &str) -> Vec<String> {
        self.service(service)
            .get("command")
            .map(words)
            .unwrap_or_default()
    }

    fn config_path(&self) -> String {
        self.environment("idemgate")
            .get("IDEMGATE_CONFIG")
            .cloned()
            .unwrap_or_else(|| CONFIG_PATH.to_owned())
    }

    fn config(&self) -> GateConfig {
        let mount = self.mount_at("idemgate", &self.config_path());
        assert!(mount.read_only, "the config is mounted read-only");
        let text = std::fs::read_to_string(&mount.source)
            .unwrap_or_else(|e| panic!("{}: {e}", mount.source.display()));
        GateConfig::new(&mount.source.display().to_string(), &text)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    a.canonicalize().unwrap() == b.canonicalize().unwrap()
}

#[test]
fn compose_builds_idemgate_from_the_repository() {
    let compose = Compose::load();
    let build = at(compose.service("idemgate"), "build");
    let context = compose_dir().join(str_at(build, "context"));
    assert!(same_file(&context, &repo_path(".")), "build context");
    let dockerfile = build
        .get("dockerfile")
        .and_then(Yaml::as_str)
        .unwrap_or("Dockerfile");
    assert!(same_file(
        &context.join(dockerfile),
        &repo_path("Dockerfile")
    ));
    assert_eq!(
        compose.published("idemgate"),
        BTreeSet::from([PROXY_PORT, ADMIN_PORT])
    );
    let command = compose.command("idemgate");
    assert!(command.is_empty() || command == ["serve"], "{command:?}");
    // Compose's default 10s would SIGKILL idemgate mid-drain.
    let stop = str_at(compose.service("idemgate"), "stop_grace_period");
    let stop = parse_duration(stop).unwrap();
    assert!(
        stop > compose.config().shutdown_grace(),
        "stop_grace_period"
    );
}

#[test]
fn compose_config_is_valid_and_matches_the_services() {
    let compose = Compose::load();
    let config = compose.config();
    config.assert_passes_check_config();
    config.assert_container_ready();
    let published = compose.published("idemgate");
    assert!(published.contains(&config.listen("proxy").port()));
    assert!(published.contains(&config.listen("admin").port()));

    let environment = compose.environment("idemgate");
    for name in config.env_names() {
        assert!(
            environment.contains_key(&name),
            "{name} not passed to idemgate"
        );
    }

    // The store and the upstream are the compose services.
    let (host, port) = url_host_port(config.required("store.url"));
    compose.service(&host);
    assert_eq!(port, 6379);
    let (host, port) = url_host_port(config.required("upstream.url"));
    let listen = compose
        .command(&host)
        .into_iter()
        .find_map(|arg| arg.strip_prefix("-listen=").map(str::to_owned))
        .unwrap_or_else(|| panic!("{host}: no -listen= argument"));
    assert_eq!(
        listen,
        format!(":{port}"),
        "the handler listens where idemgate forwards"
    );
}

#[test]
fn compose_redis_persists() {
    let compose = Compose::load();
    let redis = compose.service("redis");
    assert!(str_at(redis, "image").starts_with("redis:7"));
    let command = compose.command("redis");
    let appendonly = command
        .iter()
        .position(|arg| arg == "--appendonly")
        .expect("--appendonly");
    assert_eq!(command[appendonly + 1], "yes");
    let data = seq_at(redis, "volumes")
        .iter()
        .map(scalar)
        .any(|volume| volume.ends_with(":/data"));
    assert!(
        data,
        "Redis' /data is a volume, so the append-only file outlives the container"
    );
}

#[test]
fn compose_prometheus_scrapes_idemgate_with_the_alert_rules() {
    let compose = Compose::load();
    let service = compose.service("prometheus");
    assert!(str_at(service, "image").starts_with("prom/prometheus"));
    let config_target = compose
        .command("prometheus")
        .iter()
        .find_map(|arg| arg.strip_prefix("--config.file=").map(str::to_owned))
        .unwrap_or_else(|| "/etc/prometheus/prometheus.yml".to_owned());
    let mount = compose.mount_at("prometheus", &config_target);
    assert!(same_file(&mount.source, &repo_path(COMPOSE_PROMETHEUS)));
    assert!(mount.read_only);

    let prometheus = yaml_file(COMPOSE_PROMETHEUS);
    // Every rule file resolves (relative to the config file) to a read-only
    // mount of the bundled alert rules.
    let config_dir = Path::new(&config_target).parent().unwrap();
    let rule_files = seq_at(&prometheus, "rule_files");
    assert!(!rule_files.is_empty());
    for rule_file in rule_files {
        let target = config_dir.join(scalar(rule_file));
        let mount = compose.mount_at("prometheus", target.to_str().unwrap());
        assert!(mount.read_only, "{} read-only", target.display());
        assert!(same_file(
            &mount.source,
            &repo_path("config/prometheus/alerts.yml")
        ));
    }

    // idemgate's admin listener, by its service name, at /metrics.
    let admin_port = compose.config().listen("admin").port();
    let wanted = format!("idemgate:{admin_port}");
    let job = seq_at(&prometheus, "scrape_configs")
        .iter()
        .find(|job| {
            seq_at(job, "static_configs").iter().any(|group| {
                seq_at(group, "targets")
                    .iter()
                    .any(|target| scalar(target) == wanted)
            })
        })
        .unwrap_or_else(|| panic!("no scrape target {wanted}"));
    assert_eq!(
        str_at(job, "job_name"),
        "idemgate",
        "the alert rules select job=\"idemgate\""
    );
    let path = job
        .get("metrics_path")
        .map_or("/metrics".to_owned(), scalar);
    assert_eq!(path, "/metrics");
}

/// `promtool check config` on the Compose Prometheus configuration, laid out
/// as in the container (alerts.yml beside it). Skipped without promtool
/// (.ci/run installs it).
#[test]
#[ignore = "needs promtool"]
fn compose_prometheus_config_passes_promtool() {
    if Command::new("promtool").arg("--version").output().is_err() {
        eprintln!("promtool not installed; skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo_path(COMPOSE_PROMETHEUS),
        dir.path().join("prometheus.yml"),
    )
    .unwrap();
    std::fs::copy(
        repo_path("config/prometheus/alerts.yml"),
        dir.path().join("alerts.yml"),
    )
    .unwrap();
    let output = Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(dir.path().join("prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool check config:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// ---- systemd ------------------------------------------------------------------

const UNIT: &str = "config/deploy/idemgate.service";

/// `[Section]` → every `Key=value` in order (keys may repeat).
fn unit_sections() -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current = String::new();
    for line in read(UNIT).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_owned();
            continue;
        }
        assert!(!line.ends_with('\\'), "{UNIT}: keep directives on one line");
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{UNIT}: not Key=value: {line}"));
        sections
            .entry(current.clone())
            .or_default()
            .push((key.trim().to_owned(), value.trim().to_owned()));
    }
    sections
}

fn service_values(key: &str) -> Vec<String> {
    unit_sections()
        .get("Service")
        .expect("[Service]")
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

fn service_value(key: &str) -> String {
    let values = service_values(key);
    assert_eq!(
        values.len(),
        1,
        "{UNIT}: {key} should be set once: {values:?}"
    );
    values[0].clone()
}

/// A systemd time span as written here: "45s", "1m30s" or bare seconds.
fn systemd_seconds(text: &str) -> Duration {
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Duration::from_secs(text.parse().unwrap());
    }
    parse_duration(&text.replace("min", "m")).unwrap()
}

#[test]
fn systemd_unit_is_hardened() {
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictNamespaces", "yes"),
        ("CapabilityBoundingSet", ""),
        ("StateDirectory", "idemgate"),
        ("EnvironmentFile", "-/etc/idemgate/idemgate.env"),
        ("KillSignal", "SIGTERM"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(service_value(key), value, "{UNIT}: {key}");
    }
    let families: BTreeSet<String> = service_value("RestrictAddressFamilies")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        families,
        BTreeSet::from(["AF_INET".into(), "AF_INET6".into(), "AF_UNIX".into()])
    );
    let filters = service_values("SystemCallFilter");
    assert_eq!(filters.first().map(String::as_str), Some("@system-service"));
    // Later filters may only take away (~...), never allow more.
    assert!(
        filters[1..].iter().all(|f| f.starts_with('~')),
        "{filters:?}"
    );
}

#[test]
fn systemd_unit_runs_serve_and_outwaits_the_drain() {
    let exec = service_value("ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert!(
        argv[0].starts_with('/') && argv[0].ends_with("/idemgate"),
        "{exec}"
    );
    assert_eq!(argv[1..], ["serve", "--config", CONFIG_PATH], "{exec}");
    // SIGHUP reloads neither the file nor env: secrets (only file: secrets):
    // no ExecReload that would suggest `systemctl reload` applies a change.
    assert!(service_values("ExecReload").is_empty(), "no ExecReload");

    // The unit runs a config like the reference one; its shutdown_grace
    // (default 30s) must fit inside TimeoutStopSec.
    let reference = GateConfig::new("config/idemgate.toml", &read("config/idemgate.toml"));
    let stop = systemd_seconds(&service_value("TimeoutStopSec"));
    assert!(
        stop > reference.shutdown_grace(),
        "TimeoutStopSec {stop:?} must exceed shutdown_grace {:?}",
        reference.shutdown_grace()
    );

    // The embedded store's documented path is inside StateDirectory= (the
    // only writable place under ProtectSystem=strict).
    let state = format!("/var/lib/{}/", service_value("StateDirectory"));
    let text = read(UNIT);
    let documented = text
        .lines()
        .filter_map(|line| line.trim_start_matches('#').trim().strip_prefix("path = "))
        .next()
        .expect("the unit documents the embedded store's path");
    assert!(
        documented.trim_matches('"').starts_with(&state),
        "{documented} is not under {state}"
    );
}

/// `systemd-analyze verify`, with ExecStart pointed at the binary under
/// test (verify requires the executable to exist). Skipped where
/// systemd-analyze is not installed.
#[test]
#[ignore = "needs systemd-analyze"]
fn systemd_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze not installed; skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("idemgate.service");
    let text = read(UNIT).replace("/usr/local/bin/idemgate", BIN);
    std::fs::write(&unit, text).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "systemd-analyze verify:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// ---- Dockerfile ----------------------------------------------------------------

/// The Dockerfile's stages, each a list of (INSTRUCTION, arguments) with
/// continuation lines joined and comments dropped.
fn dockerfile_stages() -> Vec<Vec<(String, String)>> {
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    let mut pending = String::new();
    for line in read("Dockerfile").lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let full = std::mem::take(&mut pending);
        let (instruction, arguments) = full.split_once(char::is_whitespace).unwrap_or((&full, ""));
        let instruction = instruction.to_ascii_uppercase();
        if instruction == "FROM" {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("the Dockerfile starts with FROM")
            .push((instruction, arguments.trim().to_owned()));
    }
    stages
}

fn runtime_stage() -> Vec<(String, String)> {
    dockerfile_stages().pop().expect("FROM")
}

fn instruction_values_of(stage: &[(String, String)], name: &str) -> Vec<String> {
    stage
        .iter()
        .filter(|(instruction, _)| instruction == name)
        .map(|(_, arguments)| arguments.clone())
        .collect()
}

/// The arguments of every `name` instruction of the runtime stage.
fn instruction_values(name: &str) -> Vec<String> {
    instruction_values_of(&runtime_stage(), name)
}

/// (user, group) of the runtime stage's last USER.
fn dockerfile_user() -> (String, Option<String>) {
    let user = instruction_values("USER")
        .pop()
        .expect("USER in the runtime stage");
    match user.split_once(':') {
        Some((user, group)) => (user.to_owned(), Some(group.to_owned())),
        None => (user, None),
    }
}

fn exec_form(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not exec form (JSON array): {text}: {e}"))
}

#[test]
fn dockerfile_exposes_both_listeners_as_a_non_root_user() {
    let exposed: BTreeSet<u16> = instruction_values("EXPOSE")
        .iter()
        .flat_map(|ports| ports.split_whitespace())
        .map(|port| port.split('/').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        exposed.contains(&PROXY_PORT) && exposed.contains(&ADMIN_PORT),
        "{exposed:?}"
    );

    let (user, group) = dockerfile_user();
    // Numeric, so that Kubernetes' runAsNonRoot can check it.
    let uid: u32 = user
        .parse()
        .unwrap_or_else(|_| panic!("USER {user} is not numeric"));
    assert_ne!(uid, 0, "USER is root");
    if let Some(group) = group {
        assert_ne!(group.parse::<u32>().expect("numeric group"), 0);
    }

    let env = instruction_values("ENV").join(" ");
    assert!(
        env.contains(&format!("IDEMGATE_CONFIG={CONFIG_PATH}")),
        "the image sets IDEMGATE_CONFIG (read by serve and healthcheck): {env}"
    );
}

#[test]
fn dockerfile_healthcheck_runs_idemgate_healthcheck() {
    let entrypoint = exec_form(&instruction_values("ENTRYPOINT").pop().expect("ENTRYPOINT"));
    let healthchecks = instruction_values("HEALTHCHECK");
    assert_eq!(healthchecks.len(), 1, "{healthchecks:?}");
    let (options, command) = healthchecks[0]
        .split_once("CMD")
        .expect("HEALTHCHECK ... CMD");
    for option in ["--interval=", "--timeout=", "--start-period="] {
        assert!(options.contains(option), "HEALTHCHECK {option}");
    }
    let command = exec_form(command.trim());
    assert_eq!(
        command,
        [entrypoint[0].as_str(), "healthcheck"],
        "exec form, no shell: the image's binary, `healthcheck`"
    );
    // The binary is where the image puts it.
    let copied = instruction_values("COPY")
        .iter()
        .any(|copy| copy.ends_with(&format!(" {}", entrypoint[0])));
    assert!(copied, "{} is copied into the image", entrypoint[0]);
}

/// The build stage gets every file `cargo build` reads: the manifest and
/// lock file, the sources, the Lua scripts (include_str!) and the build
/// script (it sets IDEMGATE_VERSION, without which the crate does not compile).
#[test]
fn dockerfile_builder_copies_what_the_build_needs() {
    let stages = dockerfile_stages();
    assert!(stages.len() >= 2, "a build stage and a runtime stage");
    let copied: BTreeSet<String> = stages[0]
        .iter()
        .filter(|(instruction, _)| instruction == "COPY")
        .flat_map(|(_, arguments)| {
            let parts: Vec<&str> = arguments.split_whitespace().collect();
            parts[..parts.len() - 1]
                .iter()
                .map(|source| source.trim_end_matches('/').to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut needed = vec!["Cargo.toml", "Cargo.lock", "src", "lua"];
    if repo_path("build.rs").exists() {
        needed.push("build.rs");
    }
    for path in needed {
        assert!(
            copied.contains(path),
            "the build stage does not COPY {path}: {copied:?}"
        );
    }
    let runs = instruction_values_of(&stages[0], "RUN").join(" ");
    assert!(runs.contains("cargo build --release --locked"), "{runs}");
}

#[test]
fn dockerfile_labels_and_copied_files() {
    let labels = instruction_values("LABEL").join(" ");
    let cargo: toml::Table = toml::from_str(&read("Cargo.toml")).unwrap();
    let license = cargo["package"]["license"].as_str().unwrap();
    assert_eq!(license, "MIT OR Apache-2.0");
    assert!(
        labels.contains(&format!("org.opencontainers.image.licenses=\"{license}\"")),
        "{labels}"
    );
    assert!(
        labels.contains("org.opencontainers.image.source="),
        "{labels}"
    );
    // Every file the runtime stage copies from the build context exists.
    for copy in instruction_values("COPY") {
        if copy.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = copy.split_whitespace().collect();
        for source in &parts[..parts.len() - 1] {
            assert!(repo_path(source).exists(), "COPY {source}: missing");
        }
    }
}

// ---- licences and changelog -----------------------------------------------------

#[test]
fn licences_and_changelog() {
    let mit = read("LICENSE-MIT");
    assert!(mit.contains("Copyright (c) The idemgate developers"));
    assert!(mit.contains("Permission is hereby granted, free of charge"));
    assert!(mit.contains("THE SOFTWARE IS PROVIDED \"AS IS\""));
    let apache = read("LICENSE-APACHE");
    assert!(apache.contains("Apache License"));
    assert!(apache.contains("Version 2.0, January 2004"));
    assert!(apache.contains("END OF TERMS AND CONDITIONS"));
    let changelog = read("CHANGELOG.md");
    assert!(changelog.contains("keepachangelog.com"));
    assert!(changelog.contains("## [Unreleased]"));
}
