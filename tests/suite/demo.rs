//! `idemgate demo` must keep passing: it is the README's first command, and
//! the first thing a newcomer reads, so its output ends with its verdict.

use std::process::Command;
use std::time::Duration;

use crate::support::output_within;

/// The binary as a newcomer runs it: every scenario ok, idemgate's own log
/// (scenario 8 provokes two warnings on purpose) in the file the demo
/// names, nothing on stderr, and the verdict as the last line printed.
#[test]
fn every_demo_scenario_behaves_and_the_verdict_is_the_last_word() {
    let tmp = tempfile::tempdir().unwrap();
    let output = output_within(
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .arg("demo")
            .env("TMPDIR", tmp.path())
            .env_remove("RUST_LOG"),
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr.trim(), "", "the demo's output is its own");
    let last = stdout.lines().rev().find(|line| !line.trim().is_empty());
    assert!(
        last.is_some_and(|line| line.starts_with("all 8 scenarios ok")),
        "the verdict comes last: {last:?}"
    );
    let log = tmp.path().join("idemgate-demo.log");
    assert!(
        stdout.contains(&log.display().to_string()),
        "the summary names the log file: {stdout}"
    );
    let logged = std::fs::read_to_string(&log).expect("the log file");
    assert!(
        logged.contains("WARN"),
        "scenario 8's warnings went to the file: {logged:?}"
    );
}
