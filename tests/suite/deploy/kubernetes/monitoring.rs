//! The Prometheus Operator resources for the Deployment of
//! `config/deploy/kubernetes.yaml`: the ServiceMonitor and the PodMonitor
//! scrape idemgate's admin port as the job the alert rules select, and the
//! PrometheusRule is generated from `config/prometheus/alerts.yml` (the one
//! source of truth) and checked here to stay in sync with it.

use serde_yaml::Mapping;

use super::*;

const SERVICE_MONITOR: &str = "config/deploy/kubernetes-servicemonitor.yaml";
const POD_MONITOR: &str = "config/deploy/kubernetes-podmonitor.yaml";
const PROMETHEUS_RULE: &str = "config/deploy/kubernetes-prometheusrule.yaml";
/// The same rule for the kustomize base and sidecar component (kustomize
/// loads no file outside a kustomization's directory).
const KUSTOMIZE_RULE: &str = "config/deploy/kustomize/rules/prometheusrule.yaml";
const ALERTS: &str = "config/prometheus/alerts.yml";
const MONITORING_API: &str = "monitoring.coreos.com/v1";
/// The environment variable that makes the sync test rewrite the
/// PrometheusRule instead of comparing it.
const BLESS: &str = "IDEMGATE_BLESS";
/// The command that regenerates the PrometheusRule.
const REGENERATE: &str =
    "IDEMGATE_BLESS=1 cargo test --test suite deploy::kubernetes::monitoring::prometheus_rule";

/// The labels every monitoring resource carries, as the idemgate-specific
/// documents of kubernetes.yaml do.
const LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/name", "payments-callbacks"),
    ("app.kubernetes.io/component", "idemgate"),
];

fn of_kind<'a>(documents: &'a [Yaml], kind: &str) -> Vec<&'a Yaml> {
    documents
        .iter()
        .filter(|document| str_at(document, "kind") == kind)
        .collect()
}

/// Every label of a `matchLabels` (or Service `selector`) mapping is on
/// `labels` with the same value.
fn selects(selector: &Yaml, labels: &Yaml) -> bool {
    let selector = selector
        .as_mapping()
        .unwrap_or_else(|| panic!("not a label selector: {selector:?}"));
    !selector.is_empty()
        && selector
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
}

fn pod_labels(k8s: &Kubernetes) -> &Yaml {
    at(k8s.one("Deployment"), "spec.template.metadata.labels")
}

/// The job the alert rules select: `up{job="…"}` of IdemgateTargetDown.
fn alerted_job() -> String {
    let alerts = yaml_file(ALERTS);
    let expr = seq_at(&alerts, "groups")
        .iter()
        .flat_map(|group| seq_at(group, "rules"))
        .find(|rule| rule.get("alert").and_then(Yaml::as_str) == Some("IdemgateTargetDown"))
        .map(|rule| str_at(rule, "expr"))
        .expect("IdemgateTargetDown in alerts.yml");
    let rest = expr
        .split_once("job=\"")
        .unwrap_or_else(|| panic!("IdemgateTargetDown selects no job: {expr}"))
        .1;
    rest.split('"').next().unwrap().to_owned()
}

/// The monitor's metadata: the API group and the labels of kubernetes.yaml.
fn assert_monitoring_resource(document: &Yaml, origin: &str) {
    assert_eq!(str_at(document, "apiVersion"), MONITORING_API, "{origin}");
    let labels = at(document, "metadata.labels");
    for (key, value) in LABELS {
        assert_eq!(str_field(labels, key), value, "{origin}: label {key}");
    }
}

/// One scrape endpoint: the metrics path the Deployment advertises, a
/// timeout within the interval, and the job relabelled to the one the
/// alert rules select (the operator would name it after the Service or the
/// monitor, and IdemgateTargetDown would never fire).
fn assert_endpoint(k8s: &Kubernetes, endpoint: &Yaml, origin: &str) {
    let annotations = at(k8s.one("Deployment"), "spec.template.metadata.annotations");
    assert_eq!(
        str_at(endpoint, "path"),
        str_field(annotations, "prometheus.io/path"),
        "{origin}: path"
    );
    let interval = parse_duration(str_at(endpoint, "interval")).unwrap();
    let timeout = parse_duration(str_at(endpoint, "scrapeTimeout")).unwrap();
    assert!(
        timeout <= interval,
        "{origin}: scrapeTimeout above interval"
    );

    let job = alerted_job();
    let relabelled = seq_at(endpoint, "relabelings").iter().any(|rule| {
        rule.get("targetLabel").and_then(Yaml::as_str) == Some("job")
            && rule.get("replacement").and_then(Yaml::as_str) == Some(job.as_str())
            && rule
                .get("action")
                .and_then(Yaml::as_str)
                .is_none_or(|action| action == "replace")
            && rule
                .get("sourceLabels")
                .and_then(Yaml::as_sequence)
                .is_none_or(|labels| labels.is_empty())
    });
    assert!(relabelled, "{origin}: no relabeling sets job to {job:?}");
}

#[test]
fn service_monitor_scrapes_the_admin_port_of_the_deployment() {
    let k8s = Kubernetes::load();
    let documents = yaml_documents(SERVICE_MONITOR);
    let monitors = of_kind(&documents, "ServiceMonitor");
    assert_eq!(monitors.len(), 1, "{SERVICE_MONITOR}: one ServiceMonitor");
    let monitor = monitors[0];
    assert_monitoring_resource(monitor, SERVICE_MONITOR);

    // Among every Service of both files it selects exactly the metrics
    // Service, never the one senders call.
    let selector = at(monitor, "spec.selector.matchLabels");
    let services: Vec<&Yaml> = of_kind(&documents, "Service")
        .into_iter()
        .chain(k8s.all("Service"))
        .collect();
    let selected: Vec<&Yaml> = services
        .into_iter()
        .filter(|service| selects(selector, at(service, "metadata.labels")))
        .collect();
    assert_eq!(selected.len(), 1, "the ServiceMonitor selects one Service");
    let service = selected[0];
    assert!(
        selects(at(service, "spec.selector"), pod_labels(&k8s)),
        "the metrics Service selects the Deployment's pods"
    );

    let endpoints = seq_at(monitor, "spec.endpoints");
    assert_eq!(endpoints.len(), 1, "one scrape endpoint");
    let endpoint = &endpoints[0];
    let port = str_at(endpoint, "port");
    let service_port = seq_at(service, "spec.ports")
        .iter()
        .find(|p| p.get("name").and_then(Yaml::as_str) == Some(port))
        .unwrap_or_else(|| panic!("the metrics Service has no port named {port:?}"));
    assert_eq!(
        k8s.port_number(k8s.idemgate(), at(service_port, "targetPort")),
        ADMIN_PORT,
        "the ServiceMonitor scrapes idemgate's admin port"
    );
    assert_endpoint(&k8s, endpoint, SERVICE_MONITOR);
}

#[test]
fn pod_monitor_scrapes_the_admin_port_of_the_deployment() {
    let k8s = Kubernetes::load();
    let documents = yaml_documents(POD_MONITOR);
    assert_eq!(documents.len(), 1, "{POD_MONITOR}: one document");
    let monitor = &documents[0];
    assert_eq!(str_at(monitor, "kind"), "PodMonitor");
    assert_monitoring_resource(monitor, POD_MONITOR);
    assert!(
        selects(at(monitor, "spec.selector.matchLabels"), pod_labels(&k8s)),
        "the PodMonitor selects the Deployment's pods"
    );

    let endpoints = seq_at(monitor, "spec.podMetricsEndpoints");
    assert_eq!(endpoints.len(), 1, "one scrape endpoint");
    let endpoint = &endpoints[0];
    let port = str_at(endpoint, "port");
    assert_eq!(
        k8s.port_number(k8s.idemgate(), &Yaml::String(port.to_owned())),
        ADMIN_PORT,
        "the PodMonitor scrapes idemgate's admin port"
    );
    // A PodMonitor scrapes the named port of every container of the pod.
    for container in k8s.containers() {
        if str_at(container, "name") == "idemgate" {
            continue;
        }
        let clash = container
            .get("ports")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
            .any(|p| p.get("name").and_then(Yaml::as_str) == Some(port));
        assert!(!clash, "another container also names a port {port:?}");
    }
    assert_endpoint(&k8s, endpoint, POD_MONITOR);
}

/// The header of the generated file.
const HEADER: &str = "\
# GENERATED from config/prometheus/alerts.yml (the one source of truth) by
# tests/suite/deploy/kubernetes/monitoring.rs: do not edit. After a change
# to alerts.yml, regenerate it with
#   IDEMGATE_BLESS=1 cargo test --test suite deploy::kubernetes::monitoring::prometheus_rule
# The same test, without IDEMGATE_BLESS, fails in CI while it is out of date.
#
#   kubectl apply -f config/deploy/kubernetes-prometheusrule.yaml
# (the same file is config/deploy/kustomize/rules/prometheusrule.yaml, which
# the kustomize base and sidecar component include)
#
# The alert rules for the Prometheus Operator: spec.groups are exactly the
# groups of alerts.yml. They select job=\"idemgate\", the job the ServiceMonitor
# and the PodMonitor set. The Prometheus resource loads the PrometheusRules
# its ruleSelector matches (kube-prometheus-stack: usually the label
# `release: <helm release>`); add that label with a kustomize patch or
# `kubectl label prometheusrule idemgate release=…` rather than here.
";

/// The PrometheusRule document built from alerts.yml, as the file's text.
fn generated_prometheus_rule() -> String {
    let alerts = yaml_file(ALERTS);
    let keys: Vec<String> = alerts
        .as_mapping()
        .expect("alerts.yml is a mapping")
        .keys()
        .map(scalar)
        .collect();
    assert_eq!(keys, ["groups"], "{ALERTS}: only `groups` is carried over");
    let mut labels = Mapping::new();
    for (key, value) in LABELS {
        labels.insert(key.into(), value.into());
    }
    let mut metadata = Mapping::new();
    metadata.insert("name".into(), "idemgate".into());
    metadata.insert("labels".into(), Yaml::Mapping(labels));
    let mut spec = Mapping::new();
    spec.insert("groups".into(), at(&alerts, "groups").clone());
    let mut rule = Mapping::new();
    rule.insert("apiVersion".into(), MONITORING_API.into());
    rule.insert("kind".into(), "PrometheusRule".into());
    rule.insert("metadata".into(), Yaml::Mapping(metadata));
    rule.insert("spec".into(), Yaml::Mapping(spec));
    let body = serde_yaml::to_string(&Yaml::Mapping(rule)).expect("serialise the PrometheusRule");
    format!("{HEADER}---\n{body}")
}

/// `IDEMGATE_BLESS=1` rewrites the files; otherwise each must be exactly
/// what the generator makes of today's alerts.yml.
#[test]
fn prometheus_rule_is_generated_from_alerts_yml() {
    let expected = generated_prometheus_rule();
    for file in [PROMETHEUS_RULE, KUSTOMIZE_RULE] {
        assert_generated(file, &expected);
    }
}

fn assert_generated(file: &str, expected: &str) {
    let path = repo_path(file);
    if std::env::var_os(BLESS).is_some_and(|v| v == "1") {
        std::fs::write(&path, expected).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("{BLESS}=1: wrote {}", path.display());
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    if actual == expected {
        return;
    }
    let first_difference = actual
        .lines()
        .zip(expected.lines())
        .position(|(a, e)| a != e)
        .unwrap_or_else(|| actual.lines().count().min(expected.lines().count()));
    panic!(
        "{file} is out of sync with {ALERTS} (first difference at line {}:\n  \
         checked in: {:?}\n  generated:  {:?}).\nRegenerate it with\n  {REGENERATE}",
        first_difference + 1,
        actual
            .lines()
            .nth(first_difference)
            .unwrap_or("<end of file>"),
        expected
            .lines()
            .nth(first_difference)
            .unwrap_or("<end of file>"),
    );
}

/// The checked-in rule is a single PrometheusRule whose spec.groups equal
/// alerts.yml's groups, read back through a YAML parser (so the generator's
/// output is the same rules, not just the same text).
#[test]
fn prometheus_rule_spec_is_the_alert_groups() {
    let rule = yaml_file(PROMETHEUS_RULE);
    assert_eq!(str_at(&rule, "kind"), "PrometheusRule");
    assert_monitoring_resource(&rule, PROMETHEUS_RULE);
    assert_eq!(
        at(&rule, "spec.groups"),
        at(&yaml_file(ALERTS), "groups"),
        "{PROMETHEUS_RULE}: regenerate it with {REGENERATE}"
    );
}
