//! The OpenTelemetry resource every exported span carries: who sent it.
//!
//! Built from, lowest precedence first (a later source overrides an
//! earlier one key by key):
//!
//! 1. idemgate's defaults: `service.name = "idemgate"` and
//!    `service.instance.id`, a random UUID (v4) per process, so two
//!    replicas of one service are told apart;
//! 2. `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`, taken as
//!    written), e.g. `deployment.environment.name=prod` or a
//!    `service.instance.id` of the pod's own;
//! 3. `OTEL_SERVICE_NAME`;
//! 4. the `telemetry.sdk.*` attributes and `service.version` (this binary's
//!    version: the environment can not make a build claim another version);
//! 5. `[tracing] service_name`, when the file sets it.
//!
//! The order is the OpenTelemetry SDK specification's (`OTEL_SERVICE_NAME`
//! beats `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), with the file on
//! top because it is the more specific, reviewed setting.

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};

use crate::config::DEFAULT_SERVICE_NAME;

/// The environment variable that names the service (OpenTelemetry SDK
/// specification), below `[tracing] service_name`.
const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// The resource for a process whose file sets `service_name` (or not),
/// read from the environment now.
pub(super) fn resource(service_name: Option<&str>) -> Resource {
    let mut builder = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", DEFAULT_SERVICE_NAME),
            KeyValue::new("service.instance.id", instance_id()),
        ])
        .with_detector(Box::new(EnvResourceDetector::new()));
    if let Some(name) = std::env::var(OTEL_SERVICE_NAME)
        .ok()
        .filter(|name| !name.trim().is_empty())
    {
        builder = builder.with_service_name(name);
    }
    builder = builder
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(name) = service_name {
        builder = builder.with_service_name(name.to_owned());
    }
    builder.build()
}

/// A random (version 4, RFC 9562) UUID in its hyphenated form. Sixteen
/// bytes from the OS and two masks do not justify a dependency; without
/// randomness (never on a supported system) the id is all zeros but the
/// version bits, and spans still go out.
fn instance_id() -> String {
    let mut bytes = [0u8; 16];
    if let Err(error) = getrandom::fill(&mut bytes) {
        tracing::warn!(%error, "no randomness for service.instance.id");
    }
    uuid_v4(bytes)
}

/// Formats `bytes` as a version-4, variant-1 UUID.
fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_version_4_uuids() {
        assert_eq!(uuid_v4([0xff; 16]), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
        let (one, two) = (instance_id(), instance_id());
        assert_ne!(one, two, "one per process, never shared");
        assert_eq!(one.len(), 36);
    }

    #[test]
    fn the_file_names_the_service_and_the_binary_its_version() {
        let resource = resource(Some("gate-a"));
        let get = |key: &'static str| resource.get(&opentelemetry::Key::from_static_str(key));
        assert_eq!(
            get("service.name").map(|v| v.to_string()).as_deref(),
            Some("gate-a")
        );
        assert_eq!(
            get("service.version").map(|v| v.to_string()).as_deref(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        assert!(get("service.instance.id").is_some());
        assert_eq!(
            get("telemetry.sdk.language")
                .map(|v| v.to_string())
                .as_deref(),
            Some("rust")
        );
    }
}
