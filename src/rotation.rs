//! Secret rotation without a restart: the one reload path, run on SIGHUP
//! (`main.rs`) and by the file watcher here.
//!
//! Kubernetes mounts a Secret as a directory whose files are symlinks into
//! a `..data` directory; an update writes a new directory and swaps the
//! `..data` symlink, so the file's path never changes and inotify on it
//! sees nothing reliable. The watcher therefore polls: every
//! `[secrets] watch_interval` it hashes (SHA-256) the bytes read through
//! each `file:` secret's and public key's path, and when any hash differs
//! from the last poll it runs [`reload`], exactly what SIGHUP runs. A
//! source whose new content can not be used (unreadable, not decodable, or
//! weaker than its scheme's strength rule: empty, whitespace only,
//! truncated) keeps its old value, is logged at ERROR naming the route and
//! setting (never the value) and is counted in
//! `idemgate_secret_reload_failures_total{route, reason}`; the new hash is
//! remembered all the same, so a broken file is reported once, and the
//! next change to it is tried again.

use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::config::{ADMIN_LABEL, Config, ReloadFailure, Scheme};

/// `idemgate_secret_reload_failures_total{route, reason}`: `file:`
/// secrets and public keys whose reload (SIGHUP or the file watcher) kept
/// the old value: `unreadable`, `invalid` (not decodable) or `weak`
/// (below the scheme's strength rule). `route="_admin"`: `[admin] token`.
pub(crate) const SECRET_RELOAD_FAILURES_TOTAL: &str = "idemgate_secret_reload_failures_total";

/// Registers the help text of [`SECRET_RELOAD_FAILURES_TOTAL`].
pub(crate) fn describe() {
    metrics::describe_counter!(
        SECRET_RELOAD_FAILURES_TOTAL,
        "Reloads of a file: secret or public key that kept the old value, by route and reason"
    );
}

/// Re-reads every `file:` secret and public key of `config` and logs the
/// outcome, naming what triggered it (`"SIGHUP"`, `"file change"`).
/// Returns whether every source could be used.
pub fn reload(config: &Config, trigger: &str) -> bool {
    match config.reload_secrets() {
        Ok(changed) => {
            tracing::info!(changed, "{trigger}: file secrets re-read");
            true
        }
        Err(failures) => {
            for failure in failures {
                tracing::error!(
                    route = failure.route.as_str(),
                    setting = failure.setting.as_str(),
                    reason = failure.error.reason.as_str(),
                    "{trigger}: {}: {}; keeping the previous value",
                    failure.setting,
                    failure.error
                );
                metrics::counter!(
                    SECRET_RELOAD_FAILURES_TOTAL,
                    "route" => failure.route,
                    "reason" => failure.error.reason.as_str()
                )
                .increment(1);
            }
            false
        }
    }
}

/// Creates `idemgate_secret_reload_failures_total` at 0 for every route
/// that verifies with credentials (and `_admin` with an admin token), so
/// an alert on its increase has a series from start-up on.
pub fn zero_metrics(config: &Config) {
    let routes = config
        .routes
        .iter()
        .filter(|route| !matches!(route.scheme, Scheme::None))
        .map(|route| route.name.as_str());
    let admin = config.admin_token.as_ref().map(|_| ADMIN_LABEL);
    for route in routes.chain(admin) {
        for reason in ReloadFailure::ALL {
            metrics::counter!(
                SECRET_RELOAD_FAILURES_TOTAL,
                "route" => route.to_owned(),
                "reason" => reason.as_str()
            )
            .increment(0);
        }
    }
}

/// SHA-256 of a file's bytes; `None` if it can not be read (a missing
/// file differs from every readable one, so its return is seen).
fn fingerprint(path: &std::path::Path) -> Option<[u8; 32]> {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(bytes).into())
}

/// The last seen fingerprint of every `file:` source.
#[derive(Debug)]
struct Fingerprints {
    files: Vec<(PathBuf, Option<[u8; 32]>)>,
}

impl Fingerprints {
    fn of(files: Vec<PathBuf>) -> Self {
        Self {
            files: files
                .into_iter()
                .map(|path| {
                    let print = fingerprint(&path);
                    (path, print)
                })
                .collect(),
        }
    }

    /// Hashes every file again; true if any differs from the last time.
    fn changed(&mut self) -> bool {
        let mut changed = false;
        for (path, last) in &mut self.files {
            let now = fingerprint(path);
            if now != *last {
                *last = now;
                changed = true;
            }
        }
        changed
    }
}

/// Polls `config`'s `file:` sources every `interval` until `shutdown`, and
/// runs [`reload`] when any changed. Returns at once when there is none.
pub async fn watch(
    config: std::sync::Arc<Config>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let files = config.secret_files();
    if files.is_empty() {
        return;
    }
    tracing::debug!(files = files.len(), ?interval, "watching file secrets");
    let mut prints = Fingerprints::of(files);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                if prints.changed() {
                    reload(&config, "file change");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::tests::MINIMAL;
    use crate::config::{Scheme, Secret};

    /// The crate's minimal configuration with its first secret read from
    /// `secret` and `file:` sources polled every `interval`.
    fn config(secret: &std::path::Path, interval: &str) -> Config {
        let first = "literal:s3cret-0123456789abcdef";
        assert!(MINIMAL.contains(first), "the minimal route's first secret");
        let text = MINIMAL.replace(first, &format!("file:{}", secret.display()));
        Config::parse(&format!(
            "{text}\n[secrets]\nwatch_interval = \"{interval}\"\n"
        ))
        .unwrap()
    }

    fn first_secret(config: &Config) -> Secret {
        let Scheme::Hmac(hmac) = &config.routes[0].scheme else {
            panic!("an hmac route");
        };
        hmac.secrets[0].clone()
    }

    /// A file `secret` holding `value` in a fresh directory, which lives
    /// as long as the returned guard.
    fn secret_file(value: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, value).unwrap();
        (dir, path)
    }

    /// Swaps `link` to a fresh directory holding `value`, the way the
    /// kubelet swaps `..data`: new directory, new symlink, rename over.
    fn swap(dir: &std::path::Path, generation: u32, value: &str) {
        let target = dir.join(format!("gen-{generation}"));
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("secret"), value).unwrap();
        let staged = dir.join("..data_tmp");
        std::os::unix::fs::symlink(&target, &staged).unwrap();
        std::fs::rename(&staged, dir.join("..data")).unwrap();
    }

    /// Lets `seconds` of (paused) time pass, then checks the value
    /// `secret` holds; `why` says what the step shows.
    async fn expect_after(seconds: u64, secret: &Secret, expected: &str, why: &str) {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        assert_eq!(&*secret.expose(), expected.as_bytes(), "{why}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_symlink_swap_is_reloaded_within_one_interval() {
        const FIRST: &str = "first-secret-0123456789";
        const SECOND: &str = "second-secret-0123456789";
        const FOURTH: &str = "fourth-secret-0123456789";
        let dir = tempfile::tempdir().unwrap();
        swap(dir.path(), 1, FIRST);
        let path = dir.path().join("secret");
        std::os::unix::fs::symlink(dir.path().join("..data/secret"), &path).unwrap();
        let config = Arc::new(config(&path, "10s"));
        assert_eq!(config.secrets_watch, Some(Duration::from_secs(10)));
        let secret = first_secret(&config);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(watch(
            Arc::clone(&config),
            Duration::from_secs(10),
            shutdown.clone(),
        ));
        tokio::task::yield_now().await;

        swap(dir.path(), 2, SECOND);
        expect_after(9, &secret, FIRST, "not before the interval").await;
        expect_after(2, &secret, SECOND, "within one interval").await;

        // A broken file keeps the old value; fixing it is seen again.
        swap(dir.path(), 3, "");
        expect_after(10, &secret, SECOND, "a failed reload keeps it").await;
        swap(dir.path(), 4, FOURTH);
        expect_after(10, &secret, FOURTH, "a fixed file is read").await;

        shutdown.cancel();
        task.await.unwrap();
    }

    #[test]
    fn weak_or_truncated_files_keep_the_old_secret_and_are_counted() {
        let (_dir, path) = secret_file("genuine-secret-0123456789\n");
        let config = config(&path, "0s");
        let secret = first_secret(&config);
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            zero_metrics(&config);
            for weak in [" \n", "genuine\n", "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"] {
                std::fs::write(&path, weak).unwrap();
                assert!(!reload(&config, "SIGHUP"), "{weak:?}");
                assert_eq!(&*secret.expose(), b"genuine-secret-0123456789");
            }
            std::fs::remove_file(&path).unwrap();
            assert!(!reload(&config, "SIGHUP"));
            std::fs::write(&path, "rotated-secret-0123456789").unwrap();
            assert!(reload(&config, "SIGHUP"));
        });
        assert_eq!(&*secret.expose(), b"rotated-secret-0123456789");
        let text = handle.render();
        for line in [
            "idemgate_secret_reload_failures_total{route=\"payments\",reason=\"weak\"} 3",
            "idemgate_secret_reload_failures_total{route=\"payments\",reason=\"unreadable\"} 1",
            "idemgate_secret_reload_failures_total{route=\"payments\",reason=\"invalid\"} 0",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    #[test]
    fn unchanged_files_are_not_reloaded() {
        let (_dir, path) = secret_file("first");
        let mut prints = Fingerprints::of(vec![path.clone()]);
        assert!(!prints.changed());
        std::fs::write(&path, "second").unwrap();
        assert!(prints.changed());
        assert!(!prints.changed(), "remembered");
        std::fs::remove_file(&path).unwrap();
        assert!(prints.changed(), "a vanished file is a change");
    }

    #[test]
    fn zero_turns_the_watcher_off_and_sources_are_listed_once() {
        let (_dir, path) = secret_file("s-secret-0123456789");
        let config = config(&path, "0s");
        assert_eq!(config.secrets_watch, None);
        assert_eq!(config.secret_files(), vec![path]);
    }
}
