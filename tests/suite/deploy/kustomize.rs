//! `config/deploy/kustomize/`: the base (idemgate as its own Deployment),
//! the sidecar component (idemgate into an existing Deployment) and its
//! example overlay, each rendered by the real kustomize (`kubectl
//! kustomize`) and checked as Kubernetes would get it: the strict schema
//! check (`schema.rs`), then the wiring (config, ports, probes, disruption
//! budget, monitors, rules) and the rollout on a config change.

use super::kubernetes::{Kubernetes, env_entry, env_value};
use super::schema::assert_strictly_valid;
use super::*;

const KUSTOMIZE: &str = "config/deploy/kustomize";
const BASE: &str = "config/deploy/kustomize/base";
const SIDECAR_EXAMPLE: &str = "config/deploy/kustomize/examples/sidecar";
const ALERTS: &str = "config/prometheus/alerts.yml";
/// The label the sidecar component selects Deployments and Services by.
const SIDECAR_LABEL: (&str, &str) = ("idemgate-sidecar", "inject");

/// `kubectl kustomize dir`: the rendered documents.
fn render(dir: &Path) -> Vec<Yaml> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("kubectl: {e}: rendering the kustomizations needs kubectl (kustomize v5)")
        });
    assert!(
        output.status.success(),
        "kubectl kustomize {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| Yaml::deserialize(document).unwrap())
        .filter(|document| !document.is_null())
        .collect()
}

fn rendered(relative: &str) -> Kubernetes {
    let documents = render(&repo_path(relative));
    assert_strictly_valid(relative, &documents);
    Kubernetes::from_documents(relative, documents)
}

/// The generated ConfigMap (name with kustomize's content hash) is the one
/// the Deployment mounts.
fn assert_config_map_generated(k8s: &Kubernetes) -> String {
    let name = k8s.config_volume_source().to_owned();
    let hash = name
        .strip_prefix("idemgate-config-")
        .unwrap_or_else(|| panic!("volume's ConfigMap {name:?} is not generated"));
    assert_eq!(hash.len(), 10, "kustomize's hash suffix: {name}");
    k8s.config_map();
    name
}

/// The PodMonitor selects the pods, scrapes the idemgate container's admin
/// port (no other container names that port) as job="idemgate".
fn assert_pod_monitor(k8s: &Kubernetes) {
    let monitor = k8s.one("PodMonitor");
    let selector = at(monitor, "spec.selector.matchLabels")
        .as_mapping()
        .unwrap();
    let labels = at(k8s.one("Deployment"), "spec.template.metadata.labels");
    for (key, value) in selector {
        assert_eq!(labels.get(key), Some(value), "PodMonitor selector {key:?}");
    }
    let endpoints = seq_at(monitor, "spec.podMetricsEndpoints");
    assert_eq!(endpoints.len(), 1);
    let port = str_at(&endpoints[0], "port");
    assert_eq!(
        k8s.port_number(k8s.idemgate(), &Yaml::String(port.to_owned())),
        ADMIN_PORT
    );
    for container in k8s.containers() {
        let named = container
            .get("ports")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
            .any(|p| p.get("name").and_then(Yaml::as_str) == Some(port));
        assert_eq!(
            named,
            str_at(container, "name") == "idemgate",
            "port {port:?} in container {}",
            str_at(container, "name")
        );
    }
    assert_eq!(str_at(&endpoints[0], "path"), "/metrics");
    let relabelled = seq_at(&endpoints[0], "relabelings").iter().any(|rule| {
        rule.get("targetLabel").and_then(Yaml::as_str) == Some("job")
            && rule.get("replacement").and_then(Yaml::as_str) == Some("idemgate")
    });
    assert!(relabelled, "job relabelled to idemgate");
}

/// What every rendering shares: the config is valid and container-ready,
/// the probes hit the admin listener, the Service reaches the proxy port,
/// the grace period covers the drain, the rule is alerts.yml.
fn assert_idemgate_wired(k8s: &Kubernetes) {
    let config = k8s.config();
    config.assert_passes_check_config();
    config.assert_container_ready();
    let idemgate = k8s.idemgate();
    assert_eq!(
        env_value(idemgate, "IDEMGATE_CONFIG"),
        Some(CONFIG_PATH),
        "IDEMGATE_CONFIG"
    );
    assert_eq!(k8s.config_mount().1, "idemgate.toml");
    for name in config.env_names() {
        let entry = env_entry(idemgate, &name).unwrap_or_else(|| panic!("{name} not set"));
        at(entry, "valueFrom.secretKeyRef");
    }
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = at(idemgate, &format!("{probe}.httpGet"));
        assert_eq!(str_at(get, "path"), path);
        assert_eq!(k8s.port_number(idemgate, at(get, "port")), ADMIN_PORT);
    }
    let service = k8s.one("Service");
    for port in seq_at(service, "spec.ports") {
        assert_eq!(
            k8s.port_number(idemgate, at(port, "targetPort")),
            PROXY_PORT,
            "the Service reaches idemgate's proxy port"
        );
    }
    let grace = at(k8s.pod(), "terminationGracePeriodSeconds")
        .as_u64()
        .unwrap();
    let pre_stop: u64 = words(at(idemgate, "lifecycle.preStop.exec.command"))[1]
        .parse()
        .unwrap();
    assert!(Duration::from_secs(grace) > config.shutdown_grace() + Duration::from_secs(pre_stop));
    assert_eq!(
        at(k8s.one("PrometheusRule"), "spec.groups"),
        at(&yaml_file(ALERTS), "groups"),
        "the PrometheusRule is alerts.yml's"
    );
    assert_pod_monitor(k8s);
}

#[test]
#[ignore = "needs kubectl with kustomize v5 (see .ci/run) and kubernetes-validate"]
fn kustomize_base_renders_a_valid_gateway_with_budget_and_monitoring() {
    let k8s = rendered(BASE);
    let kinds: BTreeSet<&str> = k8s_kinds(&k8s);
    let expected = [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "PodMonitor",
        "PrometheusRule",
        "Service",
    ];
    assert_eq!(kinds, BTreeSet::from(expected));
    assert_config_map_generated(&k8s);
    assert_idemgate_wired(&k8s);

    // The budget covers these pods and always leaves one serving.
    let budget = k8s.one("PodDisruptionBudget");
    let labels = at(k8s.one("Deployment"), "spec.template.metadata.labels");
    for (key, value) in at(budget, "spec.selector.matchLabels")
        .as_mapping()
        .unwrap()
    {
        assert_eq!(labels.get(key), Some(value), "PDB selector {key:?}");
    }
    let replicas = at(k8s.one("Deployment"), "spec.replicas").as_u64().unwrap();
    let unavailable = at(budget, "spec.maxUnavailable").as_u64().unwrap();
    assert!(
        unavailable >= 1 && unavailable < replicas,
        "{unavailable} of {replicas}"
    );

    // The upstream is a Service, not loopback: the base is its own pod.
    let (host, _) = url_host_port(k8s.config().required("upstream.url"));
    assert_ne!(host, "127.0.0.1");
}

fn k8s_kinds(k8s: &Kubernetes) -> BTreeSet<&str> {
    [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "PodMonitor",
        "PrometheusRule",
        "Service",
        "Secret",
    ]
    .into_iter()
    .filter(|kind| !k8s.all(kind).is_empty())
    .collect()
}

/// Editing idemgate.toml renames the ConfigMap (content hash) and with it
/// the pod template's volume: a new template, so the Deployment rolls.
#[test]
#[ignore = "needs kubectl with kustomize v5 (see .ci/run) and kubernetes-validate"]
fn kustomize_config_change_rolls_the_pods() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo_path(KUSTOMIZE), &dir.path().join("kustomize"));
    let base = dir.path().join("kustomize/base");
    let template = |documents: &[Yaml]| -> Yaml {
        let deployment = documents
            .iter()
            .find(|d| str_at(d, "kind") == "Deployment")
            .unwrap();
        at(deployment, "spec.template").clone()
    };
    let before = template(&render(&base));
    assert_eq!(before, template(&render(&base)), "rendering is stable");
    let config = base.join("idemgate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("tolerance = \"5m\"", "tolerance = \"4m\""),
    )
    .unwrap();
    let after = template(&render(&base));
    assert_ne!(
        before, after,
        "a config change must change the pod template"
    );
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The example overlay: the sample app's own Deployment and Service,
/// marked by name, get idemgate through the component; everything of the
/// app is kept.
#[test]
#[ignore = "needs kubectl with kustomize v5 (see .ci/run) and kubernetes-validate"]
fn kustomize_sidecar_component_patches_the_existing_deployment() {
    let k8s = rendered(SIDECAR_EXAMPLE);
    let app = yaml_documents(&format!("{SIDECAR_EXAMPLE}/app/deployment.yaml")).remove(0);
    let deployment = k8s.one("Deployment");
    assert_eq!(
        str_at(deployment, "metadata.name"),
        str_at(&app, "metadata.name")
    );
    assert_eq!(
        at(deployment, "spec.selector"),
        at(&app, "spec.selector"),
        "the selector is immutable: never patched"
    );
    // The app's containers are untouched; idemgate is added beside them.
    let app_containers = seq_at(&app, "spec.template.spec.containers");
    let names: Vec<&str> = k8s.containers().iter().map(|c| str_at(c, "name")).collect();
    assert_eq!(names.len(), app_containers.len() + 1, "{names:?}");
    for container in app_containers {
        let name = str_at(container, "name");
        let kept = k8s
            .containers()
            .iter()
            .find(|c| str_at(c, "name") == name)
            .unwrap();
        assert_eq!(kept, container, "container {name} changed");
    }
    let labels = at(deployment, "spec.template.metadata.labels");
    assert_eq!(str_field(labels, SIDECAR_LABEL.0), SIDECAR_LABEL.1);

    // idemgate forwards to the app's port on loopback.
    let (host, port) = url_host_port(k8s.config().required("upstream.url"));
    assert_eq!(host, "127.0.0.1");
    assert!(
        app_containers.iter().any(|c| seq_at(c, "ports")
            .iter()
            .any(|p| at(p, "containerPort").as_u64() == Some(u64::from(port)))),
        "no app container listens on {port}"
    );
    let config_map = assert_config_map_generated(&k8s);
    assert_eq!(
        str_field(at(k8s.config_map(), "data"), "idemgate.toml"),
        read(&format!("{SIDECAR_EXAMPLE}/idemgate.toml")),
        "{config_map}"
    );
    assert_idemgate_wired(&k8s);
}

/// The component patches only what is marked: another Deployment and
/// Service in the same overlay keep their pods and ports.
#[test]
#[ignore = "needs kubectl with kustomize v5 (see .ci/run) and kubernetes-validate"]
fn kustomize_sidecar_component_leaves_unmarked_workloads_alone() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo_path(KUSTOMIZE), &dir.path().join("kustomize"));
    let example = dir.path().join("kustomize/examples/sidecar");
    let app = example.join("app");
    for file in ["deployment.yaml", "service.yaml"] {
        let text = std::fs::read_to_string(app.join(file)).unwrap();
        std::fs::write(
            app.join(format!("other-{file}")),
            text.replace("payments-handler", "reports"),
        )
        .unwrap();
    }
    std::fs::write(
        app.join("kustomization.yaml"),
        "resources: [deployment.yaml, service.yaml, other-deployment.yaml, other-service.yaml]\n",
    )
    .unwrap();
    let documents = render(&example);
    let named = |kind: &str, name: &str| -> Yaml {
        documents
            .iter()
            .find(|d| str_at(d, "kind") == kind && str_at(d, "metadata.name") == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    let original = |file: &str| yaml_documents(&format!("{SIDECAR_EXAMPLE}/app/{file}")).remove(0);
    let other = named("Deployment", "reports");
    assert_eq!(
        seq_at(&other, "spec.template.spec.containers").len(),
        seq_at(
            &original("deployment.yaml"),
            "spec.template.spec.containers"
        )
        .len()
    );
    assert!(
        other
            .get("metadata")
            .unwrap()
            .get("labels")
            .unwrap()
            .get(SIDECAR_LABEL.0)
            .is_none()
    );
    let service = named("Service", "reports");
    assert_eq!(
        at(&service, "spec.ports"),
        at(&original("service.yaml"), "spec.ports")
    );
    let marked = named("Deployment", "payments-handler");
    assert!(
        seq_at(&marked, "spec.template.spec.containers")
            .iter()
            .any(|c| str_at(c, "name") == "idemgate")
    );
}
