//! `config/deploy/idemgate.service`: hardened, runs `serve`, outwaits the
//! drain.

use super::*;

const UNIT: &str = "config/deploy/idemgate.service";

/// `[Section]` → every `Key=value` in order (keys may repeat).
fn unit_sections() -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current = String::new();
    for line in read(UNIT).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_owned();
            continue;
        }
        assert!(!line.ends_with('\\'), "{UNIT}: keep directives on one line");
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{UNIT}: not Key=value: {line}"));
        sections
            .entry(current.clone())
            .or_default()
            .push((key.trim().to_owned(), value.trim().to_owned()));
    }
    sections
}

fn service_values(key: &str) -> Vec<String> {
    unit_sections()
        .get("Service")
        .expect("[Service]")
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

fn service_value(key: &str) -> String {
    let values = service_values(key);
    assert_eq!(
        values.len(),
        1,
        "{UNIT}: {key} should be set once: {values:?}"
    );
    values[0].clone()
}

/// A systemd time span as written here: "45s", "1m30s" or bare seconds.
fn systemd_seconds(text: &str) -> Duration {
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Duration::from_secs(text.parse().unwrap());
    }
    parse_duration(&text.replace("min", "m")).unwrap()
}

#[test]
fn systemd_unit_is_hardened() {
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictNamespaces", "yes"),
        ("CapabilityBoundingSet", ""),
        ("StateDirectory", "idemgate"),
        ("EnvironmentFile", "-/etc/idemgate/idemgate.env"),
        ("KillSignal", "SIGTERM"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(service_value(key), value, "{UNIT}: {key}");
    }
    let families: BTreeSet<String> = service_value("RestrictAddressFamilies")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        families,
        BTreeSet::from(["AF_INET".into(), "AF_INET6".into(), "AF_UNIX".into()])
    );
    let filters = service_values("SystemCallFilter");
    assert_eq!(filters.first().map(String::as_str), Some("@system-service"));
    // Later filters may only take away (~...), never allow more.
    assert!(
        filters[1..].iter().all(|f| f.starts_with('~')),
        "{filters:?}"
    );
}

#[test]
fn systemd_unit_runs_serve_and_outwaits_the_drain() {
    let exec = service_value("ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert!(
        argv[0].starts_with('/') && argv[0].ends_with("/idemgate"),
        "{exec}"
    );
    assert_eq!(argv[1..], ["serve", "--config", CONFIG_PATH], "{exec}");
    // idemgate sends READY=1 / STOPPING=1 itself (tests/suite/systemd.rs).
    assert_eq!(service_value("Type"), "notify");
    assert_eq!(service_value("NotifyAccess"), "main");
    // SIGHUP reloads neither the file nor env: secrets (only file: secrets):
    // no ExecReload that would suggest `systemctl reload` applies a change.
    assert!(service_values("ExecReload").is_empty(), "no ExecReload");

    // The unit runs a config like the reference one; its shutdown_grace
    // (default 30s) must fit inside TimeoutStopSec.
    let reference = GateConfig::new("config/idemgate.toml", &read("config/idemgate.toml"));
    let stop = systemd_seconds(&service_value("TimeoutStopSec"));
    assert!(
        stop > reference.shutdown_grace(),
        "TimeoutStopSec {stop:?} must exceed shutdown_grace {:?}",
        reference.shutdown_grace()
    );

    // The embedded store's documented path is inside StateDirectory= (the
    // only writable place under ProtectSystem=strict).
    let state = format!("/var/lib/{}/", service_value("StateDirectory"));
    let text = read(UNIT);
    let documented = text
        .lines()
        .filter_map(|line| line.trim_start_matches('#').trim().strip_prefix("path = "))
        .next()
        .expect("the unit documents the embedded store's path");
    assert!(
        documented.trim_matches('"').starts_with(&state),
        "{documented} is not under {state}"
    );
}

/// `systemd-analyze verify`, with ExecStart pointed at the binary under
/// test (verify requires the executable to exist). Skipped where
/// systemd-analyze is not installed.
#[test]
#[ignore = "needs systemd-analyze"]
fn systemd_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze not installed; skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("idemgate.service");
    let text = read(UNIT).replace("/usr/local/bin/idemgate", BIN);
    std::fs::write(&unit, text).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "systemd-analyze verify:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
