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
        assert!(!out.contains('$'), "unsubstituted variable in {out}");
        out
    }
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
            if panel["type"] != "row" {
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

/// Each `idemgate_*` selector of `expr`: (metric, matchers between braces).
fn selectors(expr: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("idemgate_") {
        let tail = &rest[start..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..name_len];
        let after = &tail[name_len..];
        let (matchers, consumed) = after
            .strip_prefix('{')
            .and_then(|m| m.split_once('}'))
            .map_or(("", 0), |(inside, _)| (inside, inside.len() + 2));
        found.push((name.to_owned(), matchers.to_owned()));
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
