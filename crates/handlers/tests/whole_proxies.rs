//! A proxy is whole or absent (docs/safety.md, invariant 10): proxy files that went missing, were cut short or
//! replaced after they were made are found by the proxy sweep and made again by the crawl it queues (unless the
//! proxy root looks unmounted), and a crawl that can write no proxy at all fails with one error naming
//! `storage.proxy_root`. Real files, real images, a real catalogue.

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use almanac_domain::{
    ContentHash, Scope, StorageConfigId, WorkItemId, WorkKind, WorkQueue,
    ports::{CatalogueError, DatabaseClock, MaintenanceStore, StoredProxy},
};
use almanac_executor::Handler;
use almanac_handlers::{MassDeletionGuard, ProxyDeletionHandler, ProxySweepHandler};
use almanac_media::ToolLimits;
use almanac_media::fixtures::{self, FixtureExif};
use almanac_media::scratch_volume::ScratchVolume;
use almanac_store_pg::PgStore;
use chrono::{DateTime, Utc};
use diesel::sql_query;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use support::twist::{MaintenanceTwist, RealStore, Twisted};
use support::{Library, library};
use tokio_util::sync::CancellationToken;

#[derive(Debug, diesel::QueryableByName)]
struct ProxyRow {
    #[diesel(sql_type = Text)]
    display_path: String,
    #[diesel(sql_type = Text)]
    proxy_type: String,
    #[diesel(sql_type = Text)]
    relative_path: String,
    #[diesel(sql_type = BigInt)]
    size_bytes: i64,
}

impl Library {
    async fn proxy_rows(&self) -> Vec<ProxyRow> {
        sql_query(
            "SELECT a.display_path, p.proxy_type, p.relative_path, p.size_bytes
               FROM proxy_files p JOIN media_assets a ON a.id = p.asset_id
              WHERE p.relative_path IS NOT NULL AND NOT a.is_soft_deleted
              ORDER BY a.display_path, p.proxy_type",
        )
        .load(&mut self.conn().await)
        .await
        .unwrap()
    }

    async fn proxy_file(&self, display_path: &str, proxy_type: &str) -> std::path::PathBuf {
        let rows = self.proxy_rows().await;
        let row = rows.iter().find(|r| r.display_path == display_path && r.proxy_type == proxy_type).unwrap();
        self.proxies.join(&row.relative_path)
    }
}

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(800, 600, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

/// Every proxy row points at a regular file (not a link) of its recorded size, and each JPEG decodes to its end.
async fn assert_rows_point_at_whole_files(lib: &Library) {
    let rows = lib.proxy_rows().await;
    assert!(!rows.is_empty());
    for row in rows {
        let file = lib.proxies.join(&row.relative_path);
        let meta = std::fs::symlink_metadata(&file).unwrap_or_else(|e| panic!("{row:?}: {e}"));
        assert!(meta.is_file(), "{row:?} is not a regular file");
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{row:?}: {e}"));
        assert_eq!(bytes.len() as i64, row.size_bytes, "{row:?}");
        if row.relative_path.ends_with(".jpg") {
            image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
                .unwrap_or_else(|e| panic!("{row:?} does not decode: {e}"));
        }
    }
}

/// The sweep as the Worker runs it (its age floor for the default tool limits).
fn sweep(lib: &Library) -> ProxySweepHandler<PgStore> {
    ProxySweepHandler::new(
        lib.store.clone(),
        lib.proxies.clone(),
        ProxySweepHandler::<PgStore>::min_age_for(ToolLimits::default()),
    )
}

impl Library {
    async fn run_sweep(&self, handler: &impl Handler) -> serde_json::Value {
        let item = self.work_item(WorkKind::ProxySweep, Scope::Unscoped, serde_json::json!({})).await;
        self.run_handler(handler, item).await.expect("the sweep succeeds")
    }

    /// The queued proxy deletions and crawls, oldest first, as (kind, dedup key) (a crawl's burst detection is
    /// left out).
    async fn queued(&self) -> Vec<(String, String)> {
        #[derive(diesel::QueryableByName)]
        struct Queued {
            #[diesel(sql_type = Text)]
            kind: String,
            #[diesel(sql_type = Text)]
            dedup_key: String,
        }
        let rows: Vec<Queued> = sql_query(
            "SELECT kind, coalesce(dedup_key, '') AS dedup_key FROM work_items
              WHERE status = 'queued' AND kind IN ('proxy_deletion', 'crawl')
              ORDER BY requested_at, id",
        )
        .load(&mut self.conn().await)
        .await
        .unwrap();
        rows.into_iter().map(|r| (r.kind, r.dedup_key)).collect()
    }

    /// Runs the queued proxy deletions and crawls oldest first, as the config's queue would; answers the last
    /// crawl's result.
    async fn run_queued(&self) -> serde_json::Value {
        let mut crawled = serde_json::Value::Null;
        loop {
            let next = sql_query(
                "SELECT id FROM work_items WHERE status = 'queued' AND kind IN ('proxy_deletion', 'crawl')
                  ORDER BY requested_at, id LIMIT 1",
            )
            .load::<IdRow>(&mut self.conn().await)
            .await
            .unwrap();
            let Some(next) = next.into_iter().next() else { return crawled };
            let item = self.store.get(WorkItemId::from_uuid(next.id)).await.unwrap().unwrap();
            match item.kind {
                WorkKind::ProxyDeletion => {
                    let handler = ProxyDeletionHandler::new(self.store.clone(), self.proxies.clone());
                    self.run_handler(&handler, item).await.expect("the proxy deletion succeeds");
                }
                WorkKind::Crawl => crawled = self.run_handler(&self.handler(), item).await.expect("the crawl succeeds"),
                other => panic!("the sweep queued {other}"),
            }
        }
    }
}

#[derive(diesel::QueryableByName)]
struct IdRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: uuid::Uuid,
}

/// Sets a file's mtime `secs` back, as a file damaged a while ago.
fn age(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs)).unwrap();
}

#[tokio::test]
async fn proxies_deleted_cut_short_or_replaced_by_a_link_are_found_by_the_sweep_and_made_whole_by_the_crawl_after_it() {
    let lib = library().await;
    lib.write("a.jpg", &photo(1));
    lib.write("b.jpg", &photo(2));
    lib.write("c.jpg", &photo(3));
    fixtures::video(&lib.root.join("d.mp4"), 1.0, 320, 240, "2021-06-01T10:00:00Z");
    lib.write("e.jpg", &photo(5));
    let first = lib.crawl().await;
    assert_eq!(first["ingested"], 5, "{first}");

    // Behind the catalogue's back: a preview deleted, a thumbnail and a poster cut short a while ago (as a full
    // disk or an older bug left them), a preview replaced by a link to a file of the very size recorded; the
    // catalogue still saying every proxy is there.
    std::fs::remove_file(lib.proxy_file("a.jpg", "preview").await).unwrap();
    let thumbnail = lib.proxy_file("b.jpg", "thumbnail").await;
    let bytes = std::fs::read(&thumbnail).unwrap();
    std::fs::write(&thumbnail, &bytes[..bytes.len() / 2]).unwrap();
    age(&thumbnail, 7200);
    let poster = lib.proxy_file("d.mp4", "poster").await;
    let bytes = std::fs::read(&poster).unwrap();
    std::fs::write(&poster, &bytes[..8192.min(bytes.len() - 1)]).unwrap();
    age(&poster, 7200);
    let preview = lib.proxy_file("c.jpg", "preview").await;
    let elsewhere = lib.dir.path().join("elsewhere.jpg");
    std::fs::rename(&preview, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &preview).unwrap();
    let broken: Vec<String> = [("a.jpg"), ("b.jpg"), ("c.jpg"), ("d.mp4")].map(str::to_owned).to_vec();

    let found = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!(
        (found["broken_assets"].as_u64(), found["repairs_queued"].as_u64(), found["deleted"].as_u64()),
        (Some(4), Some(4), Some(0)),
        "{found}"
    );
    assert_eq!(found["refused_configs"], serde_json::json!([]), "{found}");
    let config = lib.config;
    let expected = lib.queued().await;
    let kinds: Vec<&str> = expected.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["proxy_deletion", "crawl"], "the broken assets' proxy deletion, then a crawl of their config");
    assert!(expected[0].1.starts_with(&format!("proxy_deletion:{config}:after:proxy_sweep:")), "{expected:?}");
    assert!(expected[1].1.starts_with(&format!("crawl:{config}:after:proxy_sweep:")), "{expected:?}");
    assert_eq!(lib.assets_queued_for_deletion().await, lib.asset_ids(&broken).await);
    // A sweep again before they ran finds the same and queues nothing more.
    let again = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!(again["broken_assets"], 4, "{again}");
    assert_eq!(lib.queued().await, expected, "repeated sweeps do not pile up");

    let crawled = lib.run_queued().await;
    assert_eq!(
        (crawled["proxies_regenerated"].as_u64(), crawled["unchanged"].as_u64(), crawled["failed"].as_u64()),
        (Some(4), Some(1), Some(0)),
        "the four assets with a broken proxy had their proxies made again: {crawled}"
    );
    assert_rows_point_at_whole_files(&lib).await;
    assert_eq!(lib.active_count().await, 5, "the same assets, none new");
    assert!(elsewhere.exists(), "the link's target was neither followed nor touched");

    let after = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!((after["broken_assets"].as_u64(), after["deleted"].as_u64()), (Some(0), Some(0)), "{after}");
    assert!(lib.queued().await.is_empty());
    let third = lib.crawl().await;
    assert_eq!(
        (third["unchanged"].as_u64(), third["bytes_hashed"].as_u64()),
        (Some(5), Some(0)),
        "whole proxies are not looked at again by the crawl, nothing is read: {third}"
    );
}

impl Library {
    /// The asset ids in the queued proxy deletions' payloads, sorted.
    async fn assets_queued_for_deletion(&self) -> Vec<String> {
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = Text)]
            id: String,
        }
        let rows: Vec<Id> = sql_query(
            "SELECT jsonb_array_elements_text(payload->'asset_ids') AS id FROM work_items
              WHERE status = 'queued' AND kind = 'proxy_deletion' ORDER BY 1",
        )
        .load(&mut self.conn().await)
        .await
        .unwrap();
        rows.into_iter().map(|r| r.id).collect()
    }

    /// The ids of the assets at these display paths, sorted.
    async fn asset_ids(&self, paths: &[String]) -> Vec<String> {
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = Text)]
            id: String,
        }
        let rows: Vec<Id> =
            sql_query("SELECT id::text AS id FROM media_assets WHERE display_path = ANY($1) ORDER BY 1")
                .bind::<diesel::sql_types::Array<Text>, _>(paths)
                .load(&mut self.conn().await)
                .await
                .unwrap();
        rows.into_iter().map(|r| r.id).collect()
    }
}

/// A proxy volume that is not mounted looks like every proxy is missing: the guard refuses to queue a remake of
/// the library onto the bare mount point, says so once, and the sweep after the volume is back finds all well.
#[tokio::test]
async fn a_proxy_folder_emptied_or_unmounted_is_refused_by_the_guard_and_nothing_is_queued() {
    let lib = library().await;
    for i in 0..6 {
        lib.write(&format!("{i}.jpg"), &photo(i));
    }
    lib.crawl().await;
    // Twelve proxy files (a preview and a thumbnail each): the config's folder is gone from under the root.
    let folder = lib.proxies.join(lib.config.to_string());
    let away = lib.dir.path().join("unmounted");
    std::fs::rename(&folder, &away).unwrap();

    let (logs, found) = support::logs::capture(lib.run_sweep(&sweep(&lib))).await;
    assert_eq!(found["refused_configs"], serde_json::json!([lib.config]), "{found}");
    assert_eq!((found["broken_assets"].as_u64(), found["repairs_queued"].as_u64()), (Some(0), Some(0)), "{found}");
    assert!(lib.queued().await.is_empty(), "nothing queued: {:?}", lib.queued().await);
    let warnings = support::logs::events(&logs, "proxy_root_looks_emptied");
    assert_eq!(warnings.len(), 1, "{logs:?}");
    assert_eq!(warnings[0]["level"], "WARN");
    let message = warnings[0]["fields"]["message"].as_str().unwrap();
    assert!(
        message.contains("12 of the 12 proxy files") && message.contains("looks unmounted or emptied"),
        "{message}"
    );
    assert!(message.contains("regenerate --config"), "and what to do: {message}");

    std::fs::rename(&away, &folder).unwrap();
    let back = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!((back["broken_assets"].as_u64(), back["refused_configs"].as_array().map(Vec::len)), (Some(0), Some(0)));
    assert_rows_point_at_whole_files(&lib).await;
}

/// The maintenance statements, with one twist: right after the sweep has read a folder's rows to check, and
/// before it lists the folder, a crawl writes a proxy of that folder again (a whole file of another size, through
/// a temporary name, then its row), as a crawl running beside the sweep would.
struct CrawlWritesAfterTheRowRead {
    inner: Arc<PgStore>,
    write: Mutex<Option<(PathBuf, String, Vec<u8>)>>,
    url: String,
}

impl RealStore for CrawlWritesAfterTheRowRead {
    fn store(&self) -> &PgStore {
        &self.inner
    }
}

impl MaintenanceTwist for CrawlWritesAfterTheRowRead {
    async fn proxies_to_check_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> Result<Vec<StoredProxy>, CatalogueError> {
        let rows = self.inner.proxies_to_check_in(config, prefix).await?;
        let pending = self.write.lock().unwrap().take();
        if let Some((file, relative_path, bytes)) = pending {
            let temporary = file.with_file_name(".preview.jpg.tmp");
            std::fs::write(&temporary, &bytes).unwrap();
            std::fs::rename(&temporary, &file).unwrap();
            let mut conn = AsyncPgConnection::establish(&self.url).await.unwrap();
            sql_query("UPDATE proxy_files SET size_bytes = $1 WHERE relative_path = $2")
                .bind::<BigInt, _>(bytes.len() as i64)
                .bind::<Text, _>(relative_path)
                .execute(&mut conn)
                .await
                .unwrap();
        }
        Ok(rows)
    }
}

/// The sweep reads a folder's rows, then lists it: a crawl that writes a proxy and its row in between makes the
/// listing disagree with the rows read. The sweep reads the rows again and looks at the file again before
/// calling it broken, so it queues nothing. (The age floor is zero here: the new file's youth hides nothing.)
#[tokio::test]
async fn a_proxy_written_by_a_crawl_between_the_sweep_s_row_read_and_its_listing_is_not_called_broken() {
    let lib = library().await;
    lib.write("a.jpg", &photo(1));
    lib.crawl().await;
    let preview = lib.proxy_file("a.jpg", "preview").await;
    let relative = preview.strip_prefix(&lib.proxies).unwrap().display().to_string();
    let again = fixtures::jpeg(640, 480, 7, false, &FixtureExif::default());
    assert_ne!(again.len() as u64, std::fs::metadata(&preview).unwrap().len());
    let store = CrawlWritesAfterTheRowRead {
        inner: lib.store.clone(),
        write: Mutex::new(Some((preview.clone(), relative, again.clone()))),
        url: lib.db.url().to_owned(),
    };
    let handler = ProxySweepHandler::new(Arc::new(Twisted(store)), lib.proxies.clone(), Duration::ZERO);
    let found = lib.run_sweep(&handler).await;
    assert_eq!((found["broken_assets"].as_u64(), found["repairs_queued"].as_u64()), (Some(0), Some(0)), "{found}");
    assert!(lib.queued().await.is_empty(), "nothing queued: {:?}", lib.queued().await);
    assert_eq!(std::fs::read(&preview).unwrap(), again, "the crawl's proxy stays");
    assert_rows_point_at_whole_files(&lib).await;
}

impl Library {
    async fn active_count(&self) -> i64 {
        self.count("SELECT count(*) AS n FROM media_assets WHERE NOT is_soft_deleted").await
    }
}

/// A crawl of three photos into a proxy root that cannot take a file: one retryable error, naming the setting
/// and the folder, with `cause` in it; nothing catalogued.
async fn assert_crawl_refused(lib: &Library, cause: &[&str]) {
    for i in 0..3 {
        lib.write(&format!("{i}.jpg"), &photo(i));
    }
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert!(err.message.contains("storage.proxy_root"), "{}", err.message);
    assert!(err.message.contains(&lib.proxies.display().to_string()), "{}", err.message);
    assert!(cause.iter().any(|c| err.message.contains(c)), "the cause: {}", err.message);
    assert!(err.message.contains("Nothing was read"), "{}", err.message);
    assert_eq!(lib.active_count().await, 0);
}

#[tokio::test]
async fn a_crawl_into_a_proxy_root_that_cannot_be_written_fails_with_one_error_naming_it() {
    let lib = library().await;
    let Some(_volume) = ScratchVolume::read_only(&lib.proxies) else { return };
    assert_crawl_refused(&lib, &["mounted read-only", "the Worker's user may not write there"]).await;
}

/// One of the config's proxy folders that the Worker's user may not write (a Worker run once as root left it, or
/// it sits on a read-only mount; here the latter, which the test's user, root or not, cannot write either): the
/// crawl fails at once with one error naming the folder, nothing read, where every new photo whose proxies belong
/// there failed one by one while the proxy root's own check passed. Once the folder can be written, the crawl
/// catalogues what came meanwhile.
#[tokio::test]
async fn a_proxy_folder_the_workers_user_may_not_write_fails_the_crawl_naming_it() {
    let lib = library().await;
    lib.write("0.jpg", &photo(0));
    lib.crawl().await;
    let config_dir = lib.proxies.join(lib.config.to_string());
    let prefix = std::fs::read_dir(&config_dir).unwrap().next().unwrap().unwrap().path();
    // A folder someone keeps there that is not of the layout (a NAS's recycle bin) holds no proxy: no refusal.
    let Some(recycle) = ScratchVolume::read_only(&config_dir.join("#recycle")) else { return };
    lib.crawl().await;
    drop(recycle);
    let Some(volume) = ScratchVolume::read_only(&prefix) else { return };
    lib.write("1.jpg", &photo(1));
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert!(err.message.contains("cannot be written by the Worker's user"), "{}", err.message);
    assert!(err.message.contains(&prefix.display().to_string()), "{}", err.message);
    assert!(err.message.contains("Nothing was read"), "{}", err.message);
    assert_eq!(lib.active_count().await, 1);
    drop(volume);
    lib.crawl().await;
    assert_eq!(lib.active_count().await, 2);
}

/// A folder deeper than the crawl's first check reads (`<hh>/<hash>`, one file's) that the Worker's user may not
/// write: a Worker run once as root leaves one wherever a prefix folder already existed. Making that file's proxies
/// again (here a video's, after a repair marked them missing; ffmpeg writes into the folder itself) stops the crawl
/// with one error naming the folder, where before the file failed at every crawl and each crawl ended `succeeded`.
/// Here the folder is on a read-only mount, which the test's user, root or not, cannot write either.
#[tokio::test]
async fn a_files_own_proxy_folder_the_workers_user_may_not_write_stops_the_crawl_naming_it() {
    let lib = library().await;
    fixtures::video_in(&lib.root.join("clip.mp4"), 0.6, 64, 48, None);
    lib.crawl().await;
    let rows = lib.proxy_rows().await;
    let poster = rows.iter().find(|r| r.proxy_type == "poster").expect("the video's poster");
    let folder = lib.proxies.join(&poster.relative_path).parent().unwrap().to_owned();
    // What a repair does (`proxy_deletion`): the rows go and the asset is read again at the next crawl.
    sql_query("DELETE FROM proxy_files").execute(&mut lib.conn().await).await.unwrap();
    sql_query("UPDATE media_assets SET proxies_missing = true").execute(&mut lib.conn().await).await.unwrap();
    let Some(volume) = ScratchVolume::read_only(&folder) else { return };
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert!(err.message.contains("cannot be written by the Worker's user"), "{}", err.message);
    assert!(err.message.contains(&folder.display().to_string()), "{}", err.message);
    assert!(err.message.contains("The crawl stopped before its end"), "{}", err.message);
    drop(volume);
    lib.crawl().await;
    assert!(lib.proxy_rows().await.iter().any(|r| r.proxy_type == "web_video"), "made again once writable");
}

#[tokio::test]
async fn a_crawl_into_a_full_proxy_volume_fails_with_one_error_naming_it() {
    let lib = library().await;
    let Some(_volume) = ScratchVolume::small(&lib.proxies, 64, true) else { return };
    assert_crawl_refused(&lib, &["its volume is full"]).await;
}

/// A volume with room for a few photos' proxies, not for all: once it is full, the crawl stops with one error
/// naming `storage.proxy_root` (not a failed file for each photo after it, ending succeeded), the photos whose
/// proxies fit are catalogued with whole files, and a crawl after room is made catalogues the rest.
#[tokio::test]
async fn a_proxy_volume_that_fills_during_the_crawl_stops_it_with_one_error_and_the_next_crawl_finishes() {
    let lib = library().await;
    let Some(volume) = ScratchVolume::small(&lib.proxies, 2048, false) else { return };
    // Room left for about one photo's proxies (an 800×600 photo's preview and thumbnail take some 100 KiB).
    let filler = lib.proxies.join("filler");
    std::fs::write(&filler, vec![0u8; 1900 * 1024]).unwrap();
    for i in 0..12 {
        lib.write(&format!("{i}.jpg"), &photo(i));
    }
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert!(err.message.contains("storage.proxy_root"), "{}", err.message);
    assert!(err.message.contains("The crawl stopped before its end"), "{}", err.message);
    let catalogued = lib.active_count().await;
    assert!(catalogued < 12, "the volume never filled: {catalogued} photos catalogued");
    assert_rows_point_at_whole_files(&lib).await;

    std::fs::remove_file(&filler).unwrap();
    lib.crawl().await;
    assert_eq!(lib.active_count().await, 12);
    assert_rows_point_at_whole_files(&lib).await;
    drop(volume);
}

/// A HEIC met by a proxy volume that fills up while heif-convert writes its JPEG (heif-convert then ends with
/// success, its JPEG cut short): the photo is not remembered as damaged, so the crawl after room is made reads it
/// again and catalogues it. Before, it was remembered as corrupt and passed over by every later crawl while the file
/// stayed unchanged.
#[tokio::test]
async fn a_heic_met_by_a_proxy_volume_that_fills_up_is_catalogued_once_there_is_room() {
    let lib = library().await;
    almanac_media::fixtures::heic(&lib.root.join("IMG_0001.HEIC"), 1600, 1200, 3);
    let Some(volume) = ScratchVolume::small(&lib.proxies, 96, false) else { return };
    match lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await {
        Err(e) => assert!(e.retryable && e.message.contains("storage.proxy_root"), "{e:?}"),
        Ok(result) => {
            let reason = result["failures"][0]["reason"].as_str().unwrap_or_default().to_owned();
            assert_eq!(result["failed"], 1, "{result}");
            assert!(reason.contains("could not write image") && reason.contains("storage.proxy_root"), "{result}");
        }
    }
    assert_eq!(lib.active_count().await, 0);
    assert_eq!(lib.count("SELECT count(*) AS n FROM failed_files").await, 0, "not remembered as damaged");
    drop(volume);
    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), lib.active_count().await), (Some(1), 1), "{result}");
    assert_rows_point_at_whole_files(&lib).await;
}

/// The maintenance statements, with one twist: when the sweep comes to the folder `at` (reading its rows), that
/// folder and every later one of the config are removed, as a proxy volume lost part-way through the sweep.
struct FoldersVanishAt {
    inner: Arc<PgStore>,
    config_folder: PathBuf,
    at: String,
    /// The folders before `at` (checked already) vanish, instead of `at` and those after it.
    earlier: bool,
}

impl RealStore for FoldersVanishAt {
    fn store(&self) -> &PgStore {
        &self.inner
    }
}

impl MaintenanceTwist for FoldersVanishAt {
    async fn proxies_to_check_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> Result<Vec<StoredProxy>, CatalogueError> {
        if prefix == self.at {
            let folders = prefix_folders(&self.config_folder);
            for (gone, _) in folders.into_iter().filter(|(p, _)| (*p < self.at) == self.earlier) {
                std::fs::remove_dir_all(self.config_folder.join(gone)).unwrap();
            }
        }
        self.inner.proxies_to_check_in(config, prefix).await
    }
}

/// A library of 12 photos, crawled, and its config's folder beneath the proxy root.
async fn twelve_crawled() -> (Library, PathBuf) {
    let lib = library().await;
    for i in 0..12 {
        lib.write(&format!("{i}.jpg"), &photo(i));
    }
    assert_eq!(lib.crawl().await["ingested"], 12);
    let config_folder = lib.proxies.join(lib.config.to_string());
    (lib, config_folder)
}

/// The config's `<2 hex>` proxy folders, sorted, each with how many assets' folders it holds.
fn prefix_folders(config_folder: &Path) -> Vec<(String, usize)> {
    let mut folders: Vec<(String, usize)> = std::fs::read_dir(config_folder)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read_dir(e.path()).unwrap().count())
        })
        .collect();
    folders.sort();
    folders
}

/// A proxy volume lost part-way through a sweep: the folders checked first are whole, the later ones are gone
/// (fewer than half of the files, so a guard over the config's counts alone would pass). The sweep queues no
/// repair: the folders it saw at the config's start and found gone at their turn make it refuse, with one
/// warning.
#[tokio::test]
async fn a_proxy_volume_lost_part_way_through_a_sweep_queues_no_repair() {
    let (lib, config_folder) = twelve_crawled().await;
    // The last folders holding at most a third of the assets vanish (at least one folder).
    let folders = prefix_folders(&config_folder);
    let (mut at, mut assets) = (folders.len() - 1, folders[folders.len() - 1].1);
    while at > 0 && assets + folders[at - 1].1 <= 4 {
        at -= 1;
        assets += folders[at].1;
    }
    assert!((1..=4).contains(&assets) && at > 0, "{folders:?}");
    let twist = FoldersVanishAt {
        inner: lib.store.clone(),
        config_folder: config_folder.clone(),
        at: folders[at].0.clone(),
        earlier: false,
    };
    let handler = ProxySweepHandler::new(
        Arc::new(Twisted(twist)),
        lib.proxies.clone(),
        ProxySweepHandler::<PgStore>::min_age_for(ToolLimits::default()),
    );

    let (logs, found) = support::logs::capture(lib.run_sweep(&handler)).await;
    assert!(!config_folder.join(&folders[at].0).exists(), "the later folders vanished");
    assert_eq!(found["refused_configs"], serde_json::json!([lib.config]), "{found}");
    assert_eq!(found["repairs_queued"].as_u64(), Some(0), "{found}");
    assert!(lib.queued().await.is_empty(), "nothing queued: {:?}", lib.queued().await);
    let warnings = support::logs::events(&logs, "proxy_root_looks_emptied");
    assert_eq!(warnings.len(), 1, "{logs:?}");
    let message = warnings[0]["fields"]["message"].as_str().unwrap();
    assert!(message.contains("were there when the sweep began and gone when it came to them"), "{message}");
    assert!(message.contains("looks unmounted or emptied") && message.contains("regenerate --config"), "{message}");
}

/// Files under the proxy root that are not ours are left alone, counted and warned of once, and the first 20 of
/// them, wherever they were found, are named in the answer (a stray folder beside the configs and one inside a
/// config's); a sweep that finds none says nothing of them.
#[tokio::test]
async fn files_not_ours_are_counted_and_twenty_are_named() {
    let lib = library().await;
    lib.write("a.jpg", &photo(1));
    lib.crawl().await;
    let not_ours = |logs: &[serde_json::Value]| -> Vec<serde_json::Value> {
        support::logs::events(logs, "proxy_root_not_ours").iter().map(|l| l["fields"]["count"].clone()).collect()
    };
    let (logs, _) = support::logs::capture(lib.run_sweep(&sweep(&lib))).await;
    assert!(not_ours(&logs).is_empty(), "nothing foreign yet, nothing said: {logs:?}");
    for (folder, n) in
        [(lib.proxies.join("old thumbs"), 15), (lib.proxies.join(lib.config.to_string()).join("notes"), 15)]
    {
        std::fs::create_dir_all(&folder).unwrap();
        for i in 0..n {
            std::fs::write(folder.join(format!("{i}.txt")), b"mine").unwrap();
        }
    }
    let (logs, found) = support::logs::capture(lib.run_sweep(&sweep(&lib))).await;
    assert_eq!(not_ours(&logs), [serde_json::json!(30)], "said once, with the count: {logs:?}");
    assert_eq!(found["left_alone"].as_u64(), Some(30), "{found}");
    assert_eq!(found["left_alone_examples"].as_array().map(Vec::len), Some(20), "{found}");
    assert_eq!(found["deleted"].as_u64(), Some(0), "{found}");
    assert!(lib.proxies.join("old thumbs/0.txt").exists());
}

/// The sweep's progress, after each `<2 hex>` folder: the folders walked so far and the broken assets found so
/// far (those of the config being checked counted before its repairs are queued).
#[tokio::test]
async fn the_sweep_reports_its_folders_and_broken_assets_as_it_goes() {
    let (lib, config_folder) = twelve_crawled().await;
    let folders = prefix_folders(&config_folder).len();
    assert!(folders > 1, "{folders}");
    std::fs::remove_file(lib.proxy_file("3.jpg", "thumbnail").await).unwrap();
    let item = lib.work_item(WorkKind::ProxySweep, Scope::Unscoped, serde_json::json!({})).await;
    let progress = almanac_executor::ProgressReporter::default();
    let found = lib.run_reporting(&sweep(&lib), item, CancellationToken::new(), progress.clone()).await.unwrap();
    assert_eq!(found.as_ref().map(|f| f["broken_assets"].clone()), Some(serde_json::json!(1)), "{found:?}");
    assert_eq!(progress.latest(), Some(serde_json::json!({"folders": folders, "deleted": 0, "broken_assets": 1})));
}

/// At the top of the proxy root, only a folder named as an existing config's id is that config's: a file (or a
/// link) with that name is not ours, counted and named, and kept. The config's proxies are still checked, so
/// its folder is said to be unreadable (a file where its folder should be), once.
#[tokio::test]
async fn a_file_named_as_a_config_at_the_top_of_the_proxy_root_is_not_ours() {
    let lib = library().await;
    std::fs::create_dir_all(&lib.proxies).unwrap();
    let name = lib.config.to_string();
    std::fs::write(lib.proxies.join(&name), b"not a folder").unwrap();
    let found = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!(found["left_alone"].as_u64(), Some(1), "{found}");
    let examples = found["left_alone_examples"].as_array().cloned().unwrap_or_default();
    assert!(examples.len() == 1 && examples[0].as_str().is_some_and(|e| e.ends_with(&name)), "{found}");
    let unreadable = found["unreadable_folders"].as_array().cloned().unwrap_or_default();
    assert!(
        unreadable.len() == 1 && unreadable[0].as_str().is_some_and(|u| u.contains("replaced by a file")),
        "{found}"
    );
    assert_eq!(std::fs::read(lib.proxies.join(&name)).unwrap(), b"not a folder");
}

/// A proxy volume lost after the sweep checked some folders: they were whole at their turn and are gone before
/// the repairs of a later folder's broken asset are queued. The files found whole, looked at again right before
/// the repairs, make the sweep refuse: nothing is queued. With nothing to repair, nothing is looked at again.
#[tokio::test]
async fn a_proxy_volume_lost_after_its_folders_were_checked_queues_no_repair() {
    let (logs, found, config) = volume_lost_after_its_folders_were_checked(true).await;
    assert_eq!(found["refused_configs"], serde_json::json!([config]), "{found}");
    assert_eq!(found["repairs_queued"].as_u64(), Some(0), "{found}");
    let warnings = support::logs::events(&logs, "proxy_root_looks_emptied");
    assert_eq!(warnings.len(), 1, "{logs:?}");
    let message = warnings[0]["fields"]["message"].as_str().unwrap();
    assert!(message.contains("found whole earlier in this sweep are gone now"), "{message}");

    let (logs, found, _) = volume_lost_after_its_folders_were_checked(false).await;
    assert_eq!(
        (found["refused_configs"].as_array().map(Vec::len), found["repairs_queued"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(support::logs::events(&logs, "proxy_root_looks_emptied").is_empty(), "{logs:?}");
}

/// A library of 12 whose proxy folders before the last vanish at the last one's turn, with an asset of the last
/// folder broken or not: the sweep's log lines and answer, and the config; nothing is ever queued.
async fn volume_lost_after_its_folders_were_checked(
    broken: bool,
) -> (Vec<serde_json::Value>, serde_json::Value, StorageConfigId) {
    let (lib, config_folder) = twelve_crawled().await;
    let folders = prefix_folders(&config_folder);
    let last = folders.last().unwrap().0.clone();
    assert!(folders.len() > 1, "{folders:?}");
    if broken {
        // An asset of the last folder is broken: without the volume lost, its repair would be queued.
        let mut in_last = None;
        for i in 0..12 {
            let file = lib.proxy_file(&format!("{i}.jpg"), "thumbnail").await;
            if file.starts_with(config_folder.join(&last)) {
                in_last = Some(file);
            }
        }
        std::fs::remove_file(in_last.expect("an asset in the last folder")).unwrap();
    }
    let twist =
        FoldersVanishAt { inner: lib.store.clone(), config_folder: config_folder.clone(), at: last, earlier: true };
    let handler = ProxySweepHandler::new(
        Arc::new(Twisted(twist)),
        lib.proxies.clone(),
        ProxySweepHandler::<PgStore>::min_age_for(ToolLimits::default()),
    );
    let (logs, found) = support::logs::capture(lib.run_sweep(&handler)).await;
    assert!(!config_folder.join(&folders[0].0).exists(), "the folders checked first vanished");
    assert!(lib.queued().await.is_empty(), "nothing queued: {:?}", lib.queued().await);
    (logs, found, lib.config)
}

/// The operator's guard (`storage.mass_deletion_*`, given to the sweep as to the crawl) decides when the proxy
/// root looks emptied: a third of the files missing is repaired under the default guard, refused under a
/// stricter one.
#[tokio::test]
async fn the_sweep_judges_missing_proxies_by_the_guard_it_is_given() {
    let lib = library().await;
    for i in 0..6 {
        lib.write(&format!("{i}.jpg"), &photo(i));
    }
    lib.crawl().await;
    for name in ["0.jpg", "1.jpg"] {
        for proxy in ["preview", "thumbnail"] {
            std::fs::remove_file(lib.proxy_file(name, proxy).await).unwrap();
        }
    }
    let strict = MassDeletionGuard { min_assets: 10, max_percent: 25 };
    let found = lib.run_sweep(&sweep(&lib).guarded_by(strict)).await;
    assert_eq!(found["refused_configs"], serde_json::json!([lib.config]), "4 of 12 files is over 25%: {found}");
    assert!(lib.queued().await.is_empty());
    let found = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!(
        (found["repairs_queued"].as_u64(), found["refused_configs"].as_array().map(Vec::len)),
        (Some(2), Some(0))
    );
}

/// Sweeps finding different broken assets while the first one's repair is still queued: each sweep's assets
/// are queued (the second's deletion and crawl after the first's), none lost to the first item's list, and all
/// are made whole.
#[tokio::test]
async fn a_later_sweep_s_broken_assets_are_queued_while_an_earlier_repair_waits() {
    let lib = library().await;
    for i in 0..5 {
        lib.write(&format!("{i}.jpg"), &photo(i));
    }
    lib.crawl().await;
    std::fs::remove_file(lib.proxy_file("0.jpg", "preview").await).unwrap();
    assert_eq!(lib.run_sweep(&sweep(&lib)).await["repairs_queued"], 1);
    std::fs::remove_file(lib.proxy_file("1.jpg", "thumbnail").await).unwrap();
    let second = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!(second["broken_assets"], 2, "{second}");
    let both = lib.asset_ids(&["0.jpg".to_owned(), "1.jpg".to_owned()]).await;
    let mut queued = lib.assets_queued_for_deletion().await;
    queued.dedup();
    assert_eq!(queued, both, "the second sweep's asset is queued too");
    let kinds: Vec<String> = lib.queued().await.into_iter().map(|(kind, _)| kind).collect();
    assert_eq!(kinds, ["proxy_deletion", "crawl", "proxy_deletion", "crawl"], "each deletion with a crawl after it");
    let again = lib.run_sweep(&sweep(&lib)).await;
    assert_eq!(lib.queued().await.len(), 4, "the same findings join what is queued: {again}");
    lib.run_queued().await;
    assert_rows_point_at_whole_files(&lib).await;
    assert_eq!(lib.run_sweep(&sweep(&lib)).await["broken_assets"], 0);
}

/// The maintenance statements, with one twist: the database's clock is `offset` from this host's (an NFS
/// volume's mtimes come from its server's clock, which, like the database's, may not be this host's).
struct DatabaseClockOff {
    inner: Arc<PgStore>,
    offset: chrono::Duration,
}

impl RealStore for DatabaseClockOff {
    fn store(&self) -> &PgStore {
        &self.inner
    }

    async fn db_now(&self) -> Result<DateTime<Utc>, CatalogueError> {
        Ok(self.inner.db_now().await? + self.offset)
    }
}

impl MaintenanceTwist for DatabaseClockOff {}

/// An orphan proxy file 90 minutes old by this host's clock: with the database's clock two hours behind it is
/// not an hour old yet and stays; a fresh one, with the database's clock two hours ahead, is and goes.
#[tokio::test]
async fn the_sweep_judges_a_file_s_age_by_the_database_s_clock() {
    let lib = library().await;
    let orphan = |n: u8| {
        let file = lib.proxies.join(ContentHash::from_bytes([n; 32]).proxy_dir(lib.config)).join("preview.jpg");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"an orphan").unwrap();
        file
    };
    let (older, fresh) = (orphan(0xa1), orphan(0xb2));
    age(&older, 90 * 60);
    let sweep_with = |hours: i64| {
        let clock = DatabaseClockOff { inner: lib.store.clone(), offset: chrono::Duration::hours(hours) };
        ProxySweepHandler::new(Arc::new(Twisted(clock)), lib.proxies.clone(), Duration::from_secs(3600))
    };
    let behind = lib.run_sweep(&sweep_with(-2)).await;
    assert_eq!(behind["deleted"], 0, "{behind}");
    assert!(older.exists() && fresh.exists());
    let ahead = lib.run_sweep(&sweep_with(2)).await;
    assert_eq!(ahead["deleted"], 2, "{ahead}");
    assert!(!older.exists() && !fresh.exists());
}
