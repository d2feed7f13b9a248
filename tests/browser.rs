//! The operator's page in a real browser (headless Chromium): a Worker crawls a generated library while the
//! page shows the crawl's progress moving, a failed item and its reason, and a crawl's failed file; without
//! the token an action is refused; signed in with it, a retry and a pause work; the browser reports no
//! violation of the page's Content-Security-Policy. A page on another port of the same host that frames the
//! signed-in page gets nothing. Behind nginx, under a path of another site's, the page works and sends that site
//! nothing. Screenshots are saved under `target/browser-test/`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_testdb::TestDatabase;
use support::browser::Browser;

const TOKEN: &str = "browser-test-token-0123456789";

fn cli(url: &str, args: &[&str]) -> String {
    let out = support::worker().args(args).env("DATABASE_URL", url).output().unwrap();
    assert!(out.status.success(), "almanac-worker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

/// Starts a Worker on a free port of 127.0.0.1 with the token set and `env` beside; its address, once its page
/// answers.
fn start_worker(url: &str, proxies: &Path, env: &[(&str, &str)]) -> (Worker, String) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let worker = Worker(
        support::worker()
            .args(["run"])
            .env("DATABASE_URL", url)
            .env("ALMANAC__STORAGE__PROXY_ROOT", proxies)
            .env("ALMANAC__HTTP__ADDRESS", &address)
            .env("ALMANAC__HTTP__TOKEN", TOKEN)
            .env("ALMANAC__LOG__LEVEL", "warn")
            // The tests write their photos moments before a crawl: none is being written any more.
            .env("ALMANAC__STORAGE__SETTLE_TIME", "0s")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let answers = || std::net::TcpStream::connect(&address).is_ok().then_some(());
    almanac_testdb::patience::wait_for(
        "the Worker's page to answer",
        Duration::from_secs(60),
        Duration::from_millis(100),
        answers,
    );
    (worker, address)
}

/// A database with one config whose library is empty, and a Worker on it (with the token), answering at the
/// address returned; the folder holds the library, the proxies and whatever else the test puts there.
fn a_worker_of_an_empty_library() -> (TestDatabase, tempfile::TempDir, Worker, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDatabase::create());
    let url = db.url().to_owned();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("library")).unwrap();
    cli(&url, &["migrate"]);
    cli(&url, &["config", "add", "--user", "ann", "--root", dir.path().join("library").to_str().unwrap()]);
    let (worker, address) = start_worker(&url, &dir.path().join("proxies"), &[]);
    (db, dir, worker, address)
}

/// Serves `html` to every request on a free port of 127.0.0.1 (another origin of the same site as the
/// Worker's page), until the test process ends; its URL.
fn serve_html(html: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let html = html.clone();
            std::thread::spawn(move || {
                use std::io::{BufRead, Write};
                // The request's head, up to its blank line.
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{html}",
                    html.len()
                );
            });
        }
    });
    url
}

/// Signs the browser in on the page with the token.
fn sign_in(browser: &mut Browser) {
    browser.eval(&format!(
        "document.getElementById('token').value = '{TOKEN}'; document.querySelector('form[action$=\"login\"] button').click(); true"
    ));
    browser.wait_for(
        "signing in",
        "document.body.innerText.includes('signed in for actions')",
        Duration::from_secs(30),
    );
}

fn shots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/browser-test")
}

/// Records everything the page's live section of running items shows, as it shows it, in `window.shown`
/// (`{done, text}`: the progress line and the section's text at each update). A test reads what the page
/// showed, not what it shows when the test looks: on a busy machine a crawl may well end between two looks.
const RECORD_RUNNING: &str = "window.shown = []; \
    const running = document.getElementById('running'); \
    new MutationObserver(() => window.shown.push({ \
        done: running.querySelector('.done')?.textContent ?? '', text: running.innerText })) \
      .observe(running, {childList: true, subtree: true, characterData: true}); true";

#[test]
fn the_page_shows_a_live_crawl_and_its_failures_and_acts_only_with_the_token() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDatabase::create());
    let url = db.url().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("library");
    std::fs::create_dir_all(library.join("2019")).unwrap();
    for i in 0..150 {
        let exif = FixtureExif::camera(&format!("2019:07:{:02} 10:00:00", 1 + i % 28), "+02:00");
        std::fs::write(library.join(format!("2019/IMG_{i:04}.JPG")), fixtures::jpeg(1600, 1200, i, true, &exif))
            .unwrap();
    }
    std::fs::write(library.join("2019/broken.jpg"), b"\xff\xd8\xff\xe0 not really a JPEG").unwrap();
    let root = library.to_str().unwrap();
    cli(&url, &["migrate"]);
    cli(&url, &["config", "add", "--user", "ann", "--root", root]);
    // A failure to show and retry: a proxy deletion whose payload cannot be read fails for good at once (the
    // CLI refuses such a payload, so it comes from another client, written straight into the queue).
    let failed = support::query(
        &url,
        "INSERT INTO work_items (id, kind, storage_config_id, payload)
         SELECT gen_random_uuid(), 'proxy_deletion', id, '{\"asset_ids\": \"all of them\"}' FROM storage_configs
         RETURNING id",
    )[0][0]
        .clone();
    let (_worker, address) = start_worker(
        &url,
        &dir.path().join("proxies"),
        &[
            ("ALMANAC__WORKER__ID", "worker-on-the-page"),
            ("ALMANAC__WORKER__MAX_CONCURRENT_FILES", "1"),
            ("ALMANAC__QUEUE__POLL_INTERVAL", "200ms"),
            // Progress is written with each heartbeat: once a second, so the page has something to follow.
            ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "1s"),
        ],
    );
    let page = format!("http://{address}/");

    let mut browser = Browser::launch(1200, 900);
    browser.navigate(&page);
    // The running crawl, its progress moving without a reload (server-sent events). The crawl is enqueued only
    // once the page follows the running items (an update of the live section seen): a crawl that ran before
    // the browser was up would show the page nothing (on a busy machine Chromium starts slower than 151 files
    // are crawled). What the page showed is recorded as it shows it, so a crawl that ends before the test
    // looks again is still seen.
    browser.eval(RECORD_RUNNING);
    browser.wait_for("the page to follow the running items", "window.shown.length > 0", Duration::from_secs(10));
    cli(&url, &["enqueue", "crawl", "--config", root]);
    let progress = "window.shown.filter(s => s.done.includes(' files'))";
    browser.wait_for("the crawl's progress", &format!("{progress}.length > 0"), Duration::from_secs(60));
    // The section's text when the page showed more files done than it first showed.
    let text = browser.wait_for(
        "the progress to move",
        &format!(
            "(() => {{ const p = {progress}; return p.find(s => parseInt(s.done) > parseInt(p[0].done))?.text; }})()"
        ),
        Duration::from_secs(60),
    );
    let text = text.as_str().unwrap().to_owned();
    assert!(text.contains("crawl") && text.contains("worker-on-the-page") && text.contains('%'), "{text}");
    browser.screenshot(&shots().join("page-crawling.png"));

    // The failure and its reason (on a fresh load; the failure list is not live).
    browser.navigate(&page);
    let failures = browser.eval("document.body.innerText").as_str().unwrap().to_owned();
    assert!(failures.contains("asset_ids: invalid type"), "{failures}");

    // Without the token: no buttons, and a request of the page's own is refused.
    assert_eq!(browser.eval("document.querySelector('form[action$=\"/retry\"]') === null"), true);
    let refused = browser.eval(&format!("fetch('/items/{failed}/retry', {{method: 'POST'}}).then(r => r.status)"));
    assert_eq!(refused, 401);
    assert_eq!(support::query(&url, &format!("SELECT status FROM work_items WHERE id = '{failed}'"))[0][0], "failed");

    // Signed in with the token: retry the failure, pause the config.
    sign_in(&mut browser);
    // Pause the config first: the retried item then stays queued for us to see (one item per config runs).
    browser.eval("document.querySelector('form[action$=\"/pause\"][action*=\"configs/\"] button').click(); true");
    browser.wait_for(
        "the pause",
        "document.querySelector('.flash')?.textContent.includes('paused')",
        Duration::from_secs(30),
    );
    let paused = support::query(&url, "SELECT count(*) FROM storage_configs WHERE paused_at IS NOT NULL");
    assert_eq!(paused[0][0], "1");
    browser.eval(&format!("document.querySelector('form[action$=\"items/{failed}/retry\"] button').click(); true"));
    browser.wait_for(
        "the retry",
        "document.querySelector('.flash')?.textContent.includes('queued again')",
        Duration::from_secs(30),
    );
    let row = support::query(&url, &format!("SELECT status, failures::text FROM work_items WHERE id = '{failed}'"));
    assert_eq!(row[0], ["queued", "0"], "queued again, its failures forgiven");
    assert!(browser.eval("document.body.innerText").as_str().unwrap().contains("paused"));

    // The crawl goes on (a pause holds queued work, not what runs) and lists the file it could not read.
    support::wait_for(
        &url,
        "SELECT 1 FROM work_items WHERE kind = 'crawl' AND status = 'succeeded'",
        Duration::from_secs(180),
    );
    browser.navigate(&page);
    browser.wait_for(
        "the crawl's failed file",
        "document.body.innerText.includes('broken.jpg')",
        Duration::from_secs(10),
    );
    browser.screenshot(&shots().join("page-signed-in.png"));

    // At phone width the page does not spill sideways (wide tables scroll in their own box).
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true}),
    );
    browser.navigate(&page);
    let width = browser.eval("document.documentElement.scrollWidth").as_u64().unwrap();
    let wide = browser.eval(
        "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391 && !e.closest('.scroll'))\
         .map(e => e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 40)).slice(0, 8).join(' | ')",
    );
    assert!(width <= 390, "the page is {width} px wide at phone width: {wide}");
    browser.screenshot(&shots().join("page-phone.png"));

    // All along, the page's style sheet, script and live stream kept to its Content-Security-Policy.
    assert_eq!(browser.csp_violations(), Vec::<String>::new());
    // (And a violation would have been seen: an image from elsewhere is one.)
    browser.eval(
        "const i = document.createElement('img'); i.src = 'http://127.0.0.2:1/x.png'; document.body.append(i); true",
    );
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(30));
    while browser.csp_violations().is_empty() {
        if deadline.passed() {
            deadline.fail(format_args!("the browser to report a violation: {:?}", browser.log()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // Without JavaScript it still reads: everything is in the served HTML.
    // (Read through the DOM domain: page script is off.)
    browser.call("Emulation.setScriptExecutionDisabled", serde_json::json!({"value": true}));
    browser.call("Page.navigate", serde_json::json!({ "url": page }));
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(20));
    let html = loop {
        // The document is replaced while the page loads: a node that went away is "not yet".
        let html = browser
            .try_call("DOM.getDocument", serde_json::json!({}))
            .and_then(|root| {
                browser.try_call("DOM.getOuterHTML", serde_json::json!({"nodeId": root["root"]["nodeId"]}))
            })
            .map(|h| h["outerHTML"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        if html.contains("This Worker's outage events") || deadline.passed() {
            break html;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(html.contains("Storage configs") && html.contains("broken.jpg") && html.contains("paused"), "{html}");
}

/// The signed-in page framed by a page on another port of 127.0.0.1 (the same site, so its SameSite=Strict
/// session cookie goes along): the browser refuses to show it, so nothing of it, no button, can be reached or
/// clicked through a disguise. A frame of a third port beside it shows that a frame that loads is readable.
#[test]
fn a_page_on_another_port_cannot_frame_the_signed_in_page() {
    let (db, _dir, _worker, address) = a_worker_of_an_empty_library();
    let page = format!("http://{address}/");

    let mut browser = Browser::launch(1000, 800);
    browser.navigate(&page);
    sign_in(&mut browser);
    let buttons = "document.querySelectorAll('form[method=post] button').length";
    assert!(browser.eval(buttons).as_u64().unwrap() > 3, "signed in, the page has its action buttons");
    // Its own style sheet applies under its Content-Security-Policy, and nothing was refused.
    assert_eq!(browser.eval("getComputedStyle(document.querySelector('header')).display"), "flex");
    assert_eq!(browser.csp_violations(), Vec::<String>::new());

    let control = serve_html("<!doctype html><title>control</title><form method=post><button>b</button></form>".into());
    let framing = serve_html(format!(
        "<!doctype html><title>a page elsewhere</title>\
         <iframe name=almanac src=\"{page}\" width=900 height=500></iframe>\
         <iframe name=control src=\"{control}\"></iframe>"
    ));
    assert_ne!(framing, page);
    browser.navigate(&framing);
    let frames = |browser: &mut Browser| -> Vec<(String, String, String)> {
        let tree = browser.call("Page.getFrameTree", serde_json::json!({}));
        tree["frameTree"]["childFrames"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let f = &c["frame"];
                let text = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
                (text("name"), text("id"), text("url"))
            })
            .collect()
    };
    let reach = "JSON.stringify({forms: document.querySelectorAll('form').length, \
                 text: document.body ? document.body.innerText : ''})";
    // The control frame loads, and its form is reachable the way the framed page's would be.
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(60));
    loop {
        let control_frame = frames(&mut browser).into_iter().find(|(name, _, _)| name == "control");
        let found = control_frame.and_then(|(_, id, _)| browser.eval_in_frame(&id, reach).ok());
        if found.as_ref().and_then(|v| v.as_str()).is_some_and(|v| v.contains("\"forms\":1")) {
            break;
        }
        if deadline.passed() {
            deadline.fail(format_args!("the control frame to load: {found:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, id, frame_url) = frames(&mut browser)
        .into_iter()
        .find(|(name, _, _)| name == "almanac")
        .expect("the framing page has its frame");
    assert_ne!(frame_url, page, "the framed document is not the page");
    match browser.eval_in_frame(&id, reach) {
        Ok(seen) => {
            let seen = seen.as_str().unwrap_or_default().to_owned();
            assert!(seen.contains("\"forms\":0") && !seen.contains("Almanac Worker"), "the frame shows: {seen}");
        }
        Err(e) => eprintln!("the blocked frame has no document to run in: {e}"),
    }
    // Refused by the browser for its frame-ancestors (or X-Frame-Options), in its words.
    let log = browser.log();
    assert!(
        log.iter()
            .filter_map(|e| e["text"].as_str())
            .any(|t| t.contains(&page) && (t.contains("frame-ancestors") || t.contains("X-Frame-Options"))),
        "{log:?}"
    );
    browser.screenshot(&shots().join("page-framed.png"));
    drop(db);
}

/// nginx in front of the Worker, serving the page under a path of another site's (`/almanac/`, stripped before
/// the Worker sees the request) and the other site at every other path, as on a NAS that serves several
/// services on one host name. Stopped with the test.
struct Proxy {
    child: Child,
    /// What reached the other site: one request line a line (its access log).
    other_site_log: PathBuf,
    /// The proxy's address: the page is at `/almanac/` (the prefix named, as docs/operations.md shows) and at
    /// `/plain/` (not named).
    address: String,
}

impl Proxy {
    fn start(dir: &Path, worker: &str) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let d = dir.display();
        let config = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
             events {{ worker_connections 64; }}
             http {{
                 access_log off;
                 client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
                 uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
                 server {{
                     listen 127.0.0.1:{port};
                     location /almanac/ {{
                         proxy_pass http://{worker}/; proxy_set_header X-Forwarded-Prefix /almanac;
                     }}
                     location /plain/ {{ proxy_pass http://{worker}/; }}
                     location / {{ access_log {d}/other-site.log; return 200 \"the other site\\n\"; }}
                 }}
             }}"
        );
        std::fs::write(dir.join("nginx.conf"), config).unwrap();
        let child = Command::new("/usr/sbin/nginx")
            .args(["-p", &d.to_string(), "-c", &dir.join("nginx.conf").display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (Debian package nginx; `cargo xtask deps` installs it)");
        let address = format!("127.0.0.1:{port}");
        almanac_testdb::patience::wait_for(
            "nginx to answer",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || std::net::TcpStream::connect(&address).is_ok().then_some(()),
        );
        Self { child, other_site_log: dir.join("other-site.log"), address }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the page's own style sheet loaded (another site's answer in its place has no rules the page may read).
const STYLED: &str = "document.styleSheets.length === 1 && document.styleSheets[0].cssRules.length > 0";

#[test]
fn behind_a_proxy_under_a_path_of_another_site_the_page_works_and_sends_the_other_site_nothing() {
    let (db, dir, _worker, address) = a_worker_of_an_empty_library();
    let url = db.url().to_owned();
    let proxy = Proxy::start(dir.path(), &address);

    let mut browser = Browser::launch(1000, 800);
    for (prefix, action, done, paused) in [("almanac", "pause", "paused", "1"), ("plain", "resume", "resumed", "0")] {
        let page = format!("http://{}/{prefix}/", proxy.address);
        browser.navigate(&page);
        // Its style sheet applies and its live stream answers, both through the proxy.
        assert_eq!(browser.eval("getComputedStyle(document.querySelector('header')).display"), "flex", "{page}");
        browser.eval(RECORD_RUNNING);
        browser.wait_for("the live stream to answer", "window.shown.length > 0", Duration::from_secs(30));
        sign_in(&mut browser);
        // The session is the page's: kept for its path, not sent to the other site's.
        let cookies = browser.call("Network.getAllCookies", serde_json::json!({}));
        let path = format!("/{prefix}");
        let session = cookies["cookies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "almanac_session" && c["path"] == path.as_str());
        assert!(session, "a session for {path}: {cookies}");

        let button = format!("form[action$=\"/{action}\"][action*=\"configs/\"] button");
        browser.eval(&format!("document.querySelector('{button}').click(); true"));
        browser.wait_for(
            action,
            &format!("document.querySelector('.flash')?.textContent.includes('{done}')"),
            Duration::from_secs(30),
        );
        assert_eq!(browser.eval("location.href"), page.as_str(), "back on the page after the action");
        let count = support::query(&url, "SELECT count(*) FROM storage_configs WHERE paused_at IS NOT NULL");
        assert_eq!(count[0][0], paused);
        // A problem page, styled, and its way back.
        browser.navigate(&format!("{page}items/not-an-id"));
        assert_eq!(browser.eval(STYLED), true, "the problem page has its style sheet");
        browser.eval("document.querySelector('a').click(); true");
        browser.wait_for(
            "the way back",
            &format!("location.href === '{page}' && document.readyState === 'complete'"),
            Duration::from_secs(30),
        );
        browser.eval("document.querySelector('form[action$=\"logout\"] button').click(); true");
        browser.wait_for(
            "signing out",
            "document.querySelector('.flash')?.textContent.includes('signed out')",
            Duration::from_secs(30),
        );
    }
    assert_eq!(browser.csp_violations(), Vec::<String>::new());

    // Nothing reached the other site (but the icon a browser asks every host's root for).
    let log = std::fs::read_to_string(&proxy.other_site_log).expect("nginx opens its logs as it starts");
    let reached: Vec<&str> = log.lines().filter(|l| !l.contains("GET /favicon.ico ")).collect();
    assert!(reached.is_empty(), "the page sent the other site: {reached:#?}");
    drop(db);
}
