//! The alert rules and their runbooks: promtool checks and unit tests (of
//! alerts.yml and of the PrometheusRule generated from it), a README
//! section per `runbook_url`, and the parser checks behind them.

use super::*;

#[test]
#[ignore = "needs promtool"]
fn promtool_accepts_the_alert_rules() {
    let rules = repo_path("config/prometheus/alerts.yml");
    let output = run_promtool(&["check", "rules", rules.to_str().expect("utf-8 path")]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("SUCCESS"), "{text}");

    // The shipped example configuration (loads alerts.yml next to it) and
    // the configuration the Prometheus test below generates.
    run_promtool(&[
        "check",
        "config",
        repo_path("config/prometheus/prometheus.yml")
            .to_str()
            .expect("utf-8 path"),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let generated = dir.path().join("prometheus.yml");
    std::fs::write(
        &generated,
        prometheus_config(SocketAddr::from(([127, 0, 0, 1], 9))),
    )
    .expect("write config");
    run_promtool(&["check", "config", generated.to_str().expect("utf-8 path")]);
}

/// The PrometheusRule for the Prometheus Operator: its `spec` is a rule
/// file. promtool accepts it, finds as many rules as in alerts.yml, and the
/// unit tests of alerts_test.yml pass against it.
#[test]
#[ignore = "needs promtool"]
fn promtool_accepts_the_generated_prometheus_rule() {
    let read_yaml = |relative: &str| -> serde_yaml::Value {
        let text = std::fs::read_to_string(repo_path(relative))
            .unwrap_or_else(|e| panic!("{relative}: {e}"));
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
    };
    let resource = read_yaml("config/deploy/kubernetes-prometheusrule.yaml");
    assert_eq!(resource["kind"], "PrometheusRule");
    let spec = &resource["spec"];
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("prometheus-rule-spec.yml");
    std::fs::write(&rules, serde_yaml::to_string(spec).expect("spec as YAML")).expect("write");
    let output = run_promtool(&["check", "rules", rules.to_str().expect("utf-8 path")]);
    let printed = String::from_utf8_lossy(&output.stdout);
    let count = |groups: &serde_yaml::Value| -> usize {
        groups
            .as_sequence()
            .expect("groups")
            .iter()
            .map(|group| group["rules"].as_sequence().map_or(0, Vec::len))
            .sum()
    };
    let expected = count(&read_yaml("config/prometheus/alerts.yml")["groups"]);
    assert_eq!(count(&spec["groups"]), expected);
    assert!(
        printed.contains(&format!("SUCCESS: {expected} rules found")),
        "{printed}"
    );

    // The unit tests of alerts.yml, run against the extracted spec.
    let tests = std::fs::read_to_string(repo_path("config/prometheus/alerts_test.yml"))
        .expect("alerts_test.yml");
    let retargeted = tests.replacen(
        "rule_files:\n  - alerts.yml\n",
        "rule_files:\n  - prometheus-rule-spec.yml\n",
        1,
    );
    assert_ne!(retargeted, tests, "alerts_test.yml loads alerts.yml");
    let tests_path = dir.path().join("alerts_test.yml");
    std::fs::write(&tests_path, retargeted).expect("write");
    let output = run_promtool(&["test", "rules", tests_path.to_str().expect("utf-8 path")]);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("SUCCESS"), "{printed}");
}

#[test]
#[ignore = "needs promtool"]
fn promtool_unit_tests_fire_the_upstream_eviction_inbox_and_hot_key_alerts() {
    let tests = repo_path("config/prometheus/alerts_test.yml");
    let text = std::fs::read_to_string(&tests).expect("alerts_test.yml");
    for alert in [
        "IdemgateUpstreamDown",
        "IdemgateStoreEvictionRisk",
        "IdemgateStoreEvictedKeys",
        "IdemgateInboxBacklogAging",
        "IdemgateInboxDeadDeliveries",
        "IdemgateInboxFull",
        "IdemgateInboxBooksUnbalanced",
        "IdemgateHitRateHigh",
        "IdemgateKeyRetryLoop",
    ] {
        assert!(
            text.contains(&format!("alertname: {alert}")),
            "alerts_test.yml has no case for {alert}"
        );
    }
    let output = run_promtool(&["test", "rules", tests.to_str().expect("utf-8 path")]);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("SUCCESS"), "{printed}");
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to `-`,
/// punctuation other than `-` and `_` dropped.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of the headings of the Markdown file at `path`.
fn heading_anchors(path: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_path(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| heading_anchor(heading.trim_start_matches('#')))
        .collect()
}

/// Every `runbook_url` names a heading of the README
/// (`https://github.com/idemgate/idemgate#<anchor>`) or of a page in the
/// repository (`…/blob/main/<path>#<anchor>`).
#[test]
fn every_alert_has_a_runbook_section_in_the_readme() {
    const BASE: &str = "https://github.com/idemgate/idemgate#";
    const PAGES: &str = "https://github.com/idemgate/idemgate/blob/main/";
    let anchors = heading_anchors("README.md");
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_path("config/prometheus/alerts.yml")).expect("alerts.yml"),
    )
    .expect("alerts.yml is YAML");
    let mut alerts = 0;
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let url = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has no runbook_url"));
            if let Some(page) = url.strip_prefix(PAGES) {
                let (path, anchor) = page
                    .split_once('#')
                    .unwrap_or_else(|| panic!("{name}: {url} names no section"));
                assert!(
                    heading_anchors(path).contains(anchor),
                    "{name}: {path} has no heading for #{anchor}"
                );
                continue;
            }
            let anchor = url
                .strip_prefix(BASE)
                .unwrap_or_else(|| panic!("{name}: {url} does not start with {BASE}"));
            assert!(
                anchors.contains(anchor),
                "{name}: README.md has no heading for #{anchor}"
            );
        }
    }
    assert!(alerts >= 12, "{alerts} alerts");
    assert_eq!(
        heading_anchor(" Store may evict keys"),
        "store-may-evict-keys"
    );
}

#[test]
fn exposition_parser_and_threshold_split() {
    let sample =
        parse_sample(r#"m_total{a="x\"y",b="c\\d\ne",le="+Inf"} 12.5 1700000000000"#).unwrap();
    assert_eq!(sample.name, "m_total");
    assert_eq!(sample.labels["a"], "x\"y");
    assert_eq!(sample.labels["b"], "c\\d\ne");
    assert_eq!(sample.value, 12.5);
    assert_eq!(parse_sample("up 1").unwrap().labels.len(), 0);
    assert!(parse_sample("m{a=\"x} 1").is_err());
    assert!(parse_sample("m{a=\"1\",a=\"2\"} 1").is_err());
    assert!(parse_sample("m{} NaN").unwrap().value.is_nan());

    assert_eq!(threshold_lhs("up{job=\"x\"} == 0"), "up{job=\"x\"}");
    assert_eq!(
        threshold_lhs("sum(rate(a{r=~\"x|y\",s!=\">\"}[5m])) / sum(b) > 0.5"),
        "sum(rate(a{r=~\"x|y\",s!=\">\"}[5m])) / sum(b)"
    );
    assert_eq!(
        threshold_lhs("histogram_quantile(0.99, x) >= 1e-3"),
        "histogram_quantile(0.99, x)"
    );
}
