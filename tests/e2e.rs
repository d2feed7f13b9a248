//! End to end: the real `almanac-worker` binary as processes, over a real database and a generated library.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_testdb::TestDatabase;
use support::{Proxy, Worker, http_get, log_lines, proxy_to};

struct Setup {
    db: TestDatabase,
    dir: tempfile::TempDir,
    library: PathBuf,
}

fn setup(photos: u32) -> Setup {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDatabase::create());
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("library");
    std::fs::create_dir_all(&library).unwrap();
    for i in 0..photos {
        let exif = FixtureExif::camera(&format!("2021:03:{:02} 10:00:00", 1 + i % 28), "+01:00");
        std::fs::write(library.join(format!("IMG_{i:04}.JPG")), fixtures::jpeg(1200, 900, i, true, &exif)).unwrap();
    }
    Setup { db, dir, library }
}

impl Setup {
    fn cli(&self, args: &[&str]) -> String {
        let out = support::worker().args(args).env("DATABASE_URL", self.db.url()).output().unwrap();
        assert!(out.status.success(), "almanac-worker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs the CLI with extra environment and returns its exit code, standard output and standard error.
    fn cli_exit(&self, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
        let mut command = support::worker();
        command.args(args).env("DATABASE_URL", self.db.url());
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }

    fn worker(&self, name: &str, url: &str, extra: &[(&str, &str)]) -> Worker {
        Worker::start(url, self.dir.path(), name, |run| {
            run.env("ALMANAC__QUEUE__POLL_INTERVAL", "200ms")
                // The tests write their photos moments before a crawl: none is being written any more.
                .env("ALMANAC__STORAGE__SETTLE_TIME", "0s")
                .envs(extra.iter().copied());
        })
    }

    fn query(&self, sql: &str) -> Vec<Vec<String>> {
        support::query(self.db.url(), sql)
    }

    /// Waits until `sql` returns a row, for something that takes up to `idle` on an idle machine (the deadline
    /// is the tests' patience for that: `almanac_testdb::patience`).
    fn wait_for(&self, what: &str, sql: &str, idle: Duration) -> Vec<Vec<String>> {
        let every = Duration::from_millis(100);
        almanac_testdb::patience::wait_for(what, idle, every, || Some(self.query(sql)).filter(|rows| !rows.is_empty()))
    }
}

fn events<'a>(lines: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["fields"]["event"] == name).collect()
}

fn timestamp(line: &serde_json::Value) -> chrono::DateTime<chrono::Utc> {
    line["timestamp"].as_str().unwrap().parse().unwrap()
}

/// Metrics do not depend on the log level: a Worker at `warn` logs none of its claims or outcomes, and its
/// `/metrics` still counts them, measures its claims and heartbeats, shows the process, and passes
/// `promtool check metrics` (HELP and TYPE on every family, names as Prometheus wants them).
#[test]
fn metrics_count_at_log_level_warn_and_pass_promtool() {
    let s = setup(40);
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    s.cli(&["enqueue", "crawl", "--config", root]);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let worker = s.worker(
        "quiet",
        s.db.url(),
        &[
            ("ALMANAC__HTTP__ENABLED", "true"),
            ("ALMANAC__HTTP__ADDRESS", &address),
            ("ALMANAC__LOG__LEVEL", "warn"),
            ("ALMANAC__QUEUE__LEASE", "2s"),
            ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "200ms"),
            ("ALMANAC__WORKER__MAX_CONCURRENT_FILES", "1"),
        ],
    );
    s.wait_for(
        "the crawl",
        "SELECT 1 FROM work_items WHERE kind = 'crawl' AND status = 'succeeded'",
        Duration::from_secs(120),
    );
    let response = http_get(port, "/metrics");
    let (head, metrics) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/plain; version=0.0.4"), "{head}");
    let number = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    };
    assert!(number(r#"almanac_events_total{event="claimed"}"#) >= 1.0);
    assert!(number(r#"almanac_events_total{event="succeeded"}"#) >= 1.0);
    let crawls = number(r#"almanac_events_total{event="crawl_finished"}"#);
    assert!(crawls >= 1.0);
    // Every finished crawl (the scheduler may have run one more) found the library's 40 files.
    assert_eq!(number(r#"almanac_crawl_files_total{outcome="found"}"#), 40.0 * crawls);
    assert!(number("almanac_crawl_hashed_bytes_total") > 0.0);
    assert!(number(r#"almanac_claim_duration_seconds_count{outcome="claimed"}"#) >= 1.0);
    assert!(number(r#"almanac_heartbeat_duration_seconds_count{outcome="renewed"}"#) >= 1.0);
    assert!(number(r#"almanac_item_duration_seconds_count{kind="crawl",outcome="succeeded"}"#) >= 1.0);
    assert_eq!(number(r#"almanac_work_items{kind="purge",status="failed"}"#), 0.0, "zeros are shown");
    assert_eq!(number("almanac_database_up"), 1.0);
    assert!(metrics.contains("\nalmanac_watch_mode{config=\""), "the watch gauges, written at the scrape: {metrics}");
    assert!(number("process_resident_memory_bytes") > 1e6);
    assert!(number("process_open_fds") >= 3.0);
    assert!(metrics.contains("# TYPE process_cpu_seconds_total counter"), "{metrics}");
    // Nothing of this was logged.
    let (_, lines) = worker.terminate();
    assert!(events(&lines, "claimed").is_empty() && events(&lines, "succeeded").is_empty());

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; `cargo xtask deps` installs it)");
    promtool.stdin.take().unwrap().write_all(metrics.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool: {said}\n{metrics}");
}

#[test]
fn two_workers_crawl_a_library_status_shows_it_and_sigterm_exits_cleanly() {
    let s = setup(12);
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    s.cli(&["enqueue", "crawl", "--config", root]);
    let url = s.db.url().to_owned();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let a = s.worker("worker-a", &url, &[("ALMANAC__HTTP__ENABLED", "true"), ("ALMANAC__HTTP__ADDRESS", &address)]);
    let b = s.worker("worker-b", &url, &[]);
    s.wait_for(
        "the crawl and burst detection",
        "SELECT 1 WHERE (SELECT count(*) FROM work_items WHERE kind IN ('crawl', 'burst_detection') AND status = 'succeeded') >= 2",
        Duration::from_secs(120),
    );
    let assets = s.query("SELECT count(*) FROM media_assets WHERE NOT is_soft_deleted");
    assert_eq!(assets[0][0], "12");
    let status = s.cli(&["status"]);
    assert!(status.contains("crawl") && status.contains("burst_detection"), "{status}");
    let json: serde_json::Value = serde_json::from_str(&s.cli(&["status", "--json"])).unwrap();
    assert!(json["counts"].as_array().unwrap().iter().any(|c| c["kind"] == "crawl" && c["status"] == "succeeded"));
    assert!(http_get(port, "/healthz").starts_with("HTTP/1.1 200"));
    assert!(http_get(port, "/readyz").starts_with("HTTP/1.1 200"));
    let metrics = http_get(port, "/metrics");
    assert!(metrics.contains("almanac_work_items{kind=\"crawl\",status=\"succeeded\"}"), "{metrics}");
    assert!(metrics.contains("almanac_database_up 1"));
    assert!(metrics.contains("almanac_events_total{event=\"claimed\"}"));
    // Whichever Worker ran the crawl, at least one outcome histogram exists on A (it ran something).
    assert!(metrics.contains("almanac_item_duration_seconds_count{kind="), "{metrics}");
    assert!(http_get(port, "/nope").starts_with("HTTP/1.1 404"));
    // The container health check: `health` asks the Worker on its own address.
    let (code, out, _) = s.cli_exit(&["health"], &[("ALMANAC__HTTP__ADDRESS", Path::new(&address))]);
    assert_eq!((code, out.trim()), (0, "ready"));
    // Port 1: nothing listens there (a port freed for the test could be taken by another test meanwhile).
    let (code, out, _) = s.cli_exit(&["health"], &[("ALMANAC__HTTP__ADDRESS", Path::new("127.0.0.1:1"))]);
    assert!(code == 1 && out.starts_with("not ready: no Worker answers"), "{out}");
    for w in [a, b] {
        let (exit, lines) = w.terminate();
        assert!(exit.success(), "{exit}");
        assert_eq!(events(&lines, "worker_stopped").len(), 1);
    }
}

#[test]
fn sigterm_releases_a_running_crawl_and_exits_zero() {
    let s = setup(0);
    fixtures::video(&s.library.join("long.mp4"), 30.0, 1280, 720, "2021-06-01T10:00:00Z");
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let id = s.cli(&["enqueue", "crawl", "--config", root]).split_whitespace().next().unwrap().to_owned();
    let w = s.worker("worker-a", s.db.url(), &[("ALMANAC__QUEUE__SHUTDOWN_GRACE", "500ms")]);
    s.wait_for(
        "the crawl to run",
        &format!("SELECT 1 FROM work_items WHERE id = '{id}' AND status = 'running'"),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let (exit, lines) = w.terminate();
    assert!(exit.success(), "{exit}");
    assert_eq!(events(&lines, "released").len(), 1, "the running crawl was released");
    let row = s.query(&format!("SELECT status, attempt, failures, stalls FROM work_items WHERE id = '{id}'"));
    assert_eq!(row[0], ["queued", "1", "0", "0"]);
    let survivors = fixtures::processes_holding_open_beneath(&s.dir.path().join("proxies"));
    assert!(survivors.is_empty(), "ffmpeg left running: {survivors:?}");
}

#[test]
fn roots_and_the_proxy_root_never_overlap_config_add_and_run_refuse_with_exit_2() {
    let s = setup(2);
    s.cli(&["migrate"]);
    let base = std::fs::canonicalize(s.dir.path()).unwrap();
    let library = base.join("library");
    // The proxy root lives apart, so a root containing the whole test folder meets only ann's library.
    let elsewhere = tempfile::tempdir().unwrap();
    let proxies = elsewhere.path().join("proxies");
    let env = [("ALMANAC__STORAGE__PROXY_ROOT", proxies.as_path())];
    // Registered as given by a clumsy operator (trailing slash, `..`, through a link): stored canonical.
    std::os::unix::fs::symlink(&library, base.join("photos-link")).unwrap();
    let given = format!("{}/../library/", library.display());
    let (code, out, err) = s.cli_exit(&["config", "add", "--user", "ann", "--root", &given], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with(&format!("\t{}", library.display())), "{out}");
    let (code, _, err) =
        s.cli_exit(&["config", "add", "--user", "bob", "--root", base.join("photos-link").to_str().unwrap()], &env);
    assert_eq!(code, 2, "the same tree through a link: {err}");
    assert!(err.contains("already registered") && err.contains(library.to_str().unwrap()), "{err}");
    std::fs::create_dir_all(library.join("bob")).unwrap();
    for (root, what) in [(base.clone(), "contains"), (library.join("bob"), "inside")] {
        let (code, _, err) = s.cli_exit(&["config", "add", "--user", "eve", "--root", root.to_str().unwrap()], &env);
        assert_eq!(code, 2, "{what}: {err}");
        assert!(err.contains("overlaps") && err.contains(library.to_str().unwrap()) && err.contains("user ann"));
    }
    let (code, _, err) = s.cli_exit(&["config", "add", "--user", "eve", "--root", "/no/such/share"], &env);
    assert!(code == 2 && err.contains("mount the share first"), "{code} {err}");
    // A root that would hold the proxy root, and a proxy root inside a library.
    let (code, _, err) = s.cli_exit(
        &["config", "add", "--user", "eve", "--root", base.join("proxies-parent").to_str().unwrap()],
        &[("ALMANAC__STORAGE__PROXY_ROOT", &base.join("proxies-parent/proxies"))],
    );
    assert_eq!(code, 2, "{err}");
    std::fs::create_dir_all(base.join("proxies-parent")).unwrap();
    let (code, _, err) = s.cli_exit(
        &["config", "add", "--user", "eve", "--root", base.join("proxies-parent").to_str().unwrap()],
        &[("ALMANAC__STORAGE__PROXY_ROOT", &base.join("proxies-parent/proxies"))],
    );
    assert!(code == 2 && err.contains("storage.proxy_root") && err.contains("proxies-parent"), "{code} {err}");
    let listed = s.cli(&["config", "list"]);
    assert_eq!(listed.lines().count(), 2, "only ann's library is registered: {listed}");
    // `run` with the proxy root set to the library's parent, or inside it, refuses at once: exit 2, both named.
    for proxy_root in [base.clone(), library.join(".proxies")] {
        let (code, _, err) = s.cli_exit(&["run"], &[("ALMANAC__STORAGE__PROXY_ROOT", proxy_root.as_path())]);
        assert_eq!(code, 2, "{}: {err}", proxy_root.display());
        assert!(err.contains(proxy_root.to_str().unwrap()) && err.contains(library.to_str().unwrap()), "{err}");
    }
    assert_eq!(std::fs::read_dir(&library).unwrap().count(), 3, "the library is untouched (2 photos, bob/)");
    // An older catalogue's overlap is reported by `status`.
    s.query(&format!(
        "WITH u AS (INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'eve') RETURNING id)
         INSERT INTO storage_configs (id, user_id, root_path) SELECT gen_random_uuid(), u.id, '{}' FROM u",
        library.join("bob").display()
    ));
    // And a root registered through a link (`photos-link` points at the library).
    s.query(&format!(
        "WITH u AS (INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'zed') RETURNING id)
         INSERT INTO storage_configs (id, user_id, root_path) SELECT gen_random_uuid(), u.id, '{}' FROM u",
        base.join("photos-link").display()
    ));
    let (code, status, err) = s.cli_exit(&["status"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(status.contains("ROOT PROBLEMS") && status.contains("cover one tree"), "{status}");
    assert!(status.contains("reached through a link"), "{status}");
}

/// One tree under two paths: a library bind-mounted elsewhere (in a mount namespace of the test's own, so
/// nothing outside it sees the mount). The paths differ; the file system knows it is one folder.
#[test]
fn a_bind_mount_of_a_library_is_refused_as_a_second_root_and_as_the_proxy_root() {
    let s = setup(1);
    s.cli(&["migrate"]);
    let base = std::fs::canonicalize(s.dir.path()).unwrap();
    let library = base.join("library");
    let alias = base.join("alias");
    std::fs::create_dir_all(&alias).unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", library.to_str().unwrap()]);
    let in_namespace = |command: &str| {
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            // Bounded: a Worker that wrongly starts must not hang the suite.
            .arg(format!("mount --bind '{}' '{}' && timeout 20 {command}", library.display(), alias.display()))
            .env("DATABASE_URL", s.db.url())
            .env("ALMANAC__STORAGE__PROXY_ROOT", base.join("proxies"))
            .output()
            .unwrap()
    };
    let probe = in_namespace("true");
    if !probe.status.success() {
        // Mount namespaces need root (CI runs as root); say so rather than pass silently.
        eprintln!("SKIPPED: cannot bind-mount here: {}", String::from_utf8_lossy(&probe.stderr));
        return;
    }
    let bin = format!("'{}' --config-file '{}'", support::worker_bin(), support::empty_settings().display());
    let out = in_namespace(&format!("{bin} config add --user eve --root '{}'", alias.display()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("same tree") && err.contains(library.to_str().unwrap()), "{err}");
    let out =
        in_namespace(&format!("env ALMANAC__STORAGE__PROXY_ROOT='{}' {bin} run", alias.join("proxies").display()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("lies inside") && err.contains(library.to_str().unwrap()), "{err}");
    assert!(!library.join("proxies").exists(), "nothing was created inside the library");
    assert_eq!(s.cli(&["config", "list"]).lines().count(), 2);
}

/// A command says which settings it used: `config check` names the file it read, and every other command warns
/// when the environment replaces a value of that file (a `DATABASE_URL` left in an operator's shell would otherwise
/// send `config add` to another database without a word).
#[test]
fn a_command_says_when_the_environment_replaces_a_value_of_its_settings_file() {
    let s = setup(0);
    s.cli(&["migrate"]);
    let file = s.dir.path().join("worker.toml");
    std::fs::write(&file, format!("[database]\nurl = \"{}\"\n", s.db.url())).unwrap();
    let run = |args: &[&str], database_url: Option<&str>| {
        let mut command = Command::new(support::worker_bin());
        command.arg("--config-file").arg(&file).args(args).env_remove("DATABASE_URL");
        if let Some(url) = database_url {
            command.env("DATABASE_URL", url);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = run(&["config", "list"], None);
    assert!(!quiet.contains("environment"), "the file alone: nothing to say: {quiet}");
    let warned = run(&["config", "list"], Some(s.db.url()));
    let expected = format!("DATABASE_URL in the environment sets database.url, not the value in {}", file.display());
    assert!(warned.contains(&expected), "{warned}");
    let checked = run(&["config", "check"], None);
    assert!(checked.contains(&format!("settings read from {}", file.display())), "{checked}");
}

/// A TCP proxy to the cluster's Unix socket that can be cut: it stops forwarding without closing the sockets,
/// the way a dead network path looks to both ends.
/// Worker A reaches the database through `proxy`; returns its URL (with `application_name` = `name`).
fn via_proxy(s: &Setup, name: &str) -> (Proxy, String) {
    let url = url::Url::parse(s.db.url()).unwrap();
    let host = url.query_pairs().find(|(k, _)| k == "host").map(|(_, v)| v.into_owned()).expect("a socket dir");
    let port =
        url.query_pairs().find(|(k, _)| k == "port").map(|(_, v)| v.into_owned()).unwrap_or_else(|| "5432".into());
    let proxy = proxy_to(Path::new(&host).join(format!(".s.PGSQL.{port}")));
    let db_name = url.path().trim_start_matches('/');
    let url =
        format!("postgres://postgres@127.0.0.1:{}/{db_name}?connect_timeout=2&application_name={name}", proxy.port);
    (proxy, url)
}

/// The design record's own scenario: a Worker whose database connection is cut mid-crawl self-stops within
/// half a lease and writes nothing more; after the lease expires another Worker recovers the item and finishes
/// the crawl; the two attempts never overlap.
#[test]
fn a_worker_cut_off_mid_crawl_self_stops_and_another_recovers_and_finishes_it() {
    let s = setup(60);
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let id = s.cli(&["enqueue", "crawl", "--config", root]).split_whitespace().next().unwrap().to_owned();
    // The test database is reached over the cluster's Unix socket: give worker A a cuttable TCP path to it.
    let (proxy, via_proxy) = via_proxy(&s, "worker-a");
    let quick = [
        ("ALMANAC__QUEUE__LEASE", "4s"),
        ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "1s"),
        ("ALMANAC__WORKER__MAX_CONCURRENT_FILES", "1"),
    ];
    let a = s.worker("worker-a", &via_proxy, &quick);
    s.wait_for(
        "worker A to start the crawl",
        &format!("SELECT 1 FROM work_items WHERE id = '{id}' AND status = 'running' AND worker_id = 'worker-a'"),
        Duration::from_secs(30),
    );
    // Let it ingest a few files, then cut it off while the crawl is still going.
    std::thread::sleep(Duration::from_millis(300));
    proxy.cut.store(true, Ordering::SeqCst);
    let cut_at = chrono::Utc::now();
    // Worker B reaches the database directly; it recovers the item once A's lease expires.
    let b = s.worker("worker-b", s.db.url(), &quick);
    let done = s.wait_for(
        "worker B to finish the crawl",
        &format!("SELECT status, attempt, worker_id, stalls, failures FROM work_items WHERE id = '{id}' AND status = 'succeeded'"),
        Duration::from_secs(120),
    );
    assert_eq!(done[0], ["succeeded", "2", "worker-b", "1", "0"], "recovered once, never failed");
    let finished_by_a = events(&log_lines(&a.log), "crawl_finished").len();
    assert_eq!(finished_by_a, 0, "A was cut off mid-crawl, not after it");
    assert_eq!(s.query("SELECT count(*) FROM media_assets WHERE NOT is_soft_deleted")[0][0], "60");

    let (_, b_lines) = b.terminate();
    let a_lines = log_lines(&a.log);
    drop(a);
    let stopped = events(&a_lines, "self_stopped");
    assert_eq!(stopped.len(), 1, "worker A self-stopped once");
    let since = stopped[0]["fields"]["since_last_good_beat_ms"].as_u64().unwrap();
    assert!(
        (2000..2500).contains(&since),
        "self-stopped at half a lease (2 s) after the last good beat, not {since} ms"
    );
    let self_stop_at = timestamp(stopped[0]);
    assert!(
        self_stop_at > cut_at && self_stop_at - cut_at < chrono::Duration::seconds(3),
        "within half a lease of the cut"
    );
    assert!(events(&a_lines, "failed").is_empty() && events(&a_lines, "succeeded").is_empty(), "A wrote no outcome");
    let claimed_by_b = events(&b_lines, "claimed");
    let b_start =
        timestamp(claimed_by_b.iter().find(|l| l["span"]["item_id"] == id.as_str()).expect("B claimed the crawl"));
    assert!(b_start > self_stop_at, "B started only after A had stopped");
    assert!(
        !events(&b_lines, "lease_recovered").is_empty()
            || !s.query(&format!("SELECT 1 FROM work_items WHERE id = '{id}' AND stalls = 1")).is_empty()
    );
}

/// The fault the cut above cannot show: a network path that holds worker A's bytes (nothing dropped, nothing
/// closed) and delivers them, in order, after worker B has taken the crawl over. Every catalogue write is
/// fenced, so nothing of A's attempt lands after B's claim: an audit trigger records which Worker wrote each
/// catalogue row, and when.
#[test]
fn bytes_of_a_cut_off_worker_delivered_after_the_takeover_change_nothing() {
    let s = setup(60);
    s.cli(&["migrate"]);
    s.query(
        "CREATE TABLE audit (app text, at timestamptz, tbl text);
         CREATE FUNCTION audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN INSERT INTO audit VALUES (current_setting('application_name'), clock_timestamp(), TG_TABLE_NAME);
                 RETURN NULL; END $$;
         CREATE TRIGGER audit_assets AFTER INSERT OR UPDATE OR DELETE ON media_assets
           FOR EACH STATEMENT EXECUTE FUNCTION audit_write();
         CREATE TRIGGER audit_metadata AFTER INSERT OR UPDATE OR DELETE ON asset_metadata
           FOR EACH STATEMENT EXECUTE FUNCTION audit_write();
         CREATE TRIGGER audit_proxies AFTER INSERT OR UPDATE OR DELETE ON proxy_files
           FOR EACH STATEMENT EXECUTE FUNCTION audit_write();
         CREATE TRIGGER audit_extra AFTER INSERT OR UPDATE OR DELETE ON asset_extra_paths
           FOR EACH STATEMENT EXECUTE FUNCTION audit_write();",
    );
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let id = s.cli(&["enqueue", "crawl", "--config", root]).split_whitespace().next().unwrap().to_owned();
    let (proxy, url_a) = via_proxy(&s, "worker-a");
    let quick = [
        ("ALMANAC__QUEUE__LEASE", "4s"),
        ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "1s"),
        ("ALMANAC__WORKER__MAX_CONCURRENT_FILES", "1"),
    ];
    let a = s.worker("worker-a", &url_a, &quick);
    s.wait_for(
        "worker A to ingest some files",
        "SELECT 1 WHERE (SELECT count(*) FROM audit WHERE app = 'worker-a' AND tbl = 'media_assets') >= 3",
        Duration::from_secs(60),
    );
    proxy.hold();
    let url_b = format!("{}&application_name=worker-b", s.db.url());
    let b = s.worker("worker-b", &url_b, &quick);
    let claimed_by_b = s.wait_for(
        "worker B to take the crawl over",
        &format!(
            "SELECT started_at FROM work_items WHERE id = '{id}' AND worker_id = 'worker-b' AND status = 'running'"
        ),
        Duration::from_secs(60),
    );
    let b_started: chrono::DateTime<chrono::Utc> = claimed_by_b[0][0].replace(' ', "T").parse().unwrap_or_else(|_| {
        chrono::DateTime::parse_from_str(&claimed_by_b[0][0], "%Y-%m-%d %H:%M:%S%.f%#z").unwrap().into()
    });
    let held = proxy.deliver();
    assert!(held > 0, "worker A's bytes were held and delivered late");
    s.wait_for(
        "worker B to finish the crawl",
        &format!("SELECT 1 FROM work_items WHERE id = '{id}' AND status = 'succeeded' AND worker_id = 'worker-b'"),
        Duration::from_secs(120),
    );
    // Give anything A still had to say time to arrive.
    std::thread::sleep(Duration::from_secs(2));
    // Once healed, A is a live Worker again and may claim other work (the burst detection B's crawl queued):
    // those are writes of new attempts. Nothing of A's may land between B's claim and A's next claim.
    let late = s.query(&format!(
        "SELECT count(*) FROM audit
          WHERE app = 'worker-a' AND at >= '{b}'
            AND at < coalesce((SELECT min(started_at) FROM work_items
                                WHERE worker_id = 'worker-a' AND started_at > '{b}'), 'infinity')",
        b = b_started.to_rfc3339()
    ));
    assert_eq!(late[0][0], "0", "a write of worker A's crawl landed after worker B's claim at {b_started}");
    assert_eq!(s.query("SELECT count(*) FROM media_assets WHERE NOT is_soft_deleted")[0][0], "60");
    let copies = s.query("SELECT count(*) FROM asset_extra_paths");
    assert_eq!(copies[0][0], "0", "no file recorded as a copy of itself");
    let (_, _) = b.terminate();
    let a_lines = log_lines(&a.log);
    drop(a);
    assert_eq!(events(&a_lines, "self_stopped").len(), 1, "A stopped itself");
}

/// Probes and metrics have a small pool of their own: a flood of `/readyz` and `/metrics` during a crawl of
/// four files at once neither delays a heartbeat nor stops the crawl.
#[test]
fn a_flood_of_probes_and_scrapes_never_starves_heartbeats() {
    let s = setup(40);
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let id = s.cli(&["enqueue", "crawl", "--config", root]).split_whitespace().next().unwrap().to_owned();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let w = s.worker(
        "worker-a",
        s.db.url(),
        &[
            ("ALMANAC__HTTP__ENABLED", "true"),
            ("ALMANAC__HTTP__ADDRESS", &address),
            ("ALMANAC__QUEUE__LEASE", "8s"),
            ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "2s"),
            ("ALMANAC__DATABASE__MAX_CONNECTIONS", "2"),
            ("ALMANAC__WORKER__MAX_CONCURRENT_FILES", "4"),
        ],
    );
    s.wait_for(
        "the crawl to start",
        &format!("SELECT 1 FROM work_items WHERE id = '{id}' AND status = 'running'"),
        Duration::from_secs(30),
    );
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flood: Vec<_> = (0..16)
        .map(|i| {
            let (flooding, served) = (flooding.clone(), served.clone());
            std::thread::spawn(move || {
                let path = if i % 2 == 0 { "/readyz" } else { "/metrics" };
                while flooding.load(Ordering::SeqCst) {
                    if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
                        let _ = write!(stream, "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
                        let mut answer = String::new();
                        let _ = stream.read_to_string(&mut answer);
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let done = s.wait_for(
        "the crawl to finish",
        &format!("SELECT attempt, stalls FROM work_items WHERE id = '{id}' AND status = 'succeeded'"),
        Duration::from_secs(120),
    );
    flooding.store(false, Ordering::SeqCst);
    for t in flood {
        t.join().unwrap();
    }
    assert!(served.load(Ordering::Relaxed) > 100, "the endpoints were flooded");
    assert_eq!(done[0], ["1", "0"], "one attempt, never recovered");
    let (_, lines) = w.terminate();
    assert!(events(&lines, "self_stopped").is_empty(), "a flood stopped a healthy crawl");
    assert!(events(&lines, "heartbeat_failed").is_empty(), "a heartbeat was late under the flood");
}

/// A database a newer Worker migrated: this older binary refuses it for every command that uses it (exit 2,
/// both versions named); with the unknown migration gone it runs again.
#[test]
fn a_schema_newer_than_this_binary_is_refused_with_exit_2() {
    let s = setup(0);
    s.query("INSERT INTO __diesel_schema_migrations (version) VALUES ('20991231000001')");
    for args in [&["status"][..], &["migrate"], &["config", "list"], &["run", "--migrate"]] {
        let (code, _, err) = s.cli_exit(args, &[]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("newer than this almanac-worker") && err.contains("20991231000001"), "{err}");
        assert!(err.contains("the newest it knows is 2026"), "{err}");
    }
    s.query("DELETE FROM __diesel_schema_migrations WHERE version = '20991231000001'");
    s.cli(&["status"]); // succeeds again
}

/// A newer Worker migrates the database while this older one runs a crawl (its writes wait for the migration's
/// lock): within the schema check's period the older one stops claiming, releases the crawl (queued again, nothing
/// failed) and exits 2 naming the migration it does not know, as it would refuse the schema at start.
#[test]
fn a_running_worker_stops_with_exit_2_when_a_newer_one_migrates_the_database() {
    let s = setup(3);
    let (writes_held, id, mut w) = s.crawl_waiting_for_a_lock("older", &[("ALMANAC__QUEUE__SHUTDOWN_GRACE", "500ms")]);
    s.query("INSERT INTO __diesel_schema_migrations (version) VALUES ('20991231000001')");
    let stopped = w.wait_for_event("schema_newer_than_this_worker", Duration::from_secs(30));
    // The migration's locks go once the shutdown's grace has stopped the crawl: it ends at its next file.
    w.wait_for_event("shutdown_grace_over", Duration::from_secs(10));
    drop(writes_held);
    assert_eq!(stopped["fields"]["unknown"], "[\"20991231000001\"]", "{stopped}");
    let exit = almanac_testdb::patience::wait_for(
        "the Worker to exit",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || w.child.try_wait().unwrap(),
    );
    assert_eq!(exit.code(), Some(2), "{exit}");
    let lines = log_lines(&w.log);
    assert_eq!(events(&lines, "released").len(), 1, "the running crawl was released");
    let refused = std::fs::read_to_string(&w.log).unwrap();
    assert!(refused.contains("newer than this almanac-worker") && refused.contains("20991231000001"), "{refused}");
    assert!(
        refused.contains("this Worker stopped: the database was migrated while it ran, and its running items were"),
        "{refused}"
    );
    let row = s.query(&format!("SELECT status, attempt, failures FROM work_items WHERE id = '{id}'"));
    assert_eq!(row[0], ["queued", "1", "0"], "released for a Worker that knows the schema");
}

/// A Worker killed while its statements wait for a lock (a migration's, a DBA's): the server ends them within about
/// a second of their connections closing (`client_connection_check_interval`), and their transactions' locks with
/// them. Without it they wait until their own limit: a lease, an hour here.
#[test]
fn statements_of_a_killed_worker_that_wait_for_a_lock_end_with_it() {
    let s = setup(3);
    let (writes_held, id, mut w) = s.crawl_waiting_for_a_lock("killed", &[("ALMANAC__QUEUE__LEASE", "1h")]);
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    s.wait_for(
        "the killed Worker's waiting statements to end",
        &format!("SELECT 1 WHERE NOT EXISTS ({WAITING_FOR_ASSETS})"),
        Duration::from_secs(5),
    );
    // Their transactions' locks went with them (the item's row is free: NOWAIT fails on a row still locked), while
    // the lock they waited for is still held.
    let free = format!("SELECT status FROM work_items WHERE id = '{id}' FOR UPDATE NOWAIT");
    assert_eq!(s.query(&free)[0], ["running"], "recovered only once its lease has expired");
    drop(writes_held);
    let none = "SELECT count(*) FROM media_assets";
    s.wait_for(
        "the lock to be released",
        "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_locks AS l JOIN pg_database AS d ON d.oid = l.database \
          WHERE d.datname = current_database() AND l.relation = 'media_assets'::regclass AND l.granted)",
        Duration::from_secs(5),
    );
    assert_eq!(s.query(none)[0], ["0"], "nothing written by the killed Worker");
}

/// A statement of this test's database waiting for a lock on the assets.
const WAITING_FOR_ASSETS: &str = "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() \
                                  AND wait_event_type = 'Lock' AND query ILIKE '%media_assets%'";

impl Setup {
    /// A Worker `name` (with `env`) running a crawl of the library whose first write of an asset waits behind a
    /// lock this test holds (a migration's, say) until the returned sender is dropped; and the crawl's id.
    fn crawl_waiting_for_a_lock(
        &self,
        name: &str,
        env: &[(&str, &str)],
    ) -> (std::sync::mpsc::Sender<()>, String, Worker) {
        self.cli(&["migrate"]);
        let root = self.library.to_str().unwrap();
        self.cli(&["config", "add", "--user", "ann", "--root", root]);
        let writes_held = hold_writes(self.db.url(), "media_assets");
        let id = self.cli(&["enqueue", "crawl", "--config", root]).split_whitespace().next().unwrap().to_owned();
        let w = self.worker(name, self.db.url(), env);
        self.wait_for("the crawl to wait for its first write", WAITING_FOR_ASSETS, Duration::from_secs(30));
        (writes_held, id, w)
    }
}

/// Holds `LOCK TABLE <table> IN EXCLUSIVE MODE` (reads pass, writes wait) on a connection of its own until the
/// returned sender is dropped.
fn hold_writes(url: &str, table: &str) -> std::sync::mpsc::Sender<()> {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (held, is_held) = std::sync::mpsc::channel::<()>();
    let (url, lock) = (url.to_owned(), format!("BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE"));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            client.batch_execute(&lock).await.unwrap();
            held.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || released.recv()).await;
            client.batch_execute("COMMIT").await.unwrap();
        });
    });
    is_held.recv().unwrap();
    release
}

/// `status` turns a running crawl's progress into done of total, percent, rate and time left (and `--json`
/// gives the same as numbers).
#[test]
fn status_shows_a_running_crawls_progress_as_people_read_it() {
    let s = setup(0);
    let out = s.cli(&["config", "add", "--user", "ann", "--root", s.library.to_str().unwrap()]);
    assert!(!out.is_empty());
    s.query(
        "INSERT INTO work_items (id, kind, storage_config_id, status, attempt, worker_id, lease_expires_at, progress)
         SELECT gen_random_uuid(), 'crawl', id, 'running', 1, 'w1', now() + interval '1 minute',
                '{\"found\": 250, \"done\": 250, \"total\": 1000, \"seconds\": 5.0}'::jsonb
           FROM storage_configs",
    );
    let text = s.cli(&["status"]);
    assert!(text.contains("progress 250 of 1000 files (25.0%), 50/s, about 15 s left"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&s.cli(&["status", "--json"])).unwrap();
    let estimate = &json["running"][0]["estimate"];
    assert_eq!(estimate["percent"], 25.0, "{json}");
    assert_eq!(estimate["remaining_seconds"], 15, "{json}");
}

/// `enqueue --wait` follows the item to its end: plain lines when not on a terminal, exit 0 when it succeeded;
/// and exit 1 with the outcome when it ended otherwise (here cancelled by the operator while queued).
#[test]
fn enqueue_wait_follows_the_item_and_exits_with_its_outcome() {
    let s = setup(3);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);

    // Nobody runs it: it waits queued until cancelled, once the follower has said it is queued.
    let mut waiter = support::worker()
        .args(["enqueue", "token-cleanup", "--wait"])
        .env("DATABASE_URL", s.db.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (said, lines) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(waiter.stdout.take().unwrap());
    std::thread::spawn(move || std::io::BufRead::lines(stdout).map_while(Result::ok).try_for_each(|l| said.send(l)));
    let next = || lines.recv_timeout(Duration::from_secs(60)).expect("a line from enqueue --wait");
    let enqueued = next();
    let id = enqueued.split('\t').next().unwrap().to_owned();
    assert_eq!(enqueued, format!("{id}\tqueued"), "the enqueue's line");
    assert_eq!(next(), format!("{id} queued"), "the follower's first line");
    s.cli(&["cancel", &id]);
    assert_eq!(waiter.wait().unwrap().code(), Some(1));
    let rest: Vec<String> = lines.iter().collect();
    assert_eq!(rest, [format!("{id} cancelled")], "its state once, not at each look, then the outcome");

    // A payload that is not the kind's arguments is refused before anything is queued, saying what is wrong.
    let queued_before = s.query("SELECT count(*) FROM work_items")[0][0].clone();
    for (kind, payload, says) in [
        ("crawl", r#"{"allow_mass_delete": true}"#, "unknown field `allow_mass_delete`"),
        ("crawl", r#"{"root_moved": "yes"}"#, "root_moved: invalid type"),
        ("proxy-deletion", r#"{"asset_ids": "all of them"}"#, "asset_ids: invalid type"),
    ] {
        let (code, stdout, stderr) = s.cli_exit(&["enqueue", kind, "--config", root, "--payload", payload], &[]);
        assert_eq!(code, 2, "bad usage: {payload}: {stdout}");
        assert!(stderr.contains("--payload") && stderr.contains(says), "{payload}: {stderr}");
    }
    assert_eq!(s.query("SELECT count(*) FROM work_items")[0][0], queued_before, "nothing was queued");

    // A Worker runs this one: exit 0 once the crawl succeeded.
    let worker = s.worker("worker-a", s.db.url(), &[]);
    let (code, stdout, stderr) = s.cli_exit(&["enqueue", "crawl", "--config", root, "--wait"], &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.lines().last().is_some_and(|l| l.ends_with(" succeeded")), "{stdout}");
    assert_eq!(s.query("SELECT count(*) FROM media_assets")[0][0], "3");
    let (exit, _) = worker.terminate();
    assert!(exit.success());
}

/// `list`, `show` and `retry`: what an operator asks about items, without SQL; every bad id or name is a clear
/// error.
#[test]
fn list_show_and_retry_items() {
    let s = setup(0);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let ids = s.query(
        "INSERT INTO work_items (id, kind, storage_config_id, status, attempt, failures, finished_at, last_error, result)
         SELECT gen_random_uuid(), k, c.id, st, 1, f, now(), e, r::jsonb
           FROM storage_configs c,
                (VALUES ('crawl', 'failed', 5, 'the share is not mounted', NULL),
                        ('purge', 'failed', 5, 'disk full', NULL),
                        ('crawl', 'succeeded', 0, NULL,
                         '{\"failed\": 2, \"failures\": [{\"path\": \"2019/bad.jpg\", \"reason\": \"truncated JPEG\"},
                                                        {\"path\": \"2019/bomb.png\", \"reason\": \"too many pixels\"}]}'))
                AS v (k, st, f, e, r)
         RETURNING id::text, kind, status",
    );
    let id_of = |kind: &str, status: &str| ids.iter().find(|r| r[1] == kind && r[2] == status).unwrap()[0].clone();
    let (failed_crawl, failed_purge, done_crawl) =
        (id_of("crawl", "failed"), id_of("purge", "failed"), id_of("crawl", "succeeded"));

    let listed = s.cli(&["list", "--status", "failed", "--kind", "crawl", "--config", root]);
    assert!(listed.contains(&failed_crawl) && listed.contains("the share is not mounted"), "{listed}");
    assert!(!listed.contains(&failed_purge) && !listed.contains(&done_crawl), "{listed}");
    let (code, _, err) = s.cli_exit(&["list", "--kind", "crawls"], &[]);
    assert!(code == 2 && err.contains("\"crawls\" is not a kind"), "{code}: {err}");
    let (code, _, err) = s.cli_exit(&["list", "--status", "broken"], &[]);
    assert!(code == 2 && err.contains("is not a status"), "{code}: {err}");

    let shown = s.cli(&["show", &done_crawl]);
    assert!(shown.contains("failed files (2):"), "{shown}");
    assert!(shown.contains("2019/bad.jpg: truncated JPEG") && shown.contains("2019/bomb.png: too many pixels"));
    let shown = s.cli(&["show", &failed_crawl]);
    assert!(shown.contains("the share is not mounted") && shown.contains("failures 5 of 5"), "{shown}");
    let (code, _, err) = s.cli_exit(&["show", "nope"], &[]);
    assert!(code == 2 && err.contains("\"nope\" is not a work item id"), "{code}: {err}");
    let (code, _, err) = s.cli_exit(&["show", "01a22d3e-30ac-7499-a6e3-05017482eaa6"], &[]);
    assert!(code == 1 && err.contains("no work item 01a22d3e-30ac-7499-a6e3-05017482eaa6"), "{code}: {err}");

    let (code, _, err) = s.cli_exit(&["retry", &done_crawl], &[]);
    assert!(code != 0 && err.contains("is succeeded: only failed or cancelled items are retried"), "{err}");
    let (code, _, err) = s.cli_exit(&["retry"], &[]);
    assert_eq!(code, 2, "{err}");
    let out = s.cli(&["retry", &failed_crawl]);
    assert!(out.contains("1 item(s) queued again"), "{out}");
    let row = s.query(&format!("SELECT status, failures::text FROM work_items WHERE id = '{failed_crawl}'"));
    assert_eq!(row[0], ["queued", "0"]);
    let out = s.cli(&["retry", "--failed", "--kind", "purge"]);
    assert!(out.contains(&failed_purge) && out.contains("1 item(s) queued again"), "{out}");
    assert_eq!(s.query("SELECT count(*) FROM work_items WHERE status = 'failed'")[0][0], "0");
}

/// `pause` and `resume` of a config and of a kind, as the operator sees them in `status`.
#[test]
fn pause_and_resume_a_config_and_a_kind() {
    let s = setup(0);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let out = s.cli(&["pause", "--config", root]);
    assert!(out.contains("paused: its queued work is not claimed"), "{out}");
    assert!(s.cli(&["pause", "--config", root]).contains("was paused already"));
    assert!(s.cli(&["pause", "--kind", "burst-detection"]).contains("kind burst_detection paused"));
    let status = s.cli(&["status"]);
    assert!(status.contains("PAUSED") && status.contains("kind burst_detection") && status.contains(root), "{status}");
    let json: serde_json::Value = serde_json::from_str(&s.cli(&["status", "--json"])).unwrap();
    assert_eq!(json["paused"]["kinds"], serde_json::json!(["burst_detection"]), "{json}");
    assert_eq!(json["paused"]["configs"][0]["root"], root, "{json}");
    assert!(s.cli(&["resume", "--kind", "burst-detection"]).contains("resumed"));
    assert!(s.cli(&["resume", "--config", root]).contains("resumed"));
    assert!(s.cli(&["resume", "--config", root]).contains("was not paused"));
    assert!(!s.cli(&["status"]).contains("PAUSED"));
    let (code, _, err) = s.cli_exit(&["pause", "--kind", "crawls"], &[]);
    assert!(code == 2 && err.contains("is not a kind"), "{code}: {err}");
    let (code, _, _) = s.cli_exit(&["pause"], &[]);
    assert_eq!(code, 2, "nothing to pause: a usage error");
    let (code, _, err) = s.cli_exit(&["pause", "--config", "/no/such/library"], &[]);
    assert!(code != 0 && !err.is_empty());
}

/// `config activate` serves a deactivated config again, unless another active config now covers its tree.
#[test]
fn a_deactivated_config_is_activated_again_unless_its_tree_is_taken() {
    let s = setup(0);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    s.cli(&["config", "deactivate", root]);
    assert!(s.cli(&["config", "list"]).contains("\tno\t"));
    assert!(s.cli(&["config", "activate", root]).contains("activated"));
    assert!(s.cli(&["config", "list"]).contains("\tyes\t"));
    assert!(s.cli(&["config", "activate", root]).contains("active already"));

    // Deactivated, and (as an older catalogue may hold: `config add` refuses it today) an active config on a
    // folder inside its tree.
    s.cli(&["config", "deactivate", root]);
    s.query(&format!(
        "INSERT INTO storage_configs (id, user_id, root_path) SELECT gen_random_uuid(), user_id, '{root}/bob'
           FROM storage_configs WHERE root_path = '{root}'"
    ));
    let (code, _, err) = s.cli_exit(&["config", "activate", root], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("overlaps active storage config") && err.contains(&format!("{root}/bob")), "{err}");
    assert!(s.cli(&["config", "list"]).contains("\tno\t"), "still inactive");
    let (code, _, err) = s.cli_exit(&["config", "activate", "/no/such/library"], &[]);
    assert!(code != 0 && !err.is_empty());
}

/// `config watch` sets how a config's root is watched (an unknown choice or config changes nothing), and `status`
/// shows each config's watch: off while no Worker watches it, then its watcher's mode and report.
#[test]
fn config_watch_sets_the_choice_and_status_shows_each_config_s_watch() {
    let s = setup(0);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let status = s.cli(&["status"]);
    assert!(status.contains("WATCHES") && status.contains("chosen auto  mode off (no Worker watches it)"), "{status}");
    let out = s.cli(&["config", "watch", root, "polling"]);
    assert!(out.contains("is now watched: polling"), "{out}");
    assert!(s.cli(&["config", "watch", root, "polling"]).contains("was already watched: polling"));
    assert_eq!(s.query("SELECT watch FROM storage_configs"), [["polling"]]);
    let (code, _, err) = s.cli_exit(&["config", "watch", root, "inotify"], &[]);
    assert!(code == 2 && err.contains("auto, events, polling, off"), "{code}: {err}");
    let (code, _, err) = s.cli_exit(&["config", "watch", "/no/such/library", "off"], &[]);
    assert!(code == 1 && err.contains("/no/such/library"), "{code}: {err}");
    assert_eq!(s.query("SELECT watch FROM storage_configs"), [["polling"]], "nothing else changed it");

    // A Worker watching it, as its watcher reports.
    s.query(
        "INSERT INTO config_watches (storage_config_id, worker_id, since, lease_expires_at, mode, pending_files, note)
         SELECT id, 'worker-b', now(), now() + interval '1 minute', 'polling', 2, 'the root is on NFS'
           FROM storage_configs",
    );
    let status = s.cli(&["status"]);
    assert!(status.contains("chosen polling  mode polling  worker worker-b since "), "{status}");
    assert!(status.contains("last change none  pending files 2  note: the root is on NFS"), "{status}");
    let json: serde_json::Value = serde_json::from_str(&s.cli(&["status", "--json"])).unwrap();
    let watch = &json["watches"][0];
    assert_eq!(
        (&watch["root"], &watch["choice"], &watch["mode"]),
        (&root.into(), &"polling".into(), &"polling".into())
    );
    assert_eq!((&watch["worker"], &watch["pending_files"]), (&"worker-b".into(), &2.into()), "{json}");
}

/// `regenerate --config` deletes a config's proxies and a crawl behind the deletion makes them again from the
/// originals (new proxy rows, files on disk), with `--wait` following the crawl.
#[test]
fn regenerate_rebuilds_a_configs_proxies() {
    let s = setup(3);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let worker = s.worker("worker-a", s.db.url(), &[]);
    let (code, out, err) = s.cli_exit(&["enqueue", "crawl", "--config", root, "--wait"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let before = s.query("SELECT id::text, relative_path FROM proxy_files WHERE relative_path IS NOT NULL ORDER BY 2");
    assert_eq!(before.len(), 6, "a preview and a thumbnail for each of 3 photos: {before:?}");

    let (code, out, err) = s.cli_exit(&["regenerate", "--config", root, "--wait"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 proxy deletion item(s) for 3 assets"), "{out}");
    let crawl = out.split("then crawl ").nth(1).and_then(|rest| rest.split(',').next()).expect("the crawl's id");
    assert!(out.lines().any(|l| l == format!("{crawl} succeeded")), "--wait follows the crawl to its end: {out}");
    let after = s.query("SELECT id::text, relative_path FROM proxy_files WHERE relative_path IS NOT NULL ORDER BY 2");
    assert_eq!(after.len(), 6, "{after:?}");
    for (old, new) in before.iter().zip(&after) {
        assert_eq!(old[1], new[1], "the same place (it derives from the content)");
        assert_ne!(old[0], new[0], "a new row: made again");
        assert!(s.dir.path().join("proxies").join(&new[1]).is_file(), "{} is on disk", new[1]);
    }
    let deletions = s.query("SELECT status FROM work_items WHERE kind = 'proxy_deletion'");
    assert_eq!(deletions, [["succeeded"]]);
    let (exit, _) = worker.terminate();
    assert!(exit.success());
}

/// `config remove` says what it would delete, refuses an active config, and with `--confirm` removes the
/// catalogue, the work items and the proxy files, never the originals.
#[test]
fn config_remove_spells_out_what_goes_and_keeps_the_originals() {
    let s = setup(2);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    let worker = s.worker("worker-a", s.db.url(), &[]);
    let (code, out, err) = s.cli_exit(&["enqueue", "crawl", "--config", root, "--wait"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (exit, _) = worker.terminate();
    assert!(exit.success());
    let id = s.query("SELECT id::text FROM storage_configs")[0][0].clone();
    let proxies = s.dir.path().join("proxies").join(&id);
    assert!(proxies.is_dir());
    let env = [("ALMANAC__STORAGE__PROXY_ROOT", s.dir.path().join("proxies"))];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();

    let (code, out, _) = s.cli_exit(&["config", "remove", root], &env);
    assert_eq!(code, 2);
    assert!(out.contains("would remove") && out.contains("2 asset(s)") && out.contains("--confirm"), "{out}");
    assert!(out.contains("are not touched"), "{out}");
    let (code, _, err) = s.cli_exit(&["config", "remove", root, "--confirm"], &env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("deactivate it first") && err.contains("nothing was removed"), "{err}");
    assert!(proxies.is_dir(), "nothing removed");

    s.cli(&["config", "deactivate", root]);
    let (code, out, err) = s.cli_exit(&["config", "remove", root, "--confirm"], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("removed storage config"), "{out}");
    assert_eq!(s.query("SELECT count(*) FROM media_assets")[0][0], "0");
    assert_eq!(s.query("SELECT count(*) FROM storage_configs")[0][0], "0");
    let scoped = "SELECT count(*) FROM work_items WHERE kind IN ('crawl', 'burst_detection', 'purge')";
    assert_eq!(s.query(scoped)[0][0], "0", "its work items went with it (unscoped chores stay)");
    assert!(!proxies.exists(), "its proxy files are gone");
    assert_eq!(std::fs::read_dir(&s.library).unwrap().count(), 2, "the originals are untouched");
    let (code, _, err) = s.cli_exit(&["config", "remove", root, "--confirm"], &env);
    assert!(code != 0 && !err.is_empty(), "gone: a clear error");
}

/// docs/safety.md, invariant 11: a Worker killed with SIGKILL in the middle of video transcodes leaves no tool running.
/// Its tools are in process groups of their own, which the Worker's death does not reach, and kill-on-drop
/// needs a living Worker: each tool asked the kernel to kill it when the Worker dies.
#[test]
fn a_worker_killed_with_sigkill_mid_transcode_leaves_no_tool_running() {
    use std::os::unix::process::ExitStatusExt;
    use support::procs;

    let s = setup(0);
    for name in ["a.mp4", "b.mp4"] {
        fixtures::video(&s.library.join(name), 30.0, 1280, 720, "2021-06-01T10:00:00Z");
    }
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    s.cli(&["enqueue", "crawl", "--config", root]);
    let mut worker = s.worker("worker-a", s.db.url(), &[]);
    let pid = worker.child.id();
    // The event: an ffmpeg of this Worker writing a web video (its temporary file is under the proxy root).
    procs::wait_for("an ffmpeg of the Worker transcoding a web video", Duration::from_secs(30), || {
        procs::processes().into_iter().find(|p| p.parent == pid && p.args.iter().any(|a| a.ends_with(".web.tmp.mp4")))
    });
    // Every tool the Worker runs at this moment (ffmpeg, ffprobe): its children.
    let tools: Vec<procs::Process> = procs::processes().into_iter().filter(|p| p.parent == pid).collect();
    assert!(!tools.is_empty());
    worker.child.kill().unwrap();
    assert_eq!(worker.child.wait().unwrap().signal(), Some(9), "the Worker was killed by SIGKILL");
    let proxies = s.dir.path().join("proxies");
    procs::wait_for("the killed Worker's tools to die with it", Duration::from_secs(10), || {
        let writing = fixtures::processes_holding_open_beneath(&proxies);
        (tools.iter().all(procs::has_ended) && writing.is_empty()).then_some(())
    });
}
