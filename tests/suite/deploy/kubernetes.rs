//! `config/deploy/kubernetes.yaml`: ConfigMap, Secret and a Deployment with
//! idemgate as a locked-down sidecar probed on its admin listener; the
//! Prometheus Operator resources beside it are in `kubernetes/monitoring.rs`.

use super::*;

mod memory;
mod monitoring;

const KUBERNETES: &str = "config/deploy/kubernetes.yaml";

/// The documents of one manifest (a file, or what kustomize rendered),
/// with the idemgate container, its config and its ports looked up.
pub(super) struct Kubernetes {
    origin: String,
    documents: Vec<Yaml>,
}

impl Kubernetes {
    fn load() -> Self {
        Self::from_documents(KUBERNETES, yaml_documents(KUBERNETES))
    }

    pub(super) fn from_documents(origin: &str, documents: Vec<Yaml>) -> Self {
        for document in &documents {
            str_at(document, "apiVersion");
            str_at(document, "kind");
            str_at(document, "metadata.name");
        }
        Self {
            origin: origin.to_owned(),
            documents,
        }
    }

    pub(super) fn all(&self, kind: &str) -> Vec<&Yaml> {
        self.documents
            .iter()
            .filter(|document| str_at(document, "kind") == kind)
            .collect()
    }

    pub(super) fn one(&self, kind: &str) -> &Yaml {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "{}: expected one {kind}", self.origin);
        found[0]
    }

    pub(super) fn pod(&self) -> &Yaml {
        at(self.one("Deployment"), "spec.template.spec")
    }

    pub(super) fn containers(&self) -> &[Yaml] {
        seq_at(self.pod(), "containers")
    }

    pub(super) fn idemgate(&self) -> &Yaml {
        self.containers()
            .iter()
            .find(|container| str_at(container, "name") == "idemgate")
            .expect("a container named idemgate")
    }

    pub(super) fn config(&self) -> GateConfig {
        let text = str_field(at(self.config_map(), "data"), "idemgate.toml");
        GateConfig::new(&format!("{} ConfigMap", self.origin), text)
    }

    pub(super) fn config_map(&self) -> &Yaml {
        let name = self.config_volume_source();
        self.all("ConfigMap")
            .into_iter()
            .find(|map| str_at(map, "metadata.name") == name)
            .unwrap_or_else(|| panic!("no ConfigMap {name:?}"))
    }

    /// (volume name, ConfigMap name) of the volume holding the config file.
    pub(super) fn config_volume_source(&self) -> &str {
        let (volume, _) = self.config_mount();
        let volume = seq_at(self.pod(), "volumes")
            .iter()
            .find(|v| str_at(v, "name") == volume)
            .unwrap_or_else(|| panic!("no volume {volume:?}"));
        str_at(volume, "configMap.name")
    }

    /// The idemgate container's mount that holds IDEMGATE_CONFIG, and the
    /// file's path inside the volume.
    pub(super) fn config_mount(&self) -> (&str, String) {
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

    pub(super) fn port_number(&self, container: &Yaml, port: &Yaml) -> u16 {
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

pub(super) fn env_entry<'a>(container: &'a Yaml, name: &str) -> Option<&'a Yaml> {
    container
        .get("env")?
        .as_sequence()?
        .iter()
        .find(|entry| entry.get("name").and_then(Yaml::as_str) == Some(name))
}

pub(super) fn env_value<'a>(container: &'a Yaml, name: &str) -> Option<&'a str> {
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

/// The pod template carries the SHA-256 of the config it mounts, so a
/// config change applied together with its checksum rolls the pods; a
/// config edited without its checksum fails here.
#[test]
fn kubernetes_config_checksum_matches_the_config_map() {
    use sha2::{Digest, Sha256};
    let k8s = Kubernetes::load();
    let text = str_field(at(k8s.config_map(), "data"), "idemgate.toml");
    let expected = hex::encode(Sha256::digest(text.as_bytes()));
    let annotations = at(k8s.one("Deployment"), "spec.template.metadata.annotations");
    assert_eq!(
        str_field(annotations, "checksum/config"),
        expected,
        "{KUBERNETES}: set the pod template's checksum/config to the SHA-256 of the ConfigMap's idemgate.toml"
    );
}
