//! The crawl on real files generated here and a real PostgreSQL catalogue.

mod support;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use almanac_domain::{AssetId, ProxyDeletionArgs, ProxyType, Scope, StorageConfigId, WorkArgs};
use almanac_media::fixtures::{self, FixtureExif};
use diesel::sql_query;
use diesel::sql_types::{BigInt, Binary, Bool, Nullable, Text, Uuid};
use diesel_async::RunQueryDsl;
use support::{Library, library};
use tokio_util::sync::CancellationToken;

impl Library {
    async fn assets(&self) -> Vec<AssetRow> {
        sql_query(
            "SELECT a.id, a.file_path, a.display_path, a.is_soft_deleted, a.captured_at_source, a.content_hash,
                    m.width::bigint AS width, m.orientation_degrees::bigint AS orientation, m.camera_model,
                    a.paired_asset_id, a.media_type,
                    (SELECT count(*) FROM proxy_files p WHERE p.asset_id = a.id) AS proxies
               FROM media_assets a LEFT JOIN asset_metadata m ON m.asset_id = a.id
              ORDER BY a.display_path, a.created_at",
        )
        .load(&mut self.conn().await)
        .await
        .unwrap()
    }

    async fn active(&self) -> Vec<AssetRow> {
        self.assets().await.into_iter().filter(|a| !a.is_soft_deleted).collect()
    }
}

#[derive(Debug, Clone, diesel::QueryableByName)]
struct AssetRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Binary)]
    file_path: Vec<u8>,
    #[diesel(sql_type = Text)]
    display_path: String,
    #[diesel(sql_type = Bool)]
    is_soft_deleted: bool,
    #[diesel(sql_type = Text)]
    captured_at_source: String,
    #[diesel(sql_type = Text)]
    content_hash: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    width: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    orientation: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_model: Option<String>,
    #[diesel(sql_type = Nullable<Uuid>)]
    paired_asset_id: Option<uuid::Uuid>,
    #[diesel(sql_type = Text)]
    media_type: String,
    #[diesel(sql_type = BigInt)]
    proxies: i64,
}

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(640, 480, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

fn proxy_dir(lib: &Library, hash: &str) -> PathBuf {
    lib.proxies.join(lib.config.to_string()).join(&hash[..2]).join(hash)
}

#[tokio::test]
async fn first_crawl_ingests_media_with_metadata_and_proxies_and_queues_burst_detection() {
    let lib = library().await;
    lib.write("2019/IMG_0001.JPG", &photo(1));
    lib.write("2019/screenshot.png", &fixtures::png(300, 200, 2));
    lib.write("notes.txt", b"not media");
    lib.write("2019/fake.jpg", b"I only look like a photo");
    let result = lib.crawl().await;
    assert_eq!(result["ingested"], 2, "{result}");
    assert_eq!(result["unsupported"], 1);
    assert_eq!(result["skipped"], 1, "the fake .jpg is skipped by its content");
    assert_eq!(result["soft_deleted"], 0);

    let assets = lib.active().await;
    assert_eq!(assets.len(), 2);
    let jpeg = &assets[0];
    assert_eq!(jpeg.display_path, "2019/IMG_0001.JPG");
    assert_eq!(
        (jpeg.captured_at_source.as_str(), jpeg.width, jpeg.camera_model.as_deref()),
        ("exif_original", Some(640), Some("Test Camera"))
    );
    assert_eq!(jpeg.proxies, 3, "preview, thumbnail, blurhash");
    let dir = proxy_dir(&lib, &jpeg.content_hash);
    assert!(dir.join("preview.jpg").is_file() && dir.join("thumbnail.jpg").is_file());
    assert_eq!(image::image_dimensions(dir.join("thumbnail.jpg")).unwrap(), (300, 225));
    let png = &assets[1];
    assert_eq!(png.captured_at_source, "file_mtime", "no EXIF: the file time");
    let on_this_day =
        lib.count("SELECT count(*) AS n FROM media_assets WHERE capture_month = 7 AND capture_day = 4").await;
    assert_eq!(on_this_day, 1);
    let bursts =
        lib.count("SELECT count(*) AS n FROM work_items WHERE kind = 'burst_detection' AND status = 'queued'").await;
    assert_eq!(bursts, 1);
}

#[tokio::test]
async fn a_recrawl_reads_no_unchanged_file() {
    let lib = library().await;
    for i in 0..5 {
        lib.write(&format!("a/{i}.jpg"), &photo(i));
    }
    let first = lib.crawl().await;
    assert_eq!(first["ingested"], 5);
    assert!(first["bytes_hashed"].as_u64().unwrap() > 0);
    let second = lib.crawl().await;
    assert_eq!((second["unchanged"].as_u64(), second["bytes_hashed"].as_u64()), (Some(5), Some(0)), "{second}");
    assert_eq!(second["ingested"], 0);
    assert_eq!(lib.active().await.len(), 5);
}

#[tokio::test]
async fn a_move_keeps_the_asset_and_its_proxies() {
    let lib = library().await;
    let old = lib.write("old/IMG.jpg", &photo(1));
    lib.crawl().await;
    let before = lib.active().await;
    std::fs::create_dir_all(lib.root.join("new")).unwrap();
    std::fs::rename(&old, lib.root.join("new/IMG.jpg")).unwrap();
    let result = lib.crawl().await;
    assert_eq!(
        (result["moved"].as_u64(), result["ingested"].as_u64(), result["soft_deleted"].as_u64()),
        (Some(1), Some(0), Some(0))
    );
    let after = lib.active().await;
    assert_eq!(after.len(), 1);
    assert_eq!((after[0].id, after[0].display_path.as_str()), (before[0].id, "new/IMG.jpg"));
    assert_eq!(after[0].proxies, 3);
}

#[tokio::test]
async fn a_copy_is_one_asset_with_the_extra_path_recorded() {
    let lib = library().await;
    lib.write("a/IMG.jpg", &photo(1));
    lib.write("b/IMG copy.jpg", &photo(1));
    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["copies"].as_u64()), (Some(1), Some(1)), "{result}");
    assert_eq!(lib.active().await.len(), 1);
    assert_eq!(lib.count("SELECT count(*) AS n FROM asset_extra_paths").await, 1);
    // Unchanged on the next crawl, copy included; and when the copy goes, its record goes.
    let again = lib.crawl().await;
    assert_eq!((again["unchanged"].as_u64(), again["bytes_hashed"].as_u64()), (Some(2), Some(0)));
    std::fs::remove_file(lib.root.join("b/IMG copy.jpg")).unwrap();
    lib.crawl().await;
    assert_eq!(lib.count("SELECT count(*) AS n FROM asset_extra_paths").await, 0);
    let active = lib.active().await;
    assert_eq!((active.len(), active[0].display_path.as_str()), (1, "a/IMG.jpg"));
}

#[tokio::test]
async fn when_the_asset_path_goes_but_a_copy_stays_the_asset_moves_to_the_copy() {
    let lib = library().await;
    // One at a time, so "a" is the asset's own path and "b" its copy.
    lib.write("a/IMG.jpg", &photo(1));
    lib.write("b/IMG.jpg", &photo(1));
    let item = lib.item(serde_json::json!({})).await;
    lib.run_in(&lib.handler_with(1), item, CancellationToken::new()).await.unwrap();
    let id = lib.active().await[0].id;
    assert_eq!(lib.active().await[0].display_path, "a/IMG.jpg");
    std::fs::remove_file(lib.root.join("a/IMG.jpg")).unwrap();
    let result = lib.crawl().await;
    assert_eq!((result["soft_deleted"].as_u64(), result["moved"].as_u64()), (Some(0), Some(1)), "{result}");
    let active = lib.active().await;
    assert_eq!((active.len(), active[0].id, active[0].display_path.as_str()), (1, id, "b/IMG.jpg"));
    assert_eq!(lib.count("SELECT count(*) AS n FROM asset_extra_paths").await, 0);
}

#[tokio::test]
async fn a_deleted_file_is_soft_deleted_and_revived_when_it_comes_back() {
    let lib = library().await;
    lib.write("keep.jpg", &photo(1));
    let gone = lib.write("gone.jpg", &photo(2));
    lib.crawl().await;
    let id = lib.active().await.into_iter().find(|a| a.display_path == "gone.jpg").unwrap().id;
    let content = std::fs::read(&gone).unwrap();
    std::fs::remove_file(&gone).unwrap();
    let result = lib.crawl().await;
    assert_eq!(result["soft_deleted"], 1);
    assert!(lib.assets().await.iter().any(|a| a.id == id && a.is_soft_deleted));
    lib.write("back/gone.jpg", &content);
    let result = lib.crawl().await;
    assert_eq!(result["revived"], 1);
    let revived = lib.active().await.into_iter().find(|a| a.id == id).expect("same asset, active again");
    assert_eq!(revived.display_path, "back/gone.jpg");
}

#[tokio::test]
async fn changed_content_at_a_known_path_replaces_the_asset() {
    let lib = library().await;
    let path = lib.write("IMG.jpg", &photo(1));
    lib.crawl().await;
    let old = lib.active().await[0].clone();
    std::fs::write(&path, photo(2)).unwrap();
    let result = lib.crawl().await;
    assert_eq!(result["ingested"], 1);
    let assets = lib.assets().await;
    assert_eq!(assets.len(), 2);
    assert!(assets.iter().any(|a| a.id == old.id && a.is_soft_deleted));
    let new = lib.active().await;
    assert_eq!((new.len(), new[0].display_path.as_str()), (1, "IMG.jpg"));
    assert_ne!(new[0].content_hash, old.content_hash);
}

#[tokio::test]
async fn a_missing_or_emptied_root_is_refused_and_nothing_is_soft_deleted() {
    let lib = library().await;
    lib.write("IMG.jpg", &photo(1));
    lib.crawl().await;
    let moved_away = lib.root.with_file_name("unmounted");
    std::fs::rename(&lib.root, &moved_away).unwrap();
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable && err.message.contains("is the share mounted"), "{err:?}");
    // An empty mount point looks the same.
    std::fs::create_dir_all(&lib.root).unwrap();
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable && err.message.contains("holds no photos or videos"), "{err:?}");
    assert_eq!(lib.active().await.len(), 1, "nothing soft-deleted");
}

/// The proxy volume not mounted while the catalogue has proxies of the config: the proxy root missing (the crawl
/// would make it on the system disk) or an empty mount point. The crawl is refused before it reads or writes
/// anything, saying so, and once the volume is back it crawls what came meanwhile. A config that never had
/// proxies crawls into a proxy root not made yet, as the first crawl here does.
#[tokio::test]
async fn a_proxy_volume_that_is_not_mounted_is_refused_and_nothing_is_written_beside_it() {
    let lib = library().await;
    lib.write("IMG.jpg", &photo(1));
    lib.crawl().await;
    let volume = lib.proxies.with_file_name("proxy-volume");
    std::fs::rename(&lib.proxies, &volume).unwrap();
    lib.write("NEW.jpg", &photo(2));
    for mount_point_left in [false, true] {
        if mount_point_left {
            std::fs::create_dir_all(&lib.proxies).unwrap();
        }
        let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
        assert!(err.retryable && err.message.contains("the proxy volume is not mounted"), "{err:?}");
        let written = std::fs::read_dir(&lib.proxies).map(|d| d.count()).unwrap_or(0);
        assert_eq!((lib.proxies.exists(), written), (mount_point_left, 0), "nothing made or written beside it");
    }
    assert_eq!(lib.active().await.len(), 1, "nothing ingested meanwhile");
    std::fs::remove_dir(&lib.proxies).unwrap();
    std::fs::rename(&volume, &lib.proxies).unwrap();
    let result = lib.crawl().await;
    assert_eq!(result["ingested"], 1, "{result}");
}

/// Proxies to be made again elsewhere (the proxy root moved on purpose, its old files left behind): once the
/// active assets' proxy rows are gone, as `regenerate` removes them, a crawl runs under the new root, though a
/// soft-deleted asset keeps its rows (and its old files) until the purge. It was refused for those rows.
#[tokio::test]
async fn a_soft_deleted_assets_proxies_do_not_hold_up_a_crawl_after_regenerate() {
    let lib = library().await;
    lib.write("a/1.jpg", &photo(1));
    lib.write("a/2.jpg", &photo(2));
    lib.crawl().await;
    std::fs::remove_file(lib.root.join("a/2.jpg")).unwrap();
    assert_eq!(lib.crawl().await["soft_deleted"], 1);
    std::fs::rename(&lib.proxies, lib.proxies.with_file_name("old-proxy-root")).unwrap();
    let regenerate =
        "DELETE FROM proxy_files WHERE asset_id IN (SELECT id FROM media_assets WHERE NOT is_soft_deleted)";
    diesel_async::SimpleAsyncConnection::batch_execute(&mut lib.conn().await, regenerate).await.unwrap();
    // Not refused for the soft-deleted asset's rows: the crawl runs.
    let result = lib.crawl().await;
    assert_eq!((result["found"].as_u64(), result["soft_deleted"].as_u64()), (Some(1), Some(0)), "{result}");
}

#[tokio::test]
async fn mass_deletion_is_refused_until_confirmed() {
    let lib = library().await;
    let small = fixtures::jpeg(16, 16, 0, false, &FixtureExif::default());
    for i in 0..120u32 {
        let mut content = small.clone();
        content.extend_from_slice(&i.to_le_bytes()); // distinct content, still a valid JPEG
        lib.write(&format!("lib/{i:03}.jpg"), &content);
    }
    let result = lib.crawl().await;
    assert_eq!(result["ingested"], 120, "{result}");
    for i in 0..110 {
        std::fs::remove_file(lib.root.join(format!("lib/{i:03}.jpg"))).unwrap();
    }
    let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable && err.message.contains("allow_mass_deletion"), "{err:?}");
    assert_eq!(lib.active().await.len(), 120);
    // A confirmation misspelt, mistyped, or given as a list is no confirmation: refused, nothing deleted. (A
    // misspelt field is tried again: it may be a newer version's.)
    for (payload, retried) in [
        (serde_json::json!({"allow_mass_delete": true}), true),
        (serde_json::json!({"allow_mass_deletion": "true"}), false),
        (serde_json::json!([true, true]), false),
    ] {
        let err = lib.crawl_with(payload.clone(), CancellationToken::new()).await.unwrap_err();
        assert!(err.retryable == retried && err.message.contains("payload of a crawl"), "{payload}: {err:?}");
        assert_eq!(lib.active().await.len(), 120, "{payload}");
    }
    let result =
        lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), CancellationToken::new()).await.unwrap();
    assert_eq!(result["soft_deleted"], 110);
}

#[tokio::test]
async fn links_are_never_followed_and_loops_do_not_hang() {
    let lib = library().await;
    let outside = lib.root.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.jpg"), photo(9)).unwrap();
    lib.write("in/IMG.jpg", &photo(1));
    std::os::unix::fs::symlink(&outside, lib.root.join("in/escape")).unwrap();
    std::os::unix::fs::symlink(lib.root.join("in"), lib.root.join("in/loop")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.jpg"), lib.root.join("in/linked.jpg")).unwrap();
    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["links_skipped"].as_u64()), (Some(1), Some(3)), "{result}");
    assert_eq!(lib.active().await[0].display_path, "in/IMG.jpg");
}

#[tokio::test]
async fn system_folders_hidden_files_and_empty_files_are_passed_over() {
    let lib = library().await;
    lib.write("@eaDir/IMG.jpg/SYNOPHOTO_THUMB_XL.jpg", &photo(1));
    lib.write("#recycle/old.jpg", &photo(2));
    lib.write(".Trash-1000/files/x.jpg", &photo(3));
    lib.write(".hidden.jpg", &photo(4));
    lib.write("empty.jpg", b"");
    lib.write("real.jpg", &photo(5));
    let result = lib.crawl().await;
    assert_eq!(
        (result["ingested"].as_u64(), result["skipped"].as_u64(), result["failed"].as_u64()),
        (Some(1), Some(1), Some(0)),
        "{result}"
    );
    assert_eq!(lib.active().await[0].display_path, "real.jpg");
}

#[tokio::test]
async fn a_non_utf8_name_is_kept_byte_for_byte() {
    let lib = library().await;
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.jpg");
    std::fs::write(lib.root.join(name), photo(1)).unwrap();
    lib.crawl().await;
    let asset = &lib.active().await[0];
    assert_eq!(asset.file_path, b"caf\xe9.jpg");
    assert_eq!(asset.display_path, "caf\u{fffd}.jpg");
    let again = lib.crawl().await;
    assert_eq!(again["unchanged"], 1, "found again by its exact bytes");
}

#[tokio::test]
async fn a_damaged_file_is_recorded_and_the_crawl_goes_on() {
    let lib = library().await;
    let good = photo(1);
    lib.write("good.jpg", &good);
    lib.write("cut.jpg", &photo(2)[..2000]);
    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(1), Some(1)), "{result}");
    let failure = &result["failures"][0];
    assert_eq!(failure["path"], "cut.jpg");
    let reason = failure["reason"].as_str().unwrap();
    assert!(reason.contains("damaged"), "{failure}");
    // The reason names the file where the operator finds it.
    assert!(reason.starts_with(&lib.root.join("cut.jpg").display().to_string()), "{failure}");
    // Its proxies' folder, made before its decoder failed, is not left behind empty.
    let cut = almanac_media::hash_bytes(&photo(2)[..2000]).hash.as_hex().to_owned();
    assert!(!proxy_dir(&lib, &cut).exists(), "no folder left for the proxies not made");
    assert!(proxy_dir(&lib, &cut).parent().unwrap().parent().unwrap().is_dir());
}

#[tokio::test]
async fn a_rotated_photo_gets_upright_proxies() {
    let lib = library().await;
    let exif = FixtureExif { orientation: Some(6), ..FixtureExif::camera("2020:02:02 10:00:00", "+01:00") };
    lib.write("rotated.jpg", &fixtures::jpeg(640, 480, 3, false, &exif));
    lib.crawl().await;
    let asset = &lib.active().await[0];
    assert_eq!(asset.orientation, Some(90));
    let dir = proxy_dir(&lib, &asset.content_hash);
    assert_eq!(image::image_dimensions(dir.join("preview.jpg")).unwrap(), (480, 640));
}

#[tokio::test]
async fn live_photo_halves_pair_and_a_near_miss_does_not() {
    if !fixtures::have_ffmpeg() {
        panic!("ffmpeg is required (apt-get install -y ffmpeg)");
    }
    let lib = library().await;
    let exif = FixtureExif::camera("2021:06:01 10:00:00", "+00:00");
    lib.write("live/IMG_0001.JPG", &fixtures::jpeg(320, 240, 1, false, &exif));
    fixtures::video(&lib.root.join("live/IMG_0001.MOV"), 1.0, 320, 240, "2021-06-01T10:00:02Z");
    lib.write("live/IMG_0002.JPG", &fixtures::jpeg(320, 240, 2, false, &exif));
    fixtures::video(&lib.root.join("live/IMG_0002.MOV"), 1.0, 320, 240, "2021-06-01T11:00:00Z");
    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["live_photos_paired"].as_u64()), (Some(4), Some(1)), "{result}");
    let assets = lib.active().await;
    let by = |p: &str| assets.iter().find(|a| a.display_path == p).unwrap().clone();
    assert_eq!(by("live/IMG_0001.JPG").paired_asset_id, Some(by("live/IMG_0001.MOV").id));
    assert_eq!(by("live/IMG_0001.MOV").paired_asset_id, Some(by("live/IMG_0001.JPG").id));
    assert_eq!(by("live/IMG_0002.JPG").paired_asset_id, None);
    let video = by("live/IMG_0001.MOV");
    assert_eq!(
        (video.media_type.as_str(), video.captured_at_source.as_str(), video.proxies),
        ("video", "container", 2)
    );
    let dir = proxy_dir(&lib, &video.content_hash);
    assert!(dir.join("poster.jpg").is_file() && dir.join("web.mp4").is_file());
}

#[tokio::test]
async fn a_cancelled_crawl_soft_deletes_nothing_and_stops_ffmpeg() {
    let lib = library().await;
    let gone = lib.write("a-gone.jpg", &photo(1));
    lib.crawl().await;
    std::fs::remove_file(gone).unwrap();
    fixtures::video(&lib.root.join("b-long.mp4"), 30.0, 1280, 720, "2021-06-01T10:00:00Z");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        trigger.cancel();
    });
    let err = lib.crawl_with(serde_json::json!({}), cancel).await.unwrap_err();
    assert!(err.message.contains("cancelled"), "{err:?}");
    assert_eq!(lib.active().await.len(), 1, "the vanished file is not soft-deleted by a cancelled crawl");
    let survivors = fixtures::processes_holding_open_beneath(&lib.proxies);
    assert!(survivors.is_empty(), "ffmpeg still running: {survivors:?}");
}

/// A problem that stops the crawl (here the catalogue refusing its first file) starts no other file, although the
/// walk has handed over the whole folder by then: the files after it are neither read nor ingested.
#[tokio::test]
async fn after_a_problem_that_stops_the_crawl_no_other_file_is_started() {
    let lib = library().await;
    for (seed, name) in [(1, "a.jpg"), (2, "b.jpg"), (3, "c.jpg"), (4, "d.jpg")] {
        lib.write(name, &photo(seed));
    }
    let mut conn = lib.conn().await;
    sql_query(
        "CREATE FUNCTION refuse_a() RETURNS trigger LANGUAGE plpgsql
           AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // `a.jpg` as bytes: the first file of the walk.
    sql_query(
        "CREATE TRIGGER refuse_a BEFORE INSERT ON media_assets FOR EACH ROW
           WHEN (NEW.file_path = '\\x612e6a7067'::bytea) EXECUTE FUNCTION refuse_a()",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let item = lib.item(serde_json::json!({})).await;
    let err = lib.run_in(&lib.handler_with(1), item, CancellationToken::new()).await.unwrap_err();
    assert!(err.message.contains("refused by the test"), "the crawl stops with the catalogue's error: {err:?}");
    assert_eq!(lib.count("SELECT count(*) AS n FROM media_assets").await, 0, "a file after a.jpg was ingested");
}

#[tokio::test]
async fn a_crawl_of_a_missing_config_is_a_permanent_error() {
    let lib = library().await;
    let mut item = lib.item(serde_json::json!({})).await;
    item.scope = Scope::Config(StorageConfigId::new());
    let err = lib.run_in(&lib.handler(), item, CancellationToken::new()).await.unwrap_err();
    assert!(!err.retryable && err.message.contains("does not exist"));
    let _ = Path::new("");
}

/// Whether an ffmpeg of this test's crawl is running: one started by this process that writes under `proxies`
/// (this test's own proxy root: it holds a folder there open, through which it is given its output). Under
/// `cargo test` the tests of this file share one process, so a tool of another test's crawl must not count: it could
/// run before this crawl's walk has listed anything.
fn a_tool_of_this_crawl_runs(proxies: &std::path::Path) -> bool {
    let me = std::process::id().to_string();
    fixtures::processes_holding_open_beneath(proxies).into_iter().any(|pid| {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // `pid (comm) state ppid …`
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { return false };
        let comm = &stat[open + 1..close];
        let mut rest = stat[close + 1..].split_whitespace();
        let (state, parent) = (rest.next(), rest.next());
        comm == "ffmpeg" && state != Some("Z") && parent == Some(me.as_str())
    })
}

#[tokio::test]
async fn a_file_that_vanishes_mid_crawl_is_passed_over() {
    let lib = library().await;
    // One file at a time: the video is processed first (walk order) and takes seconds, long after the walk
    // has listed the photo; the photo is deleted meanwhile.
    fixtures::video(&lib.root.join("a.mp4"), 20.0, 640, 480, "2021-06-01T10:00:00Z");
    let photo_path = lib.write("b.jpg", &photo(1));
    let item = lib.item(serde_json::json!({})).await;
    let handler = lib.handler_with(1);
    let crawl = lib.run_in(&handler, item, CancellationToken::new());
    let delete = async {
        // The event: a tool of this crawl at work on the video. The walk listed both files before the first
        // was processed, so the photo is listed; it is processed only after the video.
        let deadline = almanac_testdb::Deadline::after(Duration::from_secs(10));
        while !a_tool_of_this_crawl_runs(&lib.proxies) {
            deadline.check("the crawl to run ffmpeg on the video");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        std::fs::remove_file(&photo_path).unwrap();
    };
    let (result, ()) = tokio::join!(crawl, delete);
    let result = result.unwrap().unwrap();
    assert_eq!((result["found"].as_u64(), result["ingested"].as_u64()), (Some(2), Some(1)), "{result}");
    assert_eq!((result["skipped"].as_u64(), result["failed"].as_u64()), (Some(1), Some(0)), "{result}");
    assert_eq!(lib.active().await.len(), 1);
}

#[tokio::test]
async fn deleted_proxies_are_made_again_by_the_next_crawl() {
    let lib = library().await;
    lib.write("keep.jpg", &photo(1));
    lib.write("redo.jpg", &photo(2));
    lib.crawl().await;
    let redo = lib.active().await.into_iter().find(|a| a.display_path == "redo.jpg").unwrap();
    let deletion = almanac_handlers::ProxyDeletionHandler::new(lib.store.clone(), lib.proxies.clone());
    let ids = vec![AssetId::from_uuid(redo.id)];
    let args = ProxyDeletionArgs { asset_ids: ids, proxy_types: Some(vec![ProxyType::Preview]) };
    let item = lib.enqueue(&args.into_item(Scope::Config(lib.config)).unwrap()).await;
    lib.run_in(&deletion, item, CancellationToken::new()).await.unwrap();
    let preview = proxy_dir(&lib, &redo.content_hash).join("preview.jpg");
    assert!(!preview.exists());

    let result = lib.crawl().await;
    assert_eq!((result["proxies_regenerated"].as_u64(), result["unchanged"].as_u64()), (Some(1), Some(1)), "{result}");
    assert!(preview.is_file(), "the preview is back");
    let again = lib.active().await.into_iter().find(|a| a.display_path == "redo.jpg").unwrap();
    assert_eq!((again.id, again.proxies), (redo.id, 3), "same asset, all three proxies");
    let next = lib.crawl().await;
    assert_eq!((next["unchanged"].as_u64(), next["bytes_hashed"].as_u64()), (Some(2), Some(0)));
}

#[tokio::test]
async fn an_asset_whose_file_vanished_while_its_copy_changed_content_is_soft_deleted() {
    let lib = library().await;
    // The original first, then its copy: crawled together, either could become the asset's own path (files
    // are processed a few at a time), and this test is about the original's path vanishing.
    lib.write("IMG.jpg", &photo(1));
    assert_eq!(lib.crawl().await["ingested"].as_u64(), Some(1));
    lib.write("backup/IMG.jpg", &photo(1));
    let first = lib.crawl().await;
    assert_eq!(first["copies"].as_u64(), Some(1), "{first}");
    // The original goes; the copy's path now holds another photo. Nothing holds the first photo any more.
    std::fs::remove_file(lib.root.join("IMG.jpg")).unwrap();
    lib.write("backup/IMG.jpg", &photo(2));
    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["soft_deleted"].as_u64()), (Some(1), Some(1)), "{result}");
    let active = lib.active().await;
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].display_path, "backup/IMG.jpg");
    assert_eq!(active[0].content_hash, almanac_media::hash_bytes(&photo(2)).hash.as_hex());
}

impl Library {
    /// The extra paths (copies), as (the asset's own display path, the copy's display path), sorted.
    async fn copies(&self) -> Vec<(String, String)> {
        #[derive(diesel::QueryableByName)]
        struct Copy {
            #[diesel(sql_type = Text)]
            own: String,
            #[diesel(sql_type = Text)]
            copy: String,
        }
        let rows: Vec<Copy> = sql_query(
            "SELECT a.display_path AS own, e.display_path AS copy
               FROM asset_extra_paths e JOIN media_assets a ON a.id = e.asset_id ORDER BY 1, 2",
        )
        .load(&mut self.conn().await)
        .await
        .unwrap();
        rows.into_iter().map(|r| (r.own, r.copy)).collect()
    }
}

/// A's only path is overwritten with B's content: the path is B's copy now, and A, whose content is nowhere
/// any more, is soft-deleted in the same write (it never keeps a path that no longer holds its content).
#[tokio::test]
async fn an_asset_s_only_path_overwritten_with_another_asset_s_content_becomes_its_copy_and_the_asset_goes() {
    let lib = library().await;
    let a_path = lib.write("A.jpg", &photo(1));
    lib.write("B.jpg", &photo(2));
    lib.crawl().await;
    let before = lib.active().await;
    let (a, b) = (before[0].id, before[1].id);
    assert_eq!((before[0].display_path.as_str(), before[1].display_path.as_str()), ("A.jpg", "B.jpg"));
    std::fs::write(&a_path, photo(2)).unwrap();
    let result = lib.crawl().await;
    assert_eq!((result["copies"].as_u64(), result["ingested"].as_u64()), (Some(1), Some(0)), "{result}");
    let active = lib.active().await;
    assert_eq!(active.iter().map(|r| (r.id, r.display_path.as_str())).collect::<Vec<_>>(), [(b, "B.jpg")]);
    assert!(lib.assets().await.iter().any(|r| r.id == a && r.is_soft_deleted), "A is soft-deleted");
    assert_eq!(lib.copies().await, [("B.jpg".to_owned(), "A.jpg".to_owned())]);
    let again = lib.crawl().await;
    assert_eq!((again["unchanged"].as_u64(), again["bytes_hashed"].as_u64()), (Some(2), Some(0)), "{again}");
    assert_eq!(lib.active().await.len(), 1);
}

/// A's own path is overwritten with B's content while a copy of A remains: A moves to its copy (same asset,
/// its copy no longer recorded as an extra path) and the overwritten path is B's copy.
#[tokio::test]
async fn an_asset_s_own_path_overwritten_with_another_asset_s_content_moves_it_to_its_copy() {
    let lib = library().await;
    // One at a time, so "A.jpg" is A's own path and "copy/A.jpg" its copy.
    let a_path = lib.write("A.jpg", &photo(1));
    lib.write("B.jpg", &photo(2));
    lib.crawl().await;
    lib.write("copy/A.jpg", &photo(1));
    assert_eq!(lib.crawl().await["copies"].as_u64(), Some(1));
    let a = lib.active().await.into_iter().find(|r| r.display_path == "A.jpg").unwrap().id;
    std::fs::write(&a_path, photo(2)).unwrap();
    let result = lib.crawl().await;
    assert_eq!((result["soft_deleted"].as_u64(), result["ingested"].as_u64()), (Some(0), Some(0)), "{result}");
    let active: Vec<_> = lib.active().await.into_iter().map(|r| (r.display_path, r.id == a)).collect();
    assert_eq!(active, [("B.jpg".to_owned(), false), ("copy/A.jpg".to_owned(), true)], "A lives on at its copy");
    assert_eq!(lib.copies().await, [("B.jpg".to_owned(), "A.jpg".to_owned())], "A's copy is its own path now");
    let again = lib.crawl().await;
    assert_eq!((again["unchanged"].as_u64(), again["bytes_hashed"].as_u64()), (Some(3), Some(0)), "{again}");
    assert_eq!(lib.active().await.len(), 2);
}

/// A's own path vanished, and its copy's path now holds B's content: the copy is B's (kept), not a survivor
/// of A; A, whose content is nowhere, is soft-deleted, and B keeps its content and its path.
#[tokio::test]
async fn a_vanished_asset_is_not_moved_onto_a_copy_that_became_another_asset_s() {
    let lib = library().await;
    lib.write("A.jpg", &photo(1));
    lib.write("B.jpg", &photo(2));
    lib.crawl().await;
    let backup = lib.write("backup/A.jpg", &photo(1));
    assert_eq!(lib.crawl().await["copies"].as_u64(), Some(1));
    let before = lib.active().await;
    let (a, b) = (before[0].id, before[1].id);
    std::fs::remove_file(lib.root.join("A.jpg")).unwrap();
    std::fs::write(&backup, photo(2)).unwrap();
    let result = lib.crawl().await;
    assert_eq!((result["soft_deleted"].as_u64(), result["moved"].as_u64()), (Some(1), Some(0)), "{result}");
    let active = lib.active().await;
    assert_eq!(active.iter().map(|r| (r.id, r.display_path.as_str())).collect::<Vec<_>>(), [(b, "B.jpg")]);
    assert_eq!(active[0].content_hash, almanac_media::hash_bytes(&photo(2)).hash.as_hex());
    assert!(lib.assets().await.iter().any(|r| r.id == a && r.is_soft_deleted));
    assert_eq!(lib.copies().await, [("B.jpg".to_owned(), "backup/A.jpg".to_owned())], "B's copy is kept");
}

/// Two files swap places (P holds Y's content, R holds X's, as `mv P tmp; mv R P; mv tmp R` leaves them): both
/// assets stay active, each at the path holding its content, and no path is on two assets, whether the files
/// are written one at a time or side by side (each then first placed as a copy of the other's asset). A crawl
/// afterwards changes nothing.
#[tokio::test]
async fn two_swapped_files_keep_both_assets_each_at_the_path_holding_its_content() {
    for at_once in [1, 4] {
        let lib = library().await;
        let (x_content, y_content) = (photo(1), [photo(2), vec![0; 64]].concat());
        assert_ne!(x_content.len(), y_content.len(), "sizes tell the swapped files changed");
        let (p, r) = (lib.write("P.jpg", &x_content), lib.write("R.jpg", &y_content));
        lib.crawl().await;
        let before = lib.active().await;
        let (x, y) = (before[0].id, before[1].id);
        std::fs::rename(&p, lib.root.join("tmp")).unwrap();
        std::fs::rename(&r, &p).unwrap();
        std::fs::rename(lib.root.join("tmp"), &r).unwrap();

        let item = lib.item(serde_json::json!({})).await;
        let result = lib.run_in(&lib.handler_with(at_once), item, CancellationToken::new()).await.unwrap().unwrap();
        assert_eq!((result["soft_deleted"].as_u64(), result["ingested"].as_u64()), (Some(0), Some(0)), "{result}");
        let active: Vec<_> = lib.active().await.into_iter().map(|a| (a.display_path, a.id)).collect();
        assert_eq!(active, [("P.jpg".to_owned(), y), ("R.jpg".to_owned(), x)], "{at_once} at once: {result}");
        assert!(lib.copies().await.is_empty(), "no path on two assets");

        let again = lib.crawl().await;
        assert_eq!((again["unchanged"].as_u64(), again["bytes_hashed"].as_u64()), (Some(2), Some(0)), "{again}");
        let still: Vec<_> = lib.active().await.into_iter().map(|a| (a.display_path, a.id)).collect();
        assert_eq!(still, active);
        assert!(lib.copies().await.is_empty());
    }
}

/// A new file moved over an asset's own path while the asset has a backup copy (`mv new.jpg IMG.jpg`): the
/// asset moves to its copy, whose content it is, and the new content is a new asset at the path; the same when
/// the new file was already an asset of its own. A crawl afterwards changes nothing.
#[tokio::test]
async fn a_file_moved_over_an_asset_with_a_copy_moves_the_asset_to_its_copy() {
    for new_crawled_first in [false, true] {
        let lib = library().await;
        let img = lib.write("IMG.jpg", &photo(1));
        lib.crawl().await;
        lib.write("backup/IMG.jpg", &photo(1));
        assert_eq!(lib.crawl().await["copies"].as_u64(), Some(1));
        let x = lib.active().await[0].id;
        let new = lib.write("new.jpg", &photo(3));
        if new_crawled_first {
            assert_eq!(lib.crawl().await["ingested"].as_u64(), Some(1));
        }
        std::fs::rename(&new, &img).unwrap();

        let result = lib.crawl().await;
        assert_eq!(result["soft_deleted"].as_u64(), Some(0), "{result}");
        let active = lib.active().await;
        let paths: Vec<_> = active.iter().map(|a| (a.display_path.as_str(), a.id == x)).collect();
        assert_eq!(paths, [("IMG.jpg", false), ("backup/IMG.jpg", true)], "crawled first: {new_crawled_first}");
        assert_eq!(active[0].content_hash, almanac_media::hash_bytes(&photo(3)).hash.as_hex());
        assert!(lib.copies().await.is_empty(), "the copy is the asset's own path now");

        let again = lib.crawl().await;
        assert_eq!((again["unchanged"].as_u64(), again["bytes_hashed"].as_u64()), (Some(2), Some(0)), "{again}");
        assert_eq!(lib.active().await.iter().map(|a| a.id).collect::<Vec<_>>(), [active[0].id, x]);
    }
}

/// A re-crawl of folders holding more known files than a page (the first page of each folder is 1,000, later
/// ones 10,000): every file is found unchanged and none is read, across each page boundary and each folder's
/// first one. Catalogued as a previous crawl would have left them (the files' size and mtime on their rows,
/// every proxy present), so that no image needs decoding.
#[tokio::test]
async fn a_recrawl_across_pages_of_known_files_finds_every_file_unchanged() {
    use diesel_async::SimpleAsyncConnection;
    let lib = library().await;
    let fixed = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    let counts = [("a", 1_000), ("b", 2_501), ("c", 1)];
    for (folder, n) in counts {
        for i in 0..n {
            let file = std::fs::File::create(lib.write(&format!("{folder}/{i:05}.jpg"), b"")).unwrap();
            file.set_len(64).unwrap();
            file.set_modified(fixed).unwrap();
        }
    }
    let mut conn = lib.conn().await;
    for (folder, n) in counts {
        conn.batch_execute(&format!(
            "INSERT INTO media_assets (id, storage_config_id, file_path, display_path, content_hash, size_bytes,
                 file_modified_at, media_type, captured_at, captured_at_source, capture_month, capture_day)
             SELECT gen_random_uuid(), '{config}', convert_to(p, 'UTF8'), p, md5(p) || md5(p || 'x'), 64,
                    to_timestamp(1600000000), 'image', to_timestamp(1600000000), 'file_mtime', 9, 13
               FROM (SELECT format('{folder}/%s.jpg', lpad(g::text, 5, '0')) AS p
                       FROM generate_series(0, {last}) g) s",
            config = lib.config,
            last = n - 1,
        ))
        .await
        .unwrap();
    }
    let total: u64 = counts.iter().map(|(_, n)| *n as u64).sum();
    let again = lib.crawl().await;
    assert_eq!((again["unchanged"].as_u64(), again["bytes_hashed"].as_u64()), (Some(total), Some(0)), "{again}");
    assert_eq!((again["ingested"].as_u64(), again["soft_deleted"].as_u64()), (Some(0), Some(0)), "{again}");
}
