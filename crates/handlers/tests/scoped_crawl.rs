//! A crawl of the folders a watcher saw change (ADR 0014), on real files and a real catalogue: only those
//! folders are walked and only their known files can vanish, weighed by the mass-deletion guard against the
//! config's whole library; a file the watcher saw closed is read at once; what settles is asked for again in
//! those folders only; a folder outside the root is refused before anything is read.

mod support;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use almanac_domain::ports::DatabaseClock;
use almanac_executor::HandlerError;
use almanac_handlers::{CrawlHandler, CrawlSettings, MassDeletionGuard};
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::PgStore;
use chrono::{DateTime, Utc};
use diesel::sql_query;
use diesel::sql_types::{Jsonb, Nullable, Text, Timestamptz, Uuid};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};
use support::{Library, library};

/// A small JPEG of its own content.
fn photo(seed: u32) -> Vec<u8> {
    let mut content = fixtures::jpeg(16, 16, 0, false, &FixtureExif::default());
    content.extend_from_slice(&seed.to_le_bytes());
    content
}

#[derive(Debug, diesel::QueryableByName)]
struct Active {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    display_path: String,
}

#[derive(Debug, diesel::QueryableByName)]
struct Queued {
    #[diesel(sql_type = Timestamptz)]
    run_after: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    dedup_key: Option<String>,
    #[diesel(sql_type = Jsonb)]
    payload: Value,
}

impl Library {
    /// The active assets, by path.
    async fn active(&self) -> Vec<(String, uuid::Uuid)> {
        let rows: Vec<Active> =
            sql_query("SELECT id, display_path FROM media_assets WHERE NOT is_soft_deleted ORDER BY file_path")
                .load(&mut self.conn().await)
                .await
                .unwrap();
        rows.into_iter().map(|r| (r.display_path, r.id)).collect()
    }

    async fn active_paths(&self) -> Vec<String> {
        self.active().await.into_iter().map(|(p, _)| p).collect()
    }

    /// The crawls of the config waiting in the queue.
    async fn queued_crawls(&self) -> Vec<Queued> {
        sql_query(
            "SELECT run_after, dedup_key, payload FROM work_items
              WHERE kind = 'crawl' AND status = 'queued' AND storage_config_id = $1",
        )
        .bind::<Uuid, _>(self.config.as_uuid())
        .load(&mut self.conn().await)
        .await
        .unwrap()
    }

    /// A crawl of `folders` by `handler`, as a watcher would enqueue it.
    async fn crawl_folders(&self, handler: &CrawlHandler<PgStore>, payload: Value) -> Result<Value, HandlerError> {
        let item = self.item(payload).await;
        self.run_handler(handler, item).await
    }

    /// Files at these paths, each of its own content.
    fn files(&self, paths: impl IntoIterator<Item = String>, seed: u32) {
        for (i, path) in paths.into_iter().enumerate() {
            self.write(&path, &photo(seed + i as u32));
        }
    }
}

fn crawler(lib: &Library, guard: MassDeletionGuard, settle_time: Duration) -> CrawlHandler<PgStore> {
    let settings = CrawlSettings {
        mass_deletion: guard,
        settle_time,
        max_concurrent_files: 2,
        ..CrawlSettings::new(lib.proxies.clone())
    };
    CrawlHandler::new(lib.store.clone(), settings)
}

fn count(result: &Value, key: &str) -> u64 {
    result[key].as_u64().unwrap_or_else(|| panic!("no {key} in {result}"))
}

#[tokio::test]
async fn only_the_listed_folders_are_walked_and_only_their_files_vanish() {
    let lib = library().await;
    lib.files(
        ["in/a.jpg", "in/gone.jpg", "in/deep/d.jpg", "inside.jpg", "out/b.jpg", "out/gone.jpg"].map(String::from),
        1,
    );
    assert_eq!(count(&lib.crawl().await, "ingested"), 6);
    lib.write("in/new.jpg", &photo(50));
    lib.write("in/deep/new.jpg", &photo(51));
    lib.write("out/new.jpg", &photo(52));
    lib.write("in.jpg", &photo(53));
    std::fs::remove_file(lib.root.join("in/gone.jpg")).unwrap();
    std::fs::remove_file(lib.root.join("out/gone.jpg")).unwrap();
    std::fs::remove_file(lib.root.join("inside.jpg")).unwrap();

    let result = lib.crawl_folders(&lib.handler(), json!({"folders": ["in"]})).await.unwrap();
    assert_eq!(
        (count(&result, "found"), count(&result, "ingested"), count(&result, "soft_deleted")),
        (4, 2, 1),
        "in/a, in/new, in/deep/d, in/deep/new found; in/gone soft-deleted: {result}"
    );
    assert_eq!(
        lib.active_paths().await,
        ["in/a.jpg", "in/deep/d.jpg", "in/deep/new.jpg", "in/new.jpg", "inside.jpg", "out/b.jpg", "out/gone.jpg"],
        "nothing outside `in` ingested or soft-deleted (`in.jpg` and `inside.jpg` only share its name's start)"
    );
    // The whole root, later, finds the rest.
    let whole = lib.crawl().await;
    assert_eq!((count(&whole, "ingested"), count(&whole, "soft_deleted")), (2, 2), "{whole}");
}

#[tokio::test]
async fn a_folder_moved_between_two_listed_folders_keeps_its_assets() {
    let lib = library().await;
    lib.files(["trip/1.jpg", "trip/sub/2.jpg", "other/3.jpg"].map(String::from), 1);
    lib.crawl().await;
    let before = lib.active().await;
    std::fs::create_dir_all(lib.root.join("albums")).unwrap();
    std::fs::rename(lib.root.join("trip"), lib.root.join("albums/trip 2019")).unwrap();

    let payload = json!({"folders": ["trip", "albums/trip 2019"]});
    let result = lib.crawl_folders(&lib.handler(), payload).await.unwrap();
    assert_eq!(
        (count(&result, "moved"), count(&result, "ingested"), count(&result, "soft_deleted")),
        (2, 0, 0),
        "{result}"
    );
    let after = lib.active().await;
    let id_of = |rows: &[(String, uuid::Uuid)], path: &str| rows.iter().find(|(p, _)| p == path).map(|(_, id)| *id);
    assert_eq!(id_of(&after, "albums/trip 2019/1.jpg"), id_of(&before, "trip/1.jpg"));
    assert_eq!(id_of(&after, "albums/trip 2019/sub/2.jpg"), id_of(&before, "trip/sub/2.jpg"));
    assert_eq!(after.len(), 3, "{after:?}");
}

#[tokio::test]
async fn a_deleted_folder_is_weighed_against_the_whole_library() {
    let lib = library().await;
    lib.files((0..3).map(|i| format!("album/{i}.jpg")), 100);
    lib.files((0..11).map(|i| format!("big/{i:02}.jpg")), 200);
    lib.files((0..6).map(|i| format!("rest/{i}.jpg")), 300);
    lib.crawl().await;
    // A guard that a count of the folder alone (3 of 3) would trip; 3 of the library's 20 it does not.
    let guard = MassDeletionGuard { min_assets: 3, max_percent: 50 };
    let handler = crawler(&lib, guard, Duration::ZERO);
    std::fs::remove_dir_all(lib.root.join("album")).unwrap();
    let result = lib.crawl_folders(&handler, json!({"folders": ["album"]})).await.unwrap();
    assert_eq!((count(&result, "soft_deleted"), count(&result, "found")), (3, 0), "{result}");
    assert_eq!(lib.active().await.len(), 17);

    // A folder holding most of the library (11 of 17) is refused as a whole root's would be, until confirmed.
    std::fs::remove_dir_all(lib.root.join("big")).unwrap();
    let err = lib.crawl_folders(&handler, json!({"folders": ["big"]})).await.unwrap_err();
    assert!(
        err.retryable && err.message.contains("11 of 17") && err.message.contains("allow_mass_deletion"),
        "{err:?}"
    );
    assert_eq!(lib.active().await.len(), 17, "nothing soft-deleted");
    let confirmed = json!({"folders": ["big"], "allow_mass_deletion": true});
    let result = lib.crawl_folders(&handler, confirmed).await.unwrap();
    assert_eq!(count(&result, "soft_deleted"), 11, "{result}");
    assert_eq!(lib.active_paths().await, (0..6).map(|i| format!("rest/{i}.jpg")).collect::<Vec<_>>());

    // A folder that held every active asset is refused whatever the guard says (6 is below its minimum here),
    // as a whole root found empty is: a share not mounted must never look like a deleted library.
    let lenient = crawler(&lib, MassDeletionGuard { min_assets: 100, max_percent: 100 }, Duration::ZERO);
    std::fs::remove_dir_all(lib.root.join("rest")).unwrap();
    let err = lib.crawl_folders(&lenient, json!({"folders": ["rest"]})).await.unwrap_err();
    assert!(err.retryable && err.message.contains("all 6 active assets"), "{err:?}");
    assert_eq!(lib.active().await.len(), 6, "nothing soft-deleted");
    let confirmed = json!({"folders": ["rest"], "allow_mass_deletion": true});
    let result = lib.crawl_folders(&lenient, confirmed).await.unwrap();
    assert_eq!(count(&result, "soft_deleted"), 6, "{result}");
    assert!(lib.active().await.is_empty());
}

#[tokio::test]
async fn a_folder_whose_parent_is_gone_too_leaves_the_walk_incomplete() {
    let lib = library().await;
    lib.files(["x/y/1.jpg", "x/2.jpg", "z.jpg"].map(String::from), 1);
    lib.crawl().await;
    std::fs::remove_dir_all(lib.root.join("x")).unwrap();
    let result = lib.crawl_folders(&lib.handler(), json!({"folders": ["x/y"]})).await.unwrap();
    assert_eq!(result["unreadable_folders"].as_array().map(Vec::len), Some(1), "{result}");
    assert_eq!((count(&result, "soft_deleted"), lib.active().await.len()), (0, 3), "nothing soft-deleted: {result}");
    // Its parent's crawl, whose parent (the root) is there, finds both gone.
    let result = lib.crawl_folders(&lib.handler(), json!({"folders": ["x"]})).await.unwrap();
    assert_eq!(count(&result, "soft_deleted"), 2, "{result}");
    assert_eq!(lib.active_paths().await, ["z.jpg"]);
}

/// A folder that could not be read keeps what the catalogue knows under it, and only that: a file deleted in
/// another folder of the same crawl is soft-deleted (before, one unreadable folder kept every deletion of the
/// library from being recorded, at every crawl while it stayed so).
#[tokio::test]
async fn a_folder_that_could_not_be_read_keeps_only_what_lies_under_it() {
    let lib = library().await;
    lib.files(["x/y/1.jpg", "x/2.jpg", "w/3.jpg", "w/gone.jpg", "z.jpg"].map(String::from), 1);
    lib.crawl().await;
    std::fs::remove_dir_all(lib.root.join("x")).unwrap();
    std::fs::remove_file(lib.root.join("w/gone.jpg")).unwrap();
    let lenient = crawler(&lib, MassDeletionGuard { min_assets: 100, max_percent: 100 }, Duration::ZERO);
    let result = lib.crawl_folders(&lenient, json!({"folders": ["x/y", "w"]})).await.unwrap();
    assert_eq!(result["unreadable_folders"].as_array().map(Vec::len), Some(1), "{result}");
    assert_eq!(count(&result, "soft_deleted"), 1, "{result}");
    assert_eq!(lib.active_paths().await, ["w/3.jpg", "x/2.jpg", "x/y/1.jpg", "z.jpg"], "x/y's kept, w/gone.jpg gone");
}

/// A photo rewritten in place with its size and mtime put back (`exiftool -P` correcting a date of the same length)
/// looks unchanged by its facts: once a watcher saw it closed as it is, the crawl reads it, and the new date is
/// taken. Before, it was counted unchanged and the catalogue kept the old date and hash for as long as the file
/// stayed so.
#[tokio::test]
async fn a_file_rewritten_with_its_size_and_mtime_put_back_is_read_when_seen_closed() {
    let lib = library().await;
    let handler = crawler(&lib, MassDeletionGuard::default(), Duration::ZERO);
    let dated = |date: &str| fixtures::jpeg(16, 16, 0, false, &FixtureExif::camera(date, "+02:00"));
    let path = lib.write("phone/a.jpg", &dated("2019:07:04 18:30:05"));
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    lib.crawl_folders(&handler, json!({"folders": ["phone"]})).await.unwrap();
    let day = async || lib.count("SELECT capture_day::bigint AS n FROM media_assets WHERE NOT is_soft_deleted").await;
    assert_eq!(day().await, 4);

    let fixed = dated("2019:07:05 18:30:05");
    assert_eq!(fixed.len(), std::fs::metadata(&path).unwrap().len() as usize, "a date of the same length");
    std::fs::write(&path, &fixed).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
    let unseen = lib.crawl_folders(&handler, json!({"folders": ["phone"]})).await.unwrap();
    assert_eq!(day().await, 4, "by its facts alone the file is unchanged: {unseen}");

    let m = std::fs::metadata(&path).unwrap();
    let closed =
        json!({"path": "phone/a.jpg", "size": m.size(), "mtime_ns": m.mtime() * 1_000_000_000 + m.mtime_nsec()});
    let payload = json!({"folders": ["phone"], "closed": [closed]});
    let result = lib.crawl_folders(&handler, payload.clone()).await.unwrap();
    assert_eq!(day().await, 5, "{result}");
    assert_eq!(lib.active_paths().await, ["phone/a.jpg"], "{result}");
    // Seen closed again as it is: read, found to hold what it held, and counted unchanged; nothing written.
    let again = lib.crawl_folders(&handler, payload).await.unwrap();
    assert_eq!((count(&again, "unchanged"), count(&again, "touched")), (1, 0), "{again}");
}

#[tokio::test]
async fn a_closed_file_is_read_at_once_while_the_others_settle_in_their_folder() {
    let lib = library().await;
    let handler = crawler(&lib, MassDeletionGuard::default(), Duration::from_secs(10));
    // All written just now: by age, every one is still being written.
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        lib.write(&format!("phone/{name}.jpg"), &photo(i as u32));
    }
    lib.write("elsewhere/e.jpg", &photo(9));
    let closed = |name: &str, size_delta: u64, ns_delta: i64| {
        let m = std::fs::metadata(lib.root.join(format!("phone/{name}.jpg"))).unwrap();
        let mtime_ns = m.mtime() * 1_000_000_000 + m.mtime_nsec() + ns_delta;
        json!({"path": format!("phone/{name}.jpg"), "size": m.size() + size_delta, "mtime_ns": mtime_ns})
    };
    // `a` as it was closed; `b` not seen closed; `c` closed at another size; `d` at another mtime (1 ns off).
    let payload = json!({"folders": ["phone"], "closed": [closed("a", 0, 0), closed("c", 1, 0), closed("d", 0, 1)]});
    let asked_at = lib.store.db_now().await.unwrap();
    let result = lib.crawl_folders(&handler, payload.clone()).await.unwrap();
    assert_eq!((count(&result, "ingested"), count(&result, "settling")), (1, 3), "{result}");
    assert_eq!(lib.active_paths().await, ["phone/a.jpg"]);

    // Asked for again: those files' folder only, after the settle time, under a key of its own.
    let queued = lib.queued_crawls().await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0].payload["folders"], json!(["phone"]), "{:?}", queued[0]);
    assert!(queued[0].payload.get("closed").is_none(), "{:?}", queued[0]);
    let key = queued[0].dedup_key.clone().unwrap();
    assert!(key.starts_with(&format!("crawl:{}:folders:", lib.config)), "not the whole root's key: {key}");
    assert!(queued[0].run_after >= asked_at + chrono::Duration::seconds(10), "{:?}", queued[0]);
    // Another crawl of the folder that leaves them settling joins it.
    let again = lib.crawl_folders(&handler, payload).await.unwrap();
    assert_eq!(count(&again, "settling"), 3, "{again}");
    assert_eq!(lib.queued_crawls().await.len(), 1);
}

#[tokio::test]
async fn a_folder_or_file_outside_the_root_is_refused_and_nothing_is_written() {
    let lib = library().await;
    lib.write("a/1.jpg", &photo(1));
    for (payload, path, wrong) in [
        (json!({"folders": ["a", "../x"]}), "\"../x\"", "`..` part"),
        (json!({"folders": ["/abs"]}), "\"/abs\"", "is absolute"),
        (
            json!({"folders": ["a"], "closed": [{"path": "a//1.jpg", "size": 1, "mtime_ns": 1}]}),
            "\"a//1.jpg\"",
            "empty part",
        ),
    ] {
        let err = lib.crawl_folders(&lib.handler(), payload.clone()).await.unwrap_err();
        assert!(!err.retryable, "{payload}: {err:?}");
        assert!(err.message.contains(path) && err.message.contains(wrong), "{payload}: {}", err.message);
    }
    let written =
        lib.count("SELECT (SELECT count(*) FROM media_assets) + (SELECT count(*) FROM proxy_files) AS n").await;
    assert_eq!(written, 0);
    let queued = lib.count("SELECT count(*) AS n FROM work_items WHERE status = 'queued'").await;
    assert_eq!(queued, 0, "no follow-up either");
}

#[tokio::test]
async fn nested_folders_are_walked_once() {
    let lib = library().await;
    lib.files(["a/1.jpg", "a/b/2.jpg", "a/b/c/3.jpg", "a b/4.jpg", "c/5.jpg"].map(String::from), 1);
    let payload = json!({"folders": ["a/b/c", "a", "a b", "a/b", "a"]});
    let result = lib.crawl_folders(&lib.handler(), payload).await.unwrap();
    assert_eq!((count(&result, "found"), count(&result, "ingested"), count(&result, "failed")), (4, 4, 0), "{result}");
    assert_eq!(lib.active_paths().await, ["a b/4.jpg", "a/1.jpg", "a/b/2.jpg", "a/b/c/3.jpg"]);
    // The same again: every file found unchanged, once.
    let again = lib.crawl_folders(&lib.handler(), json!({"folders": ["a", "a/b", "a b"]})).await.unwrap();
    assert_eq!((count(&again, "found"), count(&again, "unchanged")), (4, 4), "{again}");
}

/// A file manager moving files across file systems copies them and then deletes the originals, and a watcher
/// may see the two in different windows: the crawl of the originals' folder moves an asset to its copy outside
/// that folder when the copy is still there as it was recorded, as a crawl of the whole root would; an asset
/// whose copy outside is gone, or no longer as recorded, vanishes. A crawl of the whole root afterwards moves
/// and soft-deletes nothing.
#[tokio::test]
async fn an_asset_whose_file_vanished_moves_to_its_copy_outside_the_folders() {
    let lib = library().await;
    lib.files(["P/x.jpg", "P/y.jpg", "P/z.jpg", "Q/other.jpg"].map(String::from), 1);
    lib.crawl().await;
    let (x, other) = (lib.active().await[0].clone(), lib.active().await[3].clone());
    assert_eq!((x.0.as_str(), other.0.as_str()), ("P/x.jpg", "Q/other.jpg"));
    std::fs::create_dir_all(lib.root.join("D")).unwrap();
    for name in ["x", "y", "z"] {
        std::fs::copy(lib.root.join(format!("P/{name}.jpg")), lib.root.join(format!("D/{name}.jpg"))).unwrap();
    }
    let copied = lib.crawl_folders(&lib.handler(), json!({"folders": ["D"]})).await.unwrap();
    assert_eq!(count(&copied, "copies"), 3, "{copied}");
    // Since: y's copy is gone, z's holds other content.
    std::fs::remove_file(lib.root.join("D/y.jpg")).unwrap();
    std::fs::write(lib.root.join("D/z.jpg"), [photo(100), vec![0; 5]].concat()).unwrap();
    std::fs::remove_dir_all(lib.root.join("P")).unwrap();

    let result = lib.crawl_folders(&lib.handler(), json!({"folders": ["P"]})).await.unwrap();
    assert_eq!((count(&result, "moved"), count(&result, "soft_deleted")), (1, 2), "{result}");
    let after = [("D/x.jpg".to_owned(), x.1), other];
    assert_eq!(lib.active().await, after, "x lives on at its copy");
    let whole = lib.crawl().await;
    assert_eq!((count(&whole, "moved"), count(&whole, "soft_deleted")), (0, 0), "{whole}");
    let now: Vec<_> = lib.active().await.into_iter().filter(|(path, _)| path != "D/z.jpg").collect();
    assert_eq!(now, after, "and D/z.jpg, of other content now, a new asset");
}

/// Copies inside the folders were judged by the walk: one it passes over (a NAS recycle bin inside them, recorded
/// before the rule passed it over) is never where a vanished asset moves, even when it is still there as
/// recorded. Only copies outside the folders are looked at on disk, as a crawl of the whole root would see them.
#[tokio::test]
async fn a_copy_inside_the_folders_that_the_walk_passes_over_is_never_where_an_asset_moves() {
    let lib = library().await;
    lib.files(["P/x.jpg", "Q/a.jpg", "Q/b.jpg", "Q/c.jpg", "Q/d.jpg"].map(String::from), 1);
    lib.crawl().await;
    let x = lib.active().await[0].1;
    let bin = lib.root.join("P/#recycle");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(lib.root.join("P/x.jpg"), bin.join("x.jpg")).unwrap();
    // A whole second, so the catalogue's microseconds hold the file's mtime exactly.
    let mtime = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    std::fs::File::options().write(true).open(bin.join("x.jpg")).unwrap().set_modified(mtime).unwrap();
    let size = std::fs::metadata(bin.join("x.jpg")).unwrap().len() as i64;
    sql_query(
        "INSERT INTO asset_extra_paths (storage_config_id, file_path, asset_id, display_path, size_bytes,
                                        file_modified_at)
         VALUES ($1, 'P/#recycle/x.jpg'::bytea, $2, 'P/#recycle/x.jpg', $3, to_timestamp(1700000000))",
    )
    .bind::<Uuid, _>(lib.config.as_uuid())
    .bind::<Uuid, _>(x)
    .bind::<diesel::sql_types::BigInt, _>(size)
    .execute(&mut lib.conn().await)
    .await
    .unwrap();
    std::fs::remove_file(lib.root.join("P/x.jpg")).unwrap();

    let result = lib.crawl_folders(&lib.handler(), json!({"folders": ["P"]})).await.unwrap();
    assert_eq!((count(&result, "moved"), count(&result, "soft_deleted")), (0, 1), "{result}");
    assert!(!lib.active_paths().await.iter().any(|p| p.starts_with("P/")), "x vanished, not moved to the bin");
}

/// A Live Photo's still written over in place (edited and exported again): the write soft-deletes the old still,
/// and the video, paired with it, pairs again with the new one in the same crawl; before, it stayed paired with
/// the soft-deleted still (shown as a memory of its own) until the purge. A crawl of one folder looks for pairs
/// only there: a pair left unformed elsewhere (as an interrupted crawl leaves one) waits for a crawl of its folder.
#[tokio::test]
async fn a_live_photo_s_still_written_over_pairs_again_and_a_folder_s_crawl_pairs_only_there() {
    assert!(fixtures::have_ffmpeg(), "ffmpeg is required (apt-get install -y ffmpeg)");
    let lib = library().await;
    let exif = FixtureExif::camera("2021:06:01 10:00:00", "+00:00");
    // Each video of its own content (one of the same would be a copy of the other).
    for (folder, seed, seconds) in [("live", 1, 1.0), ("other", 9, 1.5), ("live-x", 5, 2.0)] {
        lib.write(&format!("{folder}/IMG_0001.JPG"), &fixtures::jpeg(320, 240, seed, false, &exif));
        let video = lib.root.join(format!("{folder}/IMG_0001.MOV"));
        fixtures::video(&video, seconds, 320, 240, "2021-06-01T10:00:02Z");
    }
    assert_eq!(count(&lib.crawl().await, "live_photos_paired"), 3);
    let mut conn = lib.conn().await;
    // `live-x` sorts right after `live/`'s files: the folder's range must end before it.
    sql_query("UPDATE media_assets SET paired_asset_id = NULL WHERE display_path NOT LIKE 'live/%'")
        .execute(&mut conn)
        .await
        .unwrap();

    lib.write("live/IMG_0001.JPG", &fixtures::jpeg(320, 240, 2, false, &exif));
    let result = lib.crawl_folders(&lib.handler(), json!({"folders": ["live"]})).await.unwrap();
    assert_eq!((count(&result, "replaced"), count(&result, "live_photos_paired")), (1, 1), "{result}");
    let pairs = |folder: &'static str| {
        let lib = &lib;
        async move {
            let rows: Vec<Active> = sql_query(
                "SELECT a.id, coalesce(p.display_path, '') AS display_path FROM media_assets AS a
                   LEFT JOIN media_assets AS p ON p.id = a.paired_asset_id AND NOT p.is_soft_deleted
                                              AND p.paired_asset_id = a.id
                  WHERE NOT a.is_soft_deleted AND a.display_path LIKE $1 ORDER BY a.file_path",
            )
            .bind::<Text, _>(format!("{folder}/%"))
            .load(&mut lib.conn().await)
            .await
            .unwrap();
            rows.into_iter().map(|r| r.display_path).collect::<Vec<_>>()
        }
    };
    assert_eq!(pairs("live").await, ["live/IMG_0001.MOV", "live/IMG_0001.JPG"], "the new still and the video pair");
    assert_eq!(pairs("other").await, ["", ""], "another folder's candidates are not read");
    assert_eq!(pairs("live-x").await, ["", ""], "nor those of a folder whose name starts with the crawl's");
    let whole = lib.crawl_with(json!({}), Default::default()).await.unwrap();
    assert_eq!(count(&whole, "live_photos_paired"), 0, "nothing changed: no pairs looked for: {whole}");
    lib.write("other/new.jpg", &photo(3));
    assert_eq!(count(&lib.crawl().await, "live_photos_paired"), 2, "a whole crawl with a change looks everywhere");
    assert_eq!(pairs("other").await, ["other/IMG_0001.MOV", "other/IMG_0001.JPG", ""]);
}
