//! `idemgate admin …` (src/cli): the real binary against a running gate
//! on a real `redis-server`, as an operator runs it — tables for people,
//! `--json` for scripts, exit 0 / 1 (the API refused) / 2 (usage, or no
//! admin listener), the address and token from flags, environment or the
//! configuration file.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

mod entity;
mod inbox;
mod records;

const TOKEN: &str = "cli-admin-token";

/// What one `idemgate admin` run gave.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout as JSON (panics with the run when it is not).
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    /// Asserts exit 0 and returns self.
    fn ok(self) -> Self {
        assert_eq!(self.code, Some(0), "{self:?}");
        self
    }
}

/// Runs `idemgate admin ARGS` with only `envs` of the idemgate variables
/// set (bounded: 20 s).
async fn cli(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemgate"));
    command
        .arg("admin")
        .args(args)
        .env_remove("IDEMGATE_CONFIG")
        .env_remove("IDEMGATE_ADMIN_ADDR")
        .env_remove("IDEMGATE_ADMIN_TOKEN")
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .expect("idemgate admin finished within 20 s")
        .expect("idemgate admin ran");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A token file for `--token-file` (kept alive by the returned directory).
fn token_file(token: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    (dir, path.display().to_string())
}

/// `cli` against `admin` with the right token from the environment.
async fn cli_at(admin: SocketAddr, args: &[&str]) -> Run {
    cli(
        args,
        &[
            ("IDEMGATE_ADMIN_ADDR", &admin.to_string()),
            ("IDEMGATE_ADMIN_TOKEN", TOKEN),
        ],
    )
    .await
}

fn with_admin(text: &str) -> String {
    format!("{text}\n[admin]\ntoken = \"literal:{TOKEN}\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_config_print_tables_and_json_with_the_token_from_a_file() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    let (_dir, token) = token_file(TOKEN);
    let addr = gate.admin.to_string();
    let flags = ["--addr", &addr, "--token-file", &token];

    let info = cli(&[&flags[..], &["info"]].concat(), &[]).await.ok();
    for expected in [
        "version",
        "store ready     yes",
        "redis",
        "ROUTE  PATH PREFIX  METHODS",
        "pay    /notify",
    ] {
        assert!(
            info.stdout.contains(expected),
            "{expected}: {}",
            info.stdout
        );
    }
    let json = cli(&[&flags[..], &["--json", "info"]].concat(), &[])
        .await
        .ok()
        .json();
    assert_eq!(json["routes"][0]["name"], "pay");
    assert_eq!(json["store"]["ready"], true);
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));

    // The effective configuration as TOML, the token as its source only.
    let config = cli(&[&flags[..], &["config"]].concat(), &[]).await.ok();
    assert!(
        config.stdout.contains("name = \"pay\""),
        "{}",
        config.stdout
    );
    assert!(!config.stdout.contains(TOKEN), "{}", config.stdout);
    let toml: toml::Table = config.stdout.parse().expect("config is TOML");
    assert!(toml.get("route").is_some());
    gate.stop().await;
}

/// Pointed at the proxy port by mistake, the CLI does not send the token:
/// the proxy would forward it to the legacy handler. It asks `/healthz`
/// first, without the token, and goes on only if an admin listener
/// answers (exit 2 otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_never_sent_to_a_listener_that_is_not_the_admin_one() {
    let (_redis, upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    let proxy = gate.addr.to_string();
    let envs = [
        ("IDEMGATE_ADMIN_ADDR", proxy.as_str()),
        ("IDEMGATE_ADMIN_TOKEN", TOKEN),
    ];
    for args in [&["info"][..], &["records", "get", "pay", "--key", "x"][..]] {
        let run = cli(args, &envs).await;
        assert_eq!(run.code, Some(2), "{run:?}");
        assert!(
            run.stderr.contains("is not an idemgate admin listener")
                && run.stderr.contains("the token was not sent"),
            "{run:?}"
        );
    }
    for headers in upstream.headers() {
        assert!(
            headers.get("authorization").is_none(),
            "the proxy passed a token on: {headers:?}"
        );
    }
    // The admin listener itself says what it is.
    assert!(cli_at(gate.admin, &["info"]).await.code == Some(0));
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_exit_1_with_the_reason_and_no_listener_is_exit_2() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    let addr = gate.admin.to_string();
    let wrong = [
        ("IDEMGATE_ADMIN_ADDR", addr.as_str()),
        ("IDEMGATE_ADMIN_TOKEN", "wrong"),
    ];
    let refused = cli(&["info"], &wrong).await;
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("Bearer token required: send Authorization: Bearer <[admin] token, or a token of [[admin.tokens]]> (reason unauthorized, HTTP 401)"),
        "{refused:?}"
    );
    assert!(refused.stdout.is_empty(), "{refused:?}");
    // Scripts get the problem document itself.
    let refused = cli(&["--json", "records", "get", "pay", "--key", "x"], &wrong).await;
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_eq!(refused.json()["reason"], "unauthorized");

    // A refusal other than the token: still exit 1, with its own reason.
    let unknown = cli_at(gate.admin, &["records", "get", "nope", "--key", "x"]).await;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    assert!(
        unknown.stderr.contains("reason unknown_route"),
        "{unknown:?}"
    );

    // Nothing listens there: exit 2, saying so.
    let port = free_port().to_string();
    let nobody = cli(
        &["--addr", &format!("127.0.0.1:{port}"), "info"],
        &[("IDEMGATE_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    assert_eq!(nobody.code, Some(2), "{nobody:?}");
    assert!(
        nobody.stderr.contains("cannot reach the admin API") && nobody.stderr.contains("refused"),
        "{nobody:?}"
    );
    // The proxy port is not the admin API: a failure, not a table of nothing.
    let proxy = gate.addr.to_string();
    let wrong_port = cli(
        &["--addr", &proxy, "info"],
        &[("IDEMGATE_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    assert_ne!(wrong_port.code, Some(0), "{wrong_port:?}");

    // Usage errors are exit 2: a missing --state, both --key and --hash.
    for args in [
        &["records", "list", "pay"][..],
        &["records", "get", "pay", "--key", "a", "--hash", "b"][..],
        &["inbox", "retry", "pay"][..],
    ] {
        let usage = cli_at(gate.admin, args).await;
        assert_eq!(usage.code, Some(2), "{args:?}: {usage:?}");
    }
    // A token source that does not resolve is a usage error too.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-token").display().to_string();
    let usage = cli(&["--addr", &addr, "--token-file", &missing, "info"], &[]).await;
    assert_eq!(usage.code, Some(2), "{usage:?}");
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_and_token_come_from_the_config_file_or_the_environment() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, TOKEN).unwrap();
    // The operator's file: the running instance's admin address, the token
    // as a `file:` source, and a route secret this shell cannot resolve
    // (only the admin parts are read).
    let config = dir.path().join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\nadmin = \"{}\"\n\n[admin]\ntoken = \"file:{}\"\n\n[[route]]\nname = \"pay\"\n\
             [route.signature]\nsecrets = [\"env:IDEMGATE_CLI_TEST_UNSET\"]\n",
            gate.admin,
            token_path.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();

    let from_flag = cli(&["-c", &config, "--json", "info"], &[]).await.ok();
    assert_eq!(from_flag.json()["routes"][0]["name"], "pay");
    let from_env = cli(&["--json", "info"], &[("IDEMGATE_CONFIG", &config)])
        .await
        .ok();
    assert_eq!(from_env.json()["routes"][0]["name"], "pay");

    // No file at all: address and token from the environment.
    let addr = gate.admin.to_string();
    let env_only = cli(
        &["--json", "info"],
        &[
            ("IDEMGATE_ADMIN_ADDR", &addr),
            ("IDEMGATE_ADMIN_TOKEN", TOKEN),
        ],
    )
    .await
    .ok();
    assert_eq!(env_only.json()["store"]["ready"], true);

    // The environment beats the file, the flag beats the environment.
    let port = free_port();
    let nowhere = format!("127.0.0.1:{port}");
    let wrong_file = cli(
        &["-c", &config, "info"],
        &[("IDEMGATE_ADMIN_ADDR", &nowhere)],
    )
    .await;
    assert_eq!(wrong_file.code, Some(2), "env over file: {wrong_file:?}");
    cli(
        &["-c", &config, "--addr", &addr, "info"],
        &[("IDEMGATE_ADMIN_ADDR", &nowhere)],
    )
    .await
    .ok();
    let wrong_token = cli(
        &["-c", &config, "info"],
        &[("IDEMGATE_ADMIN_TOKEN", "not-it")],
    )
    .await;
    assert_eq!(
        wrong_token.code,
        Some(1),
        "env token over file: {wrong_token:?}"
    );
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_keys_show_a_retrying_sender() {
    let (_redis, _upstream, gate) =
        redis_gate_edited(Upstream::start().await, "", |text| with_admin(&text)).await;
    for _ in 0..4 {
        assert_eq!(
            deliver(&gate.url("/notify"), &payment("p-hot"))
                .await
                .status,
            200
        );
    }
    let json = cli_at(gate.admin, &["--json", "hot-keys", "--route", "pay"])
        .await
        .ok()
        .json();
    let top = &json["routes"][0]["keys"][0];
    assert_eq!(top["deliveries"], 4, "{json}");
    let hash = top["key"].as_str().unwrap();
    let table = cli_at(gate.admin, &["hot-keys"]).await.ok();
    let row = table
        .stdout
        .lines()
        .find(|line| line.contains(hash))
        .unwrap_or_else(|| panic!("{hash} in {}", table.stdout));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..4], &["pay", hash, "4", "3"], "{row}");
    assert!(table.stdout.starts_with("window: "), "{}", table.stdout);
    let unknown = cli_at(gate.admin, &["hot-keys", "--route", "nope"]).await;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    gate.stop().await;
}

/// `idemgate admin --help` shows an example of every subcommand, says
/// where the address and token come from, and no flag takes the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_has_an_example_of_every_subcommand_and_no_token_flag() {
    let help = cli(&["--help"], &[]).await.ok();
    for expected in [
        "admin records get pay --key",
        "admin records get pay --hash",
        "admin records list pay --state unknown --all",
        "admin records purge pay --key",
        "admin inbox list pay --state dead",
        "admin inbox show pay --key",
        "admin inbox retry pay --key",
        "admin inbox drop pay --hash",
        "admin hot-keys --route pay",
        "admin config",
        "admin -c /etc/idemgate/idemgate.toml info",
        "IDEMGATE_ADMIN_ADDR",
        "IDEMGATE_ADMIN_TOKEN",
        "--token-file",
        "There is no --token flag",
        "Plain HTTP",
        "1  the API refused",
        "2  usage error",
    ] {
        assert!(
            help.stdout.contains(expected),
            "{expected:?} in:\n{}",
            help.stdout
        );
    }
    let refused = cli(&["--token", "secret", "info"], &[]).await;
    assert_eq!(refused.code, Some(2), "{refused:?}");
    let top = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&top.stdout).contains("admin "));
}
