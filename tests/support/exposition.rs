//! The admin listener's `/metrics`: [`sample`] for one series by its text,
//! and a strict parser of the Prometheus text exposition format
//! ([`Exposition`]) for exact-value checks.
//!
//! Hand-written on purpose: it rejects what a scraper would (bad names,
//! escapes, duplicated series) and keeps `_bucket`/`_sum`/`_count` as the
//! plain series the assertions name; `prometheus-parse` skips lines it
//! cannot match and folds histograms into one value, so the contract tests
//! would check less and read no simpler.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use super::{admin_get, http_get};

/// The value of the sample `series` (a name, with its labels if it has
/// any) in the admin listener's `/metrics`, if present.
pub async fn metric(admin: SocketAddr, series: &str) -> Option<f64> {
    let (status, text) = admin_get(admin, "/metrics").await;
    assert_eq!(status, 200, "/metrics: {text}");
    sample(&text, series)
}

/// The value of one sample line (`name{labels} value`) in a Prometheus
/// text exposition, matched on its full series text.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// A numeric sample value as Prometheus writes it.
pub fn parse_float(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

pub type Labels = BTreeMap<String, String>;

/// One sample line: `name{l1="v1",…} value [timestamp]`.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

/// A parsed `/metrics` answer.
#[derive(Debug)]
pub struct Exposition {
    pub samples: Vec<Sample>,
}

pub fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

/// Parses one sample line.
pub fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_ascii_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .enumerate()
            .all(|(i, c)| is_name_char(c, i == 0))
    {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut labels = Labels::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let close = loop {
            while chars.next_if(|(_, c)| *c == ',' || *c == ' ').is_some() {}
            let Some(&(start, c)) = chars.peek() else {
                return Err("unterminated label set".into());
            };
            if c == '}' {
                break start;
            }
            let mut label = String::new();
            while let Some((_, c)) = chars.next_if(|(_, c)| is_name_char(*c, false)) {
                label.push(c);
            }
            if label.is_empty() || !is_name_char(label.chars().next().unwrap_or('0'), true) {
                return Err(format!("bad label name at byte {start}"));
            }
            if chars.next().map(|(_, c)| c) != Some('=')
                || chars.next().map(|(_, c)| c) != Some('"')
            {
                return Err(format!("label {label} is not followed by =\""));
            }
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    None => return Err(format!("unterminated value of label {label}")),
                    Some('"') => break,
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => return Err(format!("bad escape \\{other:?} in label {label}")),
                    },
                    Some(c) => value.push(c),
                }
            }
            if labels.insert(label.clone(), value).is_some() {
                return Err(format!("label {label} appears twice"));
            }
        };
        rest = &inner[close + 1..];
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = parse_float(value).ok_or_else(|| format!("bad value {value:?}"))?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

impl Exposition {
    /// Parses a whole exposition, skipping comments and blank lines;
    /// panics on a malformed line or a duplicated series.
    pub fn parse(text: &str) -> Self {
        let mut samples = Vec::new();
        let mut seen = BTreeSet::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let sample =
                parse_sample(line).unwrap_or_else(|e| panic!("bad metrics line {line:?}: {e}"));
            assert!(
                seen.insert((sample.name.clone(), sample.labels.clone())),
                "series exposed twice: {line}"
            );
            samples.push(sample);
        }
        Self { samples }
    }

    pub fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// The value of the series with exactly these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted = labels_of(labels);
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == wanted)
            .map(|s| s.value)
    }

    /// Every series in `expected` exists with exactly that value, and every
    /// other series of `name` is 0.
    pub fn assert_series(&self, name: &str, expected: &BTreeMap<Labels, f64>) {
        let present: BTreeMap<Labels, f64> = self
            .series(name)
            .into_iter()
            .map(|s| (s.labels.clone(), s.value))
            .collect();
        for (labels, want) in expected {
            let got = present.get(labels);
            assert_eq!(
                got,
                Some(want),
                "{name}{labels:?}: expected {want}, got {got:?}; exposed: {present:#?}"
            );
        }
        for (labels, got) in &present {
            if !expected.contains_key(labels) {
                assert_eq!(*got, 0.0, "{name}{labels:?} = {got}, expected no events");
            }
        }
    }
}

pub fn labels_of(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub async fn scrape(admin: SocketAddr) -> Exposition {
    let (status, text) = http_get(&format!("http://{admin}/metrics"))
        .await
        .expect("GET /metrics");
    assert_eq!(status, 200, "/metrics answered {status}: {text}");
    Exposition::parse(&text)
}
