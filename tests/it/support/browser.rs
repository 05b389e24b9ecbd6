//! A real browser of a test's own: `chromedriver` on a free loopback port, in a process
//! group of its own that is killed (chromium with it) when the guard drops, driving a
//! headless chromium through a fantoccini WebDriver client.
//!
//! Debian's `chromium` and `chromium-driver` packages provide both (`.ci/run` installs
//! them); `CHROMEDRIVER_BIN` and `CHROMIUM_BIN` point elsewhere. With `CONSOLE_SCREENSHOTS=1`
//! [`Browser::screenshot`] writes PNGs into `docs/console/` (the README shows them);
//! otherwise it does nothing, so an ordinary run leaves the tree as it was.
//!
//! When chromedriver is not there, CI (`CI` set) fails the test with how to install it; a
//! developer's run skips it, saying so on stderr (as the localstripe tests do), so the
//! README's `cargo test --workspace` needs only PostgreSQL and NATS.
#![allow(dead_code)]

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};

use super::nats_server::free_port;

const DEFAULT_CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// Longest wait for chromedriver to listen, and for an element to appear.
const DEADLINE: Duration = Duration::from_secs(30);

/// chromedriver and chromium: `CHROMEDRIVER_BIN` / `CHROMIUM_BIN`, else Debian's paths.
fn binaries() -> (String, String) {
    (
        std::env::var("CHROMEDRIVER_BIN").unwrap_or_else(|_| DEFAULT_CHROMEDRIVER.into()),
        std::env::var("CHROMIUM_BIN").unwrap_or_else(|_| DEFAULT_CHROMIUM.into()),
    )
}

/// A headless chromium and the chromedriver driving it.
pub struct Browser {
    client: Client,
    /// Declared after `client`: dropped (killed) last.
    driver: Driver,
}

/// The chromedriver process group, killed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver's chromium runs in its process group: kill them all, by that id.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What to do without chromedriver: install chromium and chromium-driver, or point at them.
const INSTALL: &str = "apt-get install chromium chromium-driver (as .ci/run does), or set \
    CHROMEDRIVER_BIN and CHROMIUM_BIN";

impl Browser {
    /// Whether a browser test can run here: chromedriver and chromium are where they are
    /// looked for. Without them CI fails (saying how to install them) and a developer's run
    /// skips the test, saying so.
    pub fn available(test: &str) -> bool {
        let (chromedriver, chromium) = binaries();
        if PathBuf::from(&chromedriver).is_file() && PathBuf::from(&chromium).is_file() {
            return true;
        }
        assert!(
            !super::env::in_ci(),
            "{test}: no {chromedriver} or {chromium}: {INSTALL}"
        );
        eprintln!("skipping {test}: no {chromedriver} or {chromium} ({INSTALL})");
        false
    }

    /// Starts chromedriver and a headless chromium window of 1280×900.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// [`Browser::start`] with more chromium flags (e.g. `--host-resolver-rules=…`, to
    /// resolve a name the way a rebinding attacker's DNS would).
    pub async fn start_with(flags: &[&str]) -> Self {
        let (chromedriver, chromium) = binaries();
        let port = free_port();
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {chromedriver} (install chromium-driver, or set CHROMEDRIVER_BIN): {e}")
            });
        let driver = Driver(child);
        let begun = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                begun.elapsed() < DEADLINE,
                "chromedriver did not listen on {port} within {DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
        ];
        args.extend_from_slice(flags);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium, "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("chromedriver could not start {chromium}: {e}"));
        Self { client, driver }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    /// The element `css` selects, once it is on the page.
    pub async fn find(&self, css: &str) -> Element {
        match self
            .client
            .wait()
            .at_most(DEADLINE)
            .for_element(Locator::Css(css))
            .await
        {
            Ok(element) => element,
            Err(e) => panic!(
                "no {css} on {}: {e}\n{}",
                self.path().await,
                self.client.source().await.unwrap_or_default()
            ),
        }
    }

    /// Whether `css` selects anything on the page now.
    pub async fn has(&self, css: &str) -> bool {
        !self
            .client
            .find_all(Locator::Css(css))
            .await
            .expect("the page answers")
            .is_empty()
    }

    /// The text of the element `css` selects.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.expect("its text")
    }

    /// Types `text` into the field `css` selects.
    pub async fn fill(&self, css: &str, text: &str) {
        self.find(css)
            .await
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("typing into {css}: {e}"));
    }

    /// Chooses the option with `value` in the select `css` selects.
    pub async fn select(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("choosing {value} in {css}: {e}"));
    }

    /// Clicks the element `css` selects and waits until the page it leads to has loaded
    /// (the old page's `<html>` went stale).
    pub async fn click_and_wait(&self, css: &str) {
        let old = self.find("html").await;
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
        let begun = Instant::now();
        // A stale element answers an error: the browser has moved on to the next document.
        while old.tag_name().await.is_ok() {
            assert!(begun.elapsed() < DEADLINE, "clicking {css} loaded no page");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.find("body").await;
    }

    /// The path and query of the page shown.
    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("a current URL");
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// With `CONSOLE_SCREENSHOTS=1`, the page as `docs/console/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        if std::env::var("CONSOLE_SCREENSHOTS").as_deref() != Ok("1") {
            return;
        }
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/console");
        std::fs::create_dir_all(&dir).expect("docs/console");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Ends the session (chromium quits); chromedriver is killed when `self` drops.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}
