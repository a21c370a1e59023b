//! The process-level series on the real binary's `/metrics`: the process
//! metrics (CPU, memory, file descriptors) and `idemgate_build_info`'s
//! `revision` label.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::*;

/// The real binary on the embedded store; its upstream is never called.
fn start() -> (tempfile::TempDir, GateProcess) {
    let (dir, store) = temp_embedded_store();
    let gate = GateProcess::start(&config_text(&store, "http://127.0.0.1:9", ""));
    (dir, gate)
}

/// User + system CPU seconds of process `pid`, from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces), from field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    ticks as f64
        / String::from_utf8(per_second.stdout)
            .unwrap()
            .trim()
            .parse::<f64>()
            .unwrap()
}

/// Runs git in the repository; its trimmed stdout, if it succeeded.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    Some(String::from_utf8(out.stdout).ok()?.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_metrics_are_exposed_and_plausible() {
    let (_dir, mut gate) = start();
    // Some work, so the CPU counter has something to count.
    for _ in 0..200 {
        assert_eq!(admin_get(gate.admin, "/metrics").await.0, 200);
    }
    let (status, text) = admin_get(gate.admin, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let metrics = Exposition::parse(&text);
    let value = |name: &str| {
        metrics
            .value(name, &[])
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
    };
    // metrics-process exports the counter in whole seconds (it truncates):
    // it must equal the OS's own figure, truncated, read around the scrape.
    let cpu = value("process_cpu_seconds_total");
    let after = cpu_seconds(gate.pid());
    assert!(
        cpu <= after.floor() && cpu >= (after - 1.0).floor() && cpu < 600.0,
        "cpu {cpu}, /proc says {after}"
    );
    let rss = value("process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 4e9, "rss {rss}");
    // At least the two listeners, the store file and stdio.
    let fds = value("process_open_fds");
    assert!(fds >= 5.0 && fds <= value("process_max_fds"), "fds {fds}");
    assert!(value("process_threads") >= 2.0);
    let start = value("process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        start <= now && now - start < 600.0,
        "start {start}, now {now}"
    );

    // Read at scrape time: connections opened now show on the next scrape.
    let held: Vec<_> = connect_idle(gate.addr, 20).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (_, text) = admin_get(gate.admin, "/metrics").await;
        let now_fds = Exposition::parse(&text)
            .value("process_open_fds", &[])
            .unwrap();
        // A little slack: the first reading may have counted transient
        // descriptors (an earlier scrape's connection not yet closed).
        if now_fds >= fds + 18.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "open fds stayed at {now_fds} (before: {fds}) with 20 more connections"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    gate.terminate();
}

/// Opens `n` idle connections to `addr` and keeps them.
async fn connect_idle(addr: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_info_names_the_git_revision() {
    let (_dir, mut gate) = start();
    let (status, text) = admin_get(gate.admin, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let metrics = Exposition::parse(&text);
    let build = metrics.series("idemgate_build_info");
    assert_eq!(build.len(), 1, "{build:?}");
    assert_eq!(build[0].value, 1.0);
    let labels = &build[0].labels;
    assert_eq!(
        labels.get("version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let revision = labels.get("revision").expect("revision label");
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        // The tree may have turned dirty or clean since the build, so only
        // the hash is exact.
        Some(hash) => assert!(
            *revision == hash || *revision == format!("{hash}-dirty"),
            "revision {revision:?}, HEAD {hash}"
        ),
        None => assert!(!revision.is_empty()),
    }
    assert!(gate.terminate().success());
}

/// The metric names a document's tables list: the first cell of every row
/// that starts with a metric name (several names in one cell are split).
fn documented(path: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_path(path)).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter(|rest| rest.starts_with("idemgate_") || rest.starts_with("process_"))
        .flat_map(|rest| {
            let cell = rest.split(" |").next().unwrap_or_default();
            cell.split(", ")
                .map(|name| name.trim_matches('`').to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every metric family a `/metrics` text declares (`# TYPE` lines).
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|name| name.starts_with("idemgate_") || name.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// The metric tables of docs/operations.md and the contract list exactly what the
/// binary exports, both ways: a gate with every optional part on (an inbox
/// entity and probe route, hot keys with their per-key series, the replay cache, tracing)
/// after a delivery and its copy, so the histograms and the per-key
/// series (keys with duplicates only) have something to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exported_metric_is_documented_and_every_documented_one_exported() {
    let (_dir, store) = temp_embedded_store();
    let upstream = Upstream::start().await;
    let probe = "[route.probe]\npath = \"/orders/{json:/id}\"\nhandler_deadline = \"1s\"\n";
    let text = config_text(&store, &upstream.url(), &format!("{ENTITY_MACHINE}{probe}"))
        + "\n[route.inbox]\nack_body = \"success\"\n\n[tracing]\notlp_endpoint = \"http://127.0.0.1:9\"\n"
        + "\n[hot_keys]\nexport_keys = true\n";
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    for _ in 0..2 {
        let answer = deliver(&url, &entity_notice("metrics-table-1", "o", "success")).await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    // A refused change and a repeat: the entity counters' first events.
    for (id, status) in [
        ("metrics-table-2", "pending"),
        ("metrics-table-3", "success"),
    ] {
        let answer = deliver(&url, &entity_notice(id, "o", status)).await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    let (status, scraped) = admin_get(gate.admin, "/metrics").await;
    assert_eq!(status, 200, "{scraped}");
    let exported = exported(&scraped);
    for doc in ["docs/operations.md", "docs/contract.md"] {
        let documented = documented(doc);
        let undocumented: Vec<_> = exported.difference(&documented).collect();
        let missing: Vec<_> = documented.difference(&exported).collect();
        assert!(
            undocumented.is_empty() && missing.is_empty(),
            "{doc}: exported but not documented {undocumented:?}; documented but not exported {missing:?}"
        );
    }
    assert!(exported.len() > 35, "{exported:?}");
}
