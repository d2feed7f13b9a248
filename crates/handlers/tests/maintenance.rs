//! Burst detection, purge, proxy deletion and sweep, token cleanup, retention and the scheduler, on real
//! PostgreSQL and real files.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use almanac_domain::{
    AssetId, AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType, ProxyType, Scope, StorageConfigId,
    WorkItem, WorkKind, WorkQueue, WorkerId,
    ports::{
        CatalogueStore, ClaimRequest, Failure, FileFacts, IngestOutcome, LeaseDuration, NewAsset, NewProxy,
        ServedConfigs,
    },
};
use almanac_executor::{Handler, HandlerContext, HandlerError};
use almanac_handlers::{
    BurstDetectionHandler, BurstSettings, ProxyDeletionHandler, ProxySweepHandler, PurgeHandler, PurgeSettings,
    RetentionSettings, ScheduleSettings, Scheduler, TokenCleanupHandler, WorkItemRetentionHandler,
};
use almanac_media::ToolLimits;
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::{NewStorageConfig, PgStore};
use chrono::{TimeZone, Utc};
use diesel::sql_query;
use diesel::sql_types::{BigInt, Uuid};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use support::{Library, library};
use tokio_util::sync::CancellationToken;

type Env = Library;

async fn env() -> Env {
    library().await
}

impl Library {
    /// An asset with proxy files on disk, as a crawl would leave it.
    async fn asset(&self, n: u8, model: &str, millis: i64, size: u64) -> (AssetId, ContentHash) {
        let hash = ContentHash::from_bytes([n; 32]);
        let rel_dir = hash.proxy_dir(self.config);
        let dir = self.proxies.join(&rel_dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut proxies = vec![NewProxy {
            proxy_type: ProxyType::Blurhash,
            relative_path: None,
            inline_value: Some("LKO2?U%2Tw=w".into()),
            size_bytes: 0,
        }];
        for t in [ProxyType::Preview, ProxyType::Thumbnail] {
            let rel = rel_dir.join(t.file_name().unwrap());
            std::fs::write(self.proxies.join(&rel), b"jpeg").unwrap();
            proxies.push(NewProxy {
                proxy_type: t,
                relative_path: Some(rel.display().to_string()),
                inline_value: None,
                size_bytes: 4,
            });
        }
        let at = Utc.with_ymd_and_hms(2022, 1, 1, 12, 0, 0).unwrap() + chrono::Duration::milliseconds(millis);
        let asset = NewAsset {
            storage_config_id: self.config,
            facts: FileFacts {
                file_path: format!("IMG_{n}.jpg").into_bytes(),
                display_path: format!("IMG_{n}.jpg"),
                size,
                mtime: at,
            },
            content_hash: hash.clone(),
            media_type: MediaType::Image,
            capture: CaptureTime { at, offset_minutes: Some(0), source: CaptureSource::ExifOriginal },
            metadata: AssetMetadata {
                camera_make: Some("Make".into()),
                camera_model: Some(model.into()),
                ..AssetMetadata::default()
            },
            proxies,
            replaces: None,
            sidecar: None,
        };
        match self.store.ingest(self.fixture_fence().await, &asset).await.unwrap() {
            IngestOutcome::Ingested(id) => (id, hash),
            other => panic!("{other:?}"),
        }
    }

    /// Another storage config of ann's, at the folder `name` (made) beside the library's.
    async fn another_config(&self, name: &str) -> StorageConfigId {
        let root = self.dir.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        let new = NewStorageConfig { username: "ann".into(), root_path: root };
        self.store.add_storage_config(&new).await.unwrap().1.id
    }

    async fn soft_delete(&self, id: AssetId, days_ago: i64) {
        sql_query("UPDATE media_assets SET is_soft_deleted = true, soft_deleted_at = now() - make_interval(days => $2::int) WHERE id = $1")
            .bind::<Uuid, _>(id.as_uuid())
            .bind::<BigInt, _>(days_ago)
            .execute(&mut self.conn().await)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn burst_detection_is_stable_and_a_burst_dissolves_below_the_minimum() {
    let env = env().await;
    let (a, _) = env.asset(1, "X", 0, 10).await;
    let (b, _) = env.asset(2, "X", 300, 30).await;
    let (c, _) = env.asset(3, "X", 600, 20).await;
    env.asset(4, "X", 60_000, 10).await;
    let handler = BurstDetectionHandler::new(env.store.clone(), BurstSettings::default());
    let scope = Scope::Config(env.config);
    let first = env
        .run_handler(&handler, env.work_item(WorkKind::BurstDetection, scope, serde_json::json!({})).await)
        .await
        .unwrap();
    assert_eq!(first["bursts"], 1);
    let burst_of =
        |id: AssetId| format!("SELECT count(*) AS n FROM media_assets WHERE id = '{id}' AND burst_id = '{a}'");
    for id in [a, b, c] {
        assert_eq!(env.count(&burst_of(id)).await, 1);
    }
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM bursts WHERE id = '{a}' AND primary_asset_id = '{b}' AND frame_count = 3"
        ))
        .await,
        1
    );
    // A re-run gives the same burst, same id.
    env.run_handler(&handler, env.work_item(WorkKind::BurstDetection, scope, serde_json::json!({})).await)
        .await
        .unwrap();
    assert_eq!(env.count("SELECT count(*) AS n FROM bursts").await, 1);
    assert_eq!(env.count(&format!("SELECT count(*) AS n FROM bursts WHERE id = '{a}'")).await, 1);
    // One frame leaves (deleted): two are too few, the burst dissolves.
    env.soft_delete(c, 0).await;
    env.run_handler(&handler, env.work_item(WorkKind::BurstDetection, scope, serde_json::json!({})).await)
        .await
        .unwrap();
    assert_eq!(env.count("SELECT count(*) AS n FROM bursts").await, 0);
    assert_eq!(env.count("SELECT count(*) AS n FROM media_assets WHERE burst_id IS NOT NULL").await, 0);
}

fn purge_handler(env: &Env) -> PurgeHandler<PgStore> {
    PurgeHandler::new(
        env.store.clone(),
        PurgeSettings { proxy_root: env.proxies.clone(), purge_after: Duration::from_secs(30 * 86_400), batch: 2 },
    )
}

#[tokio::test]
async fn purge_removes_old_soft_deleted_assets_files_first_and_keeps_the_rest() {
    let env = env().await;
    let (old1, h1) = env.asset(1, "X", 0, 1).await;
    let (old2, h2) = env.asset(2, "X", 0, 1).await;
    let (old3, _) = env.asset(3, "X", 0, 1).await;
    let (recent, h4) = env.asset(4, "X", 0, 1).await;
    let (active, h5) = env.asset(5, "X", 0, 1).await;
    for id in [old1, old2, old3] {
        env.soft_delete(id, 31).await;
    }
    env.soft_delete(recent, 5).await;
    let result = env
        .run_handler(
            &purge_handler(&env),
            env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await,
        )
        .await
        .unwrap();
    assert_eq!(result["purged"], 3, "three old ones, in batches of two");
    for (id, hash) in [(old1, &h1), (old2, &h2)] {
        assert_eq!(env.count(&format!("SELECT count(*) AS n FROM media_assets WHERE id = '{id}'")).await, 0);
        assert!(!env.proxies.join(hash.proxy_dir(env.config)).exists(), "proxy folder gone");
    }
    assert_eq!(
        env.count("SELECT count(*) AS n FROM proxy_files").await,
        6,
        "recent and active keep their three rows each"
    );
    assert!(env.proxies.join(h4.proxy_dir(env.config)).join("preview.jpg").exists());
    assert!(env.proxies.join(h5.proxy_dir(env.config)).join("preview.jpg").exists());
    assert_eq!(
        env.count(&format!("SELECT count(*) AS n FROM media_assets WHERE id IN ('{recent}', '{active}')")).await,
        2
    );
}

#[tokio::test]
async fn purge_keeps_an_asset_whose_proxy_file_cannot_be_deleted_and_retries_it_next_time() {
    let env = env().await;
    let (stuck, hash) = env.asset(1, "X", 0, 1).await;
    let (fine, _) = env.asset(2, "X", 0, 1).await;
    env.soft_delete(stuck, 40).await;
    env.soft_delete(fine, 40).await;
    // A directory where the preview file should be: it cannot be deleted as a file.
    let preview = env.proxies.join(hash.proxy_dir(env.config)).join("preview.jpg");
    std::fs::remove_file(&preview).unwrap();
    std::fs::create_dir_all(preview.join("blocker")).unwrap();
    let item = env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    let (lines, result) = support::logs::capture(env.run_handler(&purge_handler(&env), item)).await;
    let result = result.unwrap();
    assert_eq!(result["purged"], 1);
    assert!(result["not_deleted"][0].as_str().unwrap().contains("preview.jpg"), "{result}");
    let warned = support::logs::events(&lines, "purge_incomplete");
    assert_eq!(warned.len(), 1, "the operator is told the purge left files: {lines:?}");
    assert!(warned[0]["fields"]["files"].as_str().unwrap().contains("preview.jpg"), "{lines:?}");
    assert_eq!(
        env.count(&format!("SELECT count(*) AS n FROM media_assets WHERE id = '{stuck}' AND is_soft_deleted")).await,
        1
    );
    std::fs::remove_dir_all(&preview).unwrap();
    let item = env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    let (lines, again) = support::logs::capture(env.run_handler(&purge_handler(&env), item)).await;
    let again = again.unwrap();
    assert_eq!(again["purged"], 1);
    assert!(support::logs::events(&lines, "purge_incomplete").is_empty(), "nothing left, no warning: {lines:?}");
    assert_eq!(env.count("SELECT count(*) AS n FROM media_assets").await, 0);
}

/// The real store, except that the purge's deletion of rows fails (the database goes away right after the files).
struct RowsNeverDeleted {
    inner: PgStore,
}

impl support::twist::RealStore for RowsNeverDeleted {
    fn store(&self) -> &PgStore {
        &self.inner
    }
}

impl support::twist::MaintenanceTwist for RowsNeverDeleted {
    async fn purge_rows(
        &self,
        _: almanac_domain::ports::Fence,
        _: StorageConfigId,
        _: &[AssetId],
        _: chrono::DateTime<Utc>,
    ) -> Result<Vec<AssetId>, almanac_domain::ports::CatalogueError> {
        Err(almanac_domain::ports::CatalogueError::Unavailable("the database went away".into()))
    }
}

/// A purge stopped after an asset's proxy files went but before its rows did, then the photo comes back (restored
/// from a backup): the revived asset gets its proxies again at the crawl after, where before its rows named files
/// that were gone until the daily sweep found them.
#[tokio::test]
async fn a_purge_stopped_before_its_rows_went_leaves_an_asset_that_gets_its_proxies_again_if_revived() {
    let lib = library().await;
    let photo = almanac_media::fixtures::jpeg(64, 48, 7, false, &almanac_media::fixtures::FixtureExif::default());
    let path = lib.write("IMG_7.jpg", &photo);
    // Another that stays: a root left empty is refused as a share not mounted.
    let other = almanac_media::fixtures::jpeg(64, 48, 8, false, &almanac_media::fixtures::FixtureExif::default());
    lib.write("IMG_8.jpg", &other);
    lib.crawl().await;
    std::fs::remove_file(&path).unwrap();
    assert_eq!(lib.crawl().await["soft_deleted"], 1);
    let aged = "UPDATE media_assets SET soft_deleted_at = now() - interval '40 days' WHERE is_soft_deleted";
    lib.conn().await.batch_execute(aged).await.unwrap();
    let preview = || lib.proxies.join(almanac_media::hash_bytes(&photo).hash.proxy_dir(lib.config)).join("preview.jpg");
    assert!(preview().is_file());
    let store = Arc::new(support::twist::Twisted(RowsNeverDeleted { inner: (*lib.store).clone() }));
    let settings =
        PurgeSettings { proxy_root: lib.proxies.clone(), purge_after: Duration::from_secs(30 * 86_400), batch: 10 };
    let item = lib.work_item(WorkKind::Purge, Scope::Config(lib.config), serde_json::json!({})).await;
    lib.run_handler(&PurgeHandler::new(store, settings), item).await.expect_err("the rows' deletion fails");
    assert!(!preview().exists(), "the files went first");

    lib.write("IMG_7.jpg", &photo);
    assert_eq!(lib.crawl().await["revived"], 1);
    lib.crawl().await;
    assert!(preview().is_file(), "the revived asset's preview is made again");
    let missing = "SELECT count(*) AS n FROM media_assets WHERE proxies_missing OR is_soft_deleted";
    assert_eq!(lib.count(missing).await, 0);
}

#[tokio::test]
async fn assets_whose_files_stay_never_hold_back_the_purge_of_the_ones_after_them() {
    let env = env().await;
    // A whole batch (two) of the oldest candidates whose preview cannot be deleted, then one that can go.
    let mut stuck = Vec::new();
    for (n, days) in [(1, 42), (2, 41)] {
        let (id, hash) = env.asset(n, "X", 0, 1).await;
        env.soft_delete(id, days).await;
        let preview = env.proxies.join(hash.proxy_dir(env.config)).join("preview.jpg");
        std::fs::remove_file(&preview).unwrap();
        std::fs::create_dir_all(preview.join("blocker")).unwrap();
        stuck.push(id);
    }
    let (fine, fine_hash) = env.asset(3, "X", 0, 1).await;
    env.soft_delete(fine, 40).await;
    let item = env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    // A purge that went back to the first batch would never end.
    let result = tokio::time::timeout(
        almanac_testdb::patience(Duration::from_secs(10)),
        env.run_handler(&purge_handler(&env), item),
    )
    .await
    .expect("the purge ends")
    .unwrap();
    assert_eq!(result["purged"], 1, "{result}");
    assert_eq!(result["not_deleted"].as_array().map(Vec::len), Some(2), "{result}");
    assert_eq!(env.count(&format!("SELECT count(*) AS n FROM media_assets WHERE id = '{fine}'")).await, 0);
    assert!(!env.proxies.join(fine_hash.proxy_dir(env.config)).exists());
    let kept = format!(
        "SELECT count(*) AS n FROM media_assets WHERE id IN ('{}', '{}') AND is_soft_deleted",
        stuck[0], stuck[1]
    );
    assert_eq!(env.count(&kept).await, 2);
}

#[tokio::test]
async fn purge_keeps_proxy_files_shared_with_an_active_asset_of_the_same_content() {
    let env = env().await;
    let (old, hash) = env.asset(1, "X", 0, 1).await;
    env.soft_delete(old, 40).await;
    // The same content came back as a new active asset (its proxies live in the same folder).
    sql_query("INSERT INTO media_assets (id, storage_config_id, file_path, display_path, content_hash, size_bytes, file_modified_at, media_type, captured_at, captured_at_source, capture_month, capture_day)
               SELECT gen_random_uuid(), storage_config_id, 'again.jpg', 'again.jpg', content_hash, size_bytes, file_modified_at, media_type, captured_at, captured_at_source, capture_month, capture_day FROM media_assets WHERE id = $1")
        .bind::<Uuid, _>(old.as_uuid())
        .execute(&mut env.conn().await)
        .await
        .unwrap();
    env.run_handler(
        &purge_handler(&env),
        env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await,
    )
    .await
    .unwrap();
    assert_eq!(env.count(&format!("SELECT count(*) AS n FROM media_assets WHERE id = '{old}'")).await, 0);
    assert!(env.proxies.join(hash.proxy_dir(env.config)).join("preview.jpg").exists());
}

/// The per-config rule is what makes purge safe beside a crawl: a crawl queued during a purge of the same
/// config waits until the purge ends.
#[tokio::test]
async fn a_crawl_of_the_same_config_queued_during_a_purge_waits_for_it() {
    let env = env().await;
    let claimer = ClaimRequest {
        worker_id: WorkerId::new("w").unwrap(),
        served: ServedConfigs::All,
        kinds: WorkKind::ALL.to_vec(),
        lease: LeaseDuration::DEFAULT,
    };
    env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    let purge = env.store.claim(&claimer).await.unwrap().expect("purge claimed");
    let crawl = env.work_item(WorkKind::Crawl, Scope::Config(env.config), serde_json::json!({})).await;
    assert!(env.store.claim(&claimer).await.unwrap().is_none(), "the crawl waits");
    env.store.complete(purge.fence, None).await.unwrap();
    assert_eq!(env.store.claim(&claimer).await.unwrap().unwrap().item.id, crawl.id);
}

#[tokio::test]
async fn proxy_deletion_removes_the_chosen_proxies_and_rejects_a_bad_payload() {
    let env = env().await;
    let (id, hash) = env.asset(1, "X", 0, 1).await;
    let handler = ProxyDeletionHandler::new(env.store.clone(), env.proxies.clone());
    let payload = serde_json::json!({"asset_ids": [id], "proxy_types": ["preview"]});
    let result = env
        .run_handler(&handler, env.work_item(WorkKind::ProxyDeletion, Scope::Unscoped, payload).await)
        .await
        .unwrap();
    assert_eq!(result["deleted"], 1);
    let dir = env.proxies.join(hash.proxy_dir(env.config));
    assert!(!dir.join("preview.jpg").exists() && dir.join("thumbnail.jpg").exists());
    let payload = serde_json::json!({"asset_ids": [id]});
    let result = env
        .run_handler(&handler, env.work_item(WorkKind::ProxyDeletion, Scope::Config(env.config), payload).await)
        .await
        .unwrap();
    assert_eq!(result["deleted"], 2, "thumbnail and blurhash");
    assert!(!dir.exists(), "the emptied folder goes too");
    let bad = serde_json::json!({"asset_ids": ["not-a-uuid"]});
    let err = env
        .run_handler(&handler, env.work_item(WorkKind::ProxyDeletion, Scope::Unscoped, bad).await)
        .await
        .unwrap_err();
    assert!(!err.retryable && err.message.contains("asset_ids"));
}

/// An attempt that no longer holds its item deletes no file: its host slept (suspended, its VM paused) past its
/// lease with the executor's clock stopped, so nothing cancelled it, and another attempt took the item over. Forced
/// here by taking the item again under the first attempt's feet; both the proxy deletion and the purge are run with
/// the first attempt's fence and a token nothing cancels. Before, each deleted the files, and only its fenced row
/// write after them was refused: the files of a newer attempt (a crawl's remade proxies) were gone.
#[tokio::test]
async fn an_attempt_that_lost_its_item_deletes_no_proxy_file() {
    let env = env().await;
    let (id, hash) = env.asset(1, "X", 0, 1).await;
    let dir = env.proxies.join(hash.proxy_dir(env.config));
    let stale = async |handler: &dyn Handler, kind, payload| {
        let item = env.work_item(kind, Scope::Config(env.config), payload).await;
        let fence = env.start(item.id).await;
        let newer = env.start(item.id).await;
        let ctx = HandlerContext { item, fence, cancel: CancellationToken::new(), progress: Default::default() };
        let err = handler.run(ctx).await.unwrap_err();
        env.finish(newer).await;
        err
    };
    let deletion = ProxyDeletionHandler::new(env.store.clone(), env.proxies.clone());
    let err = stale(&deletion, WorkKind::ProxyDeletion, serde_json::json!({"asset_ids": [id]})).await;
    assert!(err.message.contains("no longer holds its work item"), "{}", err.message);
    assert!(dir.join("preview.jpg").exists() && dir.join("thumbnail.jpg").exists(), "nothing deleted");

    env.soft_delete(id, 31).await;
    let err = stale(&purge_handler(&env), WorkKind::Purge, serde_json::json!({})).await;
    assert!(err.message.contains("no longer holds its work item"), "{}", err.message);
    assert!(dir.join("preview.jpg").exists() && dir.join("thumbnail.jpg").exists(), "nothing purged");
    assert_eq!(env.count("SELECT count(*) AS n FROM media_assets").await, 1);
}

/// A proxy deletion or a purge on a host whose proxy volume is not mounted (its proxy root an empty mount point)
/// deletes nothing: each file would count as already deleted and its row would go, and without rows a crawl writes
/// every proxy onto the disk beneath the mount point (`regenerate` queues exactly that deletion and a crawl). Once
/// the volume is back, both run. A deletion keeps the config's own folder, so a retry after it emptied it runs too.
#[tokio::test]
async fn a_deletion_on_an_unmounted_proxy_volume_deletes_no_row() {
    let env = env().await;
    let (id, hash) = env.asset(1, "X", 0, 1).await;
    let (old, _) = env.asset(2, "X", 0, 1).await;
    env.soft_delete(old, 31).await;
    let away = env.proxies.with_file_name("proxy-volume-unmounted");
    std::fs::rename(&env.proxies, &away).unwrap();
    std::fs::create_dir_all(&env.proxies).unwrap();
    let deletion = ProxyDeletionHandler::new(env.store.clone(), env.proxies.clone());
    let payload = serde_json::json!({"asset_ids": [id]});
    let item = env.work_item(WorkKind::ProxyDeletion, Scope::Config(env.config), payload.clone()).await;
    let err = env.run_handler(&deletion, item).await.unwrap_err();
    assert!(err.retryable && err.message.contains("is not there"), "{}", err.message);
    assert!(err.message.contains("Nothing more was deleted"), "{}", err.message);
    assert!(err.message.contains(&format!("regenerate --config {}", env.config)), "{}", err.message);
    let purge = env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    let err = env.run_handler(&purge_handler(&env), purge).await.unwrap_err();
    assert!(err.retryable && err.message.contains("Nothing more was purged"), "{}", err.message);
    assert_eq!(env.count("SELECT count(*) AS n FROM proxy_files").await, 6, "every row kept");

    std::fs::remove_dir(&env.proxies).unwrap();
    std::fs::rename(&away, &env.proxies).unwrap();
    let item = env.work_item(WorkKind::ProxyDeletion, Scope::Config(env.config), payload).await;
    assert_eq!(env.run_handler(&deletion, item).await.unwrap()["deleted"], 3);
    assert!(!env.proxies.join(hash.proxy_dir(env.config)).exists());
    let purge = env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    assert_eq!(env.run_handler(&purge_handler(&env), purge).await.unwrap()["purged"], 1);
    assert!(env.proxies.join(env.config.to_string()).is_dir(), "the config's folder stays, emptied");
    let again = serde_json::json!({"asset_ids": [id]});
    let item = env.work_item(WorkKind::ProxyDeletion, Scope::Config(env.config), again).await;
    assert_eq!(env.run_handler(&deletion, item).await.unwrap()["deleted"], 0, "nothing left, and no refusal");
}

fn age(path: &std::path::Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs)).unwrap();
}

#[tokio::test]
async fn proxy_sweep_deletes_old_orphans_only_and_never_follows_links() {
    let env = env().await;
    let (_, hash) = env.asset(1, "X", 0, 1).await;
    let referenced = env.proxies.join(hash.proxy_dir(env.config)).join("preview.jpg");
    age(&referenced, 7200);
    let orphan_dir = env.proxies.join(env.config.to_string()).join("ff").join("ff".repeat(32));
    std::fs::create_dir_all(&orphan_dir).unwrap();
    let old_orphan = orphan_dir.join("preview.jpg");
    std::fs::write(&old_orphan, b"old").unwrap();
    age(&old_orphan, 7200);
    let debris = orphan_dir.join(".thumbnail.jpg.tmp");
    std::fs::write(&debris, b"half").unwrap();
    age(&debris, 7200);
    // Written a moment ago by a crawl whose rows are not committed yet: it must survive.
    let fresh = env.proxies.join(env.config.to_string()).join("ee").join("ee".repeat(32)).join("preview.jpg");
    std::fs::create_dir_all(fresh.parent().unwrap()).unwrap();
    std::fs::write(&fresh, b"new").unwrap();
    // A link out of the proxy root, to an old file: never followed.
    let outside = env.dir.path().join("outside.jpg");
    std::fs::write(&outside, b"keep").unwrap();
    age(&outside, 7200);
    std::os::unix::fs::symlink(env.dir.path(), env.proxies.join("escape")).unwrap();

    let handler = ProxySweepHandler::new(env.store.clone(), env.proxies.clone(), Duration::from_secs(3600));
    let result = env
        .run_handler(&handler, env.work_item(WorkKind::ProxySweep, Scope::Unscoped, serde_json::json!({})).await)
        .await
        .unwrap();
    assert_eq!(result["deleted"], 2, "{result}");
    assert!(!old_orphan.exists() && !debris.exists() && !orphan_dir.exists());
    assert!(referenced.exists() && fresh.exists() && outside.exists());
}

/// At start, only temporary files in the exact proxy layout of an existing config and older than the sweep's age
/// floor go: never a finished proxy (even an unreferenced old one), a younger temporary file (another Worker may
/// be writing it), one of a config that does not exist, one outside the layout, or a link in a temporary name.
#[tokio::test]
async fn the_start_up_clean_up_removes_only_old_temporary_files_in_our_layout() {
    let env = env().await;
    let limits = ToolLimits::default();
    let floor = ProxySweepHandler::<PgStore>::min_age_for(limits).as_secs();
    let folder = |config: &str, n: &str| env.proxies.join(config).join(n).join(n.repeat(32));
    let ours = env.config.to_string();
    let (a, b) = (folder(&ours, "aa"), folder(&ours, "bb"));
    let elsewhere = folder(&StorageConfigId::new().to_string(), "cc");
    // The scratch folders a killed Worker left, where it and its tools write.
    let scratch = |n: &str| folder(&ours, n).join(almanac_domain::ports::PROXY_SCRATCH_FOLDER);
    let (e, f) = (scratch("ee"), scratch("ff"));
    for dir in [&a, &b, &elsewhere, &env.proxies.join(&ours).join("dd"), &e, &f] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let write = |path: &std::path::Path, secs: u64| {
        std::fs::write(path, b"half a file").unwrap();
        age(path, secs);
    };
    let debris =
        [a.join(".web.tmp.mp4"), a.join(".poster.tmp.jpg"), b.join(".heic-decode-1.jpg"), e.join(".heic-decode.jpg")];
    for path in &debris {
        write(path, floor + 60);
    }
    let kept = [
        b.join("poster.jpg"),
        b.join("web.mp4"),
        elsewhere.join(".web.tmp.mp4"),
        env.proxies.join(&ours).join("dd").join(".web.tmp.mp4"),
        env.proxies.join(".web.tmp.mp4"),
        f.join("web.mp4"),
    ];
    for path in &kept {
        write(path, floor + 60);
    }
    let young = b.join(".preview.jpg.tmp");
    write(&young, floor - 120);
    let outside = env.dir.path().join("outside.jpg");
    write(&outside, floor + 60);
    let link = b.join(".thumbnail.jpg.tmp");
    std::os::unix::fs::symlink(&outside, &link).unwrap();

    let removing = almanac_handlers::maintenance::remove_temporary_debris(
        env.store.clone(),
        env.proxies.clone(),
        limits,
        CancellationToken::new(),
    );
    let (lines, report) = support::logs::capture(removing).await;
    assert_eq!(report, almanac_handlers::maintenance::DebrisReport { removed: 4, problems: vec![], problems_total: 0 });
    let removed = |lines: &[serde_json::Value]| -> Vec<serde_json::Value> {
        support::logs::events(lines, "temporary_debris_removed").into_iter().cloned().collect()
    };
    let logged = removed(&lines);
    let counts: Vec<_> = logged.iter().map(|l| &l["fields"]["removed"]).collect();
    assert_eq!(counts, [&serde_json::json!(4)], "said once, with the count: {lines:?}");
    let warned = |lines: &[serde_json::Value]| !support::logs::events(lines, "temporary_debris_not_removed").is_empty();
    assert!(!warned(&lines), "no problem, no warning: {lines:?}");
    assert!(debris.iter().all(|p| !p.exists()) && !a.exists(), "the debris and its emptied folder are gone");
    assert!(!folder(&ours, "ee").exists(), "an emptied scratch folder goes, and the proxy folder it emptied");
    assert!(kept.iter().all(|p| p.exists()), "a finished proxy, another config's or a file outside the layout");
    assert!(young.exists(), "a temporary file younger than the floor may be another Worker's, being written");
    assert!(link.symlink_metadata().is_ok() && outside.exists(), "a link is neither followed nor removed");

    let stopped = CancellationToken::new();
    stopped.cancel();
    std::fs::create_dir_all(&a).unwrap();
    write(&a.join(".web.tmp.mp4"), floor + 60);
    let removing =
        almanac_handlers::maintenance::remove_temporary_debris(env.store.clone(), env.proxies.clone(), limits, stopped);
    let (lines, report) = support::logs::capture(removing).await;
    assert_eq!(report.removed, 0, "a stopped Worker walks no further");
    assert!(removed(&lines).is_empty() && !warned(&lines), "nothing removed, nothing said removed: {lines:?}");
    assert!(a.join(".web.tmp.mp4").exists());
}

#[tokio::test]
async fn a_proxy_root_not_made_yet_has_no_debris_and_one_that_is_a_file_is_a_problem() {
    let env = env().await;
    let never_made = env.dir.path().join("no proxies yet");
    let report = almanac_handlers::maintenance::remove_temporary_debris(
        env.store.clone(),
        never_made.clone(),
        ToolLimits::default(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(report, almanac_handlers::maintenance::DebrisReport::default());
    assert!(!never_made.exists(), "nothing is made by looking");

    // One that is there but cannot be opened as a folder is a problem, said.
    let a_file = env.dir.path().join("proxies is a file");
    std::fs::write(&a_file, b"not a folder").unwrap();
    let report = almanac_handlers::maintenance::remove_temporary_debris(
        env.store.clone(),
        a_file,
        ToolLimits::default(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(report.removed, 0);
    assert!(report.problems.len() == 1 && report.problems[0].contains("cannot be opened"), "{report:?}");
}

#[tokio::test]
async fn token_cleanup_deletes_only_tokens_expired_or_revoked_past_the_grace() {
    let env = env().await;
    env.conn().await.batch_execute(
        "INSERT INTO refresh_tokens (id, user_id, token_hash, expires_at, revoked_at)
         SELECT gen_random_uuid(), u.id, decode(v.h, 'hex'), now() + v.expires, now() + v.revoked
           FROM users u, (VALUES ('01', interval '-30 days', NULL::interval), ('02', interval '-1 day', NULL),
                                 ('03', interval '30 days', interval '-30 days'), ('04', interval '30 days', NULL),
                                 ('05', interval '-6 days', NULL), ('06', interval '30 days', interval '-8 days')) v(h, expires, revoked)",
    ).await.unwrap();
    // The grace the Worker runs with: a week.
    let handler = TokenCleanupHandler::new(env.store.clone(), TokenCleanupHandler::<PgStore>::DEFAULT_GRACE);
    let result = env
        .run_handler(&handler, env.work_item(WorkKind::TokenCleanup, Scope::Unscoped, serde_json::json!({})).await)
        .await
        .unwrap();
    assert_eq!(result["deleted"], 3, "expired a month ago, revoked a month and 8 days ago");
    assert_eq!(
        env.count("SELECT count(*) AS n FROM refresh_tokens WHERE token_hash IN ('\\x02', '\\x04', '\\x05')").await,
        3,
        "expired within the week, or not yet"
    );
}

#[tokio::test]
async fn retention_deletes_finished_items_past_retention_only() {
    let env = env().await;
    let handler = WorkItemRetentionHandler::new(env.store.clone(), RetentionSettings::default());
    let old_done = env.work_item(WorkKind::TokenCleanup, Scope::Unscoped, serde_json::json!({})).await;
    let queued = env.work_item(WorkKind::ProxySweep, Scope::Unscoped, serde_json::json!({})).await;
    sql_query("UPDATE work_items SET status = 'succeeded', finished_at = now() - interval '8 days' WHERE id = $1")
        .bind::<Uuid, _>(old_done.id.as_uuid())
        .execute(&mut env.conn().await)
        .await
        .unwrap();
    // Finished within their retention (7 days for done items, 30 for failed ones): kept.
    let recent_done = env.work_item(WorkKind::TokenCleanup, Scope::Unscoped, serde_json::json!({})).await;
    let recent_failed = env.work_item(WorkKind::TokenCleanup, Scope::Unscoped, serde_json::json!({})).await;
    for (id, status, age) in [(recent_done.id, "succeeded", "1 day"), (recent_failed.id, "failed", "8 days")] {
        sql_query(format!(
            "UPDATE work_items SET status = '{status}', finished_at = now() - interval '{age}' WHERE id = $1"
        ))
        .bind::<Uuid, _>(id.as_uuid())
        .execute(&mut env.conn().await)
        .await
        .unwrap();
    }
    let item = env.work_item(WorkKind::WorkItemRetention, Scope::Unscoped, serde_json::json!({})).await;
    let result = env.run_handler(&handler, item).await.unwrap();
    assert_eq!(result["deleted"], 1);
    assert!(env.store.get(old_done.id).await.unwrap().is_none());
    assert!(env.store.get(queued.id).await.unwrap().is_some());
    assert!(env.store.get(recent_done.id).await.unwrap().is_some(), "a done item within its retention is kept");
    assert!(env.store.get(recent_failed.id).await.unwrap().is_some(), "a failed item within its retention is kept");
}

/// Retention keeps what the purge reads, however old: each config's newest crawl of the whole root that succeeded
/// (a failure is kept 30 days where a success is kept 7, so a config crawled less often than weekly had its purge
/// held by a failure its last whole crawl had answered), and a failed crawl no such success answered (else the
/// purge went on after 30 days of failures). An older success of the whole root, a newer success of some folders and
/// a failure answered long ago go as before.
#[tokio::test]
async fn retention_keeps_each_configs_newest_crawl_of_the_whole_root_that_the_purge_reads() {
    use almanac_domain::ports::MaintenanceStore;
    let env = env().await;
    let other = env.another_config("other-library").await;
    let ended = |config: StorageConfigId, payload: serde_json::Value, status: &'static str, days: i32| {
        let env = &env;
        async move {
            let item = env.work_item(WorkKind::Crawl, Scope::Config(config), payload).await;
            sql_query(
                "UPDATE work_items SET status = $2, finished_at = now() - make_interval(days => $3), attempt = 1,
                        started_at = now() - make_interval(days => $3),
                        failures = CASE WHEN $2 = 'failed' THEN 1 ELSE 0 END,
                        last_error = CASE WHEN $2 = 'failed' THEN 'the share was gone' END
                  WHERE id = $1",
            )
            .bind::<Uuid, _>(item.id.as_uuid())
            .bind::<diesel::sql_types::Text, _>(status)
            .bind::<diesel::sql_types::Integer, _>(days)
            .execute(&mut env.conn().await)
            .await
            .unwrap();
            item.id
        }
    };
    let whole = serde_json::json!({});
    let answered_long_ago = ended(env.config, whole.clone(), "failed", 35).await;
    let older_whole = ended(env.config, whole.clone(), "succeeded", 20).await;
    let failure = ended(env.config, whole.clone(), "failed", 15).await;
    let newest_whole = ended(env.config, whole.clone(), "succeeded", 10).await;
    let folders = ended(env.config, serde_json::json!({"folders": ["2024"]}), "succeeded", 9).await;
    // The other config's crawls have failed for 40 days since its last whole success: the purge is held, and the
    // failure that holds it stays however long the retention of failures.
    let others_whole = ended(other, whole.clone(), "succeeded", 50).await;
    let others_failure = ended(other, whole.clone(), "failed", 40).await;
    let handler = WorkItemRetentionHandler::new(env.store.clone(), RetentionSettings::default());
    let item = env.work_item(WorkKind::WorkItemRetention, Scope::Unscoped, serde_json::json!({})).await;
    let result = env.run_handler(&handler, item).await.unwrap();
    assert_eq!(result["deleted"], 3, "{result}");
    let expected = [
        (answered_long_ago, false),
        (older_whole, false),
        (failure, true),
        (newest_whole, true),
        (folders, false),
        (others_whole, true),
        (others_failure, true),
    ];
    for (id, kept) in expected {
        assert_eq!(env.store.get(id).await.unwrap().is_some(), kept, "{id}");
    }
    assert_eq!(env.store.failing_crawl(env.config).await.unwrap(), None, "the failure was answered");
    let holding = env.store.failing_crawl(other).await.unwrap().map(|f| f.item);
    assert_eq!(holding, Some(others_failure), "still held by the failure kept");
}

/// Retention deletes in batches (of 1,000) until none is left: 2,500 items past their retention take three.
#[tokio::test]
async fn retention_deletes_every_item_past_its_retention_whatever_the_number_of_batches() {
    let env = env().await;
    let handler = WorkItemRetentionHandler::new(env.store.clone(), RetentionSettings::default());
    sql_query(
        "INSERT INTO work_items (id, kind, status, requested_at, run_after, finished_at)
         SELECT gen_random_uuid(), 'token_cleanup', 'succeeded', now() - interval '9 days',
                now() - interval '9 days', now() - interval '8 days'
           FROM generate_series(1, 2500)",
    )
    .execute(&mut env.conn().await)
    .await
    .unwrap();
    let item = env.work_item(WorkKind::WorkItemRetention, Scope::Unscoped, serde_json::json!({})).await;
    let result = env.run_handler(&handler, item).await.unwrap();
    assert_eq!(result["deleted"], 2500);
    let left = env.count("SELECT count(*) AS n FROM work_items WHERE kind = 'token_cleanup'").await;
    assert_eq!(left, 0, "every item past its retention is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_racing_schedulers_enqueue_each_periodic_item_exactly_once() {
    let env = env().await;
    let (_, other) = env
        .store
        .add_storage_config(&NewStorageConfig { username: "bob".into(), root_path: "/photos/bob".into() })
        .await
        .unwrap();
    let schedulers: Vec<_> = (0..3)
        .map(|_| {
            let store = Arc::new(PgStore::new(env.db.url(), 2, Duration::from_secs(10)).unwrap());
            Scheduler::new(store, ServedConfigs::All, ScheduleSettings::default())
        })
        .collect();
    let (a, b, c) = tokio::join!(schedulers[0].tick(), schedulers[1].tick(), schedulers[2].tick());
    let total = a.unwrap() + b.unwrap() + c.unwrap();
    // Two configs: a crawl and a purge each, plus sweep, token cleanup and retention.
    assert_eq!(total, 7);
    assert_eq!(env.count("SELECT count(*) AS n FROM work_items").await, 7);
    assert_eq!(env.count("SELECT count(*) AS n FROM work_items WHERE kind = 'crawl'").await, 2);
    // Later in the same period: nothing new.
    assert_eq!(schedulers[0].tick().await.unwrap(), 0);
    // An inactive config gets nothing new and loses what was queued.
    env.store.set_storage_config_active(other.id, false).await.unwrap();
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM work_items WHERE storage_config_id = '{}' AND status = 'queued'",
            other.id
        ))
        .await,
        0
    );
    sql_query("DELETE FROM schedule_periods").execute(&mut env.conn().await).await.unwrap();
    schedulers[1].tick().await.unwrap();
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) AS n FROM work_items WHERE storage_config_id = '{}' AND status = 'queued'",
            other.id
        ))
        .await,
        0
    );
}

#[tokio::test]
async fn a_running_scheduler_enqueues_on_its_own_and_stops_when_told() {
    let env = env().await;
    let settings = ScheduleSettings { tick: Duration::from_millis(50), ..ScheduleSettings::default() };
    let scheduler = Scheduler::new(env.store.clone(), ServedConfigs::All, settings);
    let stop = CancellationToken::new();
    let task = tokio::spawn(scheduler.run(stop.clone()));
    let deadline = almanac_testdb::Deadline::after(Duration::from_secs(10));
    while env.count("SELECT count(*) AS n FROM work_items").await < 5 {
        deadline.check("the scheduler to enqueue its work");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    let stops = almanac_testdb::patience(Duration::from_secs(5));
    tokio::time::timeout(stops, task).await.expect("stops when told").unwrap();
    assert_eq!(env.count("SELECT count(*) AS n FROM work_items").await, 5, "and only once per period");
}

#[tokio::test]
async fn on_this_day_shows_one_memory_per_burst() {
    let env = env().await;
    let (first, _) = env.asset(1, "X", 0, 10).await;
    let (primary, _) = env.asset(2, "X", 300, 30).await;
    env.asset(3, "X", 600, 20).await;
    let (alone, _) = env.asset(4, "X", 3_600_000, 10).await;
    let handler = BurstDetectionHandler::new(env.store.clone(), BurstSettings::default());
    env.run_handler(
        &handler,
        env.work_item(WorkKind::BurstDetection, Scope::Config(env.config), serde_json::json!({})).await,
    )
    .await
    .unwrap();
    let user = env.store.user_by_name("ann").await.unwrap().unwrap().id;
    let memories = env.store.on_this_day(user, 1, 1, 50).await.unwrap();
    let shown: Vec<AssetId> = memories.iter().map(|m| m.asset_id).collect();
    assert_eq!(shown, [alone, primary], "newest first; the burst shows once, by its primary frame");
    assert_eq!(memories[1].burst_id.map(|b| b.as_uuid()), Some(first.as_uuid()));
    assert!(env.store.on_this_day(user, 1, 2, 50).await.unwrap().is_empty());
}

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(320, 240, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

/// An attempt at `item` run as the executor ends one: taken as a claim takes it, then completed, or failed as the
/// queue records a failure (queued again while the handler says it may be and attempts are left, else failed).
async fn attempt(env: &Env, handler: &impl Handler, item: WorkItem) -> Result<serde_json::Value, HandlerError> {
    let fence = env.start(item.id).await;
    let ctx = HandlerContext { item, fence, cancel: CancellationToken::new(), progress: Default::default() };
    let answer = handler.run(ctx).await;
    match &answer {
        Ok(_) => env.finish(fence).await,
        Err(e) => {
            let failure = Failure { error: e.message.clone(), retryable: e.retryable, retry_delay: Duration::ZERO };
            env.store.fail(fence, &failure).await.unwrap();
        }
    }
    answer.map(|r| r.unwrap_or_default())
}

/// A purge run alone: its result and the `purge_held` events it logged.
async fn purge_logged(env: &Env) -> (serde_json::Value, usize) {
    let item = env.work_item(WorkKind::Purge, Scope::Config(env.config), serde_json::json!({})).await;
    let (lines, result) = support::logs::capture(env.run_handler(&purge_handler(env), item)).await;
    (result.unwrap(), support::logs::events(&lines, "purge_held").len())
}

/// Deletion is for good, and a soft-deleted photo is known gone only as of the last crawl that read the library. A
/// photo that went from a disk that dropped out beneath the root, then the whole share gone for longer than
/// `purge_after`: while the config's crawls fail (to be tried again, then failed for good) the purge deletes nothing
/// and says why; once the share is back, the crawl revives the photo that came back with it, and the purge after it
/// purges only what is still gone. Without the hold the first purge purged both photos.
#[tokio::test]
async fn a_purge_deletes_nothing_while_the_configs_crawls_fail_and_a_photo_back_with_the_share_keeps_its_asset() {
    let env = env().await;
    env.write("keep.jpg", &photo(1));
    let back = env.write("disk/back.jpg", &photo(2));
    let gone = env.write("disk/gone.jpg", &photo(3));
    env.crawl().await;
    let content = std::fs::read(&back).unwrap();
    std::fs::remove_file(&back).unwrap();
    std::fs::remove_file(&gone).unwrap();
    assert_eq!(env.crawl().await["soft_deleted"], 2);
    let soft_deleted = "SELECT count(*) AS n FROM media_assets WHERE is_soft_deleted";
    sql_query("UPDATE media_assets SET soft_deleted_at = now() - interval '31 days' WHERE is_soft_deleted")
        .execute(&mut env.conn().await)
        .await
        .unwrap();
    let proxies_before = env.count("SELECT count(*) AS n FROM proxy_files").await;
    let away = env.root.with_file_name("share-away");
    std::fs::rename(&env.root, &away).unwrap();
    let crawl = env.item(serde_json::json!({})).await;
    let err = attempt(&env, &env.handler(), crawl.clone()).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    let failed = format!("SELECT count(*) AS n FROM work_items WHERE id = '{}' AND status = 'failed'", crawl.id);
    for to_be_tried_again in [true, false] {
        if !to_be_tried_again {
            // Its attempts run out: failed for good, and still the config's last crawl.
            while env.count(&failed).await == 0 {
                attempt(&env, &env.handler(), crawl.clone()).await.unwrap_err();
            }
        }
        let (result, held) = purge_logged(&env).await;
        assert_eq!((result["purged"].as_u64(), held), (Some(0), 1), "{result}");
        assert_eq!(result["held_by_crawl"], crawl.id.to_string(), "{result}");
        assert_eq!(env.count(soft_deleted).await, 2, "nothing purged");
        assert_eq!(env.count("SELECT count(*) AS n FROM proxy_files").await, proxies_before);
    }
    std::fs::rename(&away, &env.root).unwrap();
    std::fs::write(&back, &content).unwrap();
    let item = env.item(serde_json::json!({})).await;
    assert_eq!(attempt(&env, &env.handler(), item).await.unwrap()["revived"], 1);
    let (result, held) = purge_logged(&env).await;
    assert_eq!((result["purged"].as_u64(), held), (Some(1), 0), "only the photo still gone: {result}");
    assert!(result.get("held_by_crawl").is_none(), "{result}");
    assert_eq!(env.count(soft_deleted).await, 0);
    let kept = "SELECT count(*) AS n FROM media_assets WHERE display_path = 'disk/back.jpg' AND NOT is_soft_deleted";
    assert_eq!(env.count(kept).await, 1, "the photo that came back kept its asset");
}

/// Which crawls hold a config's purge, each history on a config of its own, written through the queue's own
/// statements: the latest crawl that failed or stalled since the last crawl of the whole root that succeeded,
/// whether it is to be tried again, failed for good, cancelled (by the operator, while retrying) or put back by
/// `retry`. Not a crawl never tried or cancelled before it ran, a failure that a success of the whole root came
/// after (even when the failed crawl is cancelled later: its attempt's start dates it), a crawl that failed and then
/// succeeded, another kind's failure, or another config's; and a crawl of some folders reads only those, so its
/// success clears no other crawl's failure.
#[tokio::test]
async fn a_configs_purge_is_held_by_a_failing_crawl_of_that_config_only() {
    use almanac_domain::ports::MaintenanceStore;
    #[derive(Clone, Copy, Debug)]
    enum End {
        Succeeded,
        FoldersSucceeded,
        RootListedSucceeded,
        Retrying,
        Failed,
        Cancelled,
        RetryingThenCancelled,
        FailedThenRetried,
        Stalled,
        NeverTried,
        PurgeFailed,
        RetriedThenSucceeded,
        CancelTheFirst,
    }
    use End::*;
    let env = env().await;
    let cases: [(&[End], Option<bool>); 19] = [
        (&[], None),
        (&[NeverTried], None),
        (&[Succeeded, NeverTried], None),
        (&[Cancelled], None),
        (&[Retrying], Some(true)),
        (&[Succeeded, Failed], Some(false)),
        (&[Failed, Succeeded], None),
        (&[Retrying, Succeeded], None),
        (&[Failed, Cancelled], Some(false)),
        (&[Succeeded, PurgeFailed], None),
        (&[Failed, PurgeFailed], Some(false)),
        (&[Failed, Retrying], Some(true)),
        (&[Succeeded, RetryingThenCancelled], Some(false)),
        (&[Succeeded, FailedThenRetried], Some(true)),
        (&[Succeeded, Stalled], Some(true)),
        (&[Failed, FoldersSucceeded], Some(false)),
        (&[Failed, RootListedSucceeded], None),
        (&[RetriedThenSucceeded], None),
        // Its failure was answered by the success after it, whenever it is cancelled.
        (&[Retrying, Succeeded, CancelTheFirst], None),
    ];
    let stalled = "its last attempt ended without an answer";
    let mut configs = Vec::new();
    for (n, (history, _)) in cases.iter().enumerate() {
        let config = env.another_config(&format!("library-{n}")).await;
        let (mut failing, mut first) = (None, None);
        for (step, end) in history.iter().enumerate() {
            if let (CancelTheFirst, Some(first)) = (end, first) {
                env.store.request_cancel(first).await.unwrap();
                continue;
            }
            let kind = if matches!(end, PurgeFailed) { WorkKind::Purge } else { WorkKind::Crawl };
            let payload = match end {
                FoldersSucceeded => serde_json::json!({"folders": ["2024/phone"]}),
                RootListedSucceeded => serde_json::json!({"folders": ["2024/phone", ""]}),
                _ => serde_json::json!({}),
            };
            let item = env.work_item(kind, Scope::Config(config), payload).await;
            first = first.or(Some(item.id));
            let error = format!("{end:?} at step {step}");
            let fail = |retryable| Failure { error: error.clone(), retryable, retry_delay: Duration::ZERO };
            match end {
                NeverTried | CancelTheFirst => {}
                RetriedThenSucceeded => {
                    env.store.fail(env.start(item.id).await, &fail(true)).await.unwrap();
                    env.finish(env.start(item.id).await).await;
                }
                Cancelled => drop(env.store.request_cancel(item.id).await.unwrap()),
                Succeeded | FoldersSucceeded | RootListedSucceeded => env.finish(env.start(item.id).await).await,
                Retrying => drop(env.store.fail(env.start(item.id).await, &fail(true)).await.unwrap()),
                Failed | PurgeFailed => drop(env.store.fail(env.start(item.id).await, &fail(false)).await.unwrap()),
                RetryingThenCancelled => {
                    env.store.fail(env.start(item.id).await, &fail(true)).await.unwrap();
                    env.store.request_cancel(item.id).await.unwrap();
                }
                FailedThenRetried => {
                    env.store.fail(env.start(item.id).await, &fail(false)).await.unwrap();
                    env.store.retry_items(&Default::default(), Some(&[item.id])).await.unwrap();
                }
                Stalled => {
                    env.start(item.id).await;
                    let expire = "UPDATE work_items SET lease_expires_at = now() - interval '1 second' WHERE id = $1";
                    sql_query(expire).bind::<Uuid, _>(item.id.as_uuid()).execute(&mut env.conn().await).await.unwrap();
                    assert_eq!(env.store.recover_expired_leases(5).await.unwrap().len(), 1);
                }
            }
            if !matches!(end, NeverTried | Cancelled | PurgeFailed | CancelTheFirst)
                && !format!("{end:?}").ends_with("Succeeded")
            {
                failing = Some((item.id, if matches!(end, Stalled) { stalled.to_owned() } else { error }));
            }
        }
        configs.push((config, failing));
    }
    // Each config's answer is its own history's, whatever the other configs' hold.
    for ((config, failing), (history, expected)) in configs.iter().zip(cases) {
        let found = env.store.failing_crawl(*config).await.unwrap();
        assert_eq!(found.as_ref().map(|f| f.retrying), expected, "{history:?}: {found:?}");
        if let Some(found) = found {
            let (item, error) = failing.as_ref().expect("a failing crawl in the history");
            assert_eq!(found.item, *item, "{history:?}");
            assert!(found.error.starts_with(error.as_str()), "{history:?}: {found:?}");
        }
    }
}
