//! [`Browser`]: a real headless Chromium driven over WebDriver
//! (`chromedriver` on a free loopback port, the `fantoccini` client), for
//! the console's tests. Debian's `chromium` and `chromium-driver` packages
//! provide both; `.ci/run` installs them and sets
//! `IDEMGATE_REQUIRE_BROWSER=1`, so a missing browser fails CI while a
//! laptop without one skips with a message.
//!
//! With `IDEMGATE_SCREENSHOTS=<dir>` set, [`Browser::screenshot`] writes
//! PNGs there (the console's pictures in `docs/img/` come from it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use hyper_util::client::legacy::connect::HttpConnector;

use super::{Proc, free_port, listens};

/// How long any wait for the page may take.
pub const PAGE_LIMIT: Duration = Duration::from_secs(15);

/// A headless Chromium session and the `chromedriver` that runs it.
pub struct Browser {
    pub client: Client,
    driver: Proc,
    _profile: tempfile::TempDir,
}

/// `name` on `PATH`, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// The Chromium binary and its driver: Debian's names first.
fn installed() -> Option<(PathBuf, PathBuf)> {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(on_path)?;
    Some((browser, on_path("chromedriver")?))
}

/// The processes whose parent is `pid`, and theirs (read from `/proc`).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.filter_map(Result::ok) {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces: split after ')'.
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((child, ppid));
            }
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

impl Browser {
    /// A fresh headless session, or `None` (with a message) when Chromium
    /// or `chromedriver` is absent and `IDEMGATE_REQUIRE_BROWSER` is unset.
    pub async fn start(test: &str) -> Option<Self> {
        let Some((browser, driver)) = installed() else {
            assert!(
                std::env::var_os("IDEMGATE_REQUIRE_BROWSER").is_none(),
                "{test}: IDEMGATE_REQUIRE_BROWSER is set but chromium or chromedriver is missing \
                 (apt-get install chromium chromium-driver)"
            );
            eprintln!(
                "SKIPPED {test}: no chromium/chromedriver on PATH \
                 (apt-get install chromium chromium-driver; .ci/run requires them)"
            );
            return None;
        };
        let profile = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let mut driver = Proc::spawn(
            "chromedriver",
            Command::new(driver)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1"),
        );
        let deadline = Instant::now() + PAGE_LIMIT;
        while !listens(driver.pid(), port) {
            assert!(!driver.has_exited(), "chromedriver exited");
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let capabilities = serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--disable-extensions",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object literal")
        };
        let connected = tokio::time::timeout(
            Duration::from_secs(60),
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities)
                .connect(&format!("http://127.0.0.1:{port}")),
        )
        .await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                Self::stop_driver(&mut driver);
                panic!("{test}: no browser session: {error}");
            }
            Err(_) => {
                Self::stop_driver(&mut driver);
                panic!("{test}: no browser session within 60 s");
            }
        };
        Some(Self {
            client,
            driver,
            _profile: profile,
        })
    }

    /// Kills the browser processes the driver started, then the driver,
    /// each by PID.
    fn stop_driver(driver: &mut Proc) {
        if driver.is_running() {
            for pid in descendants(driver.pid()) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        driver.kill();
    }

    /// Ends the session (the browser quits) and stops the driver.
    pub async fn stop(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        Self::stop_driver(&mut self.driver);
    }

    /// The first element matching `css`, waiting for it.
    pub async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(PAGE_LIMIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Clicks the first element matching `css`, waiting for it.
    pub async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Types `text` into the first element matching `css`, waiting for it.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.find(css)
            .await
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Opens the admin console served on `admin`.
    pub async fn open_console(&self, admin: std::net::SocketAddr) {
        self.client
            .goto(&format!("http://{admin}/admin/"))
            .await
            .expect("open the console");
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |all| all.len())
    }

    /// Waits until `css` matches nothing.
    pub async fn until_gone(&self, css: &str) {
        let deadline = Instant::now() + PAGE_LIMIT;
        while self.count(css).await > 0 {
            assert!(Instant::now() < deadline, "{css} is still there");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the text of `css` contains `wanted`; returns the text.
    pub async fn until_text(&self, css: &str, wanted: &str) -> String {
        let deadline = Instant::now() + PAGE_LIMIT;
        loop {
            let text = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains(wanted) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never said {wanted:?}; it says {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a `confirm()` dialog, returns its text and accepts it.
    pub async fn accept_confirmation(&self) -> String {
        self.answer_confirmation(true).await
    }

    /// Waits for a `confirm()` dialog, returns its text and accepts or
    /// dismisses it.
    pub async fn answer_confirmation(&self, accept: bool) -> String {
        let deadline = Instant::now() + PAGE_LIMIT;
        loop {
            if let Ok(text) = self.client.get_alert_text().await {
                if accept {
                    self.client.accept_alert().await.expect("accept");
                } else {
                    self.client.dismiss_alert().await.expect("dismiss");
                }
                return text;
            }
            assert!(Instant::now() < deadline, "no confirmation was asked");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a `prompt()` dialog, types `answer` into it and accepts
    /// it; returns its text.
    pub async fn answer_prompt(&self, answer: &str) -> String {
        let deadline = Instant::now() + PAGE_LIMIT;
        loop {
            if let Ok(text) = self.client.get_alert_text().await {
                self.client
                    .send_alert_text(answer)
                    .await
                    .expect("type the answer");
                self.client.accept_alert().await.expect("accept");
                return text;
            }
            assert!(Instant::now() < deadline, "no prompt was shown");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Writes `<name>.png` of the viewport into `IDEMGATE_SCREENSHOTS`, if set.
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("IDEMGATE_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.expect("screenshot");
        let path = Path::new(&dir).join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        Self::stop_driver(&mut self.driver);
    }
}
