//! `config/container.toml`, the image's default configuration: both
//! listeners on every interface, and no start without the admin token and
//! the signature secret (a bare `docker run` is healthy or stopped, never
//! open). The Dockerfile side is in `dockerfile.rs`.

use super::*;

pub(super) const CONTAINER_CONFIG: &str = "config/container.toml";
/// The variables the default reads its secrets from.
const SECRETS: [&str; 2] = ["IDEMGATE_ADMIN_TOKEN", "IDEMGATE_WEBHOOK_SECRET"];

fn container_config() -> GateConfig {
    GateConfig::new(CONTAINER_CONFIG, &read(CONTAINER_CONFIG))
}

/// `idemgate <command> --config container.toml` with `set` of SECRETS set
/// to usable values and the others removed.
fn run(command: &str, set: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.arg(command)
        .arg("--config")
        .arg(repo_path(CONTAINER_CONFIG))
        .env_remove("IDEMGATE_CONFIG");
    for name in SECRETS {
        if set.contains(&name) {
            cmd.env(name, format!("value-of-{name}-0123456789abcdef"));
        } else {
            cmd.env_remove(name);
        }
    }
    cmd.output().unwrap()
}

#[test]
fn container_default_listens_on_every_interface() {
    let config = container_config();
    assert_eq!(
        config.listen("proxy"),
        SocketAddr::from(([0, 0, 0, 0], PROXY_PORT))
    );
    assert_eq!(
        config.listen("admin"),
        SocketAddr::from(([0, 0, 0, 0], ADMIN_PORT))
    );
    assert_eq!(config.required("admin.token"), "env:IDEMGATE_ADMIN_TOKEN");
    assert_eq!(
        config.env_names(),
        SECRETS.iter().map(|s| (*s).to_owned()).collect()
    );
}

/// Without either secret, `check-config` and `serve` both exit 2 and name
/// every missing variable; with both, the file is valid and warning-free.
#[test]
fn container_default_refuses_to_start_without_its_secrets() {
    for set in [&[][..], &[SECRETS[1]][..], &[SECRETS[0]][..]] {
        for command in ["check-config", "serve"] {
            let output = run(command, set);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{command} with only {set:?} must refuse to start:\n{stderr}"
            );
            for name in SECRETS.iter().filter(|name| !set.contains(name)) {
                assert!(
                    stderr.contains(&format!("environment variable {name} is not set")),
                    "{command} with only {set:?}: {name} not named:\n{stderr}"
                );
            }
        }
    }
    let output = run("check-config", &SECRETS);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("configuration is valid"), "{stdout}");
    assert!(!stdout.contains("# warning:"), "{stdout}");
}

/// With the secrets set, the default serves: /healthz and /readyz answer
/// 200 (the embedded store under the working directory needs nothing
/// else) and `idemgate healthcheck`, the image's HEALTHCHECK, passes.
#[test]
fn container_default_is_healthy_with_its_secrets() {
    let config = container_config();
    assert_eq!(config.required("store.kind"), "embedded");
    assert!(
        !config.required("store.path").starts_with('/'),
        "relative: under the image's WORKDIR"
    );
    let dir = tempfile::tempdir().unwrap();
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = read(CONTAINER_CONFIG)
        .replace("0.0.0.0:8080", &format!("127.0.0.1:{}", free_port()))
        .replace("0.0.0.0:8790", &admin.to_string());
    let path = config.write_to(dir.path(), &text);
    let secrets: Vec<(&str, String)> = SECRETS
        .iter()
        .map(|name| (*name, format!("value-of-{name}-0123456789abcdef")))
        .collect();
    let _running = Proc::spawn_logged(
        "idemgate",
        Command::new(BIN)
            .arg("serve")
            .current_dir(dir.path())
            .env("IDEMGATE_CONFIG", &path)
            .envs(secrets.iter().map(|(k, v)| (k, v))),
        std::fs::File::create(dir.path().join("idemgate.log")).unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get_blocking(admin, "/readyz").map(|(status, _)| status) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "/readyz never 200:\n{}",
            std::fs::read_to_string(dir.path().join("idemgate.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http_get_blocking(admin, "/healthz").unwrap().0, 200);
    assert!(
        dir.path().join(config.required("store.path")).exists(),
        "the store file is under the working directory"
    );
    assert_healthcheck_passes(&path, &secrets);
}
