//! The idemgate container's memory request and limit, in every manifest
//! that sets them, against the peak RSS measured with `bench/peak-rss`
//! (docs/kubernetes.md, "Memory"). A config that raises the replay cache
//! must raise the limit with it.

use super::*;

/// Peak RSS (VmHWM), Redis store, 2 worker threads, `wrk -t2 -c256` for
/// 15 s, the higher of two runs: 1 KiB bodies, first deliveries then
/// duplicates.
const MEASURED_SMALL_BODIES_MIB: f64 = 71.7;
/// The same with 1 MiB bodies (the default max_body_bytes), where the
/// default max_buffered_bytes (64 MiB) bounds what is buffered.
const MEASURED_LARGE_BODIES_MIB: f64 = 169.0;
/// Headroom of the limit over the worst case, of the request over the
/// steady case.
const LIMIT_HEADROOM: f64 = 1.25;
const DEFAULT_REPLAY_CACHE_BYTES: f64 = 33_554_432.0;
const DEFAULT_MAX_BUFFERED_BYTES: f64 = 67_108_864.0;
const MIB: f64 = 1024.0 * 1024.0;

/// (manifest, idemgate's config file in it) for each place the container's
/// resources are written.
const MANIFESTS: [(&str, Option<&str>); 3] = [
    ("config/deploy/kubernetes.yaml", None),
    (
        "config/deploy/kustomize/base/deployment.yaml",
        Some("config/deploy/kustomize/base/idemgate.toml"),
    ),
    (
        "config/deploy/kustomize/components/sidecar/deployment-patch.yaml",
        Some("config/deploy/kustomize/examples/sidecar/idemgate.toml"),
    ),
];

fn bytes_setting(config: &GateConfig, key: &str, default: f64) -> f64 {
    key.split('.')
        .try_fold(&config.toml, |value, part| value.get(part))
        .and_then(toml::Value::as_integer)
        .map_or(default, |n| n as f64)
}

#[test]
fn kubernetes_memory_covers_the_measured_peak() {
    for (manifest, config_file) in MANIFESTS {
        let k8s = Kubernetes::from_documents(manifest, yaml_documents(manifest));
        let config = match config_file {
            Some(file) => GateConfig::new(file, &read(file)),
            None => k8s.config(),
        };
        let cache = bytes_setting(
            &config,
            "limits.replay_cache_bytes",
            DEFAULT_REPLAY_CACHE_BYTES,
        );
        let buffered = bytes_setting(
            &config,
            "limits.max_buffered_bytes",
            DEFAULT_MAX_BUFFERED_BYTES,
        );
        // A larger buffer budget than measured raises the worst case by as much.
        let worst = MEASURED_LARGE_BODIES_MIB * MIB
            + (buffered - DEFAULT_MAX_BUFFERED_BYTES).max(0.0)
            + cache;
        let steady = MEASURED_SMALL_BODIES_MIB * MIB + cache;
        let resources = at(k8s.idemgate(), "resources");
        let limit = memory(at(resources, "limits.memory"));
        let request = memory(at(resources, "requests.memory"));
        assert!(
            limit >= worst * LIMIT_HEADROOM,
            "{manifest}: memory limit {:.0} MiB below the measured worst case {:.0} MiB + {:.0}%",
            limit / MIB,
            worst / MIB,
            (LIMIT_HEADROOM - 1.0) * 100.0
        );
        assert!(
            request >= steady * LIMIT_HEADROOM && request <= limit,
            "{manifest}: memory request {:.0} MiB: the 1 KiB-body peak + cache is {:.0} MiB",
            request / MIB,
            steady / MIB
        );
    }
}
