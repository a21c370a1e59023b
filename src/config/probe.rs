//! `[route.probe]`: how an unknown outcome asks the handler whether it
//! applied the delivery (`crate::probe` has the runtime).
//!
//! The handler is asked with a request idemgate builds from the delivery
//! (`path` is a template of literal text and `{selector}` values read from
//! the verified delivery, percent-encoded), no earlier than `start_after`
//! after the call ended. idemgate can not know when a handler gives up on
//! a request it is still working on, so the operator declares it
//! (`handler_deadline`), and a probe that could start before the upstream
//! timeout plus that deadline is refused: asked too early, a handler still
//! working would answer "not applied" and the retry would run twice.

use std::time::Duration;

use http::Method;

use serde::{Deserialize, Serialize};

use super::duration::{ConfigDuration, format_duration};
use super::problems::Problems;
use super::{Segment, Selector, Template};
use crate::signature::Secret;

/// `[route.probe]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawProbe {
    /// Method (default GET).
    pub method: Option<String>,
    /// Path and query template on the route's upstream.
    pub path: String,
    /// Extra headers, `"Name: value"`.
    pub headers: Option<Vec<String>>,
    /// When the handler gives up on a request at the latest. Required;
    /// an `Option` because the reader's stand-ins for a missing key are
    /// plain TOML values and none reads as a duration: the validator
    /// requires it instead, beside every other problem of the file.
    pub handler_deadline: Option<ConfigDuration>,
    /// Delay after the call ended (default upstream timeout + deadline).
    pub start_after: Option<ConfigDuration>,
    /// Pause between attempts.
    pub retry_every: Option<ConfigDuration>,
    /// Attempts at most.
    pub max_attempts: Option<u32>,
    /// Time allowed per attempt.
    pub timeout: Option<ConfigDuration>,
    /// Probes of this route in flight at once, per instance.
    pub concurrency: Option<u32>,
    /// Statuses meaning applied.
    pub applied_status: Option<Vec<u16>>,
    /// Statuses meaning not applied.
    pub not_applied_status: Option<Vec<u16>>,
    /// A field of the answer that decides.
    pub field: Option<String>,
    /// Field values meaning applied.
    pub applied: Option<Vec<String>>,
    /// Field values meaning not applied.
    pub not_applied: Option<Vec<String>>,
    /// `"ack"` or `"probe"`: what duplicates of an applied record get.
    pub answer: Option<ProbeAnswer>,
}

/// The sources a header value may name instead of the value itself.
const SECRET_SOURCES: [&str; 3] = ["env:", "file:", "literal:"];

/// Most probes of one route in flight at once, per instance.
const MAX_CONCURRENCY: u32 = 256;

/// What a resolved "applied" record answers duplicates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// The route's acknowledgement (`[route.inbox]` or `[route.entity]`).
    Ack,
    /// The probe's own answer (status, content type and body).
    Probe,
}

super::choice::choices! {
    ProbeAnswer { "ack" => Ack, "probe" => Probe }
}

/// `[route.probe]`, validated.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Method of the probe request.
    pub method: Method,
    /// Path and query on the route's upstream, with `{selector}` values.
    pub path: Template,
    /// Extra request headers; a value may come from a secret source
    /// (`env:`, `file:`, `literal:`), and every value prints redacted.
    pub headers: Vec<(String, Secret)>,
    /// The handler's declared deadline: it gives up on a request by then.
    pub handler_deadline: Duration,
    /// How long after the original call ended the first probe is sent.
    pub start_after: Duration,
    /// Pause between attempts that could not tell.
    pub retry_every: Duration,
    /// Attempts at most.
    pub max_attempts: u32,
    /// Time allowed for one probe's whole answer.
    pub timeout: Duration,
    /// Probes of this route in flight at once, per instance.
    pub concurrency: u32,
    /// Statuses that mean "applied" (subject to `field`).
    pub applied_status: Vec<u16>,
    /// Statuses that mean "not applied".
    pub not_applied_status: Vec<u16>,
    /// A field of the probe's answer that decides, with its values.
    pub field: Option<Selector>,
    /// `field` values meaning "applied".
    pub applied: Vec<String>,
    /// `field` values meaning "not applied".
    pub not_applied: Vec<String>,
    /// What an "applied" record answers duplicates with.
    pub answer: ProbeAnswer,
}

/// Validates `raw` (route `key`'s `[route.probe]`) against the route's
/// upstream timeout and `unknown_hold`; `has_ack` says whether the route
/// has an acknowledgement for `answer = "ack"` (the default when it has).
pub(super) fn probe(
    problems: &mut Problems,
    key: &str,
    raw: Option<&RawProbe>,
    (upstream_timeout, unknown_hold, has_ack): (Duration, Duration, bool),
) -> Option<Probe> {
    let raw = raw?;
    let key = format!("{key}.probe");
    let at = |name: &str| format!("{key}.{name}");
    let method = raw.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let method = problems
        .take(
            &at("method"),
            Method::from_bytes(method.as_bytes())
                .map_err(|_| format!("{method:?} is not a method")),
        )
        .unwrap_or(Method::GET);
    let path = problems.take(&at("path"), path_template(&raw.path));
    let deadline_key = at("handler_deadline");
    let handler_deadline = match raw.handler_deadline {
        Some(deadline) => deadline.get(),
        None => {
            if !problems.failed(&deadline_key) {
                problems.push(
                    &deadline_key,
                    "is required: the longest the handler works on one request",
                );
            }
            Duration::ZERO
        }
    };
    let earliest = upstream_timeout + handler_deadline;
    let start_after = raw.start_after.map_or(earliest, ConfigDuration::get);
    if start_after < earliest {
        problems.push_derived(
            &at("start_after"),
            &[&deadline_key],
            format!(
                "{} would probe before the upstream timeout ({}) plus handler_deadline ({}): a handler still working would answer \"not applied\" and the retry would run twice",
                format_duration(start_after),
                format_duration(upstream_timeout),
                format_duration(handler_deadline)
            ),
        );
    }
    let retry_every = raw
        .retry_every
        .map_or(Duration::from_secs(10), ConfigDuration::get);
    let max_attempts = raw.max_attempts.unwrap_or(3);
    if !(1..=100).contains(&max_attempts) {
        problems.push(&at("max_attempts"), format!("{max_attempts} must be 1-100"));
    }
    let timeout = raw
        .timeout
        .map_or(Duration::from_secs(2), ConfigDuration::get);
    let concurrency = raw.concurrency.unwrap_or(4);
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        problems.push(
            &at("concurrency"),
            format!("{concurrency} must be 1-{MAX_CONCURRENCY}"),
        );
    }
    let last = start_after + retry_every * max_attempts.saturating_sub(1) + timeout;
    if last >= unknown_hold {
        problems.push(
            &at("start_after"),
            format!(
                "the last attempt could end {} after the call, not before unknown_hold ({}) ends: the record it would resolve is gone by then",
                format_duration(last),
                format_duration(unknown_hold)
            ),
        );
    }
    let field = raw
        .field
        .as_deref()
        .and_then(|text| problems.take(&at("field"), Selector::parse(text)));
    let (applied, not_applied) = (
        raw.applied.clone().unwrap_or_default(),
        raw.not_applied.clone().unwrap_or_default(),
    );
    if field.is_some() && applied.is_empty() {
        problems.push(
            &at("applied"),
            "must list the field's values meaning applied",
        );
    }
    if field.is_none() && !(applied.is_empty() && not_applied.is_empty()) {
        problems.push(
            &at("field"),
            "applied and not_applied values need a field to read",
        );
    }
    let applied_status = raw.applied_status.clone().unwrap_or_else(|| vec![200]);
    let not_applied_status = raw.not_applied_status.clone().unwrap_or_else(|| vec![404]);
    if let Some(both) = applied_status
        .iter()
        .find(|s| not_applied_status.contains(s))
    {
        if field.is_none() {
            problems.push(
                &at("not_applied_status"),
                format!("{both} also means applied: only a field could tell them apart"),
            );
        }
    }
    let answer = raw.answer.unwrap_or(if has_ack {
        ProbeAnswer::Ack
    } else {
        ProbeAnswer::Probe
    });
    if answer == ProbeAnswer::Ack && !has_ack {
        problems.push(
            &at("answer"),
            "\"ack\" needs an acknowledgement ([route.inbox] or [route.entity] ack_*)",
        );
    }
    Some(Probe {
        method,
        path: path?,
        headers: headers(
            problems,
            &at("headers"),
            raw.headers.as_deref().unwrap_or_default(),
        ),
        handler_deadline,
        start_after,
        retry_every,
        max_attempts,
        timeout,
        concurrency,
        applied_status,
        not_applied_status,
        field,
        applied,
        not_applied,
        answer,
    })
}

/// `"Name: value"` lines, each a valid header; a value written
/// `env:NAME`, `file:PATH` or `literal:VALUE` is read from that source.
fn headers(problems: &mut Problems, key: &str, lines: &[String]) -> Vec<(String, Secret)> {
    lines
        .iter()
        .filter_map(|line| {
            let Some((name, value)) = line.split_once(':') else {
                problems.push(key, "a header line is written \"Name: value\"");
                return None;
            };
            let (name, value) = (name.trim(), value.trim());
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problems.push(key, format!("{name:?} is not a header name"));
                return None;
            }
            let secret = if SECRET_SOURCES.iter().any(|s| value.starts_with(s)) {
                problems.take(key, Secret::resolve(value))?
            } else {
                Secret::from_bytes(value)
            };
            if http::HeaderValue::from_bytes(&secret.expose()).is_err() {
                // Never the value: it may be a credential.
                problems.push(key, format!("the value of {name} is not a header value"));
                return None;
            }
            Some((name.to_owned(), secret))
        })
        .collect()
}

/// A path template: it starts with `/`, and only literal text and
/// `{selector}` values (no body, method, path or timestamp).
fn path_template(text: &str) -> Result<Template, String> {
    if !text.starts_with('/') {
        return Err(format!(
            "{text:?} must start with / (a path on the route's upstream)"
        ));
    }
    let template = Template::parse(text)?;
    for segment in &template.segments {
        if !matches!(segment, Segment::Literal(_) | Segment::Value(_)) {
            return Err(format!(
                "{text:?}: only literal text and {{selector}} values may appear in a probe path"
            ));
        }
    }
    Ok(template)
}

impl Probe {
    /// The table as `check-config` prints it.
    pub(super) fn to_raw(&self) -> RawProbe {
        RawProbe {
            method: Some(self.method.to_string()),
            path: self.path.to_string(),
            headers: Some(
                self.headers
                    .iter()
                    .map(|(name, value)| format!("{name}: {}", printed(value)))
                    .collect(),
            ),
            handler_deadline: Some(self.handler_deadline.into()),
            start_after: Some(self.start_after.into()),
            retry_every: Some(self.retry_every.into()),
            max_attempts: Some(self.max_attempts),
            timeout: Some(self.timeout.into()),
            concurrency: Some(self.concurrency),
            applied_status: Some(self.applied_status.clone()),
            not_applied_status: Some(self.not_applied_status.clone()),
            field: self.field.as_ref().map(ToString::to_string),
            applied: Some(self.applied.clone()),
            not_applied: Some(self.not_applied.clone()),
            answer: Some(self.answer),
        }
    }
}

/// A header value as `check-config` and `/admin/config` print it: its
/// source (`env:NAME`, `file:PATH`), never the value.
fn printed(value: &Secret) -> &str {
    match value.source() {
        source if source.starts_with("literal:") => "<redacted>",
        source => source,
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{MINIMAL, problems_of};

    /// `MINIMAL` with a `[route.probe]` of `deadline` and a bad
    /// `max_attempts`, so another problem stands beside the deadline's.
    fn probe_problems(deadline: &str) -> String {
        problems_of(&format!(
            "{MINIMAL}\n[route.probe]\npath = \"/orders/{{json:/id}}\"\n{deadline}\nmax_attempts = 0\n"
        ))
    }

    #[test]
    fn a_refused_or_missing_handler_deadline_is_one_problem_among_all() {
        for (deadline, says) in [
            (
                "handler_deadline = \"1.5h\"",
                "route[0].probe.handler_deadline: \"1.5h\": fractions are not supported, write 90m",
            ),
            (
                "",
                "route[0].probe.handler_deadline: is required: the longest the handler works on one request",
            ),
        ] {
            let problems = probe_problems(deadline);
            assert!(problems.contains(says), "{problems}");
            assert!(
                problems.contains("route[0].probe.max_attempts: 0 must be 1-100"),
                "every other problem is reported too: {problems}"
            );
            assert_eq!(
                problems.matches("handler_deadline").count(),
                1,
                "nothing compared with a stand-in: {problems}"
            );
        }
    }
}
