//! `config/deploy/docker-compose.yml` and the Prometheus configuration for
//! Compose.

use super::*;

const COMPOSE: &str = "config/deploy/docker-compose.yml";
const COMPOSE_PROMETHEUS: &str = "config/deploy/compose-prometheus.yml";

fn compose_dir() -> PathBuf {
    repo_path("config/deploy")
}

struct Compose {
    file: Yaml,
}

/// A short-syntax or long-syntax volume.
struct Mount {
    source: PathBuf,
    target: String,
    read_only: bool,
}

impl Compose {
    fn load() -> Self {
        Self {
            file: yaml_file(COMPOSE),
        }
    }

    fn service(&self, name: &str) -> &Yaml {
        at(&self.file, &format!("services.{name}"))
    }

    fn environment(&self, service: &str) -> BTreeMap<String, String> {
        match self.service(service).get("environment") {
            None => BTreeMap::new(),
            Some(Yaml::Mapping(map)) => map
                .iter()
                .map(|(k, v)| {
                    (
                        scalar(k),
                        if v.is_null() {
                            String::new()
                        } else {
                            scalar(v)
                        },
                    )
                })
                .collect(),
            Some(Yaml::Sequence(items)) => items
                .iter()
                .map(|item| {
                    let text = scalar(item);
                    let (k, v) = text.split_once('=').unwrap_or((&text, ""));
                    (k.to_owned(), v.to_owned())
                })
                .collect(),
            Some(other) => panic!("environment: {other:?}"),
        }
    }

    /// Container ports published by `service`.
    fn published(&self, service: &str) -> BTreeSet<u16> {
        seq_at(self.service(service), "ports")
            .iter()
            .map(|port| match port {
                Yaml::Mapping(_) => u16::try_from(at(port, "target").as_u64().unwrap()).unwrap(),
                other => {
                    let text = scalar(other);
                    let text = text.split('/').next().unwrap();
                    text.rsplit(':').next().unwrap().parse().unwrap()
                }
            })
            .collect()
    }

    /// Bind mounts of `service` (named volumes are skipped).
    fn mounts(&self, service: &str) -> Vec<Mount> {
        seq_at(self.service(service), "volumes")
            .iter()
            .filter_map(|volume| {
                let (source, target, read_only) = match volume {
                    Yaml::Mapping(_) => (
                        str_at(volume, "source").to_owned(),
                        str_at(volume, "target").to_owned(),
                        volume.get("read_only").and_then(Yaml::as_bool) == Some(true),
                    ),
                    other => {
                        let text = scalar(other);
                        let parts: Vec<&str> = text.split(':').collect();
                        (
                            parts[0].to_owned(),
                            parts[1].to_owned(),
                            parts
                                .get(2)
                                .is_some_and(|mode| mode.split(',').any(|m| m == "ro")),
                        )
                    }
                };
                let is_path = source.starts_with('.') || source.starts_with('/');
                is_path.then(|| Mount {
                    source: compose_dir().join(source),
                    target,
                    read_only,
                })
            })
            .collect()
    }

    fn mount_at(&self, service: &str, target: &str) -> Mount {
        self.mounts(service)
            .into_iter()
            .find(|mount| mount.target == target)
            .unwrap_or_else(|| panic!("{service}: nothing mounted at {target}"))
    }

    fn command(&self, service: &str) -> Vec<String> {
        self.service(service)
            .get("command")
            .map(words)
            .unwrap_or_default()
    }

    fn config_path(&self) -> String {
        self.environment("idemgate")
            .get("IDEMGATE_CONFIG")
            .cloned()
            .unwrap_or_else(|| CONFIG_PATH.to_owned())
    }

    fn config(&self) -> GateConfig {
        let mount = self.mount_at("idemgate", &self.config_path());
        assert!(mount.read_only, "the config is mounted read-only");
        let text = std::fs::read_to_string(&mount.source)
            .unwrap_or_else(|e| panic!("{}: {e}", mount.source.display()));
        GateConfig::new(&mount.source.display().to_string(), &text)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    a.canonicalize().unwrap() == b.canonicalize().unwrap()
}

#[test]
fn compose_builds_idemgate_from_the_repository() {
    let compose = Compose::load();
    let build = at(compose.service("idemgate"), "build");
    let context = compose_dir().join(str_at(build, "context"));
    assert!(same_file(&context, &repo_path(".")), "build context");
    let dockerfile = build
        .get("dockerfile")
        .and_then(Yaml::as_str)
        .unwrap_or("Dockerfile");
    assert!(same_file(
        &context.join(dockerfile),
        &repo_path("Dockerfile")
    ));
    assert_eq!(
        compose.published("idemgate"),
        BTreeSet::from([PROXY_PORT, ADMIN_PORT])
    );
    let command = compose.command("idemgate");
    assert!(command.is_empty() || command == ["serve"], "{command:?}");
    // Compose's default 10s would SIGKILL idemgate mid-drain.
    let stop = str_at(compose.service("idemgate"), "stop_grace_period");
    let stop = parse_duration(stop).unwrap();
    assert!(
        stop > compose.config().shutdown_grace(),
        "stop_grace_period"
    );
}

#[test]
fn compose_config_is_valid_and_matches_the_services() {
    let compose = Compose::load();
    let config = compose.config();
    config.assert_passes_check_config();
    config.assert_container_ready();
    let published = compose.published("idemgate");
    assert!(published.contains(&config.listen("proxy").port()));
    assert!(published.contains(&config.listen("admin").port()));

    let environment = compose.environment("idemgate");
    for name in config.env_names() {
        assert!(
            environment.contains_key(&name),
            "{name} not passed to idemgate"
        );
    }

    // The store and the upstream are the compose services.
    let (host, port) = url_host_port(config.required("store.url"));
    compose.service(&host);
    assert_eq!(port, 6379);
    let (host, port) = url_host_port(config.required("upstream.url"));
    let listen = compose
        .command(&host)
        .into_iter()
        .find_map(|arg| arg.strip_prefix("-listen=").map(str::to_owned))
        .unwrap_or_else(|| panic!("{host}: no -listen= argument"));
    assert_eq!(
        listen,
        format!(":{port}"),
        "the handler listens where idemgate forwards"
    );
}

#[test]
fn compose_redis_persists() {
    let compose = Compose::load();
    let redis = compose.service("redis");
    assert!(str_at(redis, "image").starts_with("redis:7"));
    let command = compose.command("redis");
    let appendonly = command
        .iter()
        .position(|arg| arg == "--appendonly")
        .expect("--appendonly");
    assert_eq!(command[appendonly + 1], "yes");
    let data = seq_at(redis, "volumes")
        .iter()
        .map(scalar)
        .any(|volume| volume.ends_with(":/data"));
    assert!(
        data,
        "Redis' /data is a volume, so the append-only file outlives the container"
    );
}

#[test]
fn compose_prometheus_scrapes_idemgate_with_the_alert_rules() {
    let compose = Compose::load();
    let service = compose.service("prometheus");
    assert!(str_at(service, "image").starts_with("prom/prometheus"));
    let config_target = compose
        .command("prometheus")
        .iter()
        .find_map(|arg| arg.strip_prefix("--config.file=").map(str::to_owned))
        .unwrap_or_else(|| "/etc/prometheus/prometheus.yml".to_owned());
    let mount = compose.mount_at("prometheus", &config_target);
    assert!(same_file(&mount.source, &repo_path(COMPOSE_PROMETHEUS)));
    assert!(mount.read_only);

    let prometheus = yaml_file(COMPOSE_PROMETHEUS);
    // Every rule file resolves (relative to the config file) to a read-only
    // mount of the bundled alert rules.
    let config_dir = Path::new(&config_target).parent().unwrap();
    let rule_files = seq_at(&prometheus, "rule_files");
    assert!(!rule_files.is_empty());
    for rule_file in rule_files {
        let target = config_dir.join(scalar(rule_file));
        let mount = compose.mount_at("prometheus", target.to_str().unwrap());
        assert!(mount.read_only, "{} read-only", target.display());
        assert!(same_file(
            &mount.source,
            &repo_path("config/prometheus/alerts.yml")
        ));
    }

    // idemgate's admin listener, by its service name, at /metrics.
    let admin_port = compose.config().listen("admin").port();
    let wanted = format!("idemgate:{admin_port}");
    let job = seq_at(&prometheus, "scrape_configs")
        .iter()
        .find(|job| {
            seq_at(job, "static_configs").iter().any(|group| {
                seq_at(group, "targets")
                    .iter()
                    .any(|target| scalar(target) == wanted)
            })
        })
        .unwrap_or_else(|| panic!("no scrape target {wanted}"));
    assert_eq!(
        str_at(job, "job_name"),
        "idemgate",
        "the alert rules select job=\"idemgate\""
    );
    let path = job
        .get("metrics_path")
        .map_or("/metrics".to_owned(), scalar);
    assert_eq!(path, "/metrics");
}

/// `promtool check config` on the Compose Prometheus configuration, laid out
/// as in the container (alerts.yml beside it). Skipped without promtool
/// (.ci/run installs it).
#[test]
#[ignore = "needs promtool"]
fn compose_prometheus_config_passes_promtool() {
    if Command::new("promtool").arg("--version").output().is_err() {
        eprintln!("promtool not installed; skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo_path(COMPOSE_PROMETHEUS),
        dir.path().join("prometheus.yml"),
    )
    .unwrap();
    std::fs::copy(
        repo_path("config/prometheus/alerts.yml"),
        dir.path().join("alerts.yml"),
    )
    .unwrap();
    let output = Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(dir.path().join("prometheus.yml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool check config:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
