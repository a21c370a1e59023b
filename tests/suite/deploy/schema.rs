//! The strict schema check of every Kubernetes manifest the repository
//! ships, as a file (`config/deploy/*.yaml`) or as kustomize renders it
//! (`kustomize.rs`).
//!
//! The checker is `kubernetes-validate --strict` (PyPI, pinned in
//! `.ci/requirements-kubernetes.txt`, installed by `.ci/run` into
//! `target/ci-python`): the Kubernetes OpenAPI schemas it bundles, with
//! every object closed (an unknown or misspelt field is an error, as
//! `kubectl apply --validate=strict` makes it), wrong types and missing
//! required fields too. The Prometheus Operator's kinds
//! (`monitoring.coreos.com`) have no schema there and none can be fetched
//! offline: they are checked field by field in `kubernetes/monitoring.rs`
//! and `kustomize.rs` instead. Any other kind it cannot find a schema for
//! fails the check (a misspelt apiVersion would otherwise pass).

use super::*;

/// The pinned checker's version: the Kubernetes release whose schemas it
/// checks against.
const KUBERNETES_VERSION: &str = "1.37.0";
/// API groups without a schema in the checker (see the module doc).
const UNCHECKED_GROUPS: [&str; 1] = ["monitoring.coreos.com/"];

/// The checker: IDEMGATE_KUBERNETES_VALIDATE, else the one `.ci/run`
/// installs, else `kubernetes-validate` on PATH.
fn validator() -> PathBuf {
    if let Some(path) = std::env::var_os("IDEMGATE_KUBERNETES_VALIDATE") {
        return PathBuf::from(path);
    }
    let installed = repo_path("target/ci-python/bin/kubernetes-validate");
    if installed.exists() {
        return installed;
    }
    PathBuf::from("kubernetes-validate")
}

/// Every document of `documents` (from `origin`) passes the strict schema
/// check, except the kinds of UNCHECKED_GROUPS.
pub(super) fn assert_strictly_valid(origin: &str, documents: &[Yaml]) {
    let checked: Vec<&Yaml> = documents
        .iter()
        .filter(|document| {
            let api = str_at(document, "apiVersion");
            !UNCHECKED_GROUPS.iter().any(|group| api.starts_with(group))
        })
        .collect();
    assert!(!checked.is_empty(), "{origin}: nothing to check");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.yaml");
    let text: String = checked
        .iter()
        .map(|document| format!("---\n{}", serde_yaml::to_string(document).unwrap()))
        .collect();
    std::fs::write(&path, text).unwrap();
    let output = Command::new(validator())
        .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: the strict schema check needs kubernetes-validate; \
                 .ci/run installs it (pip install -r .ci/requirements-kubernetes.txt)",
                validator().display()
            )
        });
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{origin}: the strict schema check failed:\n{report}"
    );
    // One "passed" per document, and no kind left unchecked.
    let passed = report
        .lines()
        .filter(|l| l.contains(" passed for "))
        .count();
    assert_eq!(passed, checked.len(), "{origin}:\n{report}");
    assert!(!report.contains("WARN"), "{origin}:\n{report}");
}

/// The checker itself rejects what it must: an unknown field, a wrong
/// type, an unknown kind. Without this, a checker that passed everything
/// would make every test here pass.
#[test]
#[ignore = "needs kubernetes-validate (.ci/run installs it)"]
fn schema_check_rejects_unknown_fields_wrong_types_and_kinds() {
    let deployment = yaml_documents(KUBERNETES_FILES[0])
        .into_iter()
        .find(|document| str_at(document, "kind") == "Deployment")
        .unwrap();
    assert_strictly_valid("the Deployment", std::slice::from_ref(&deployment));
    let text = serde_yaml::to_string(&deployment).unwrap();
    for (what, broken) in [
        (
            "an unknown field",
            text.replacen("replicas:", "replicaz:", 1),
        ),
        (
            "a wrong type",
            text.replacen("replicas: 2", "replicas: two", 1),
        ),
        (
            "an unknown kind",
            text.replacen("kind: Deployment", "kind: Deploymnet", 1),
        ),
    ] {
        assert_ne!(broken, text, "{what}: the edit did not apply");
        let document: Yaml = serde_yaml::from_str(&broken).unwrap();
        let refused = std::panic::catch_unwind(|| assert_strictly_valid(what, &[document]));
        assert!(refused.is_err(), "the schema check accepted {what}");
    }
}

/// The manifests shipped as plain files.
const KUBERNETES_FILES: [&str; 4] = [
    "config/deploy/kubernetes.yaml",
    "config/deploy/kubernetes-servicemonitor.yaml",
    "config/deploy/kubernetes-podmonitor.yaml",
    "config/deploy/kubernetes-prometheusrule.yaml",
];

#[test]
#[ignore = "needs kubernetes-validate (.ci/run installs it)"]
fn kubernetes_files_pass_the_strict_schema_check() {
    let mut checked = 0;
    for file in KUBERNETES_FILES {
        let documents = yaml_documents(file);
        let has_core = documents.iter().any(|document| {
            !UNCHECKED_GROUPS
                .iter()
                .any(|group| str_at(document, "apiVersion").starts_with(group))
        });
        if has_core {
            assert_strictly_valid(file, &documents);
            checked += 1;
        }
    }
    assert_eq!(
        checked, 2,
        "kubernetes.yaml and the ServiceMonitor's Service"
    );
}
