//! A headless Chromium driven through ChromeDriver's W3C WebDriver
//! protocol (JSON over HTTP on loopback): what the portal's tests click
//! with. Skipped, with a note, where chromium or chromedriver is missing
//! (`.ci/run` installs both).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session, ended (and its driver stopped) when dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.send("DELETE", &format!("/session/{}", self.session), None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Whether the machine has what the browser tests need.
pub fn available() -> bool {
    ["chromium", "chromedriver"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

impl Browser {
    pub fn start() -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        crate::common::wait_for("chromedriver", Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1280,1000".into(),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ];
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args },
        } } });
        let answer = browser
            .send("POST", "/session", Some(caps))
            .expect("a browser session");
        browser.session = answer["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        browser
    }

    /// One WebDriver command: its `value`, or the driver's error.
    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let json_text = read_answer(&mut stream)?;
        let value: Value =
            serde_json::from_str(&json_text).map_err(|e| format!("{e}: {json_text}"))?;
        match value["value"].get("error") {
            Some(error) => Err(format!("{error}: {}", value["value"]["message"])),
            None => Ok(value["value"].clone()),
        }
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn open(&self, url: &str) {
        self.send(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        )
        .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    pub fn url(&self) -> String {
        self.send("GET", &self.session_path("/url"), None)
            .unwrap()
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn source(&self) -> String {
        self.send("GET", &self.session_path("/source"), None)
            .unwrap()
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn find(&self, css: &str) -> Option<String> {
        let found = self
            .send(
                "POST",
                &self.session_path("/element"),
                Some(json!({ "using": "css selector", "value": css })),
            )
            .ok()?;
        found[ELEMENT].as_str().map(str::to_string)
    }

    /// The element `css`, waiting up to 10 s for it.
    pub fn element(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(id) = self.find(css) {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no {css} in {}: {}",
                self.url(),
                self.source()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn text(&self, css: &str) -> String {
        let id = self.element(css);
        self.send(
            "GET",
            &self.session_path(&format!("/element/{id}/text")),
            None,
        )
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.send(
            "POST",
            &self.session_path(&format!("/element/{id}/click")),
            Some(json!({})),
        )
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        let _ = self.send(
            "POST",
            &self.session_path(&format!("/element/{id}/clear")),
            Some(json!({})),
        );
        self.send(
            "POST",
            &self.session_path(&format!("/element/{id}/value")),
            Some(json!({ "text": text })),
        )
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Resizes the window (a phone's: 390 × 844).
    pub fn resize(&self, width: u32, height: u32) {
        self.send(
            "POST",
            &self.session_path("/window/rect"),
            Some(json!({ "width": width, "height": height })),
        )
        .unwrap_or_else(|e| panic!("resize: {e}"));
    }

    /// Runs `script` in the page (for what no button does: a forged
    /// request).
    pub fn execute(&self, script: &str) -> Value {
        self.send(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": [] })),
        )
        .unwrap_or_else(|e| panic!("script: {e}"))
    }

    /// Whether a JavaScript dialog (an injected `alert`) is open.
    pub fn alert_open(&self) -> bool {
        self.send("GET", &self.session_path("/alert/text"), None)
            .is_ok()
    }

    /// Waits up to `timeout` for the page's text to contain `needle`,
    /// reloading it each second when `reload`.
    pub fn wait_text(&self, needle: &str, timeout: Duration, reload: bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.source().contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "'{needle}' not in {}: {}",
                self.url(),
                self.source()
            );
            if reload {
                let _ = self.send("POST", &self.session_path("/refresh"), Some(json!({})));
            }
            std::thread::sleep(Duration::from_millis(if reload { 1_000 } else { 200 }));
        }
    }

    /// A PNG of the window, written to `path`.
    pub fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine as _;
        let png = self
            .send("GET", &self.session_path("/screenshot"), None)
            .unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// The body of an HTTP answer: the driver keeps the connection open, so
/// read what Content-Length says.
fn read_answer(stream: &mut TcpStream) -> Result<String, String> {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 65536];
    let (head_end, length) = loop {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "the driver closed: {}",
                String::from_utf8_lossy(&answer)
            ));
        }
        answer.extend_from_slice(&chunk[..n]);
        if let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..at]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (at + 4, length);
        }
    };
    while answer.len() < head_end + length {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&answer[head_end..]).into_owned())
}
