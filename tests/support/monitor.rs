//! [`DataWatch`]: the commands a `redis-server` runs on data, as `MONITOR`
//! shows them, for the tests that assert a request never reached the
//! store.
//!
//! Counting by command name (`INFO commandstats`) can not tell a record
//! read from the gate's own health reads, which run on timers whatever
//! the test does: the replay cache's epoch marker (`GET`, every second),
//! the generation marker, the settings reads. A test whose window
//! happened to span a tick failed, more often the busier the machine.
//! `MONITOR` names each command's key, so those are left out by what
//! they touch, at any moment.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Proc, RedisTls, wait_until};

/// Commands that read or change no data: connection set-up, the
/// harness's own calls, the settings watchers.
const NOT_DATA: &[&str] = &[
    "ping", "echo", "info", "config", "client", "hello", "select", "command", "auth", "role",
];

/// Key suffixes of the markers the gate keeps for itself: the replay
/// cache's epoch and the store's generation (`store::generation`).
const OWN_MARKERS: &[&str] = &[":replay-cache-epoch", ":generation"];

/// A `MONITOR` of one server from the moment it is attached; stopped (by
/// PID) when dropped.
pub struct DataWatch {
    port: u16,
    tls: Option<RedisTls>,
    lines: Arc<Mutex<Vec<String>>>,
    _monitor: Proc,
}

impl DataWatch {
    /// Attaches a `MONITOR` to the server on `port` and waits until it
    /// runs, so every command after this call is seen.
    pub fn attach(port: u16, tls: Option<&RedisTls>) -> Self {
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
        if let Some(tls) = tls {
            command.args(tls.cli_args());
        }
        command.arg("MONITOR");
        let (monitor, stdout) = Proc::spawn_reading("redis-cli MONITOR", &mut command);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().expect("monitor lines").push(line);
            }
        });
        let watch = Self {
            port,
            tls: tls.cloned(),
            lines,
            _monitor: monitor,
        };
        wait_until(Duration::from_secs(10), "MONITOR attached", || {
            watch
                .lines
                .lock()
                .expect("monitor lines")
                .iter()
                .any(|l| l == "OK")
        });
        watch
    }

    /// The data commands run since [`DataWatch::attach`], each as its
    /// monitor line: every command sent before this call is in (a marker
    /// `ECHO` is sent and waited for).
    pub fn commands(&self) -> Vec<String> {
        static MARKS: AtomicU64 = AtomicU64::new(0);
        let mark = MARKS.fetch_add(1, Ordering::Relaxed);
        let nonce = format!("idemgate-test-watch-{}-{mark}", std::process::id());
        super::tls_cli(self.port, self.tls.as_ref(), &["ECHO", &nonce]);
        let quoted = format!("\"{nonce}\"");
        wait_until(Duration::from_secs(10), "MONITOR saw the marker", || {
            self.lines
                .lock()
                .expect("monitor lines")
                .iter()
                .any(|l| l.ends_with(&quoted))
        });
        let lines = self.lines.lock().expect("monitor lines");
        let end = lines.iter().position(|l| l.ends_with(&quoted)).unwrap_or(0);
        lines[..end]
            .iter()
            .filter(|line| is_data(line))
            .cloned()
            .collect()
    }

    /// How many data commands ran since [`DataWatch::attach`].
    pub fn count(&self) -> usize {
        self.commands().len()
    }
}

/// Whether a monitor line is a command on data: not one of [`NOT_DATA`],
/// and not on one of the gate's [`OWN_MARKERS`].
fn is_data(line: &str) -> bool {
    let Some(args) = line.split_once("] ").map(|(_, args)| quoted(args)) else {
        return false;
    };
    let Some(command) = args.first() else {
        return false;
    };
    let command = command.to_ascii_lowercase();
    if NOT_DATA.contains(&command.as_str()) {
        return false;
    }
    let own = args
        .get(1)
        .is_some_and(|key| OWN_MARKERS.iter().any(|marker| key.contains(marker)));
    !own
}

/// The double-quoted arguments of a monitor line, escapes kept as written.
fn quoted(args: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    arg.push(c);
                    if let Some(next) = chars.next() {
                        arg.push(next);
                    }
                }
                '"' => break,
                _ => arg.push(c),
            }
        }
        found.push(arg);
    }
    found
}

#[test]
fn monitor_lines_are_read_by_command_and_key() {
    let line = |args: &str| format!("1700000000.123456 [0 127.0.0.1:5555] {args}");
    assert!(is_data(&line(r#""evalsha" "abc" "2" "idemgate:{k}" "x""#)));
    assert!(is_data(&line(r#""GET" "idemgate:rec:\"q\"""#)));
    assert!(!is_data(&line(r#""get" "idemgate:replay-cache-epoch""#)));
    assert!(!is_data(&line(r#""getex" "idemgate:generation""#)));
    assert!(!is_data(&line(r#""ping""#)));
    assert!(!is_data(&line(r#""client" "tracking" "on""#)));
    assert!(!is_data("OK"));
}
