//! `[tracing]`: the checked OpenTelemetry export settings (docs/operations.md "Tracing").
//!
//! Owns [`Tracing`] and its validation: the collector URL must be a plain
//! `http://` OTLP/HTTP endpoint (spans go out through idemgate's own hyper
//! client, which speaks no TLS; a collector runs beside the proxy), the
//! sampling ratio a share and the queue non-empty. Without an
//! `otlp_endpoint` tracing is off and [`crate::config::Config::tracing`]
//! is `None`. The endpoint is printed (`check-config`, `Debug`, errors)
//! only through [`redact_url`], so a userinfo password never shows.

use std::fmt;

use http::Uri;

use serde::{Deserialize, Serialize};

use super::problems::Problems;

use super::redact::redact_url;

/// Default `[tracing] sampling_ratio`: every trace a sender did not
/// decide on is kept; lower it when the collector can not take them all.
const DEFAULT_SAMPLING_RATIO: f64 = 1.0;
/// The `service.name` of every span when neither `[tracing] service_name`
/// nor the OpenTelemetry environment (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`) names the service.
pub const DEFAULT_SERVICE_NAME: &str = "idemgate";
/// Default `[tracing] queue_size`: finished spans waiting for export at
/// most (a delivery makes four or five); more are dropped and counted.
const DEFAULT_TRACE_QUEUE_SIZE: usize = 2048;

/// `[tracing]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    /// OTLP/HTTP collector base URL (`/v1/traces` is appended); absent: off.
    pub otlp_endpoint: Option<String>,
    /// Share of new traces kept, 0.0 to 1.0; a sender's sampled
    /// `traceparent` is always honoured.
    pub sampling_ratio: Option<f64>,
    /// `service.name` of the exported spans.
    pub service_name: Option<String>,
    /// Finished spans waiting for export at most.
    pub queue_size: Option<usize>,
}

/// Largest `queue_size`: a million spans is about a gigabyte of memory,
/// beyond any sane buffer in front of a collector.
const MAX_QUEUE_SIZE: usize = 1_000_000;

/// OTLP trace export, as configured.
#[derive(Clone, PartialEq)]
pub struct Tracing {
    /// The collector's base URL, as written (`http://host:4318`).
    pub otlp_endpoint: Uri,
    /// Share of new traces kept (0.0 to 1.0); parent-based, so a sender's
    /// sampled `traceparent` is always kept and an unsampled one never.
    pub sampling_ratio: f64,
    /// `service.name` of the exported spans as the file sets it; `None`
    /// leaves it to `OTEL_SERVICE_NAME`, then `OTEL_RESOURCE_ATTRIBUTES`,
    /// then [`DEFAULT_SERVICE_NAME`] (`crate::telemetry`, "Resource").
    pub service_name: Option<String>,
    /// Finished spans waiting for export at most; more are dropped and
    /// counted in `idemgate_trace_spans_dropped_total`.
    pub queue_size: usize,
}

impl fmt::Debug for Tracing {
    /// Prints the endpoint without its userinfo password, like every URL.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracing")
            .field(
                "otlp_endpoint",
                &redact_url(&self.otlp_endpoint.to_string()),
            )
            .field("sampling_ratio", &self.sampling_ratio)
            .field("service_name", &self.service_name)
            .field("queue_size", &self.queue_size)
            .finish()
    }
}

impl Tracing {
    /// Where spans are posted: the endpoint with `/v1/traces` appended
    /// (the OTLP/HTTP signal path, as `OTEL_EXPORTER_OTLP_ENDPOINT` works).
    pub fn traces_url(&self) -> String {
        let base = self.otlp_endpoint.to_string();
        format!("{}/v1/traces", base.trim_end_matches('/'))
    }

    /// The raw form `check-config` prints.
    pub(super) fn to_raw(&self) -> RawTracing {
        RawTracing {
            otlp_endpoint: Some(redact_url(&self.otlp_endpoint.to_string())),
            sampling_ratio: Some(self.sampling_ratio),
            service_name: self.service_name.clone(),
            queue_size: Some(self.queue_size),
        }
    }
}

/// Checks `[tracing]`; `None` when it is absent or has no endpoint (off).
pub(super) fn tracing(problems: &mut Problems, raw: Option<RawTracing>) -> Option<Tracing> {
    let raw = raw?;
    let sampling_ratio = raw.sampling_ratio.unwrap_or(DEFAULT_SAMPLING_RATIO);
    if !(0.0..=1.0).contains(&sampling_ratio) {
        problems.push(
            "tracing.sampling_ratio",
            format!("{sampling_ratio} is not between 0.0 and 1.0"),
        );
    }
    let service_name = raw.service_name;
    if service_name
        .as_deref()
        .is_some_and(|name| name.trim().is_empty())
    {
        problems.push("tracing.service_name", "must not be empty");
    }
    let queue_size = raw.queue_size.unwrap_or(DEFAULT_TRACE_QUEUE_SIZE);
    if queue_size == 0 || queue_size > MAX_QUEUE_SIZE {
        problems.push(
            "tracing.queue_size",
            format!("{queue_size} is not between 1 and {MAX_QUEUE_SIZE}"),
        );
    }
    let endpoint = raw.otlp_endpoint?;
    let otlp_endpoint = problems.take("tracing.otlp_endpoint", endpoint_url(&endpoint))?;
    Some(Tracing {
        otlp_endpoint,
        sampling_ratio,
        service_name,
        queue_size,
    })
}

/// An `http://host[:port][/base]` URL without query. Errors quote it
/// redacted.
fn endpoint_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|error| format!("{:?} is not a URL: {error}", redact_url(text)))?;
    let text = redact_url(text);
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "{text:?}: https is not supported; export to a collector beside idemgate over http"
            ));
        }
        _ => return Err(format!("{text:?} must start with http://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("{text:?} must not have a query"));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawTracing) -> (Option<Tracing>, Vec<String>) {
        let mut problems = Problems::default();
        let tracing = tracing(&mut problems, Some(raw));
        (tracing, problems.0)
    }

    /// The tracing a table setting only `otlp_endpoint` turns on, which
    /// must have no problems.
    fn on_with_endpoint(endpoint: &str) -> Tracing {
        let (tracing, problems) = check(RawTracing {
            otlp_endpoint: Some(endpoint.to_owned()),
            ..RawTracing::default()
        });
        assert!(problems.is_empty(), "{problems:?}");
        tracing.expect("on")
    }

    #[test]
    fn absent_or_without_endpoint_is_off() {
        let mut problems = Problems::default();
        assert_eq!(tracing(&mut problems, None), None);
        let (tracing, problems) = check(RawTracing::default());
        assert_eq!(tracing, None);
        assert!(problems.is_empty());
    }

    #[test]
    fn defaults_fill_in() {
        let tracing = on_with_endpoint("http://127.0.0.1:4318");
        assert_eq!(tracing.sampling_ratio, DEFAULT_SAMPLING_RATIO);
        assert_eq!(tracing.service_name, None, "left to the environment");
        assert_eq!(tracing.queue_size, DEFAULT_TRACE_QUEUE_SIZE);
        assert_eq!(tracing.traces_url(), "http://127.0.0.1:4318/v1/traces");
    }

    #[test]
    fn errors_name_the_key() {
        let (tracing, problems) = check(RawTracing {
            otlp_endpoint: Some("https://collector:4318".to_owned()),
            sampling_ratio: Some(1.5),
            service_name: Some(" ".to_owned()),
            queue_size: Some(0),
        });
        assert_eq!(tracing, None);
        let keys: Vec<&str> = problems
            .iter()
            .map(|p| p.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            keys,
            [
                "tracing.sampling_ratio",
                "tracing.service_name",
                "tracing.queue_size",
                "tracing.otlp_endpoint"
            ]
        );
    }

    #[test]
    fn the_endpoint_prints_without_its_password() {
        let tracing = on_with_endpoint("http://u:otel-pw@127.0.0.1:4318");
        let printed = tracing.to_raw().otlp_endpoint.unwrap();
        assert_eq!(printed, "http://u:<redacted>@127.0.0.1:4318/");
        assert!(!format!("{tracing:?}").contains("otel-pw"), "{tracing:?}");
        for wrong in [
            "https://u:otel-pw@collector:4318",
            "http://u:otel-pw@collector:4318/?a=b",
            "ftp://u:otel-pw@collector",
            "http://u:otel-pw@",
        ] {
            let error = endpoint_url(wrong).unwrap_err();
            assert!(!error.contains("otel-pw"), "{error}");
        }
    }

    #[test]
    fn endpoint_must_be_plain_http() {
        assert!(endpoint_url("http://collector:4318/").is_ok());
        assert!(endpoint_url("collector:4318").is_err());
        assert!(endpoint_url("ftp://collector").is_err());
        assert!(endpoint_url("http://collector:4318/?a=b").is_err());
    }
}
