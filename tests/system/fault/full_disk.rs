//! The embedded store on a real filesystem that fills up: a small tmpfs
//! mounted for the test (root only). Deliveries are in the handler when the
//! disk fills, and it stays full for longer than lease + `unknown_hold`:
//! each sender still gets the handler's answer, no copy runs a delivery
//! again, and once space returns every copy gets the stored answer. An
//! almost full disk (room for claims, not for a large answer) keeps
//! `/readyz` at 503 rather than flapping.

use std::io::Write;

use super::*;

/// Keys in the handler when the disk fills.
const KEYS: usize = 10;

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` when this machine does not let the test mount (not root, or
    /// no `CAP_SYS_ADMIN`): said on stderr, and a failure instead when
    /// `IDEMGATE_REQUIRE_TMPFS` is set.
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status();
        if status.is_ok_and(|s| s.success()) {
            return Some(Self { dir });
        }
        assert!(
            std::env::var_os("IDEMGATE_REQUIRE_TMPFS").is_none(),
            "IDEMGATE_REQUIRE_TMPFS is set but a tmpfs can not be mounted"
        );
        eprintln!("[fault] full_disk: skipped: a tmpfs can not be mounted here (needs root)");
        None
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fills the filesystem of `path` with a file there, then gives `leave`
/// bytes back; the file's size.
fn fill_leaving(path: &Path, leave: u64) -> u64 {
    let mut file = std::fs::File::create(path).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0;
    loop {
        match file.write(&chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n as u64,
        }
    }
    let kept = written.saturating_sub(leave);
    file.set_len(kept).expect("filler shortened");
    let _ = file.sync_all();
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: mounts a tmpfs"]
async fn a_full_disk_never_runs_an_answered_delivery_again() {
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    // Answers of 400 KiB: storing them needs room the store file does not
    // have yet, so the full disk refuses them.
    let upstream = Upstream::scripted(|_, _| Reply {
        delay: Duration::from_millis(1500),
        ..Reply::with_body(bytes::Bytes::from(vec![b'a'; 400 * 1024]))
    })
    .await;
    let store = embedded_store(&fs.path().join("idemgate.redb"));
    let text = config_text(
        &store,
        &upstream.url(),
        "lease = \"1s\"\nunknown_hold = \"1s\"\non_in_flight = \"conflict\"",
    );
    let gate = GateProcess::start(&text);
    let url = gate.url("/notify");
    let ids: Vec<String> = (0..KEYS).map(|i| format!("full-disk-{i}")).collect();
    let firsts: Vec<_> = ids
        .iter()
        .map(|id| {
            let (url, body) = (url.clone(), payment(id));
            tokio::spawn(async move { deliver(&url, &body).await })
        })
        .collect();
    wait_until(Duration::from_secs(10), "every key in the handler", || {
        upstream.calls() == KEYS
    });
    let filler = fs.path().join("filler");
    let filled = fill_leaving(&filler, 0);
    let full_at = Instant::now();
    for (id, first) in ids.iter().zip(firsts) {
        let answer = first.await.unwrap();
        assert_eq!(
            answer.status, 200,
            "{id}: the sender gets its answer: {answer:?}"
        );
    }
    // Full for longer than lease + unknown_hold, copies arriving all along:
    // whatever they are told, none may run the delivery again.
    let mut during = HashMap::<u16, usize>::new();
    while full_at.elapsed() < Duration::from_secs(4) {
        for id in &ids {
            *during
                .entry(deliver(&url, &payment(id)).await.status)
                .or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        upstream.calls(),
        KEYS,
        "nothing ran again while the disk was full"
    );
    std::fs::remove_file(&filler).expect("filler removed");
    let freed = Instant::now();
    for id in &ids {
        poll(
            "a copy replayed once space returned",
            Duration::from_secs(15),
            Duration::from_millis(100),
            async || {
                let copy = deliver(&url, &payment(id)).await;
                (copy.status == 200 && copy.replayed() == Some("true")).then_some(())
            },
        )
        .await;
    }
    assert_executed_times(&upstream, &ids, 1);
    println!(
        "[fault] a_full_disk_never_runs_an_answered_delivery_again: {KEYS} keys in the handler \
         when {filled} filler bytes filled the disk; copies while full {during:?}; every \
         copy replayed {:.1} s after space returned; 0 run twice",
        freed.elapsed().as_secs_f64()
    );
    drop(gate);
    report_time("a_full_disk_never_runs_an_answered_delivery_again", started);
}

/// Room for claims and small answers, not for a 900 KiB one (below
/// `max_stored_answer_bytes`, 1 MiB): the large answer is sent, its storing
/// fails, and from then on `/readyz` stays 503 (ready needs room for the
/// largest answer the store may keep, not only for a small probe) until
/// space returns; then the answer is stored and replayed, run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: mounts a tmpfs"]
async fn an_almost_full_disk_is_not_ready_until_the_largest_answer_fits() {
    const NAME: &str = "an_almost_full_disk_is_not_ready_until_the_largest_answer_fits";
    let _lane = SINGLE_LANE.lock().await;
    let started = Instant::now();
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let upstream = Upstream::scripted(|_, body| {
        let large = String::from_utf8_lossy(body).contains("large");
        let size = if large { 900 * 1024 } else { 64 };
        Reply::with_body(bytes::Bytes::from(vec![b'a'; size]))
    })
    .await;
    let store = embedded_store(&fs.path().join("idemgate.redb"));
    let gate = GateProcess::start(&config_text(&store, &upstream.url(), ""));
    let url = gate.url("/notify");
    assert_eq!(deliver(&url, &payment("small-before")).await.status, 200);
    readyz_becomes(gate.admin, 200).await;
    let filler = fs.path().join("filler");
    fill_leaving(&filler, 600 * 1024);

    let large = deliver(&url, &payment("large-1")).await;
    assert_eq!(large.status, 200, "the sender gets the handler's answer");
    readyz_becomes(gate.admin, 503).await;
    let mut ready = 0;
    for _ in 0..30 {
        if admin_get(gate.admin, "/readyz").await.0 == 200 {
            ready += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        ready, 0,
        "/readyz stays 503 while a large answer can not be kept"
    );

    std::fs::remove_file(&filler).expect("filler removed");
    readyz_becomes(gate.admin, 200).await;
    poll(
        "the large answer stored and replayed",
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || {
            let copy = deliver(&url, &payment("large-1")).await;
            (copy.status == 200 && copy.replayed() == Some("true")).then_some(())
        },
    )
    .await;
    let ids = ["small-before".to_owned(), "large-1".to_owned()];
    assert_executed_times(&upstream, &ids, 1);
    println!(
        "[fault] {NAME}: 600 KiB free, a 900 KiB answer sent 200 and not yet stored: /readyz \
         200 in {ready} of 30 samples over 3 s; once space returned the answer was stored and \
         replayed, run once"
    );
    report_time(NAME, started);
}
