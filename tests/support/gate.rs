//! idemgate under test: the test route's configuration, [`Gate`] (the
//! library started in this process) and [`GateProcess`] (the real binary).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idemgate::app::RunningApp;
use idemgate::config::Config;

use super::{Proc, RedisServer, SECRET, Upstream, free_port, listens};

/// A test configuration: one route `pay` on `/notify`, generic HMAC over
/// `{timestamp}.{body}` with the timestamp in `X-Timestamp` (seconds), key
/// `json:/id`. `store` is a `[store]` body; `extra` is appended to
/// `[route.idempotency]`.
pub fn config_text(store: &str, upstream: &str, extra: &str) -> String {
    format!(
        r#"{}
[limits]
shutdown_grace = "5s"

[[route]]
name = "pay"
path_prefix = "/notify"

[route.signature]
scheme = "hmac"
secrets = ["literal:{SECRET}", "literal:previous-secret-0123456789"]
signature = "header:X-Signature"
message = "{{timestamp}}.{{body}}"
timestamp = "header:X-Timestamp"
tolerance = "5m"

[route.idempotency]
key = ["json:/id"]
retention = "1h"
{extra}
"#,
        base_sections(store, upstream)
    )
}

/// The sections every test configuration starts with: `[listen]` (both
/// listeners on port 0), `[store]` with the body `store`, and `[upstream]`
/// with a 5 s timeout.
pub fn base_sections(store: &str, upstream: &str) -> String {
    format!(
        r#"
[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
{store}

[upstream]
url = "{upstream}"
timeout = "5s"
"#
    )
}

/// The `[store]` body for `redis`: the default durability (`fsync`) on a
/// server with an AOF fsynced per write, `memory` on one without, and a
/// store timeout of [`TEST_STORE_TIMEOUT`].
pub fn redis_store(redis: &RedisServer) -> String {
    redis_store_timing_out(redis, TEST_STORE_TIMEOUT)
}

/// The `command_timeout` of [`redis_store`]: long enough that a loaded
/// CI machine (two cores, the system tier beside the suite) does not turn
/// a slow reply into a 503 in a test that is about something else. A test
/// about what a timeout does sets a short one itself
/// ([`redis_store_timing_out`]).
pub const TEST_STORE_TIMEOUT: &str = "1s";

/// [`redis_store`] with the store timeout `timeout` (`"250ms"`, `"5s"`).
pub fn redis_store_timing_out(redis: &RedisServer, timeout: &str) -> String {
    let durability = if redis.is_persistent() {
        ""
    } else {
        "\ndurability = \"memory\""
    };
    format!(
        "kind = \"redis\"\nurl = \"{}\"\ncommand_timeout = \"{timeout}\"{durability}",
        redis.url()
    )
}

pub fn embedded_store(path: &std::path::Path) -> String {
    format!("kind = \"embedded\"\npath = \"{}\"", path.display())
}

/// A fresh embedded store in its own temporary directory, for tests that
/// need one file nobody else writes: the directory (keep it alive for the
/// whole test; dropping it deletes the store) and the `[store]` body.
pub fn temp_embedded_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = embedded_store(&dir.path().join("idemgate.redb"));
    (dir, store)
}

/// idemgate running in this process.
pub struct Gate {
    pub app: Option<RunningApp>,
    pub addr: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
}

impl Gate {
    pub async fn start(text: &str) -> Self {
        let config = Config::parse(text).expect("test config is valid");
        let app = idemgate::app::start(config, None)
            .await
            .expect("idemgate starts");
        Self {
            addr: app.proxy_addr,
            admin: app.admin_addr,
            app: Some(app),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn stop(mut self) {
        if let Some(app) = self.app.take() {
            app.stop().await;
        }
    }
}

/// The binary [`GateProcess`] starts: this build's, or the one named by
/// `IDEMGATE_BIN`, so one test can measure an older build the same way
/// (bench/RESULTS.md says where that was done).
fn binary() -> std::ffi::OsString {
    std::env::var_os("IDEMGATE_BIN")
        .unwrap_or_else(|| std::ffi::OsString::from(env!("CARGO_BIN_EXE_idemgate")))
}

/// The `idemgate` binary as a child process.
pub struct GateProcess {
    child: Proc,
    pub addr: SocketAddr,
    /// The admin listener (/metrics, /healthz, /readyz, /admin/records).
    pub admin: SocketAddr,
    /// The configuration file it runs with.
    pub config_path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl GateProcess {
    /// Starts the binary with `text` (whose listen section is replaced by
    /// fresh ports) and waits until it accepts connections.
    pub fn start(text: &str) -> Self {
        Self::launch(text, &[], None)
    }

    /// Like `start`, with extra environment variables and, if `log` is
    /// given, debug-level logs written to that file.
    pub fn launch(text: &str, envs: &[(&str, &str)], log: Option<&std::path::Path>) -> Self {
        // A port can be taken between choosing it and the child binding it;
        // the child then exits, and is started again on fresh ports.
        for _ in 0..5 {
            if let Some(gate) = Self::try_launch(text, envs, log) {
                return gate;
            }
        }
        panic!("idemgate did not start on five pairs of free ports");
    }

    /// One start on fresh ports; `None` if the child exited before it
    /// listened on both.
    fn try_launch(
        text: &str,
        envs: &[(&str, &str)],
        log: Option<&std::path::Path>,
    ) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let admin_port = free_port();
        let text = text
            .replace(
                "proxy = \"127.0.0.1:0\"",
                &format!("proxy = \"127.0.0.1:{port}\""),
            )
            .replace(
                "admin = \"127.0.0.1:0\"",
                &format!("admin = \"127.0.0.1:{admin_port}\""),
            );
        let path = dir.path().join("idemgate.toml");
        std::fs::write(&path, text).expect("write config");
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::null(),
        };
        let mut child = Proc::spawn_logged(
            "idemgate",
            Command::new(binary())
                .args(["serve", "--config"])
                .arg(&path)
                .env("RUST_LOG", if log.is_some() { "debug" } else { "warn" })
                .envs(envs.iter().copied()),
            stderr,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(listens(child.pid(), port) && listens(child.pid(), admin_port)) {
            if child.has_exited() {
                return None;
            }
            assert!(Instant::now() < deadline, "idemgate did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
            config_path: path,
            _dir: dir,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// SIGKILL: no shutdown, no cleanup.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.child.terminate()
    }
}

/// The usual set-up: a `redis-server`, an [`Upstream`] answering 200 and
/// idemgate in this process on the test route ([`config_text`]) with `extra`
/// appended to `[route.idempotency]`.
pub async fn redis_gate(extra: &str) -> (RedisServer, Upstream, Gate) {
    redis_gate_for(Upstream::start().await, extra).await
}

/// [`redis_gate`] in front of a given `upstream` (scripted, slow, failing).
pub async fn redis_gate_for(upstream: Upstream, extra: &str) -> (RedisServer, Upstream, Gate) {
    redis_gate_edited(upstream, extra, |text| text).await
}

/// [`redis_gate_for`] with the configuration text passed through `edit`
/// before idemgate starts, for tests that change the test route beyond
/// `[route.idempotency]` (its key, its signed message, its limits).
pub async fn redis_gate_edited(
    upstream: Upstream,
    extra: &str,
    edit: impl FnOnce(String) -> String,
) -> (RedisServer, Upstream, Gate) {
    let redis = RedisServer::start();
    let text = edit(config_text(&redis_store(&redis), &upstream.url(), extra));
    let gate = Gate::start(&text).await;
    (redis, upstream, gate)
}

/// Polls `/readyz` until it answers `status`; panics after 10 s.
pub async fn readyz_becomes(admin: std::net::SocketAddr, status: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (got, body) = super::admin_get(admin, "/readyz").await;
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz answered {got} ({body}), expected {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `/readyz`'s body once it answers `status` with a body containing
/// `cause`; panics after 10 s with the last answer. A store that can not
/// be reached may first read as timed out on a loaded machine and only
/// then as what refuses it.
pub async fn readyz_says(admin: std::net::SocketAddr, status: u16, cause: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (got, body) = super::admin_get(admin, "/readyz").await;
        if got == status && body.contains(cause) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz answered {got} ({body}), expected {status} with {cause:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The log file so far (empty before the first line).
pub fn log_text(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The log once a line satisfies `wanted` (lines are written in batches);
/// panics after 5 s with the log so far.
pub async fn log_with_line(
    log: &std::path::Path,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let found = super::eventually(Duration::from_secs(5), || {
        log_text(log).lines().any(&wanted)
    })
    .await;
    let text = log_text(log);
    assert!(found, "no log line {what}:\n{text}");
    text
}

/// A gate on Redis whose connections get `lines` in `[limits]`.
pub async fn gate_with_limits(lines: &str) -> (RedisServer, Upstream, Gate) {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let text = config_text(&redis_store(&redis), &upstream.url(), "")
        .replace("[limits]", &format!("[limits]\n{lines}"));
    let gate = Gate::start(&text).await;
    (redis, upstream, gate)
}
