//! `idemgate admin …` (src/cli): the real binary against a running gate
//! on a real `redis-server`, as an operator runs it — tables for people,
//! `--json` for scripts, exit 0 / 1 (the API refused) / 2 (usage, or no
//! admin listener), the address and token from flags, environment or the
//! configuration file.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

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
            .contains("Bearer token required: send Authorization: Bearer <[admin] token> (reason unauthorized, HTTP 401)"),
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

/// A config whose upstream times out after 200 ms (the first call takes
/// 2 s), so that delivery's outcome turns unknown and is held.
fn times_out_to_unknown(redis: &RedisServer, upstream: &Upstream) -> String {
    with_admin(
        &config_text(
            &redis_store(redis),
            &upstream.url(),
            "unknown_hold = \"10m\"",
        )
        .replace("timeout = \"5s\"", "timeout = \"200ms\""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_get_and_purge_by_key_and_by_hash_resolve_an_unknown_outcome() {
    let redis = RedisServer::start();
    let upstream = Upstream::slow_first(Duration::from_secs(2)).await;
    let gate = Gate::start(&times_out_to_unknown(&redis, &upstream)).await;
    let body = payment("p-cli");
    assert_eq!(deliver(&gate.url("/notify"), &body).await.status, 504);

    let shown = cli_at(gate.admin, &["records", "get", "pay", "--key", "p-cli"])
        .await
        .ok();
    assert!(
        shown.stdout.contains("state        unknown"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("route        pay"),
        "{}",
        shown.stdout
    );
    let view = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--key", "p-cli"],
    )
    .await
    .ok()
    .json();
    assert_eq!(view["state"], "unknown");
    let hash = view["key_hash"].as_str().unwrap().to_owned();
    let by_hash = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--hash", &hash],
    )
    .await
    .ok()
    .json();
    assert_eq!(by_hash["fingerprint"], view["fingerprint"]);

    // Purged by hash: the next delivery is forwarded.
    let purged = cli_at(gate.admin, &["records", "purge", "pay", "--hash", &hash])
        .await
        .ok();
    assert!(purged.stdout.contains("purged"), "{purged:?}");
    let again = cli_at(gate.admin, &["records", "purge", "pay", "--hash", &hash]).await;
    assert_eq!(again.code, Some(1), "{again:?}");
    assert!(
        again.stderr.contains("reason record_not_found"),
        "{again:?}"
    );
    let retry = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((retry.status, retry.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 2);

    // Completed now; purged by key (a key value with characters a URL
    // escapes), the next delivery is forwarded again.
    let completed = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--key", "p-cli"],
    )
    .await
    .ok()
    .json();
    assert_eq!(
        (&completed["state"], &completed["status"]),
        (&"completed".into(), &200.into())
    );
    cli_at(gate.admin, &["records", "purge", "pay", "--key", "p-cli"])
        .await
        .ok();
    let third = deliver(&gate.url("/notify"), &body).await;
    assert_eq!((third.status, third.replayed()), (200, Some("false")));
    assert_eq!(upstream.calls(), 3);

    let odd = "a b+c/d&e=%";
    assert_eq!(
        deliver(&gate.url("/notify"), &payment(odd)).await.status,
        200
    );
    let odd_view = cli_at(
        gate.admin,
        &["--json", "records", "get", "pay", "--key", odd],
    )
    .await
    .ok()
    .json();
    assert_eq!(odd_view["state"], "completed");
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

/// The test route with an inbox whose handler always fails: one
/// redelivery 100 ms after the live attempt, then the delivery is dead.
fn dying_inbox(redis: &RedisServer, handler: &Upstream) -> String {
    with_admin(&format!(
        "{}\n[route.inbox]\nack_body = \"success\"\nbackoff = \"100ms\"\nmax_backoff = \"1s\"\n\
         max_attempts = 1\nvisibility_timeout = \"10s\"\n",
        config_text(&redis_store(redis), &handler.url(), "")
    ))
}

/// Polls `inbox show` until the delivery `id` is in `state` (bounded: 20 s).
async fn until_state(admin: SocketAddr, id: &str, state: &str) -> serde_json::Value {
    poll(
        &format!("delivery {id} to be {state}"),
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let view = cli_at(admin, &["--json", "inbox", "show", "pay", "--key", id])
                .await
                .ok()
                .json();
            (view["state"] == state).then_some(view)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_list_show_retry_and_drop_a_dead_delivery() {
    let redis = RedisServer::start();
    let handler = Upstream::scripted(|_, _| Reply::status(503)).await;
    let gate = Gate::start(&dying_inbox(&redis, &handler)).await;
    let first = deliver(&gate.url("/notify"), &payment("p-dead")).await;
    assert_eq!((first.status, &first.body[..]), (200, &b"success"[..]));
    let dead = until_state(gate.admin, "p-dead", "dead").await;
    let hash = dead["key_hash"].as_str().unwrap().to_owned();
    let calls = handler.calls();

    let shown = cli_at(gate.admin, &["inbox", "show", "pay", "--hash", &hash])
        .await
        .ok();
    assert!(
        shown.stdout.contains("handler answered 503"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .lines()
            .any(|l| l.starts_with("state ") && l.ends_with(" dead")),
        "{}",
        shown.stdout
    );

    let listed = cli_at(gate.admin, &["inbox", "list", "pay", "--state", "dead"])
        .await
        .ok();
    let mut lines = listed.stdout.lines();
    assert!(
        lines.next().unwrap().starts_with("KEY HASH"),
        "{}",
        listed.stdout
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..3],
        &[hash.as_str(), "dead", "1/1"],
        "{}",
        listed.stdout
    );
    let page = cli_at(
        gate.admin,
        &["--json", "inbox", "list", "pay", "--state", "dead", "--all"],
    )
    .await
    .ok()
    .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1, "{page}");
    let queued = cli_at(gate.admin, &["inbox", "list", "pay", "--state", "queued"])
        .await
        .ok();
    assert_eq!(queued.stdout, "no queued deliveries on route pay\n");

    // Retry: one attempt now (the handler still fails: dead again).
    let retried = cli_at(
        gate.admin,
        &["--json", "inbox", "retry", "pay", "--key", "p-dead"],
    )
    .await
    .ok()
    .json();
    assert_eq!(retried["state"], "queued", "{retried}");
    until_state(gate.admin, "p-dead", "dead").await;
    assert_eq!(handler.calls(), calls + 1, "the retry sent it once");

    // Drop: resolved without sending; copies still get the ack.
    let dropped = cli_at(gate.admin, &["inbox", "drop", "pay", "--key", "p-dead"])
        .await
        .ok();
    assert!(
        dropped
            .stdout
            .lines()
            .any(|l| l.starts_with("state ") && l.ends_with(" dropped")),
        "{}",
        dropped.stdout
    );
    let empty = cli_at(gate.admin, &["inbox", "list", "pay", "--state", "dead"])
        .await
        .ok();
    assert_eq!(empty.stdout, "no dead deliveries on route pay\n");
    let copy = deliver(&gate.url("/notify"), &payment("p-dead")).await;
    assert_eq!((copy.status, copy.replayed()), (200, Some("true")));
    assert_eq!(handler.calls(), calls + 1);
    let nobody = cli_at(gate.admin, &["inbox", "show", "pay", "--key", "nobody"]).await;
    assert_eq!(nobody.code, Some(1), "{nobody:?}");
    assert!(
        nobody.stderr.contains("reason delivery_not_found"),
        "{nobody:?}"
    );
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_list_pages_through_the_unknown_outcomes() {
    let redis = RedisServer::start();
    // Every call outlasts the 200 ms upstream timeout: every outcome is unknown.
    let upstream = Upstream::scripted(|_, _| Reply::slow(Duration::from_secs(2))).await;
    let gate = Gate::start(&times_out_to_unknown(&redis, &upstream)).await;
    let ids = ["p-list-0", "p-list-1", "p-list-2"];
    for id in ids {
        assert_eq!(
            deliver(&gate.url("/notify"), &payment(id)).await.status,
            504
        );
    }

    // People: one table of every page.
    let all = cli_at(
        gate.admin,
        &[
            "records", "list", "pay", "--state", "unknown", "--limit", "1", "--all",
        ],
    )
    .await
    .ok();
    let mut lines = all.stdout.lines();
    assert!(
        lines.next().unwrap().starts_with("KEY HASH  "),
        "{}",
        all.stdout
    );
    let mut keys: Vec<&str> = lines
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells[0].len(), 64, "{line}");
            assert_eq!(cells[2], "unknown", "{line}");
            cells[1]
        })
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ids, "{}", all.stdout);

    // One page: the rest is announced with its cursor, which the next run takes.
    let first = cli_at(
        gate.admin,
        &[
            "records", "list", "pay", "--state", "unknown", "--limit", "1",
        ],
    )
    .await
    .ok();
    let cursor = first
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("more: --cursor "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("a next page: {}", first.stdout))
        .to_owned();
    cli_at(
        gate.admin,
        &[
            "records", "list", "pay", "--state", "unknown", "--cursor", &cursor,
        ],
    )
    .await
    .ok();

    // Scripts: one page document per line, the items of all of them.
    let pages = cli_at(
        gate.admin,
        &[
            "--json", "records", "list", "pay", "--state", "unknown", "--limit", "1", "--all",
        ],
    )
    .await
    .ok();
    let items: usize = pages
        .stdout
        .lines()
        .map(|line| {
            let page: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(page["state"], "unknown", "{line}");
            page["items"].as_array().unwrap().len()
        })
        .sum();
    assert_eq!(items, 3, "{}", pages.stdout);
    assert!(pages.stdout.lines().count() >= 3, "{}", pages.stdout);

    let none = cli_at(
        gate.admin,
        &["records", "list", "pay", "--state", "in_flight"],
    )
    .await
    .ok();
    assert_eq!(none.stdout, "no in_flight records on route pay\n");
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
