//! What the store is handed from outside its control and PostgreSQL cannot hold as it is. A NUL: `text` refuses it
//! and `jsonb` refuses `\u0000`, so one NUL in a handler's error, result or progress, or in a file's metadata, failed
//! the whole write (a batch of completions, every item of it); the store writes it as U+FFFD. A path: the catalogue
//! indexes paths, and holds every one up to `LONGEST_PATH` bytes, however they compress; the server refuses one byte
//! more that does not compress.

mod support;

use almanac_domain::ports::{
    CatalogueError, CatalogueStore, EARLIEST_TIME, FailOutcome, Failure, Fence, FileFacts, Heartbeat, IngestOutcome,
    LONGEST_PATH, LeaseDuration, NewAsset, WriteOutcome,
};
use almanac_domain::{
    AssetId, AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType, NewWorkItem, Scope, Status,
    StorageConfigId, WorkKind, WorkQueue,
};
use almanac_store_pg::PgStore;
use chrono::Utc;
use diesel::sql_query;
use diesel::sql_types::{Binary, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::json;

/// Claims an item of `kind` enqueued just now for `config`.
async fn claimed(store: &PgStore, config: StorageConfigId, kind: WorkKind) -> Fence {
    let item = store.enqueue(&NewWorkItem::new(kind, Scope::Config(config)).unwrap()).await.unwrap().item;
    let mut request = support::claimer("w1");
    request.kinds = vec![kind];
    let claimed = store.claim(&request).await.unwrap().expect("claimed");
    assert_eq!(claimed.item.id, item.id);
    claimed.fence
}

/// An asset at `path` whose content is `n`.
fn asset(config: StorageConfigId, n: u8, path: &[u8], metadata: AssetMetadata) -> NewAsset {
    let at = Utc::now();
    NewAsset {
        storage_config_id: config,
        facts: facts(path),
        content_hash: ContentHash::from_bytes([n; 32]),
        media_type: MediaType::Image,
        capture: CaptureTime { at, offset_minutes: Some(0), source: CaptureSource::FileMtime },
        metadata,
        proxies: vec![],
        replaces: None,
        sidecar: None,
    }
}

fn facts(path: &[u8]) -> FileFacts {
    FileFacts {
        file_path: path.to_vec(),
        display_path: String::from_utf8_lossy(path).into(),
        size: 10,
        mtime: Utc::now(),
    }
}

/// `len` bytes drawn at random (no NUL, no `/`): a path that does not compress.
fn random_path(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match (x % 254) as u8 + 1 {
                b'/' => b'_',
                b => b,
            }
        })
        .collect()
}

#[tokio::test]
async fn a_nul_in_an_error_a_result_or_a_progress_is_written_as_the_replacement_character() {
    let (_db, store) = support::setup().await;
    let (ann, bob) =
        (support::config(&store, "ann", "/p/ann").await.id, support::config(&store, "bob", "/p/bob").await.id);
    let lease = LeaseDuration::new(std::time::Duration::from_secs(60)).unwrap();

    // A heartbeat's progress, then a batch of two completions, one of them with a NUL in its result.
    let (first, second) = (claimed(&store, ann, WorkKind::Crawl).await, claimed(&store, bob, WorkKind::Crawl).await);
    let progress = json!({"at": "a/b\0.jpg"});
    assert_eq!(
        store.heartbeat(first, lease, Some(&progress)).await.unwrap(),
        Heartbeat::Renewed { cancel_requested: false }
    );
    let item = store.get(first.id).await.unwrap().unwrap();
    assert_eq!(item.progress, Some(json!({"at": "a/b\u{fffd}.jpg"})));
    let (dirty, clean) = (json!({"failures": [{"reason": "bad\0byte"}], "k\0": 1}), json!({"found": 2}));
    let batch = [(first, Some(&dirty)), (second, Some(&clean))];
    let done = store.complete_many_and_claim(&batch, &support::claimer("w1"), 0).await.unwrap();
    assert_eq!(done.written, [WriteOutcome::Written, WriteOutcome::Written], "the whole batch written");
    let first = store.get(first.id).await.unwrap().unwrap();
    assert_eq!(
        (first.status, first.result),
        (Status::Succeeded, Some(json!({"failures": [{"reason": "bad\u{fffd}byte"}], "k\u{fffd}": 1})))
    );
    let second = store.get(second.id).await.unwrap().unwrap();
    assert_eq!((second.status, second.result), (Status::Succeeded, Some(clean)));

    // A completion alone, and a failure whose message carries a NUL.
    let alone = claimed(&store, ann, WorkKind::BurstDetection).await;
    assert_eq!(store.complete(alone, Some(&json!(["\0"]))).await.unwrap(), WriteOutcome::Written);
    assert_eq!(store.get(alone.id).await.unwrap().unwrap().result, Some(json!(["\u{fffd}"])));
    let failing = claimed(&store, bob, WorkKind::BurstDetection).await;
    let failure =
        Failure { error: "ffmpeg said \0 and stopped".into(), retryable: true, retry_delay: Default::default() };
    assert!(matches!(store.fail(failing, &failure).await.unwrap(), FailOutcome::RetryScheduled { .. }));
    let failed = store.get(failing.id).await.unwrap().unwrap();
    assert_eq!(failed.last_error.as_deref(), Some("ffmpeg said \u{fffd} and stopped"));
}

#[derive(diesel::QueryableByName, Debug)]
struct Texts {
    #[diesel(sql_type = Nullable<Text>)]
    camera_make: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_model: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lens_model: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_burst_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    live_photo_content_id: Option<String>,
    #[diesel(sql_type = Nullable<diesel::sql_types::BigInt>)]
    width: Option<i64>,
    #[diesel(sql_type = Nullable<diesel::sql_types::BigInt>)]
    height: Option<i64>,
    #[diesel(sql_type = Nullable<diesel::sql_types::BigInt>)]
    duration_ms: Option<i64>,
}

/// Whatever reader filled a file's metadata, a NUL in its texts is written as U+FFFD, and a dimension or a duration
/// past its column is none (not wrapped to a negative one the table's checks refuse): the asset is catalogued.
#[tokio::test]
async fn a_nul_or_a_number_past_its_column_in_a_files_metadata_still_catalogues_the_file() {
    let (db, store) = support::setup().await;
    let config = support::config(&store, "ann", "/p/ann").await.id;
    let fence = claimed(&store, config, WorkKind::Crawl).await;
    let metadata = AssetMetadata {
        camera_make: Some("Can\0on".into()),
        camera_model: Some("\0".into()),
        lens_model: Some("50mm".into()),
        camera_burst_id: Some("b\0".into()),
        live_photo_content_id: Some("\0c".into()),
        width: Some(u32::MAX),
        height: Some(3_000_000_000),
        duration_ms: Some(u64::MAX),
        ..AssetMetadata::default()
    };
    let ingested = store.ingest(fence, &asset(config, 1, b"a.jpg", metadata)).await.unwrap();
    let IngestOutcome::Ingested(id) = ingested else { panic!("ingested: {ingested:?}") };
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    let texts: Texts = sql_query(
        "SELECT camera_make, camera_model, lens_model, camera_burst_id, live_photo_content_id, width::bigint AS width,
                height::bigint AS height, duration_ms FROM asset_metadata WHERE asset_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(id.as_uuid())
    .get_result(&mut conn)
    .await
    .unwrap();
    let got =
        [texts.camera_make, texts.camera_model, texts.lens_model, texts.camera_burst_id, texts.live_photo_content_id];
    let want = ["Can\u{fffd}on", "\u{fffd}", "50mm", "b\u{fffd}", "\u{fffd}c"].map(|t| Some(t.to_owned()));
    assert_eq!(got, want);
    assert_eq!((texts.width, texts.height, texts.duration_ms), (None, None, None), "past their columns: none");
}

#[derive(diesel::QueryableByName, Debug)]
struct Path {
    #[diesel(sql_type = Binary)]
    file_path: Vec<u8>,
}

async fn own_path(conn: &mut AsyncPgConnection, id: AssetId) -> Vec<u8> {
    let row: Path = sql_query("SELECT file_path FROM media_assets WHERE id = $1")
        .bind::<diesel::sql_types::Uuid, _>(id.as_uuid())
        .get_result(conn)
        .await
        .unwrap();
    row.file_path
}

/// A path of `LONGEST_PATH` bytes that do not compress is held as an asset's own path, as a copy's and as a move's;
/// one byte more is refused by the server, so the limit is the index's, not a guess below it, and the store says it
/// refused the write's value.
#[tokio::test]
async fn the_longest_path_is_held_as_an_asset_a_copy_and_a_move_and_one_byte_more_is_refused() {
    let (db, store) = support::setup().await;
    let config = support::config(&store, "ann", "/p/ann").await.id;
    let fence = claimed(&store, config, WorkKind::Crawl).await;
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    let (own, copy, moved) = (random_path(LONGEST_PATH, 3), random_path(LONGEST_PATH, 5), random_path(LONGEST_PATH, 9));

    let ingested = store.ingest(fence, &asset(config, 1, &own, AssetMetadata::default())).await.unwrap();
    let IngestOutcome::Ingested(id) = ingested else { panic!("ingested: {ingested:?}") };
    assert_eq!(own_path(&mut conn, id).await, own);
    store.record_extra_path(fence, config, id, &facts(&copy)).await.expect("a copy at the longest path");
    store.relocate(fence, id, &facts(&moved)).await.expect("a move to the longest path");
    assert_eq!(own_path(&mut conn, id).await, moved);

    // One byte more, not compressing, is refused for its value, as a path of an asset, of a copy, of a move.
    let longer = random_path(LONGEST_PATH + 1, 17);
    refused_everywhere(&store, fence, (config, id), &longer, "its path is longer than the catalogue's index of paths")
        .await;
    assert_eq!(own_path(&mut conn, id).await, moved, "the refused move changed nothing");

    // Past 8,000 bytes the server's error would name no index: refused by the store, before anything is written.
    refused_everywhere(&store, fence, (config, id), &random_path(9_000, 23), "9000 bytes long").await;
}

/// `path` refused for its value as an asset's own path (a new one, of content 9), as `asset`'s copy and as its move,
/// each refusal saying `says`.
async fn refused_everywhere(
    store: &PgStore,
    fence: Fence,
    (config, asset_id): (StorageConfigId, AssetId),
    path: &[u8],
    says: &str,
) {
    let refusals = [
        store.ingest(fence, &asset(config, 9, path, AssetMetadata::default())).await.map(|_| ()),
        store.record_extra_path(fence, config, asset_id, &facts(path)).await,
        store.relocate(fence, asset_id, &facts(path)).await,
    ];
    for refused in refusals {
        let Err(CatalogueError::Refused(why)) = refused else { panic!("refused for its value: {refused:?}") };
        assert!(why.to_string().contains(says), "{why}");
    }
}

/// `EARLIEST_TIME` is PostgreSQL's first: an asset's file time at it is held, a microsecond earlier is refused.
#[tokio::test]
async fn the_earliest_time_is_the_first_the_catalogue_holds() {
    let (_db, store) = support::setup().await;
    let config = support::config(&store, "ann", "/p/ann").await.id;
    let fence = claimed(&store, config, WorkKind::Crawl).await;
    let mut first = asset(config, 1, b"a.jpg", AssetMetadata::default());
    first.facts.mtime = EARLIEST_TIME;
    assert!(matches!(store.ingest(fence, &first).await, Ok(IngestOutcome::Ingested(_))), "the first time held");
    let mut before = asset(config, 2, b"b.jpg", AssetMetadata::default());
    before.facts.mtime = EARLIEST_TIME - chrono::Duration::microseconds(1);
    assert!(store.ingest(fence, &before).await.is_err(), "a microsecond before it refused");
}
