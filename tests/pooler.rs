//! The real `almanac-worker` through PgBouncer 1.18 in transaction mode (issue #26, ADR 0012): a crawl, the CLI
//! and the operator's page work through it; an enqueue wakes the Worker through its direct `listen_url`, and
//! without one the Worker says that it polls and holds no LISTEN through the pooler.

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_testdb::{PgBouncer, TestDatabase};
use support::{Worker, http_get};

struct Setup {
    db: TestDatabase,
    bouncer: PgBouncer,
    dir: tempfile::TempDir,
    library: PathBuf,
}

fn setup(photos: u32) -> Setup {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDatabase::create());
    // Few server sessions, so the Worker's pools, the page's and the CLI's take turns on them.
    let bouncer = PgBouncer::start(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("library");
    std::fs::create_dir_all(&library).unwrap();
    for i in 0..photos {
        let exif = FixtureExif::camera(&format!("2021:03:{:02} 10:00:00", 1 + i % 28), "+01:00");
        std::fs::write(library.join(format!("IMG_{i:04}.JPG")), fixtures::jpeg(800, 600, i, true, &exif)).unwrap();
    }
    Setup { db, bouncer, dir, library }
}

impl Setup {
    /// The URL every process of the Worker's is given: the database through PgBouncer.
    fn pooled_url(&self) -> String {
        self.bouncer.url_of(&self.db)
    }

    /// The CLI through PgBouncer, in transaction mode; its standard output.
    fn cli(&self, args: &[&str]) -> String {
        let out = support::worker()
            .args(args)
            .env("DATABASE_URL", self.pooled_url())
            .env("ALMANAC__DATABASE__POOLER_MODE", "transaction")
            .env("ALMANAC__STORAGE__PROXY_ROOT", self.dir.path().join("proxies"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "almanac-worker {args:?}: {said}\nPgBouncer:\n{}", self.bouncer.log());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn worker(&self, name: &str, extra: &[(&str, &str)]) -> Worker {
        Worker::start(&self.pooled_url(), self.dir.path(), name, |run| {
            run.env("ALMANAC__DATABASE__POOLER_MODE", "transaction")
                // The tests write their photos moments before a crawl: none is being written any more.
                .env("ALMANAC__STORAGE__SETTLE_TIME", "0s")
                .envs(extra.iter().copied());
        })
    }

    /// Waits (on a direct connection) until `sql` returns a row, for something that takes up to `idle` on an
    /// idle machine.
    fn wait_for(&self, sql: &str, idle: Duration) -> Vec<Vec<String>> {
        support::wait_for(self.db.url(), sql, idle)
    }

    fn query(&self, sql: &str) -> Vec<Vec<String>> {
        support::query(self.db.url(), sql)
    }

    /// Waits until nothing is running and nothing queued is due: the Worker is idle.
    fn wait_until_idle(&self) {
        self.wait_for(
            "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM work_items
               WHERE status = 'running' OR (status = 'queued' AND run_after <= now()))",
            Duration::from_secs(30),
        );
    }
}

/// The sessions of the database on the server that LISTEN (their last statement, as `pg_stat_activity` shows
/// it), by process id.
fn listeners(s: &Setup) -> Vec<Vec<String>> {
    s.query(&format!(
        "SELECT pid::text FROM pg_stat_activity WHERE datname = '{}' AND query ILIKE 'LISTEN%'",
        s.db.name()
    ))
}

/// A crawl, the CLI and the page through PgBouncer in transaction mode, and the Worker's LISTEN on the direct
/// `listen_url` (the only LISTEN session of the database), by which an enqueue made once it is idle is picked
/// up. (The pickup alone does not prove the wake-up: an idle executor also claims again after a back-off. That an
/// enqueue through the pooler wakes a listener on the direct URL, and never one through the pooler, is shown by
/// `crates/store-pg/tests/pooler_contract.rs`.)
#[test]
fn a_crawl_the_cli_and_the_page_work_through_pgbouncer_and_the_worker_listens_on_listen_url() {
    let s = setup(12);
    // Through the pooler too (the database is cloned from a migrated template: this applies what the binary has
    // beyond it, if anything).
    s.cli(&["migrate"]);
    let root = s.library.to_str().unwrap();
    s.cli(&["config", "add", "--user", "ann", "--root", root]);
    s.cli(&["enqueue", "crawl", "--config", root]);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let worker = s.worker(
        "pooled",
        &[
            ("ALMANAC__DATABASE__LISTEN_URL", s.db.url()),
            ("ALMANAC__QUEUE__POLL_INTERVAL", "1h"),
            ("ALMANAC__HTTP__ENABLED", "true"),
            ("ALMANAC__HTTP__ADDRESS", &address),
        ],
    );
    s.wait_for("SELECT 1 FROM work_items WHERE kind = 'crawl' AND status = 'succeeded'", Duration::from_secs(60));
    assert_eq!(s.query("SELECT count(*) FROM media_assets WHERE NOT is_soft_deleted")[0][0], "12");
    s.wait_until_idle();

    // The CLI and the page, through the pooler, while the Worker runs.
    let status = s.cli(&["status"]);
    assert!(status.contains("crawl"), "{status}");
    assert!(s.cli(&["config", "list"]).contains(root));
    let succeeded = s.cli(&["list", "--status", "succeeded"]);
    assert!(succeeded.contains("crawl"), "{succeeded}");
    let page = http_get(port, "/");
    assert!(page.starts_with("HTTP/1.1 200") && page.contains(root), "{page}");
    let metrics = http_get(port, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200") && metrics.contains("almanac_database_up 1"), "{metrics}");
    assert!(metrics.contains("almanac_work_items{kind=\"crawl\",status=\"succeeded\"}"), "{metrics}");
    assert!(http_get(port, "/readyz").starts_with("HTTP/1.1 200"));

    // The Worker listens on the direct connection, never through PgBouncer.
    assert_eq!(listeners(&s).len(), 1, "one LISTEN, on the direct connection");
    assert!(worker.events("polling_only").is_empty());
    // Idle, polling once an hour: an enqueue is picked up.
    let id = s.cli(&["enqueue", "token-cleanup"]).split_whitespace().next().unwrap().to_owned();
    s.wait_for(
        &format!("SELECT 1 FROM work_items WHERE id = '{id}' AND status = 'succeeded'"),
        Duration::from_secs(10),
    );

    let (exit, lines) = worker.terminate();
    assert!(exit.success(), "{exit}");
    let started: Vec<_> = lines.iter().filter(|l| l["fields"]["event"] == "worker_starting").collect();
    assert_eq!(started[0]["fields"]["pooler_mode"], "transaction", "{started:?}");
}

/// Without `listen_url`, a Worker in transaction mode says once that it polls, holds no LISTEN (through the
/// pooler it would never hear a notification), and finds enqueued work at its next poll.
#[test]
fn without_a_listen_url_the_worker_polls_and_says_so_once() {
    let s = setup(0);
    s.cli(&["migrate"]);
    let worker = s.worker("polling", &[("ALMANAC__QUEUE__POLL_INTERVAL", "300ms")]);
    let said = worker.wait_for_event("polling_only", Duration::from_secs(10));
    assert_eq!(said["level"], "WARN", "{said}");
    let id = s.cli(&["enqueue", "token-cleanup"]).split_whitespace().next().unwrap().to_owned();
    s.wait_for(
        &format!("SELECT 1 FROM work_items WHERE id = '{id}' AND status = 'succeeded'"),
        Duration::from_secs(10),
    );
    assert!(listeners(&s).is_empty(), "no LISTEN anywhere: {:?}", listeners(&s));
    let (exit, lines) = worker.terminate();
    assert!(exit.success(), "{exit}");
    assert_eq!(lines.iter().filter(|l| l["fields"]["event"] == "polling_only").count(), 1, "said once");
}
