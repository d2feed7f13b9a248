//! A real browser for tests: headless Chromium driven over the DevTools protocol (a WebSocket of JSON
//! messages), enough to open a page, run script in it (read what it shows, click a button), read its frames
//! and what it logged (Content-Security-Policy violations included), and take screenshots.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// A headless Chromium driven over the DevTools protocol, with a profile of its own.
pub struct Browser {
    child: Child,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// The protocol's events seen so far (those of the domains enabled: `Log` from the start).
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts headless Chromium (Debian package `chromium`) with a profile of its own, `width` pixels wide.
    pub fn launch(width: u32, height: u32) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium (Debian package chromium; `cargo xtask deps` installs it)");
        // Chromium writes the port it took into the profile.
        let active = profile.path().join("DevToolsActivePort");
        let port: u16 = almanac_testdb::patience::wait_for(
            "chromium to start its DevTools server",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || std::fs::read_to_string(&active).ok().and_then(|t| t.lines().next()?.parse().ok()),
        );
        let list: Value = serde_json::from_str(&http_get(port, "/json/list")).unwrap();
        let page = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_owned();
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        // An answer slower than this is a browser that hangs (the tests' patience: a busy machine is slow).
        stream.set_read_timeout(Some(almanac_testdb::patience(Duration::from_secs(30)))).unwrap();
        let (ws, _) = tungstenite::client(page.as_str(), stream).unwrap();
        let mut browser = Self { child, ws, next_id: 0, events: Vec::new(), _profile: profile };
        // What the browser tells the page's console: refused loads, CSP violations, script errors.
        browser.call("Log.enable", json!({}));
        browser
    }

    /// What the browser logged so far (`Log.entryAdded`: `source`, `level`, `text`, `url`).
    pub fn log(&mut self) -> Vec<Value> {
        // Events come before the answer to a later command: one round trip reads those already sent.
        self.call("Runtime.evaluate", json!({"expression": "0"}));
        self.events.iter().filter(|e| e["method"] == "Log.entryAdded").map(|e| e["params"]["entry"].clone()).collect()
    }

    /// The Content-Security-Policy violations the browser reported so far, in its words.
    pub fn csp_violations(&mut self) -> Vec<String> {
        self.log()
            .iter()
            .filter_map(|e| e["text"].as_str())
            .filter(|t| t.contains("Content Security Policy"))
            .map(str::to_owned)
            .collect()
    }

    /// Evaluates `expression` in a world of its own inside the frame `frame_id` (another origin's frame
    /// included: the protocol is not bound by the same-origin policy), as the page's own script would see
    /// the frame's document; the protocol's error when the frame has no document to run in.
    pub fn eval_in_frame(&mut self, frame_id: &str, expression: &str) -> Result<Value, Value> {
        let world = self.try_call("Page.createIsolatedWorld", json!({"frameId": frame_id, "worldName": "test"}))?;
        let r = self.try_call(
            "Runtime.evaluate",
            json!({"expression": expression, "contextId": world["executionContextId"], "returnByValue": true}),
        )?;
        match r.get("exceptionDetails") {
            Some(e) => Err(e.clone()),
            None => Ok(r["result"]["value"].clone()),
        }
    }

    /// Sends a DevTools command and returns its result (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params).unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// As [`Browser::call`], the protocol's error returned (an evaluation while the page navigates, say).
    pub fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.ws.send(Message::text(json!({"id": id, "method": method, "params": params}).to_string())).unwrap();
        loop {
            let Message::Text(text) = self.ws.read().unwrap() else { continue };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply.get("method").is_some() {
                self.events.push(reply);
                continue;
            }
            if reply["id"] == id {
                return match reply.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(reply["result"].clone()),
                };
            }
        }
    }

    /// Opens `url` and waits for it to load.
    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
        self.wait_for("the page to load", "document.readyState === 'complete'", Duration::from_secs(30));
    }

    /// Evaluates `expression` in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}));
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Waits until `expression` is truthy in the page, for something that takes up to `idle` on an idle machine
    /// (the deadline is the tests' patience for that: `almanac_testdb::patience`).
    pub fn wait_for(&mut self, what: &str, expression: &str, idle: Duration) -> Value {
        let deadline = almanac_testdb::Deadline::after(idle);
        loop {
            // While a form's POST navigates, the page's context goes away: that is "not yet", not a failure.
            let expression = format!("(() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }})()");
            let value = self
                .try_call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}))
                .ok()
                .filter(|r| r.get("exceptionDetails").is_none())
                .map_or(Value::Null, |r| r["result"]["value"].clone());
            if !(value.is_null() || value == false || value == "" || value == 0) {
                return value;
            }
            deadline.check(what);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The whole page as a PNG at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": true}));
        let png = data_encoding::BASE64.decode(shot["data"].as_str().unwrap().as_bytes()).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET to Chromium's DevTools HTTP server, which keeps the connection open: read as far as its
/// `Content-Length`.
fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(almanac_testdb::patience(Duration::from_secs(10)))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= length {
                return body.to_owned();
            }
        }
        let n = stream.read(&mut chunk).expect("chromium answers its DevTools requests");
        assert!(n > 0, "chromium closed the DevTools connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}
