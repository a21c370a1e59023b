//! The alert rules and their runbooks: promtool checks and unit tests (of
//! alerts.yml and of the PrometheusRule generated from it), a
//! docs/runbooks.md section per `runbook_url`, and the parser checks behind them.

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

/// What every `runbook_url` is: the section of docs/runbooks.md, behind
/// the base a Prometheus supplies as its external label `idemgate_repo`
/// (empty without it), so no host is ever named in the rules.
const RUNBOOK_PREFIX: &str = "{{ $externalLabels.idemgate_repo }}docs/runbooks.md#";

/// The anchors of a Markdown file's headings.
fn heading_anchors(markdown: &str, level: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|line| line.strip_prefix(level))
        .map(heading_anchor)
        .collect()
}

/// Every alert's `runbook_url` in a rule file's `groups`, by alert name.
fn runbook_urls(groups: &serde_yaml::Value) -> Vec<(String, String)> {
    let mut urls = Vec::new();
    for group in groups.as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            let url = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has no runbook_url"));
            urls.push((name.to_owned(), url.to_owned()));
        }
    }
    urls
}

/// Every alert of alerts.yml and of the generated PrometheusRule links its
/// own section of docs/runbooks.md through the configurable base, names no
/// host, and every section of the page is some alert's runbook.
#[test]
fn every_alert_has_a_runbook_section_and_names_no_host() {
    let runbooks = std::fs::read_to_string(repo_path("docs/runbooks.md")).expect("runbooks.md");
    let sections = heading_anchors(&runbooks, "## ");
    let read_yaml = |relative: &str| -> serde_yaml::Value {
        let text = std::fs::read_to_string(repo_path(relative))
            .unwrap_or_else(|e| panic!("{relative}: {e}"));
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
    };
    let rules = read_yaml("config/prometheus/alerts.yml");
    let generated = read_yaml("config/deploy/kubernetes-prometheusrule.yaml");
    let mut linked = BTreeSet::new();
    for (file, groups) in [
        ("alerts.yml", &rules["groups"]),
        (
            "kubernetes-prometheusrule.yaml",
            &generated["spec"]["groups"],
        ),
    ] {
        let urls = runbook_urls(groups);
        assert!(urls.len() >= 12, "{file}: {} alerts", urls.len());
        for (name, url) in urls {
            assert!(
                !url.contains("://") && !url.contains("www."),
                "{file}: {name}: {url} names a host; the base is the external label"
            );
            let anchor = url.strip_prefix(RUNBOOK_PREFIX).unwrap_or_else(|| {
                panic!("{file}: {name}: {url} does not start with {RUNBOOK_PREFIX}")
            });
            assert!(
                sections.contains(anchor),
                "{file}: {name}: docs/runbooks.md has no section ## for #{anchor}"
            );
            linked.insert(anchor.to_owned());
        }
    }
    let orphans: Vec<_> = sections.difference(&linked).collect();
    assert!(orphans.is_empty(), "runbooks no alert links: {orphans:?}");
    assert!(
        runbooks.starts_with("# Runbooks\n"),
        "docs/runbooks.md has its title"
    );
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
