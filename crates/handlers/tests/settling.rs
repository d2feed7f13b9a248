//! Files still being written, on real files and a real catalogue: a file is ingested only once its size and mtime
//! have stayed the same for the settle time; until then it is counted as settling (never failed, never
//! vanished), and the crawl asks for itself again once it may have settled.

mod support;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use almanac_domain::{
    StorageConfigId, WorkItem, WorkItemId, WorkQueue,
    ports::{CatalogueError, CatalogueStore, DatabaseClock, KnownFile},
};
use almanac_handlers::{CrawlHandler, CrawlSettings};
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::PgStore;
use chrono::{DateTime, Utc};
use diesel::sql_query;
use diesel::sql_types::{Jsonb, Nullable, Text, Timestamptz, Uuid};
use diesel_async::RunQueryDsl;
use support::twist::{AfterListing, CatalogueTwist, RealStore, Twisted};
use support::{Library, library};

fn photo(seed: u32, width: u32) -> Vec<u8> {
    fixtures::jpeg(width, width * 3 / 4, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

fn hash_of(content: &[u8]) -> String {
    almanac_media::hash_bytes(content).hash.as_hex().to_owned()
}

/// Sets a file's mtime `secs` from now (in the past when negative).
fn dated(path: &Path, secs: i64) {
    let now = SystemTime::now();
    let at =
        if secs < 0 { now - Duration::from_secs(secs.unsigned_abs()) } else { now + Duration::from_secs(secs as u64) };
    std::fs::File::options().write(true).open(path).unwrap().set_modified(at).unwrap();
}

/// A crawl with this settle time, over any catalogue.
fn crawler<C>(lib: &Library, catalogue: Arc<C>, settle_time: Duration) -> CrawlHandler<C> {
    CrawlHandler::new(
        catalogue,
        CrawlSettings { settle_time, max_concurrent_files: 2, ..CrawlSettings::new(lib.proxies.clone()) },
    )
}

#[derive(Debug, diesel::QueryableByName)]
struct Queued {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Timestamptz)]
    run_after: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    dedup_key: Option<String>,
    #[diesel(sql_type = Jsonb)]
    payload: serde_json::Value,
}

#[derive(Debug, diesel::QueryableByName)]
struct Asset {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    content_hash: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    size_bytes: i64,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    is_soft_deleted: bool,
}

impl Library {
    /// The crawls of the config waiting in the queue.
    async fn queued_crawls(&self) -> Vec<Queued> {
        sql_query(
            "SELECT id, run_after, dedup_key, payload FROM work_items
              WHERE kind = 'crawl' AND status = 'queued' AND storage_config_id = $1",
        )
        .bind::<Uuid, _>(self.config.as_uuid())
        .load(&mut self.conn().await)
        .await
        .unwrap()
    }

    /// Every asset row ever made at `path`, soft-deleted ones included.
    async fn assets_at(&self, path: &str) -> Vec<Asset> {
        sql_query(
            "SELECT id, content_hash, size_bytes, is_soft_deleted FROM media_assets WHERE display_path = $1
              ORDER BY created_at",
        )
        .bind::<Text, _>(path)
        .load(&mut self.conn().await)
        .await
        .unwrap()
    }

    /// Waits until a crawl of the config queued in the queue is due (the database's `now()` has reached its
    /// `run_after`), and answers it as a claim would hand it over.
    async fn due_crawl(&self) -> WorkItem {
        let waited = std::time::Instant::now();
        loop {
            let due: Vec<Queued> = sql_query(
                "SELECT id, run_after, dedup_key, payload FROM work_items
                  WHERE kind = 'crawl' AND status = 'queued' AND storage_config_id = $1 AND run_after <= now()",
            )
            .bind::<Uuid, _>(self.config.as_uuid())
            .load(&mut self.conn().await)
            .await
            .unwrap();
            if let Some(q) = <[Queued]>::first(&due) {
                let id = WorkItemId::from_uuid(q.id);
                return self.store.get(id).await.unwrap().expect("queued");
            }
            assert!(waited.elapsed() < Duration::from_secs(60), "no crawl came due: {:?}", self.queued_crawls().await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn counts(result: &serde_json::Value) -> (u64, u64, u64, u64) {
    let get = |k: &str| result[k].as_u64().unwrap_or_else(|| panic!("no {k} in {result}"));
    (get("ingested"), get("settling"), get("failed"), get("skipped"))
}

#[tokio::test]
async fn a_file_written_slowly_is_ingested_once_complete_by_the_crawl_asked_for_again() {
    let lib = library().await;
    let content = photo(7, 1600);
    let path = lib.root.join("phone/IMG_0001.jpg");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // A phone syncing it: ten steps over ten seconds, each pause shorter than the settle time.
    let settle = Duration::from_secs(4);
    let (first_step, started) = std::sync::mpsc::channel();
    let writer = {
        let content = content.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(&path).unwrap();
            for (i, chunk) in content.chunks(content.len().div_ceil(10)).enumerate() {
                if i > 0 {
                    std::thread::sleep(Duration::from_secs(1));
                }
                file.write_all(chunk).unwrap();
                if i == 0 {
                    first_step.send(()).unwrap();
                }
            }
        })
    };
    started.recv().unwrap();
    let handler = crawler(&lib, lib.store.clone(), settle);
    let first = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.unwrap();
    assert_eq!(counts(&first), (0, 1, 0, 0), "started mid-write: settling, not failed nor skipped: {first}");
    assert!(lib.assets_at("phone/IMG_0001.jpg").await.is_empty(), "nothing written for it");
    // Every crawl asked for runs once it is due, as a Worker would run it, until one found the file settled.
    let mut crawls = 1;
    loop {
        let result = lib.run_handler(&handler, lib.due_crawl().await).await.unwrap();
        crawls += 1;
        match counts(&result) {
            (0, 1, 0, 0) => assert!(lib.assets_at("phone/IMG_0001.jpg").await.is_empty(), "never a half file"),
            (1, 0, 0, 0) => break,
            other => panic!("crawl {crawls}: {other:?}: {result}"),
        }
        assert!(crawls < 20, "the file never settled");
    }
    writer.join().unwrap();
    let assets = lib.assets_at("phone/IMG_0001.jpg").await;
    assert_eq!(assets.len(), 1, "ingested once: {assets:?}");
    assert_eq!(
        (assets[0].content_hash.as_str(), assets[0].size_bytes),
        (hash_of(&content).as_str(), content.len() as i64)
    );
    assert!(lib.queued_crawls().await.is_empty(), "nothing settling: no crawl asked for again");
    assert!(crawls >= 3, "the writing outlasted at least two settle times ({crawls} crawls)");
}

/// A file written for much longer than the settle time (a recording, a copy of hours) has its folder asked for
/// again less and less often: each crawl asked for waits half as long as the file has been found being written
/// (the settle time at least), not the settle time again and again. Once written, it is read.
#[tokio::test]
async fn a_file_written_for_long_is_asked_for_again_less_and_less_often_then_read() {
    let lib = library().await;
    let content = photo(8, 1600);
    let path = lib.root.join("cam/clip.jpg");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let settle = Duration::from_secs(2);
    // Written a little every 400 ms, for about six settle times.
    let (first_step, started) = std::sync::mpsc::channel();
    let writer = {
        let (content, path) = (content.clone(), path.clone());
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(&path).unwrap();
            for (i, chunk) in content.chunks(content.len().div_ceil(32)).enumerate() {
                file.write_all(chunk).unwrap();
                if i == 0 {
                    first_step.send(()).unwrap();
                }
                std::thread::sleep(Duration::from_millis(400));
            }
        })
    };
    started.recv().unwrap();
    let handler = crawler(&lib, lib.store.clone(), settle);
    let first = lib.item(serde_json::json!({})).await;
    let mut started = lib.store.db_now().await.unwrap();
    let mut result = lib.run_handler(&handler, first).await.unwrap();
    // Each crawl asked for runs once due. How long each waited after the crawl that asked for it ended lies
    // between its due time less the database's time once that crawl had returned (a lower bound: it ended
    // before), and its due time less the time before that crawl started (an upper bound).
    let mut waits = Vec::new();
    while counts(&result) == (0, 1, 0, 0) {
        let ended = lib.store.db_now().await.unwrap();
        let queued = lib.queued_crawls().await;
        assert_eq!(queued.len(), 1, "{queued:?}");
        let bound = |from: DateTime<Utc>| (queued[0].run_after - from).to_std().unwrap_or_default();
        waits.push(bound(ended)..=bound(started));
        let item = lib.due_crawl().await;
        started = lib.store.db_now().await.unwrap();
        result = lib.run_handler(&handler, item).await.unwrap();
        assert!(waits.len() < 12, "the file never settled: waits {waits:?}");
    }
    writer.join().unwrap();
    assert_eq!(counts(&result), (1, 0, 0, 0), "read once written: {result}");
    assert_eq!(lib.assets_at("cam/clip.jpg").await[0].content_hash, hash_of(&content));
    // None waited less than the settle time, and one at least half as long again (the file was written for
    // about six settle times; at the settle time alone, every wait's lower bound is at most the settle time).
    assert!(waits.iter().all(|w| *w.end() >= settle), "sooner than the settle time: {waits:?}");
    assert!(waits.iter().any(|w| *w.start() >= settle + settle / 2), "never longer than the settle time: {waits:?}");
}

#[tokio::test]
async fn a_fresh_file_is_settling_not_failed_and_a_crawl_is_asked_for_after_the_settle_time() {
    let lib = library().await;
    let settle = Duration::from_secs(600);
    let (a, b) = (photo(1, 640), photo(2, 640));
    for (rel, content) in [("a.jpg", &a), ("b.jpg", &b), ("copy/a.jpg", &a)] {
        dated(&lib.write(rel, content), -3600);
    }
    let handler = crawler(&lib, lib.store.clone(), settle);
    let first = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.unwrap();
    assert_eq!((counts(&first), first["copies"].as_u64()), ((2, 0, 0, 0), Some(1)), "{first}");
    assert!(lib.queued_crawls().await.is_empty());
    let before = lib.assets_at("a.jpg").await;

    // a.jpg and its copy are being written over (half of another photo so far), c.jpg is new and being written, and
    // d.jpg is dated a day ahead (a camera's clock): not judged by its age.
    let rewrite = photo(3, 640);
    lib.write("a.jpg", &rewrite[..rewrite.len() / 2]);
    lib.write("copy/a.jpg", &rewrite[..rewrite.len() / 2]);
    lib.write("c.jpg", &photo(4, 640));
    dated(&lib.write("d.jpg", &photo(5, 640)), 86_400);
    let asked_at = lib.store.db_now().await.unwrap();
    let second = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.unwrap();
    assert_eq!(counts(&second), (1, 3, 0, 0), "d ingested; a, its copy and c settling, none failed: {second}");
    assert_eq!(second["soft_deleted"], 0, "{second}");
    let after = lib.assets_at("a.jpg").await;
    assert_eq!(after.len(), 1, "not replaced: {after:?}");
    assert_eq!(
        (after[0].id, &after[0].content_hash, after[0].is_soft_deleted),
        (before[0].id, &before[0].content_hash, false)
    );
    assert_eq!(
        lib.count("SELECT count(*) AS n FROM asset_extra_paths").await,
        1,
        "the copy being written keeps its place"
    );
    assert!(lib.assets_at("c.jpg").await.is_empty());

    let queued = lib.queued_crawls().await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    // a.jpg and c.jpg are in the root: the whole root, under a key of its own, which neither the scheduler's crawl
    // nor a watcher's joins (they would wait for it).
    let settling_key = format!("crawl:{}:settling", lib.config);
    assert_eq!(queued[0].dedup_key.as_deref(), Some(settling_key.as_str()));
    assert_eq!(queued[0].payload.get("folders"), None, "the whole root");
    assert_eq!(queued[0].payload["allow_mass_deletion"], false, "no confirmation carried over");
    let settle_chrono = chrono::Duration::from_std(settle).unwrap();
    let done_at = lib.store.db_now().await.unwrap();
    assert!(
        queued[0].run_after >= asked_at + settle_chrono && queued[0].run_after <= done_at + settle_chrono,
        "due the settle time after the crawl: {} not within {asked_at}..{done_at} + {settle:?}",
        queued[0].run_after
    );
    // A crawl finding them still settling joins the crawl already asked for.
    let third = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.unwrap();
    assert_eq!(counts(&third).1, 3, "{third}");
    let again = lib.queued_crawls().await;
    assert_eq!((again.len(), again[0].id), (1, queued[0].id), "{again:?}");

    // The writing ends; the crawl asked for reads what is there now.
    for rel in ["a.jpg", "copy/a.jpg"] {
        dated(&lib.write(rel, &rewrite), -1200);
    }
    dated(&lib.root.join("c.jpg"), -1200);
    let item = lib.store.get(WorkItemId::from_uuid(queued[0].id)).await.unwrap().unwrap();
    let last = lib.run_handler(&handler, item).await.unwrap();
    assert_eq!((counts(&last), last["copies"].as_u64()), ((2, 0, 0, 0), Some(1)), "{last}");
    // One asset holds the new content, at one of the two paths, the other its copy (which one is its own depends on
    // the order they were written: a.jpg, which took its asset's own path, is held back until the walk is done).
    let mut now = lib.assets_at("a.jpg").await;
    now.extend(lib.assets_at("copy/a.jpg").await);
    let now: Vec<_> = now.into_iter().filter(|a| !a.is_soft_deleted).collect();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].content_hash, hash_of(&rewrite));
    assert!(lib.queued_crawls().await.is_empty());
}

#[tokio::test]
async fn a_file_that_changes_between_the_walk_and_its_hashing_is_settling_and_nothing_is_written() {
    let lib = library().await;
    let (listed, written) = (photo(1, 640), photo(2, 800));
    let path = lib.write("album/IMG.jpg", &listed);
    dated(&path, -7200);
    // Once the walk has listed the folder (size and mtime read), the file is written again, dated in the past so
    // that only the look after hashing can tell.
    let twisted = path.clone();
    let catalogue = ChangeAfterListing::new(lib.store.clone(), &lib.root.join("album"), move || {
        std::fs::write(&twisted, &written).unwrap();
        dated(&twisted, -3600);
    });
    let handler = crawler(&lib, Arc::new(catalogue), CrawlSettings::DEFAULT_SETTLE_TIME);
    let result = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.unwrap();
    assert_eq!(counts(&result), (0, 1, 0, 0), "{result}");
    assert!(lib.assets_at("album/IMG.jpg").await.is_empty(), "nothing written for it");
    assert_eq!(lib.queued_crawls().await.len(), 1, "a crawl asked for again");
    // The crawl asked for finds it settled, and records what it is now.
    let handler = crawler(&lib, lib.store.clone(), CrawlSettings::DEFAULT_SETTLE_TIME);
    let item = lib.store.get(WorkItemId::from_uuid(lib.queued_crawls().await[0].id)).await.unwrap().unwrap();
    let again = lib.run_handler(&handler, item).await.unwrap();
    assert_eq!(counts(&again), (1, 0, 0, 0), "{again}");
    let written = std::fs::read(&path).unwrap();
    let assets = lib.assets_at("album/IMG.jpg").await;
    assert_eq!(
        (assets[0].content_hash.as_str(), assets[0].size_bytes),
        (hash_of(&written).as_str(), written.len() as i64)
    );
}

/// The catalogue as the crawl sees it, with one twist: loading the known files waits until the walk has listed
/// (and closed) the watched folder, then runs the change ([`AfterListing`]).
struct ChangeAfterListing {
    inner: Arc<PgStore>,
    after_listing: AfterListing,
}

impl ChangeAfterListing {
    fn new(inner: Arc<PgStore>, folder: &Path, change: impl FnOnce() + Send + 'static) -> Twisted<Self> {
        Twisted(Self { inner, after_listing: AfterListing::new(folder, change) })
    }
}

impl RealStore for ChangeAfterListing {
    fn store(&self) -> &PgStore {
        &self.inner
    }
}

impl CatalogueTwist for ChangeAfterListing {
    async fn known_files(
        &self,
        config: StorageConfigId,
        folder: &[u8],
        after: Option<&KnownFile>,
        limit: i64,
    ) -> Result<Vec<KnownFile>, CatalogueError> {
        self.after_listing.wait_and_run().await;
        self.inner.known_files(config, folder, after, limit).await
    }
}
