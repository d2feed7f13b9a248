//! Watching libraries end to end (ADR 0014): the real `almanac-worker` binary watching a library on a local file
//! system. Photos copied into it become assets with proxies without any crawl being asked for; the test prints
//! how long after each copy finished (p50, p95: a figure for docs/media.md, never an assertion).

use std::path::PathBuf;
use std::time::Duration;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_testdb::TestDatabase;
use chrono::{DateTime, Utc};
use support::Worker;

const PHOTOS: u32 = 20;

/// Between two copies, unless `ALMANAC_WATCH_SPACING_MS` says otherwise: more than `watch.debounce` (1 s), so
/// each copy closes its own window, as photos a phone syncs now and then. (Copies closer together than the
/// debounce are enqueued `watch.max_delay`, 2 s, after the window's first.)
const SPACING: Duration = Duration::from_millis(1500);

fn spacing() -> Duration {
    let ms = std::env::var("ALMANAC_WATCH_SPACING_MS").ok().and_then(|v| v.parse().ok());
    ms.map_or(SPACING, Duration::from_millis)
}

struct Setup {
    db: TestDatabase,
    dir: tempfile::TempDir,
    library: PathBuf,
}

fn setup() -> Setup {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = rt.block_on(TestDatabase::create());
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("library");
    std::fs::create_dir_all(library.join("DCIM")).unwrap();
    Setup { db, dir, library }
}

impl Setup {
    fn cli(&self, args: &[&str]) {
        let out = support::worker().args(args).env("DATABASE_URL", self.db.url()).output().unwrap();
        assert!(out.status.success(), "almanac-worker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A Worker with the default settle time: a photo is read at once only because it was seen closed.
    fn worker(&self) -> Worker {
        Worker::start(self.db.url(), self.dir.path(), "watcher", |run| {
            run.env("ALMANAC__QUEUE__POLL_INTERVAL", "200ms");
        })
    }
}

/// The `q`-quantile of sorted `values` (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Photos copied one by one into a watched library, [`spacing`] apart, each become an asset
/// with its thumbnail and preview; no crawl is asked for. Prints copy-finished → asset-with-proxies.
#[test]
fn photos_copied_into_a_watched_library_become_assets_with_proxies_unasked() {
    let s = setup();
    s.cli(&["migrate"]);
    s.cli(&["config", "add", "--user", "ann", "--root", s.library.to_str().unwrap()]);
    let worker = s.worker();
    worker.wait_for_event("watch_started", Duration::from_secs(5));

    let staging = s.dir.path().join("phone");
    std::fs::create_dir_all(&staging).unwrap();
    let mut copied: Vec<(String, DateTime<Utc>)> = Vec::new();
    for i in 0..PHOTOS {
        let name = format!("IMG_{i:04}.JPG");
        let exif = FixtureExif::camera(&format!("2026:12:{:02} 10:00:00", 1 + i % 28), "+01:00");
        std::fs::write(staging.join(&name), fixtures::jpeg(1600, 1200, i, true, &exif)).unwrap();
        std::fs::copy(staging.join(&name), s.library.join("DCIM").join(&name)).unwrap();
        copied.push((format!("DCIM/{name}"), Utc::now()));
        std::thread::sleep(spacing());
    }

    let done = format!(
        "SELECT count(*) FROM (SELECT a.id FROM media_assets a JOIN proxy_files p ON p.asset_id = a.id
           WHERE p.proxy_type IN ('thumbnail', 'preview') GROUP BY a.id HAVING count(DISTINCT p.proxy_type) = 2) t
         HAVING count(*) = {PHOTOS}"
    );
    support::wait_for(s.db.url(), &done, Duration::from_secs(30));
    let rows = support::query(
        s.db.url(),
        "SELECT a.display_path, to_char(max(p.created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           FROM media_assets a JOIN proxy_files p ON p.asset_id = a.id
          WHERE p.proxy_type IN ('thumbnail', 'preview') GROUP BY a.display_path",
    );
    let mut seconds: Vec<f64> = copied
        .iter()
        .map(|(path, at)| {
            let row = rows.iter().find(|r| &r[0] == path).unwrap_or_else(|| panic!("no asset for {path}"));
            let ready: DateTime<Utc> = row[1].parse().unwrap();
            (ready - *at).num_microseconds().unwrap() as f64 / 1e6
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    println!(
        "copy finished -> asset with proxies, {PHOTOS} photos {:?} apart: p50 {:.2} s, p95 {:.2} s, max {:.2} s",
        spacing(),
        quantile(&seconds, 0.5),
        quantile(&seconds, 0.95),
        seconds[seconds.len() - 1]
    );
    let enqueued = worker.events("watch_enqueued").len();
    println!("crawls enqueued by the watcher: {enqueued}");
    assert!(enqueued >= 1, "the photos came through the watcher's crawls");
    let (status, lines) = worker.terminate();
    assert!(status.success(), "{status}");
    assert!(lines.iter().all(|l| l["level"] != "ERROR"), "no error logged");
}
