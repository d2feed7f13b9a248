//! Every write of an attempt is fenced (ADR 0008 rule 5, docs/safety.md invariant 1), catalogue writes included: with a
//! stale fence, each port method answers Lost and commits nothing.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use almanac_domain::{
    AssetId, AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType, NewWorkItem, ProxyType, Scope, Status,
    StorageConfigId, WorkKind, WorkQueue,
    ports::{
        BurstGroup, CatalogueError, CatalogueStore, FailedFile, Fence, FileFacts, IngestOutcome, LeaseDuration,
        MaintenanceStore, NewAsset, NewProxy, ServedConfigs, StoredProxy,
    },
};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use chrono::{TimeZone, Utc};
use diesel::sql_query;
use diesel::sql_types::{Text, Uuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

struct Setup {
    db: TestDatabase,
    store: PgStore,
    config: StorageConfigId,
}

async fn setup() -> Setup {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 4, Duration::from_secs(10)).expect("store");
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = store.add_storage_config(&new).await.unwrap().1.id;
    Setup { db, store, config }
}

impl Setup {
    async fn raw(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(self.db.url()).await.unwrap()
    }

    /// Claims the config's oldest item (a crawl), as a Worker would.
    async fn claim(&self, worker: &str) -> Fence {
        let request = support::claimer(worker);
        self.store.claim(&request).await.unwrap().expect("an item to claim").fence
    }

    /// The attempt's lease expires and another Worker's recovery requeues its item.
    async fn expire_and_recover(&self, fence: Fence) {
        sql_query("UPDATE work_items SET lease_expires_at = now() - interval '1 second' WHERE id = $1")
            .bind::<Uuid, _>(fence.id.as_uuid())
            .execute(&mut self.raw().await)
            .await
            .unwrap();
        assert_eq!(self.store.recover_expired_leases(3).await.unwrap().len(), 1);
    }

    /// Everything a handler can write, as one text: equal before and after means nothing was committed.
    async fn state(&self) -> String {
        #[derive(diesel::QueryableByName)]
        struct State {
            #[diesel(sql_type = Text)]
            state: String,
        }
        let tables = [
            "media_assets",
            "asset_metadata",
            "proxy_files",
            "asset_extra_paths",
            "bursts",
            "refresh_tokens",
            "failed_files",
        ];
        let parts: Vec<String> = tables
            .iter()
            .map(|t| format!("(SELECT coalesce(string_agg(x::text, ';' ORDER BY x::text), '') FROM {t} x)"))
            .chain([
                "(SELECT string_agg(root_path || coalesce(root_is_mount_point::text, '-') || mounts_below::text, ';') \
                  FROM storage_configs)"
                    .into(),
                "(SELECT string_agg(id::text || status || coalesce(dedup_key, ''), ';' ORDER BY id) FROM work_items)"
                    .into(),
                "(SELECT coalesce(string_agg(schedule_key, ';'), '') FROM schedule_periods)".into(),
            ])
            .collect();
        let state: State = sql_query(format!("SELECT {} AS state", parts.join(" || '|' || ")))
            .get_result(&mut self.raw().await)
            .await
            .unwrap();
        state.state
    }
}

fn asset(config: StorageConfigId, n: u8, path: &str) -> NewAsset {
    let at = Utc.with_ymd_and_hms(2022, 1, 1, 12, 0, 0).unwrap();
    let hash = ContentHash::from_bytes([n; 32]);
    NewAsset {
        storage_config_id: config,
        facts: FileFacts { file_path: path.as_bytes().to_vec(), display_path: path.into(), size: 10, mtime: at },
        content_hash: hash.clone(),
        media_type: MediaType::Image,
        capture: CaptureTime { at, offset_minutes: Some(0), source: CaptureSource::ExifOriginal },
        metadata: AssetMetadata { camera_model: Some("X".into()), ..AssetMetadata::default() },
        proxies: vec![NewProxy {
            proxy_type: ProxyType::Thumbnail,
            relative_path: Some(hash.proxy_dir(config).join("thumbnail.jpg").display().to_string()),
            inline_value: None,
            size_bytes: 4,
        }],
        replaces: None,
        sidecar: None,
    }
}

fn assert_lost<T: std::fmt::Debug>(what: &str, answer: Result<T, CatalogueError>) {
    assert!(matches!(answer, Err(CatalogueError::Lost)), "{what} with a stale fence: {answer:?}");
}

/// Runs every fenced write with `stale` and checks each is Lost and the catalogue unchanged.
async fn every_write_is_lost(s: &Setup, stale: Fence, live_asset: AssetId, gone_asset: AssetId) {
    let before = s.state().await;
    let facts =
        FileFacts { file_path: b"moved.jpg".to_vec(), display_path: "moved.jpg".into(), size: 1, mtime: Utc::now() };
    let store = &s.store;
    assert_lost("ingest", store.ingest(stale, &asset(s.config, 9, "late.jpg")).await);
    assert_lost("relocate", store.relocate(stale, live_asset, &facts).await);
    assert_lost("record_extra_path", store.record_extra_path(stale, s.config, live_asset, &facts).await);
    let proxy = NewProxy { proxy_type: ProxyType::Preview, relative_path: None, inline_value: None, size_bytes: 1 };
    assert_lost("put_proxies", store.put_proxies(stale, live_asset, &[proxy], &Default::default()).await);
    assert_lost("soft_delete", store.soft_delete(stale, s.config, &[live_asset], &[]).await);
    assert_lost("pair", store.pair(stale, live_asset, gone_asset).await);
    assert_lost("record_root_identity", store.record_root_identity(stale, s.config, true, &[b"usb".to_vec()]).await);
    let follow_up = NewWorkItem::new(WorkKind::BurstDetection, Scope::Config(s.config)).unwrap();
    assert_lost("enqueue_follow_up", store.enqueue_follow_up(stale, &follow_up).await);
    assert_lost("remember_failed_file", store.remember_failed_file(stale, s.config, &failed(b"dcim/cut.jpg")).await);
    assert_lost("forget_failed_files", store.forget_failed_files(stale, s.config, &[b"kept.jpg".to_vec()]).await);
    let group = BurstGroup {
        id: live_asset,
        primary: live_asset,
        members: vec![live_asset],
        from_camera: false,
        camera_make: None,
        camera_model: None,
        started_at: Utc::now(),
        ended_at: Utc::now(),
    };
    assert_lost("replace_bursts", store.replace_bursts(stale, s.config, &[group]).await);
    assert_lost("purge_rows", store.purge_rows(stale, s.config, &[gone_asset], Utc::now()).await);
    let stored =
        StoredProxy { asset_id: live_asset, proxy_type: ProxyType::Thumbnail, relative_path: None, size_bytes: 0 };
    assert_lost("delete_proxy_rows", store.delete_proxy_rows(stale, &[stored]).await);
    let future = Utc::now() + chrono::Duration::days(1);
    assert_lost("delete_refresh_tokens", store.delete_refresh_tokens(stale, future, future, 100).await);
    assert_lost("delete_finished_work", store.delete_finished_work(stale, future, future, 100).await);
    assert_eq!(s.state().await, before, "a stale attempt committed something");
}

/// A failure remembered at `path`.
fn failed(path: &[u8]) -> FailedFile {
    FailedFile {
        file_path: path.to_vec(),
        size: 7,
        mtime: Utc.with_ymd_and_hms(2024, 5, 6, 7, 8, 9).unwrap(),
        inode: (u64::MAX - 1, Utc.with_ymd_and_hms(2024, 5, 6, 7, 8, 10).unwrap()),
        reason: "damaged".into(),
        read_by: "rules 1".into(),
        failed_at: Utc::now(),
    }
}

/// Failures are remembered per config and path (again: replaced), read for the whole config or for folders (each
/// with everything below it, not a sibling whose name starts alike), and forgotten by path.
#[tokio::test]
async fn failed_files_are_remembered_read_by_folder_and_forgotten() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let fence = s.claim("w1").await;
    for path in [&b"dcim/cut.jpg"[..], b"dcim/sub/clip.mp4", b"dcim-x/cut.jpg", b"top.jpg"] {
        s.store.remember_failed_file(fence, s.config, &failed(path)).await.unwrap();
    }
    let again = FailedFile { size: 8, reason: "damaged again".into(), read_by: "rules 2".into(), ..failed(b"top.jpg") };
    s.store.remember_failed_file(fence, s.config, &again).await.unwrap();
    let paths = |files: Vec<FailedFile>| {
        let mut p: Vec<Vec<u8>> = files.into_iter().map(|f| f.file_path).collect();
        p.sort();
        p
    };
    let all = s.store.failed_files(s.config, None).await.unwrap();
    let top = all.iter().find(|f| f.file_path == b"top.jpg").unwrap();
    assert_eq!((top.size, top.reason.as_str(), top.read_by.as_str()), (8, "damaged again", "rules 2"));
    assert_eq!((top.mtime, top.inode), (again.mtime, again.inode), "an inode number past i64::MAX too");
    assert_eq!(paths(all).len(), 4, "one row a path");
    let dcim = s.store.failed_files(s.config, Some(&[b"dcim".to_vec()])).await.unwrap();
    assert_eq!(paths(dcim), [b"dcim/cut.jpg".to_vec(), b"dcim/sub/clip.mp4".to_vec()]);
    s.store.forget_failed_files(fence, s.config, &[b"dcim/cut.jpg".to_vec(), b"nowhere".to_vec()]).await.unwrap();
    let left = paths(s.store.failed_files(s.config, None).await.unwrap());
    assert_eq!(left, [b"dcim-x/cut.jpg".to_vec(), b"dcim/sub/clip.mp4".to_vec(), b"top.jpg".to_vec()]);
}

/// The crawl merges its walk with the known files, both in the byte order of paths: pages of any size come in
/// that order (bytes, not text: `a.jpg` before `a/b.jpg` before `a0.jpg`, a name that is not UTF-8 last), own
/// and extra paths interleaved (an own path before an extra one at the same bytes), each path exactly once, and
/// nothing of a soft-deleted asset.
#[tokio::test]
async fn known_files_come_page_by_page_in_the_byte_order_of_paths() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let fence = s.claim("w1").await;
    let (kept, _) = catalogue(&s, fence).await;
    let mut ids = vec![kept];
    let extra =
        |path: &[u8]| FileFacts { file_path: path.to_vec(), display_path: String::new(), size: 1, mtime: Utc::now() };
    // The copies first: a copy recorded at an asset's own path takes the path from that asset.
    for path in [&b"a/a.jpg"[..], b"copy/kept.jpg", b"a0.jpg"] {
        s.store.record_extra_path(fence, s.config, kept, &extra(path)).await.unwrap();
    }
    for (n, path) in [(11u8, &b"a.jpg"[..]), (12, b"a/b.jpg"), (13, b"a0.jpg"), (14, b"\xffn.jpg")] {
        let mut new = asset(s.config, n, "placeholder");
        new.facts.file_path = path.to_vec();
        let IngestOutcome::Ingested(id) = s.store.ingest(fence, &new).await.unwrap() else { panic!("ingested") };
        ids.push(id);
    }
    let expected: Vec<(&[u8], bool)> = vec![
        (b"a.jpg", false),
        (b"a/a.jpg", true),
        (b"a/b.jpg", false),
        (b"a0.jpg", false),
        (b"a0.jpg", true),
        (b"copy/kept.jpg", true),
        (b"kept.jpg", false),
        (b"\xffn.jpg", false),
    ];
    for limit in [1, 2, 3, 100] {
        let (mut all, mut after) = (Vec::new(), None);
        loop {
            let page = s.store.known_files(s.config, b"", after.as_ref(), limit).await.unwrap();
            assert!(page.len() <= limit as usize);
            let Some(last) = page.last().cloned() else { break };
            all.extend(page);
            after = Some(last);
        }
        let got: Vec<(&[u8], bool)> = all.iter().map(|k| (&k.facts.file_path[..], k.extra)).collect();
        assert_eq!(got, expected, "pages of {limit}");
        assert_eq!(all.iter().filter(|k| !k.extra && ids.contains(&k.asset_id)).count(), 5, "every own path");
    }
}

/// The reads the proxy sweep and deletion rely on: an asset's proxies (all, or of some types), which paths
/// a row still references, and the configs a Worker's sweep checks (active, and its user's only when it serves
/// one).
#[tokio::test]
async fn the_sweeps_reads_answer_the_proxies_paths_and_configs_asked_for() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let fence = s.claim("w1").await;
    let mut with_two = asset(s.config, 1, "two.jpg");
    let preview = ContentHash::from_bytes([1; 32]).proxy_dir(s.config).join("preview.jpg").display().to_string();
    with_two.proxies.push(NewProxy {
        proxy_type: ProxyType::Preview,
        relative_path: Some(preview.clone()),
        inline_value: None,
        size_bytes: 9,
    });
    let IngestOutcome::Ingested(two) = s.store.ingest(fence, &with_two).await.unwrap() else { panic!("ingested") };
    let IngestOutcome::Ingested(one) = s.store.ingest(fence, &asset(s.config, 2, "one.jpg")).await.unwrap() else {
        panic!("ingested")
    };
    let thumbnail = |n: u8| ContentHash::from_bytes([n; 32]).proxy_dir(s.config).join("thumbnail.jpg");

    let mut all = s.store.proxies_of(&[two], None).await.unwrap();
    all.sort_by_key(|p| p.proxy_type.as_str());
    let shown: Vec<_> = all.iter().map(|p| (p.asset_id, p.proxy_type, p.relative_path.clone(), p.size_bytes)).collect();
    assert_eq!(
        shown,
        [
            (two, ProxyType::Preview, Some(preview.clone()), 9),
            (two, ProxyType::Thumbnail, Some(thumbnail(1).display().to_string()), 4)
        ]
    );
    let previews = s.store.proxies_of(&[two, one], Some(&[ProxyType::Preview])).await.unwrap();
    assert_eq!(previews.iter().map(|p| p.asset_id).collect::<Vec<_>>(), [two], "only the type asked for");
    assert_eq!(s.store.proxies_of(&[one], None).await.unwrap().len(), 1);

    let asked = [preview.clone(), "nowhere/thumbnail.jpg".to_owned(), thumbnail(2).display().to_string()];
    let mut referenced = s.store.referenced_proxy_paths(&asked).await.unwrap();
    referenced.sort();
    let mut expected = vec![preview.clone(), thumbnail(2).display().to_string()];
    expected.sort();
    assert_eq!(referenced, expected, "the paths a row references, and no other");

    // By folder (`<config>/<2 hex>/`, the hash's first byte): the sweep's walk, one folder at a time.
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(s.store.proxy_folders(s.config).await.unwrap(), ["01", "02"]);
    let in_01 = sorted(vec![preview, thumbnail(1).display().to_string()]);
    assert_eq!(sorted(s.store.referenced_proxy_paths_in(s.config, "01").await.unwrap()), in_01);
    assert_eq!(s.store.proxies_to_check_in(s.config, "01").await.unwrap().len(), 2);
    assert_eq!(s.store.soft_delete(fence, s.config, &[two], &[]).await.unwrap(), 1);
    let still = sorted(s.store.referenced_proxy_paths_in(s.config, "01").await.unwrap());
    assert_eq!(still, in_01, "a soft-deleted asset's files are still referenced");
    assert!(s.store.proxies_to_check_in(s.config, "01").await.unwrap().is_empty(), "only active assets' are checked");
    let of = s.store.proxies_to_check_of(s.config, &[two, one]).await.unwrap();
    assert_eq!(of.iter().map(|p| p.asset_id).collect::<Vec<_>>(), [one], "active assets only, wherever they lie");
    let in_02 = s.store.proxies_to_check_in(s.config, "02").await.unwrap();
    assert_eq!(
        in_02.iter().map(|p| p.relative_path.clone()).collect::<Vec<_>>(),
        [Some(thumbnail(2).display().to_string())]
    );

    let bob = NewStorageConfig { username: "bob".into(), root_path: PathBuf::from("/photos/bob") };
    let (bob_user, bob_config) = s.store.add_storage_config(&bob).await.unwrap();
    let mut every = s.store.configs_to_check(ServedConfigs::All).await.unwrap();
    every.sort();
    let mut both = vec![s.config, bob_config.id];
    both.sort();
    assert_eq!(every, both);
    assert_eq!(s.store.configs_to_check(ServedConfigs::User(bob_user.id)).await.unwrap(), [bob_config.id]);
    assert!(s.store.proxy_folders(bob_config.id).await.unwrap().is_empty(), "another config's folders are its own");
    let follow_up = NewWorkItem::new(WorkKind::Crawl, Scope::Config(bob_config.id)).unwrap();
    s.store.enqueue_follow_ups(fence, &[follow_up]).await.unwrap();
    let bobs = s.store.queue_summary().await.unwrap();
    let queued = |r: &&almanac_store_pg::QueueSummaryRow| r.kind == WorkKind::Crawl && r.status == Status::Queued;
    assert_eq!(bobs.iter().find(queued).map(|r| r.count), Some(1), "{bobs:?}");
    let rows = s.store.proxies_of(&[two], None).await.unwrap();
    assert_eq!(s.store.delete_proxy_rows(fence, &rows).await.unwrap(), 2, "each row deleted, counted");
    assert!(s.store.proxies_of(&[two], None).await.unwrap().is_empty());
    s.store.set_storage_config_active(bob_config.id, false).await.unwrap();
    assert_eq!(s.store.configs_to_check(ServedConfigs::All).await.unwrap(), [s.config], "active configs only");
}

/// The catalogue the stale writes aim at: a live asset, a soft-deleted one, an expired refresh token, a
/// finished work item. Written with a live fence, which must work.
async fn catalogue(s: &Setup, live: Fence) -> (AssetId, AssetId) {
    let IngestOutcome::Ingested(kept) = s.store.ingest(live, &asset(s.config, 1, "kept.jpg")).await.unwrap() else {
        panic!("ingested")
    };
    let IngestOutcome::Ingested(gone) = s.store.ingest(live, &asset(s.config, 2, "gone.jpg")).await.unwrap() else {
        panic!("ingested")
    };
    assert_eq!(s.store.soft_delete(live, s.config, &[gone], &[]).await.unwrap(), 1);
    sql_query(
        "INSERT INTO refresh_tokens (id, user_id, token_hash, expires_at)
         SELECT gen_random_uuid(), id, '\\x01', now() - interval '30 days' FROM users",
    )
    .execute(&mut s.raw().await)
    .await
    .unwrap();
    let done = s.store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap();
    sql_query("UPDATE work_items SET status = 'succeeded', finished_at = now() - interval '30 days' WHERE id = $1")
        .bind::<Uuid, _>(done.item.id.as_uuid())
        .execute(&mut s.raw().await)
        .await
        .unwrap();
    (kept, gone)
}

#[tokio::test]
async fn every_catalogue_write_of_a_recovered_attempt_is_lost_and_commits_nothing() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let first = s.claim("w1").await;
    let (kept, gone) = catalogue(&s, first).await;
    s.expire_and_recover(first).await;
    every_write_is_lost(&s, first, kept, gone).await;
}

#[tokio::test]
async fn every_catalogue_write_of_an_attempt_superseded_by_a_newer_claim_is_lost() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let first = s.claim("w1").await;
    let (kept, gone) = catalogue(&s, first).await;
    s.expire_and_recover(first).await;
    let second = s.claim("w2").await;
    assert_eq!((second.id, second.attempt.get()), (first.id, first.attempt.get() + 1));
    every_write_is_lost(&s, first, kept, gone).await;
    // The new attempt's own writes go through.
    assert_eq!(s.store.soft_delete(second, s.config, &[kept], &[]).await.unwrap(), 1);
}

#[tokio::test]
async fn a_finished_attempt_writes_nothing_more() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let fence = s.claim("w1").await;
    let (kept, gone) = catalogue(&s, fence).await;
    assert_eq!(s.store.complete(fence, None).await.unwrap(), almanac_domain::ports::WriteOutcome::Written);
    every_write_is_lost(&s, fence, kept, gone).await;
}

/// A fenced write in progress holds its item's row against a takeover (recovery passes the item over until
/// the write has committed) but not against its own attempt's heartbeat.
#[tokio::test]
async fn a_fenced_write_in_progress_holds_off_recovery_but_not_its_own_heartbeat() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let fence = s.claim("w1").await;
    let (kept, _) = catalogue(&s, fence).await;
    // Hold the write after its fence check: the table it updates is locked.
    let mut blocker = s.raw().await;
    blocker.batch_execute("BEGIN; LOCK TABLE media_assets IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let store = std::sync::Arc::new(PgStore::new(s.db.url(), 4, Duration::from_secs(10)).unwrap());
    let writer = store.clone();
    let (config, write_fence) = (s.config, fence);
    let write = tokio::spawn(async move { writer.soft_delete(write_fence, config, &[kept], &[]).await });
    assert_eq!(s.db.sessions_waiting_on_locks(1).await, 1, "the write is under way, past its fence");

    let lease = LeaseDuration::new(Duration::from_secs(60)).unwrap();
    // A beat held behind the write would wait until the test commits it: any bound tells it apart.
    let beat =
        tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(2)), store.heartbeat(fence, lease, None))
            .await;
    assert!(matches!(beat, Ok(Ok(almanac_domain::ports::Heartbeat::Renewed { .. }))), "its own beat waited: {beat:?}");
    sql_query("UPDATE work_items SET lease_expires_at = now() - interval '1 second' WHERE id = $1")
        .bind::<Uuid, _>(fence.id.as_uuid())
        .execute(&mut s.raw().await)
        .await
        .unwrap();
    assert!(store.recover_expired_leases(3).await.unwrap().is_empty(), "recovery passes over a held item");

    blocker.batch_execute("COMMIT").await.unwrap();
    assert_eq!(write.await.unwrap(), Ok(1), "the write that held the item commits");
    assert_eq!(store.recover_expired_leases(3).await.unwrap().len(), 1, "then recovery takes the item");
    assert_lost("a write after the takeover", store.soft_delete(fence, s.config, &[kept], &[]).await);
}

/// What a live attempt writes reads back as written: the size and time of the file (the crawl compares them
/// with the file system to find what changed).
#[tokio::test]
async fn a_live_attempt_s_writes_read_back_as_written() {
    let s = setup().await;
    s.store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(s.config)).unwrap()).await.unwrap();
    let fence = s.claim("w1").await;
    let (kept, _) = catalogue(&s, fence).await;
    let known = s.store.known_files(s.config, b"", None, 100).await.unwrap();
    let [file] = &known[..] else { panic!("one active asset: {known:?}") };
    assert_eq!(
        (file.asset_id, file.facts.size, file.facts.mtime),
        (kept, 10, Utc.with_ymd_and_hms(2022, 1, 1, 12, 0, 0).unwrap())
    );
    let moved = FileFacts {
        file_path: b"moved.jpg".to_vec(),
        display_path: "moved.jpg".into(),
        size: 123_456_789_012,
        mtime: Utc.with_ymd_and_hms(2023, 5, 6, 7, 8, 9).unwrap(),
    };
    s.store.relocate(fence, kept, &moved).await.unwrap();
    let known = s.store.known_files(s.config, b"", None, 100).await.unwrap();
    assert_eq!(
        (known[0].facts.file_path.as_slice(), known[0].facts.size, known[0].facts.mtime),
        (&b"moved.jpg"[..], moved.size, moved.mtime)
    );
}
