//! Debian's headless Chromium, driven over WebDriver (`chromedriver` on a free loopback port,
//! `fantoccini` as the client), for tests of the demo's pages.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

use crate::process::free_port;

const CHROMIUM: &str = "/usr/bin/chromium";
const INSTALL: &str = "apt-get install chromium chromium-driver (bash .ci/run does)";

/// A headless Chromium session, closed (with its chromedriver) when dropped.
#[derive(Debug)]
pub struct Browser {
    client: Option<Client>,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session in a 1280×900 window.
    ///
    /// # Panics
    ///
    /// When Chromium or chromedriver is missing (saying how to install them) or does not start.
    pub async fn start() -> Self {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} not found: {INSTALL}"
        );
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start chromedriver ({error}): {INSTALL}"));
        let mut browser = Self {
            client: None,
            driver,
        };
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-dev-shm-usage",
            // A page nobody looks at keeps its timers: the dashboard polls.
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
            "--disable-backgrounding-occluded-windows",
            "--window-size=1280,900",
        ];
        let mut capabilities = Capabilities::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({ "binary": CHROMIUM, "args": args }),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let webdriver = format!("http://127.0.0.1:{port}");
        loop {
            let connected = ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&webdriver)
                .await;
            match connected {
                Ok(client) => {
                    browser.client = Some(client);
                    return browser;
                }
                Err(error) if Instant::now() > deadline => {
                    panic!("no Chromium session through chromedriver in 20 s: {error}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a session until dropped")
    }

    /// Loads `url`.
    pub async fn open(&self, url: &str) {
        self.client().goto(url).await.expect("the page loads");
    }

    /// The text of the first element matching `css`, waiting up to 10 s for one to appear.
    /// Found and read in one script: the page re-renders its tables on every poll, and an
    /// element found first and read next may be gone by then (a stale element).
    pub async fn text(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let script = "const found = document.querySelector(arguments[0]); \
                          return found && found.innerText;";
            let found = (self.client().execute(script, vec![json!(css)]).await)
                .expect("a script runs in the page");
            if let Some(text) = found.as_str() {
                return text.to_owned();
            }
            assert!(Instant::now() < deadline, "no `{css}` on the page in 10 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the first element matching `css` once `wanted` accepts it, looking every
    /// 100 ms for up to `patience` (the page updates itself).
    pub async fn text_when(
        &self,
        css: &str,
        patience: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + patience;
        loop {
            let text = self.text(css).await;
            if wanted(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "`{css}` still reads {text:?} after {patience:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What `script` (a function body, its arguments in `arguments`) returns in the page.
    pub async fn evaluate(&self, script: &str, args: Vec<serde_json::Value>) -> serde_json::Value {
        (self.client().execute(script, args).await).expect("a script runs in the page")
    }

    /// Resizes the window to `width` × `height` CSS pixels (a phone's: 390 × 844).
    pub async fn resize(&self, width: u32, height: u32) {
        (self.client().set_window_size(width, height).await).expect("the window is resized");
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> usize {
        let found = self.client().find_all(Locator::Css(css)).await;
        found.expect("a search").len()
    }

    /// The whole window as a PNG, written to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client().screenshot().await.expect("a screenshot");
        std::fs::write(path, png).expect("the screenshot is written");
    }

    /// Ends the session and chromedriver.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.close().await;
        }
    }
}

impl Drop for Browser {
    /// A session still open (the test failed): its Chromium, chromedriver's child, is
    /// terminated first, as chromedriver killed would leave it running.
    fn drop(&mut self) {
        if self.client.is_some() {
            let parent = self.driver.id().to_string();
            let _ = Command::new("pkill")
                .args(["-TERM", "-P", &parent])
                .status();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
