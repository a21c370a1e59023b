//! The embedded store's start-up check (docs/operations.md, "Embedded
//! store start-up check"): a file emptied, deleted, altered or replaced
//! under its marker is refused, never taken for a first start; a clean
//! restart and a database from a release without markers start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

/// How many answered deliveries the damaged files hold.
const KEYS: usize = 300;

/// A store file with `KEYS` answered deliveries (`k-0` …), idemgate
/// stopped: the folder, the database path and the configuration.
async fn answered_store(upstream: &Upstream) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.redb");
    let admin = format!("[admin]\ntoken = \"literal:{TOKEN}\"\n");
    let text = config_text(&embedded_store(&path), &upstream.url(), &admin);
    let gate = Gate::start(&text).await;
    let url = gate.url("/notify");
    let tasks: Vec<_> = (0..8)
        .map(|lane| {
            let url = url.clone();
            tokio::spawn(async move {
                for i in (lane..KEYS).step_by(8) {
                    assert_eq!(deliver(&url, &payment(&format!("k-{i}"))).await.status, 200);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    gate.stop().await;
    closed(&path).await;
    (dir, path, text)
}

/// Waits until this process no longer holds the database at `path` open:
/// connection tasks may keep the stopped gate's store alive a moment, and
/// redb writes to the file when it closes, which would land after (and
/// over) the damage a test writes.
async fn closed(path: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Anything but a clean open (already open, or caught mid-close)
        // means the gate's store is still closing.
        match redb::Database::open(path) {
            Ok(db) => return drop(db),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                panic!("{} did not close: {error}", path.display())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The admin token of [`answered_store`]'s configuration.
const TOKEN: &str = "store-integrity-admin-token";

/// `/admin/info` of `gate`, as text.
async fn info(gate: &Gate) -> String {
    let headers: Headers = vec![("authorization".to_owned(), format!("Bearer {TOKEN}"))];
    let answer = send("GET", &format!("http://{}/admin/info", gate.admin), &headers, "").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    String::from_utf8_lossy(&answer.body).into_owned()
}

/// Why idemgate refused to start on `text`.
async fn refusal(text: &str) -> String {
    let config = idemgate::config::Config::parse(text).unwrap();
    match idemgate::app::start(config, None).await {
        Ok(app) => {
            app.stop().await;
            panic!("idemgate started on a damaged store");
        }
        Err(error) => error.to_string(),
    }
}

fn marker(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap().to_os_string();
    name.push(".marker");
    path.with_file_name(name)
}

/// The stored form of a record key: `idemgate:pay:` and 64 hex digits.
const KEY_PREFIX: &[u8] = b"idemgate:pay:";
const KEY_LEN: usize = KEY_PREFIX.len() + 64;

/// Where each stored record key starts in `file`.
fn key_starts(file: &[u8]) -> Vec<usize> {
    file.windows(KEY_PREFIX.len())
        .enumerate()
        .filter(|(_, w)| *w == KEY_PREFIX)
        .map(|(i, _)| i)
        .collect()
}

/// The byte offsets of every copy of the record key stored nearest the
/// middle of the file (records and expiries hold it, and an older page
/// version may still be on disk).
fn middle_key_copies(file: &[u8]) -> Vec<usize> {
    let starts = key_starts(file);
    assert!(!starts.is_empty(), "no stored key found in the file");
    let middle = file.len() / 2;
    let at = *starts.iter().min_by_key(|&&i| i.abs_diff(middle)).unwrap();
    let key = &file[at..at + KEY_LEN];
    starts
        .into_iter()
        .filter(|&i| file.get(i..i + key.len()) == Some(key))
        .collect()
}

/// The byte offsets of every copy of `count` record keys picked evenly
/// over the file.
fn spread_key_copies(file: &[u8], count: usize) -> Vec<usize> {
    let starts = key_starts(file);
    assert!(starts.len() >= count, "too few stored keys in the file");
    let keys: Vec<&[u8]> = (0..count)
        .map(|n| {
            let at = starts[n * starts.len() / count];
            &file[at..at + KEY_LEN]
        })
        .collect();
    starts
        .into_iter()
        .filter(|&i| {
            keys.iter()
                .any(|key| file.get(i..i + key.len()) == Some(*key))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_starts_and_replays_every_answer() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    assert!(marker(&path).exists(), "the first start writes the marker");
    let gate = Gate::start(&text).await;
    for i in [0, KEYS / 2, KEYS - 1] {
        let answer = deliver(&gate.url("/notify"), &payment(&format!("k-{i}"))).await;
        assert_eq!(answer.replayed(), Some("true"), "k-{i}");
    }
    assert_eq!(upstream.calls(), KEYS);
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_truncated_to_zero_bytes_is_refused() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    std::fs::File::create(&path).unwrap();
    let error = refusal(&text).await;
    assert!(error.contains("is empty (0 bytes)"), "{error}");
    assert!(error.contains(&path.display().to_string()), "{error}");
    assert!(
        error.contains(&format!("delete {}", marker(&path).display())),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_store_with_its_marker_left_is_refused_and_deleting_the_marker_starts_fresh() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    std::fs::remove_file(&path).unwrap();
    let error = refusal(&text).await;
    assert!(error.contains("is missing"), "{error}");
    assert!(!path.exists(), "the refusal created nothing");
    std::fs::remove_file(marker(&path)).unwrap();
    let gate = Gate::start(&text).await;
    let answer = deliver(&gate.url("/notify"), &payment("k-0")).await;
    assert_eq!(answer.replayed(), Some("false"), "a deliberate fresh start");
    gate.stop().await;
}

/// Where the default check (`background`) caught a damaged file.
#[derive(Debug, PartialEq, Eq)]
enum Caught {
    /// The open itself read a damaged page: refused before serving.
    AtStart,
    /// Found by the check while serving.
    WhileServing,
}

/// `damage` done to a store of answered deliveries, met by both integrity
/// checks, each on its own copy of the damaged file and marker: with
/// `before_serving`, idemgate refuses to start; with the default
/// (`background`), it is refused at start-up too if the open reads a
/// damaged page, else it starts and finds the damage while serving, and
/// from then on `/readyz` and `/admin/info` name it and a new delivery is
/// refused (503) without reaching the handler.
async fn damage_is_caught_by_both_checks(damage: impl Fn(&mut Vec<u8>)) -> Caught {
    let upstream = Upstream::start().await;
    let (dir, path, text) = answered_store(&upstream).await;
    let mut file = std::fs::read(&path).unwrap();
    damage(&mut file);
    std::fs::write(&path, &file).unwrap();
    let copy = dir.path().join("copy").join("idemgate.redb");
    std::fs::create_dir(copy.parent().unwrap()).unwrap();
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(marker(&path), marker(&copy)).unwrap();

    let before_serving = config_text(
        &format!("{}\nintegrity_check = \"before_serving\"", embedded_store(&copy)),
        &upstream.url(),
        "",
    );
    let error = refusal(&before_serving).await;
    assert!(error.contains("is damaged"), "{error}");
    assert!(error.contains("restore it from a backup"), "{error}");

    let config = idemgate::config::Config::parse(&text).unwrap();
    let app = match idemgate::app::start(config, None).await {
        Ok(app) => app,
        Err(error) => {
            let error = error.to_string();
            assert!(error.contains("is damaged"), "{error}");
            assert!(error.contains("restore it from a backup"), "{error}");
            return Caught::AtStart;
        }
    };
    let gate = Gate {
        addr: app.proxy_addr,
        admin: app.admin_addr,
        app: Some(app),
    };
    let why = readyz_says(gate.admin, 503, "is damaged").await;
    assert!(why.contains("restore it from a backup"), "{why}");
    assert!(why.contains(&path.display().to_string()), "{why}");
    let shown = info(&gate).await;
    assert!(shown.contains("is damaged"), "{shown}");
    let answer = deliver(&gate.url("/notify"), &payment("after-the-damage")).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.reason().as_deref(), Some("store_unavailable"));
    assert_eq!(upstream.calls(), KEYS, "nothing reached the handler");
    gate.stop().await;
    Caught::WhileServing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_a_stored_key_is_caught() {
    let caught = damage_is_caught_by_both_checks(|file| {
        // The last hex digit of a stored key, in every page that holds it:
        // a key may be found only in pages an earlier commit left free
        // (harmless, and not checked), so ten keys spread over the file
        // are damaged.
        for at in spread_key_copies(file, 10) {
            file[at + KEY_LEN - 1] ^= 0x01;
        }
    })
    .await;
    // Keys live in the trees' leaves, which the open does not read.
    assert_eq!(caught, Caught::WhileServing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_written_mid_file_is_caught() {
    damage_is_caught_by_both_checks(|file| {
        // 16 KiB of garbage from the start of the 4 KiB page that holds
        // the key nearest the middle.
        let page = middle_key_copies(file)[0] / 4096 * 4096;
        let end = (page + 16 * 1024).min(file.len());
        for (i, byte) in file[page..end].iter_mut().enumerate() {
            *byte = i.to_le_bytes()[0].wrapping_mul(151).wrapping_add(7);
        }
    })
    .await;
    // Either way: the open may need one of the pages.
}

/// An intact store verifies in the background and says so; a store that
/// checks before serving says that instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intact_store_is_verified_in_the_background() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    let gate = Gate::start(&text).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let shown = info(&gate).await;
        if shown.contains("verified") || std::time::Instant::now() > deadline {
            break shown;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(shown.contains("in the background"), "{shown}");
    assert_eq!(readyz_becomes(gate.admin, 200).await.trim(), "ready");
    let answer = deliver(&gate.url("/notify"), &payment("k-3")).await;
    assert_eq!(answer.replayed(), Some("true"));
    gate.stop().await;
    closed(&path).await;
    let before_serving = text.replace(
        &embedded_store(&path),
        &format!("{}\nintegrity_check = \"before_serving\"", embedded_store(&path)),
    );
    let gate = Gate::start(&before_serving).await;
    let shown = info(&gate).await;
    assert!(shown.contains("checked before serving"), "{shown}");
    gate.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_store_s_file_under_the_marker_is_refused() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    let (_other_dir, other) = temp_embedded_store();
    let other_path = _other_dir.path().join("idemgate.redb");
    let gate = Gate::start(&config_text(&other, &upstream.url(), "")).await;
    gate.stop().await;
    std::fs::copy(&other_path, &path).unwrap();
    let error = refusal(&text).await;
    assert!(error.contains("is not the store"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_a_release_without_markers_starts_replays_and_gets_its_marker() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    // What the previous release left: the records, no id, no marker.
    std::fs::remove_file(marker(&path)).unwrap();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let meta: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("meta");
        assert!(
            txn.delete_table(meta).unwrap(),
            "the store id lives in table meta"
        );
        txn.commit().unwrap();
    }
    let gate = Gate::start(&text).await;
    let answer = deliver(&gate.url("/notify"), &payment("k-7")).await;
    assert_eq!(answer.replayed(), Some("true"));
    assert_eq!(upstream.calls(), KEYS);
    gate.stop().await;
    assert!(marker(&path).exists(), "the upgrade wrote the marker");
    // And the marker now guards the file.
    std::fs::File::create(&path).unwrap();
    assert!(refusal(&text).await.contains("is empty (0 bytes)"));
}

/// A restored backup: a copy of the file taken before deliveries that
/// were answered since. Started on it, their retries would run again; it
/// is refused until the operator deletes the marker on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_copy_of_the_store_is_refused_as_a_restored_backup() {
    let upstream = Upstream::start().await;
    let (_dir, path, text) = answered_store(&upstream).await;
    let backup = path.with_extension("backup");
    std::fs::copy(&path, &backup).unwrap();
    let gate = Gate::start(&text).await;
    let later = deliver(&gate.url("/notify"), &payment("after-the-backup")).await;
    assert_eq!(later.status, 200);
    gate.stop().await;
    std::fs::copy(&backup, &path).unwrap();
    let error = refusal(&text).await;
    assert!(error.contains("is an older copy of its store"), "{error}");
    assert!(
        error.contains(&format!("deleting {}", marker(&path).display())),
        "{error}"
    );
    assert_eq!(upstream.calls(), KEYS + 1, "nothing ran on the copy");
}

#[test]
fn the_binary_exits_non_zero_with_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.redb");
    let text = config_text(&embedded_store(&path), "http://127.0.0.1:9", "");
    // A first start writes the database and its marker.
    let mut gate = GateProcess::start(&text);
    assert!(gate.terminate().success());
    std::fs::File::create(&path).unwrap();
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, &text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("idemgate kept running on an emptied store");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = printed.lines().filter(|l| l.contains("0 bytes")).collect();
    assert_eq!(lines.len(), 1, "{printed}");
    assert!(lines[0].contains(&path.display().to_string()), "{printed}");
}

/// A SIGKILL once the writer went idle: the next start loads the allocator
/// state the idle checkpoint recorded (quick repair) instead of rebuilding
/// it from the whole file, which is what keeps start-up flat as the store
/// grows; and every answered delivery still replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_starts_without_walking_its_file() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.redb");
    let text = config_text(&embedded_store(&path), &upstream.url(), "");
    let mut gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    for i in 0..40 {
        let answer = deliver(&url, &payment(&format!("kill-{i}"))).await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    // The writer records the allocator state once idle for 20 ms
    // (`store/embedded/writer.rs`, the idle checkpoint): a wide margin.
    tokio::time::sleep(Duration::from_secs(1)).await;
    gate.kill();
    let log = dir.path().join("restart.log");
    let mut gate = GateProcess::launch(&text, &[], Some(&log));
    let opened = log_with_line(&log, "saying the store opened", |line| {
        line.contains("embedded store opened")
    })
    .await;
    assert!(
        !opened.contains("rebuilding the allocator state"),
        "the start after the kill walked the whole file:\n{opened}"
    );
    for i in [0, 39] {
        let answer = deliver(&gate.url("/notify"), &payment(&format!("kill-{i}"))).await;
        assert_eq!(answer.replayed(), Some("true"), "kill-{i}");
    }
    assert_eq!(upstream.calls(), 40);
    assert!(gate.terminate().success());
}
