//! Free ports, the one child-process guard and bounded short commands.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Ports [`free_port`] has handed out in this test process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Where [`free_port`] draws from: the ports below the kernel's ephemeral
/// range (`ip_local_port_range`, 32768–60999 by default). The kernel never
/// gives those to an outgoing connection or a `bind` to port 0, so a port
/// found free here stays free until the server meant for it binds it,
/// whatever the many HTTP clients and servers of the other test binary
/// (`.ci/run` runs two at once) are doing meanwhile.
fn unclaimed_ports() -> std::ops::Range<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    10_000..ephemeral_low.max(20_000)
}

/// A random number: each test process draws its own sequence, so the
/// two test binaries running at once do not walk the pool in step.
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = STATE
        .get_or_init(std::collections::hash_map::RandomState::new)
        .build_hasher();
    hasher.write_u64(DRAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// A port nobody listens on right now, never handed out before in this
/// process, and outside the kernel's ephemeral range ([`unclaimed_ports`]):
/// two tests running side by side never get the same one, and no client
/// socket takes it meanwhile. (The port is free, not reserved: a server
/// spawned on it must still prove it holds it, see [`listens`].)
pub fn free_port() -> u16 {
    let pool = unclaimed_ports();
    let width = u64::from(pool.end - pool.start);
    loop {
        let offset = u16::try_from(random() % width).expect("within the pool");
        let port = pool.start + offset;
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        if HANDED_OUT
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(port)
        {
            return port;
        }
    }
}

/// Whether process `pid` holds a TCP socket listening on `port`. Readiness
/// waits use it instead of "a connection succeeds": a child whose port was
/// taken in the meantime by another test's server must not pass for ready.
pub fn listens(pid: u32, port: u16) -> bool {
    let wanted = format!(":{port:04X}");
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    // local_address, st (0A = LISTEN), inode
                    let listening = fields.get(1)?.ends_with(&wanted) && *fields.get(3)? == "0A";
                    if !listening {
                        return None;
                    }
                    Some(format!("socket:[{}]", fields.get(9)?))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
}

/// `n` distinct free loopback ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut ports = Vec::with_capacity(n);
    for _ in 0..n * 20 {
        if ports.len() == n {
            break;
        }
        let port = free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "free ports");
    ports
}

/// A child process, SIGKILLed by PID and reaped on drop (also when a test
/// panics).
pub struct Proc {
    name: String,
    child: Option<Child>,
}

impl Proc {
    /// Spawns `command` with stdin, stdout and stderr all null.
    pub fn spawn(name: &str, command: &mut Command) -> Self {
        Self::spawn_logged(name, command, Stdio::null())
    }

    /// Spawns `command` with stdin and stdout null and stderr to `stderr`.
    pub fn spawn_logged(name: &str, command: &mut Command, stderr: impl Into<Stdio>) -> Self {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Self {
            name: name.to_owned(),
            child: Some(child),
        }
    }

    /// Spawns `command` with stdin and stderr null and its standard output
    /// handed back to read.
    pub fn spawn_reading(name: &str, command: &mut Command) -> (Self, std::process::ChildStdout) {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let proc = Self {
            name: name.to_owned(),
            child: Some(child),
        };
        (proc, stdout)
    }

    /// Whether the process ended on its own (e.g. it could not bind its port).
    pub fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|child| child.try_wait().ok().flatten().is_some())
    }

    /// Whether the process has not been killed or terminated yet.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id (panics once the process is gone).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL (by PID) and wait for the exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM (by PID) and wait for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child
            .wait()
            .unwrap_or_else(|e| panic!("wait {}: {e}", self.name))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.is_some() && std::thread::panicking() {
            eprintln!("[support] stopping {} after a panic", self.name);
        }
        self.kill();
    }
}

/// Runs a short command to completion within `limit` (killed by PID and a
/// panic otherwise) and returns its standard output.
pub fn run_bounded<S: AsRef<OsStr>>(program: &str, args: &[S], limit: Duration) -> String {
    let output = output_within(Command::new(program).args(args), limit);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `command` to completion within `limit` (killed by PID and a panic
/// otherwise): its exit status, standard output and standard error.
pub fn output_within(command: &mut Command, limit: Duration) -> std::process::Output {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = pipe.read_to_end(&mut out);
            out
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{program} did not finish within {limit:?}");
            }
        }
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// `idemgate check-config` on `text`: (exit code, stdout + stderr).
pub fn check_config(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run check-config");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), printed)
}

/// The peak resident set of process `pid` so far (`VmHWM`), in KiB; 0 if
/// it can not be read.
pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
