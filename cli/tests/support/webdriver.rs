//! A small WebDriver client (W3C protocol over the plain HTTP client) driving headless
//! Chromium through chromedriver: new session, navigate, reload, window size, find
//! elements, text, attributes, click, run a script, take a screenshot. Both are Debian's packages (`chromium`, `chromium-driver`).

use super::http::request;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Where Debian installs the driver.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Whether both are installed; without them a test says SKIPPED loudly, and fails when
/// `CI=true` (CI installs them, see .ci/run).
pub fn available_or_skip(test: &str) -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {missing:?} missing in CI (CI=true): .ci/run installs chromium and chromium-driver");
    }
    eprintln!("\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!("!! SKIPPED: {test}: {missing:?} not installed");
    eprintln!("!! (apt-get install -y chromium chromium-driver to run the browser test)");
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n");
    false
}

/// A chromedriver process with one headless Chromium session; both end when dropped.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver on a free port and opens a headless session.
    pub fn start() -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        // Built first, so that a failure below still stops the driver (Drop).
        let mut browser = Browser {
            driver,
            addr: format!("127.0.0.1:{port}"),
            session: String::new(),
            _profile: tempfile::tempdir().expect("profile dir"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = std::net::TcpStream::connect(&browser.addr).is_ok()
                && request(&browser.addr, "GET", "/status", None).json()["value"]["ready"] == true;
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not get ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = format!("--user-data-dir={}", browser._profile.path().display());
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            &profile,
        ];
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args }
        }}});
        let created = browser.call("POST", "/session", Some(caps));
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        browser
    }

    /// A WebDriver command; returns its `value`, panics on a WebDriver error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .unwrap_or_else(|value| panic!("{method} {path}: {value}"))
    }

    /// A WebDriver command: its `value`, or the error's `value` (`{error, message, …}`).
    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let body = body.map(|b| b.to_string());
        let reply = request(&self.addr, method, path, body.as_deref());
        let value = reply.json()["value"].clone();
        if reply.status == 200 {
            Ok(value)
        } else {
            Err(value)
        }
    }

    /// Runs `act` on the first element matching `css`, finding it again while the page
    /// re-renders it between the find and the act (the dashboard redraws its tables and
    /// plots on every refresh: a "stale element reference"); waits up to 10 s.
    fn on_fresh<T>(&self, css: &str, act: impl Fn(&Element) -> Result<T, Value>) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let e = self.find(css, Duration::from_secs(10));
            match act(&e) {
                Ok(v) => return v,
                Err(value) if value["error"] == "stale element reference" => {
                    assert!(Instant::now() < deadline, "{css} kept going stale: {value}");
                }
                Err(value) => panic!("{css}: {value}"),
            }
        }
    }

    fn session(&self, method: &str, tail: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{tail}", self.session), body)
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.session("POST", "/url", Some(json!({ "url": url })));
    }

    /// Reloads the page.
    pub fn reload(&self) {
        self.session("POST", "/refresh", Some(json!({})));
    }

    /// Sets the window's size; returns the page's viewport width then, a vertical scroll bar
    /// included (headless Chromium has no window frame, so it is `width`).
    pub fn resize(&self, width: u32, height: u32) -> u64 {
        self.session(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        );
        self.script("return window.innerWidth")
            .as_u64()
            .expect("a width")
    }

    /// Saves a PNG of the whole page, at the window's width, to `path` (Chromium's own
    /// command through chromedriver: WebDriver's screenshot stops at the viewport).
    pub fn screenshot(&self, path: &std::path::Path) {
        let png = self.session(
            "POST",
            "/goog/cdp/execute",
            Some(json!({ "cmd": "Page.captureScreenshot", "params": {
                "format": "png", "captureBeyondViewport": true
            }})),
        );
        let bytes = base64_decode(png["data"].as_str().expect("base64 PNG"));
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// The elements matching a CSS selector now.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self.session(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        );
        found
            .as_array()
            .expect("elements")
            .iter()
            .map(|e| {
                let id = e[ELEMENT].as_str();
                Element(
                    id.unwrap_or_else(|| panic!("no element id in {e}"))
                        .to_owned(),
                )
            })
            .collect()
    }

    /// The one element matching `css`, waiting up to `within` for it.
    pub fn find(&self, css: &str, within: Duration) -> Element {
        let deadline = Instant::now() + within;
        loop {
            if let Some(e) = self.find_all(css).into_iter().next() {
                return e;
            }
            assert!(Instant::now() < deadline, "no element {css}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An element's visible text.
    pub fn text(&self, e: &Element) -> String {
        self.session("GET", &format!("/element/{}/text", e.0), None)
            .as_str()
            .expect("text")
            .to_owned()
    }

    /// The visible text of the first element matching `css` (found again if the page
    /// re-rendered it meanwhile).
    pub fn text_of(&self, css: &str) -> String {
        self.on_fresh(css, |e| {
            let tail = format!("/session/{}/element/{}/text", self.session, e.0);
            self.try_call("GET", &tail, None)
                .map(|v| v.as_str().expect("text").to_owned())
        })
    }

    /// An attribute of the first element matching `css` (found again if the page re-rendered
    /// it meanwhile).
    pub fn attribute_of(&self, css: &str, name: &str) -> Option<String> {
        self.on_fresh(css, |e| {
            let tail = format!("/session/{}/element/{}/attribute/{name}", self.session, e.0);
            self.try_call("GET", &tail, None)
                .map(|v| v.as_str().map(str::to_owned))
        })
    }

    /// Clicks the first element matching `css` (found again if the page re-rendered it
    /// meanwhile).
    pub fn click_on(&self, css: &str) {
        self.on_fresh(css, |e| {
            let tail = format!("/session/{}/element/{}/click", self.session, e.0);
            self.try_call("POST", &tail, Some(json!({}))).map(drop)
        })
    }

    /// An attribute of an element.
    pub fn attribute(&self, e: &Element, name: &str) -> Option<String> {
        self.session("GET", &format!("/element/{}/attribute/{name}", e.0), None)
            .as_str()
            .map(str::to_owned)
    }

    /// Clicks an element.
    pub fn click(&self, e: &Element) {
        self.session("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Runs `script` (a function body) in the page; returns its value.
    pub fn script(&self, script: &str) -> Value {
        self.session(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Waits up to `within` until `check` holds, polling every 100 ms; panics with `what`.
    pub fn wait_until(&self, what: &str, within: Duration, mut check: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !check(self) {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Standard base64 (what WebDriver sends screenshots in), padding and whitespace ignored.
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = ALPHABET
            .iter()
            .position(|a| *a == c)
            .unwrap_or_else(|| panic!("not base64: {c}")) as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                request(
                    &self.addr,
                    "DELETE",
                    &format!("/session/{}", self.session),
                    None,
                )
            }));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
