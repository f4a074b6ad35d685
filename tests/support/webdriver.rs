//! A tiny W3C WebDriver client for the headless-browser tests: it starts Debian's
//! `chromedriver` on a free loopback port, opens a headless Chromium session with a
//! throw-away profile, and speaks the WebDriver HTTP protocol with reqwest + serde_json
//! (navigate, find by CSS, type, click, read text and source, screenshot).
//!
//! When Chromium or chromedriver is missing, [`Browser::start`] returns `None` after a loud
//! message on the terminal (past libtest's capture), unless `OUTBOXD_REQUIRE_BROWSER=1`
//! (CI), where it panics.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// Where Debian installs the browser and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// See [`CHROMIUM`].
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Environment variable naming another Chromium binary (tests use it to make the browser
/// unavailable on purpose).
pub const CHROMIUM_ENV: &str = "OUTBOXD_TEST_CHROMIUM";
/// The W3C element reference key.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long to wait for the driver to come up and for page conditions.
const PATIENCE: Duration = Duration::from_secs(30);

fn require_browser() -> bool {
    std::env::var("OUTBOXD_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

/// A running chromedriver with one browser session; both end on drop.
pub struct Browser {
    driver: Child,
    client: reqwest::Client,
    session: String,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless session, or `None` (loudly) when the browser is
    /// not installed and not required.
    pub async fn start() -> Option<Browser> {
        let chromium = std::env::var(CHROMIUM_ENV).unwrap_or_else(|_| CHROMIUM.to_owned());
        if !Path::new(&chromium).exists() || !Path::new(CHROMEDRIVER).exists() {
            let msg = format!("{chromium} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)");
            assert!(!require_browser(), "OUTBOXD_REQUIRE_BROWSER=1 but {msg}");
            crate::support::announce_skip(&format!("{msg}; SKIPPING the headless-browser test"));
            return None;
        }
        outboxd::provider::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        // The free port can be taken by another process before chromedriver binds it:
        // chromedriver then exits, and a new port is tried.
        for _ in 0..5 {
            let port = free_port();
            let driver = Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn chromedriver");
            let mut browser = Browser {
                driver,
                client: client.clone(),
                session: String::new(),
                base: format!("http://127.0.0.1:{port}"),
                _profile: tempfile::tempdir().expect("profile dir"),
            };
            if browser.wait_until_ready().await {
                browser.session = browser.new_session().await;
                return Some(browser);
            }
        }
        panic!("chromedriver exited at start on five free ports in a row");
    }

    /// Waits until chromedriver answers ready (true) or has exited (false: port taken).
    async fn wait_until_ready(&mut self) -> bool {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if matches!(self.driver.try_wait(), Ok(Some(_))) {
                return false;
            }
            let status = self
                .client
                .get(format!("{}/status", self.base))
                .send()
                .await;
            if let Ok(response) = status {
                let body: Value = response.json().await.unwrap_or(Value::Null);
                if body["value"]["ready"] == json!(true) {
                    return true;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn new_session(&self) -> String {
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--no-proxy-server",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", self._profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let value = self.command("POST", "/session", Some(caps)).await;
        value["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {value}"))
            .to_owned()
    }

    /// Sends one WebDriver command; returns its `value`, panicking on a WebDriver error.
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.try_command(method, path, body).await {
            Ok(value) => value,
            Err(error) => panic!("webdriver {method} {path}: {error}"),
        }
    }

    /// Sends one WebDriver command; a WebDriver error (no such element, stale element,
    /// ...) is returned as `Err` with its JSON.
    async fn try_command(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Value> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.client.get(url),
            "DELETE" => self.client.delete(url),
            _ => self
                .client
                .post(url)
                .json(&body.unwrap_or_else(|| json!({}))),
        };
        let response = request.send().await.expect("webdriver request");
        let body: Value = response.json().await.expect("webdriver json");
        if body["value"]["error"].is_string() {
            return Err(body["value"].clone());
        }
        Ok(body["value"].clone())
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.command(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        )
        .await;
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        let v = self.command("GET", &self.session_path("/url"), None).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The element matching `css` (panics if none).
    pub async fn find(&self, css: &str) -> String {
        let body = json!({"using": "css selector", "value": css});
        let v = self
            .command("POST", &self.session_path("/element"), Some(body))
            .await;
        v[ELEMENT_KEY].as_str().expect("element id").to_owned()
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        let body = json!({"using": "css selector", "value": css});
        let v = self
            .command("POST", &self.session_path("/elements"), Some(body))
            .await;
        v.as_array().map_or(0, Vec::len)
    }

    /// Types `text` into the element matching `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        let path = self.session_path(&format!("/element/{element}/value"));
        self.command("POST", &path, Some(json!({ "text": text })))
            .await;
    }

    /// Clicks the element matching `css`.
    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        let path = self.session_path(&format!("/element/{element}/click"));
        self.command("POST", &path, Some(json!({}))).await;
    }

    /// The rendered text of the element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        let element = self.find(css).await;
        let path = self.session_path(&format!("/element/{element}/text"));
        let v = self.command("GET", &path, None).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The text of `css`, or `None` while it is absent or the page is changing under it.
    async fn try_text(&self, css: &str) -> Option<String> {
        let body = json!({"using": "css selector", "value": css});
        let found = self
            .try_command("POST", &self.session_path("/element"), Some(body))
            .await
            .ok()?;
        let element = found[ELEMENT_KEY].as_str()?.to_owned();
        let path = self.session_path(&format!("/element/{element}/text"));
        let text = self.try_command("GET", &path, None).await.ok()?;
        Some(text.as_str().unwrap_or_default().to_owned())
    }

    /// Waits (with a deadline) until the text of `css` contains `needle`; returns the text.
    /// Navigation may be in progress, so a missing or stale element only means "not yet".
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.try_text(css).await;
            if let Some(text) = &text {
                if text.contains(needle) {
                    return text.clone();
                }
            }
            if Instant::now() >= deadline {
                let url = self
                    .try_command("GET", &self.session_path("/url"), None)
                    .await;
                panic!("{css:?} never contained {needle:?} (last text {text:?}, at {url:?})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG screenshot of the viewport to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let v = self
            .command("GET", &self.session_path("/screenshot"), None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 screenshot"))
            .expect("decode screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Ends the session (the driver is stopped on drop).
    pub async fn quit(mut self) {
        self.command("DELETE", &self.session_path(""), None).await;
        self.session.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            // A test failed mid-session: close the browser before stopping its driver, so
            // no Chromium process outlives the test. Plain blocking HTTP: Drop cannot await.
            delete_session_blocking(&self.base, &self.session);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn delete_session_blocking(base: &str, session: &str) {
    use std::io::{Read, Write};
    let Some(addr) = base.strip_prefix("http://") else {
        return;
    };
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_end(&mut Vec::new());
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().unwrap().port()
}
