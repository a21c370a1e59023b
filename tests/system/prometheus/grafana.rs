//! The bundled Grafana dashboard (`config/grafana/idemgate.json`) as data:
//! its template variables, every panel query with the variables substituted
//! the way Grafana substitutes them, and the conventions every query
//! follows (the datasource variable; the job, namespace and instance
//! filters, so one dashboard serves several deployments scraped by one
//! Prometheus, with or without a `namespace` label).

use super::*;

const DASHBOARD: &str = "config/grafana/idemgate.json";

/// The matchers every idemgate selector of every panel carries.
const FILTERS: [&str; 3] = [
    r#"job=~"$job""#,
    r#"namespace=~"$namespace""#,
    r#"instance=~"$instance""#,
];

/// Values of the dashboard's variables, as Grafana writes them into the
/// `=~` matchers: regular expressions, `.*` for "All".
pub(super) struct Vars {
    job: String,
    namespace: String,
    instance: String,
    route: String,
}

impl Vars {
    /// Every variable at "All".
    pub(super) fn all() -> Self {
        Self {
            job: ".*".into(),
            namespace: ".*".into(),
            instance: ".*".into(),
            route: ".*".into(),
        }
    }

    /// One job and one instance (its address regex-escaped, as Grafana
    /// escapes a selected value); namespace and route at "All".
    pub(super) fn one(job: &str, instance: SocketAddr) -> Self {
        Self {
            job: job.into(),
            instance: instance.to_string().replace('.', r"\\."),
            ..Self::all()
        }
    }

    /// `expr` with every variable replaced; panics if one is left.
    fn substitute(&self, expr: &str) -> String {
        let mut out = expr.replace("$__rate_interval", "1m");
        for (name, value) in [
            ("job", &self.job),
            ("namespace", &self.namespace),
            ("instance", &self.instance),
            ("route", &self.route),
        ] {
            out = out
                .replace(&format!("${{{name}}}"), value)
                .replace(&format!("${name}"), value);
        }
        for (name, value) in textbox_defaults() {
            out = out.replace(&format!("${name}"), &value);
        }
        assert!(!out.contains('$'), "unsubstituted variable in {out}");
        out
    }
}

/// The dashboard's text-box variables and their default values (the
/// memory limit the process row divides by, the runbook base URL).
fn textbox_defaults() -> Vec<(String, String)> {
    dashboard()["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|variable| variable["type"] == "textbox")
        .map(|variable| {
            let name = variable["name"].as_str().expect("variable name");
            let value = variable["query"].as_str().expect("a default value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo_path(DASHBOARD)).expect("read the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every `targets[].expr` of every panel (rows included), as written, with
/// its panel's title; checks that panels and targets use the datasource
/// variable and that every panel has a description.
fn dashboard_queries() -> Vec<(String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("?").to_owned();
            assert!(
                panel["description"].as_str().is_some_and(|d| !d.is_empty()),
                "panel {title:?} has no description"
            );
            for target in panel["targets"].as_array().into_iter().flatten() {
                assert_eq!(
                    target["datasource"]["uid"], "${datasource}",
                    "panel {title:?}: targets use the datasource variable"
                );
                let expr = target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("panel {title:?}: target without expr"));
                out.push((title.clone(), expr.to_owned()));
            }
            if panel["type"] == "alertlist" {
                // Lists the alerts of the chosen data source; no query.
                assert_eq!(
                    panel["options"]["datasource"], "${datasource}",
                    "panel {title:?} lists the alerts of the datasource variable"
                );
            } else if panel["type"] != "row" {
                assert_eq!(
                    panel["datasource"]["uid"], "${datasource}",
                    "panel {title:?} uses the datasource variable"
                );
            }
            if let Some(children) = panel["panels"].as_array() {
                walk(children, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        dashboard()["panels"].as_array().expect("dashboard panels"),
        &mut out,
    );
    out
}

/// Every panel expression with `vars` substituted: (panel title, PromQL).
pub(super) fn dashboard_expressions(vars: &Vars) -> Vec<(String, String)> {
    dashboard_queries()
        .into_iter()
        .map(|(title, expr)| (title, vars.substitute(&expr)))
        .collect()
}

/// A `label_values(…)` query variable.
pub(super) struct Variable {
    /// The variable's name (`job`, `namespace`, …).
    pub(super) name: String,
    /// The series selector, as written.
    selector: String,
    /// The label whose values it lists.
    pub(super) label: String,
}

impl Variable {
    /// The Prometheus API path Grafana's `label_values` turns into.
    pub(super) fn api_path(&self, vars: &Vars) -> String {
        let selector: String =
            form_urlencoded::byte_serialize(vars.substitute(&self.selector).as_bytes()).collect();
        format!("/api/v1/label/{}/values?match[]={selector}", self.label)
    }
}

/// The query variables in dashboard order; each one allows "All" as `.*`
/// (which also matches series without the label: no `namespace` outside
/// Kubernetes) and several values.
pub(super) fn dashboard_variables() -> Vec<Variable> {
    let dashboard = dashboard();
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|variable| variable["type"] == "query")
        .map(|variable| {
            let name = variable["name"].as_str().expect("variable name").to_owned();
            assert_eq!(variable["includeAll"], true, "{name}: includeAll");
            assert_eq!(variable["allValue"], ".*", "{name}: allValue");
            assert_eq!(variable["multi"], true, "{name}: multi");
            assert_eq!(variable["datasource"]["uid"], "${datasource}", "{name}");
            let query = variable["query"]["query"].as_str().expect("variable query");
            assert_eq!(variable["definition"].as_str(), Some(query), "{name}");
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{name}: not label_values(…): {query}"));
            let (selector, label) = inner
                .rsplit_once(',')
                .unwrap_or_else(|| panic!("{name}: label_values without a selector: {query}"));
            Variable {
                name,
                selector: selector.trim().to_owned(),
                label: label.trim().to_owned(),
            }
        })
        .collect()
}

/// Whether `name` is a series the dashboard reads from idemgate's targets:
/// its own metrics, the process metrics it exports, and the targets' `up`.
fn is_idemgate_series(name: &str, selector_follows: bool) -> bool {
    name.starts_with("idemgate_")
        || name.starts_with("process_")
        || (name == "up" && selector_follows)
}

/// Each selector of an idemgate series in `expr` (see
/// [`is_idemgate_series`]): (metric, matchers between braces).
fn selectors(expr: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        let tail = &rest[start..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..name_len];
        let after = &tail[name_len..];
        let braces = after
            .strip_prefix('{')
            .and_then(|m| m.split_once('}'))
            .map(|(inside, _)| inside);
        let consumed = braces.map_or(0, |inside| inside.len() + 2);
        if is_idemgate_series(name, braces.is_some()) {
            found.push((name.to_owned(), braces.unwrap_or_default().to_owned()));
        }
        rest = &after[consumed..];
    }
    found
}

#[test]
fn every_dashboard_query_filters_by_job_namespace_and_instance() {
    let variables = dashboard_variables();
    let names: Vec<&str> = variables.iter().map(|v| v.name.as_str()).collect();
    // Each variable narrows the next one's choices.
    assert_eq!(names, ["job", "namespace", "instance", "route"]);
    for (i, variable) in variables.iter().enumerate() {
        assert_eq!(variable.label, variable.name);
        for filter in &FILTERS[..i.min(FILTERS.len())] {
            assert!(
                variable.selector.contains(filter),
                "variable {}: {} lacks {filter}",
                variable.name,
                variable.selector
            );
        }
    }

    let queries = dashboard_queries();
    let mut checked = 0;
    for (panel, expr) in &queries {
        let found = selectors(expr);
        assert!(
            !found.is_empty(),
            "panel {panel:?}: no idemgate metric in {expr}"
        );
        for (metric, matchers) in found {
            checked += 1;
            for filter in FILTERS {
                assert!(
                    matchers.contains(filter),
                    "panel {panel:?}: {metric}{{{matchers}}} lacks {filter}"
                );
            }
        }
    }
    assert!(checked >= 25, "{checked} selectors checked");

    assert_eq!(
        selectors(r#"sum(a{x="}"}) / idemgate_b{c="d"} + idemgate_e[5m]"#),
        [
            ("idemgate_b".to_owned(), r#"c="d""#.to_owned()),
            ("idemgate_e".to_owned(), String::new())
        ]
    );
    assert_eq!(
        selectors(r#"count(up{j="k"}) - sum by (up) (process_open_fds{l="m"})"#),
        [
            ("up".to_owned(), r#"j="k""#.to_owned()),
            ("process_open_fds".to_owned(), r#"l="m""#.to_owned())
        ]
    );
    let one = Vars::one("idemgate", SocketAddr::from(([127, 0, 0, 1], 8790)));
    assert_eq!(
        one.substitute(r#"m{job=~"$job",instance=~"${instance}"}[$__rate_interval]"#),
        r#"m{job=~"idemgate",instance=~"127\\.0\\.0\\.1:8790"}[1m]"#
    );
}

/// The table of the hot keys: two instant table queries (deliveries and
/// duplicates of the same top 10 keys) merged into the columns route, key,
/// deliveries, duplicates.
#[test]
fn hot_keys_table_shows_route_key_deliveries_and_duplicates() {
    let dashboard = dashboard();
    let panel = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| p["title"] == "Hot keys (top 10)")
        .expect("a panel \"Hot keys (top 10)\"");
    assert_eq!(panel["type"], "table");
    let targets = panel["targets"].as_array().expect("targets");
    let metrics = ["idemgate_hot_key_deliveries", "idemgate_hot_key_duplicates"];
    assert_eq!(targets.len(), metrics.len());
    for (target, metric) in targets.iter().zip(metrics) {
        assert_eq!(target["instant"], true, "{metric}: instant query");
        assert_eq!(target["range"], false, "{metric}: instant query");
        assert_eq!(target["format"], "table", "{metric}");
        let expr = target["expr"].as_str().expect("expr");
        assert!(
            expr.contains(metric) && expr.contains("topk(10,"),
            "{metric}: {expr}"
        );
        assert!(expr.contains("by (route, key)"), "{expr}");
    }
    let organize = panel["transformations"]
        .as_array()
        .expect("transformations")
        .iter()
        .find(|t| t["id"] == "organize")
        .expect("an organize transformation");
    let order = &organize["options"]["indexByName"];
    let rename = &organize["options"]["renameByName"];
    let mut columns: Vec<(u64, String)> = order
        .as_object()
        .expect("indexByName")
        .iter()
        .map(|(field, index)| {
            let shown = rename[field].as_str().unwrap_or(field).to_owned();
            (index.as_u64().expect("index"), shown)
        })
        .collect();
    columns.sort();
    let columns: Vec<&str> = columns.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(columns, ["route", "key", "deliveries", "duplicates"]);
}

/// The titles of the first row's panels, in order: what needs a person,
/// then the alerts firing.
const FIRST_ROW: [&str; 8] = [
    "Targets up",
    "5xx seen by senders (5m)",
    "p99 latency (5m)",
    "Unknown outcomes (24h)",
    "Dead deliveries",
    "Eviction risk",
    "Store errors (5m)",
    "Alerts firing and pending",
];

/// The anchors the alerts' `runbook_url`s name (after `#`).
fn alert_runbook_anchors() -> BTreeSet<String> {
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_path("config/prometheus/alerts.yml")).expect("alerts.yml"),
    )
    .expect("alerts.yml is YAML");
    rules["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_sequence().expect("rules").iter())
        .filter_map(|rule| rule["annotations"]["runbook_url"].as_str())
        .filter_map(|url| url.split_once('#').map(|(_, anchor)| anchor.to_owned()))
        .collect()
}

/// The dashboard opens on trouble: a first row of stats, each turning
/// red on its own and linking to its runbook under the `runbook_base`
/// variable, and the alert list; then the detail rows, the process row
/// last.
#[test]
fn the_first_row_leads_with_trouble_and_links_runbooks() {
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert_eq!(panels[0]["type"], "row", "the dashboard opens with a row");
    let first: Vec<&Value> = panels[1..]
        .iter()
        .take_while(|panel| panel["type"] != "row")
        .collect();
    let titles: Vec<&str> = first.iter().filter_map(|p| p["title"].as_str()).collect();
    assert_eq!(titles, FIRST_ROW);
    for panel in &first {
        let y = panel["gridPos"]["y"].as_u64().expect("gridPos.y");
        assert!(y <= 6, "{}: on the first screen (y = {y})", panel["title"]);
    }

    let anchors = alert_runbook_anchors();
    for panel in first.iter().filter(|p| p["type"] == "stat") {
        let title = panel["title"].as_str().expect("title");
        let links = panel["links"].as_array().expect("links");
        let url = links
            .iter()
            .find(|link| link["title"] == "Runbook")
            .and_then(|link| link["url"].as_str())
            .unwrap_or_else(|| panic!("{title}: no Runbook link"));
        let anchor = url
            .strip_prefix("${runbook_base}docs/runbooks.md#")
            .unwrap_or_else(|| {
                panic!("{title}: {url} is not under ${{runbook_base}}docs/runbooks.md")
            });
        assert!(
            anchors.contains(anchor),
            "{title}: #{anchor} is no alert's runbook ({anchors:?})"
        );
        let steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"].as_array();
        let overrides = panel["fieldConfig"]["overrides"].to_string();
        assert!(
            steps.is_some_and(|s| s.len() >= 2) || overrides.contains("red"),
            "{title}: turns a colour on trouble"
        );
    }
    let alerts = first
        .iter()
        .find(|p| p["type"] == "alertlist")
        .expect("an alert list on the first screen");
    assert_eq!(alerts["options"]["alertName"], "Idemgate");
    let base = textbox_defaults()
        .into_iter()
        .find(|(name, _)| name == "runbook_base")
        .expect("a runbook_base text variable");
    // No host is named by default: the operator sets where runbooks live.
    assert_eq!(base.1, "", "{base:?}");

    // The process row, last: CPU, memory against the limit, descriptors.
    let last_row = panels
        .iter()
        .rposition(|p| p["type"] == "row")
        .expect("rows");
    assert_eq!(panels[last_row]["title"], "Process");
    let exprs: Vec<String> = panels[last_row + 1..]
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    for needle in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes{",
        "$memory_limit_bytes",
        "process_open_fds{",
        "process_max_fds{",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(needle)),
            "the process row reads {needle}: {exprs:?}"
        );
    }
}
