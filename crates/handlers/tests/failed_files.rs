//! Files that failed for their content are remembered and not read again while unchanged and read by the same rules
//! (`failed_files`, migration 000041): a watcher crawls a folder at each change in it, and a phone syncing into a
//! folder all day made every one of those crawls hash and decode its damaged files again.

mod support;

use almanac_handlers::{CrawlHandler, CrawlSettings};
use almanac_media::fixtures::{self, FixtureExif};
use serde_json::{Value, json};
use support::{Library, library};

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(64, 48, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

fn count(result: &Value, key: &str) -> u64 {
    result[key].as_u64().unwrap_or_else(|| panic!("no {key} in {result}"))
}

/// The reasons of the failures a crawl reports, by path.
fn reasons(result: &Value) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = result["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f["reason"].as_str().unwrap().to_owned()))
        .collect();
    all.sort();
    all
}

impl Library {
    async fn remembered(&self) -> i64 {
        self.count("SELECT count(*) AS n FROM failed_files").await
    }

    async fn crawl_by(&self, handler: &CrawlHandler<almanac_store_pg::PgStore>, payload: Value) -> Value {
        self.run_handler(handler, self.item(payload).await).await.expect("the crawl succeeds")
    }
}

/// A damaged photo and a damaged video fail and are remembered; the next crawls, the whole library's and a
/// watcher's of their folder, report them failed with the reason they had, without reading a byte of them. Changed,
/// one is read again; written over with a good photo, it is ingested and forgotten; gone, the other is forgotten.
#[tokio::test]
async fn a_file_that_failed_for_its_content_is_not_read_again_until_it_changes() {
    let lib = library().await;
    let good = photo(1);
    lib.write("dcim/cut.jpg", &good[..good.len() / 2]);
    // A video cut short before its index (an upload that stopped): ffprobe cannot read it.
    let whole = lib.dir.path().join("whole.mp4");
    fixtures::video_in(&whole, 1.0, 320, 240, None);
    let video = std::fs::read(&whole).unwrap();
    lib.write("dcim/clip.mp4", &video[..video.len() / 2]);
    lib.write("dcim/good.jpg", &good);
    let first = lib.crawl().await;
    assert_eq!((count(&first, "ingested"), count(&first, "failed")), (1, 2), "{first}");
    assert_eq!(lib.remembered().await, 2);
    let read_first = reasons(&first);

    let handler = lib.handler();
    for payload in [json!({}), json!({"folders": ["dcim"]})] {
        let again = lib.crawl_by(&handler, payload).await;
        assert_eq!((count(&again, "failed"), count(&again, "bytes_hashed")), (2, 0), "not read again: {again}");
        for ((path, reason), (first_path, first_reason)) in reasons(&again).iter().zip(&read_first) {
            assert_eq!(path, first_path);
            assert!(reason.starts_with(first_reason.as_str()) && reason.contains("not read again"), "{reason}");
        }
    }

    // Changed (its mtime): read again, failing again, remembered again.
    let cut = lib.root.join("dcim/cut.jpg");
    let later = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options().write(true).open(&cut).unwrap().set_modified(later).unwrap();
    let changed = lib.crawl().await;
    assert_eq!(count(&changed, "failed"), 2, "{changed}");
    assert!(count(&changed, "bytes_hashed") > 0, "the changed file is read: {changed}");
    assert_eq!(lib.remembered().await, 2);

    // Written over with a good photo: ingested, and its failure forgotten.
    lib.write("dcim/cut.jpg", &photo(2));
    let mended = lib.crawl().await;
    assert_eq!((count(&mended, "ingested"), count(&mended, "failed")), (1, 1), "{mended}");
    assert_eq!(lib.remembered().await, 1);

    // Gone: forgotten.
    std::fs::remove_file(lib.root.join("dcim/clip.mp4")).unwrap();
    let gone = lib.crawl().await;
    assert_eq!(count(&gone, "failed"), 0, "{gone}");
    assert_eq!(lib.remembered().await, 0);
}

/// A failure is read again by other rules: a still over the pixel limit, remembered, is read again once the limit
/// is raised, and ingested.
#[tokio::test]
async fn a_file_remembered_as_failed_is_read_again_when_the_limit_is_raised() {
    let lib = library().await;
    lib.write("big.png", &fixtures::png(1100, 1000, 3));
    let low = lib.crawler(CrawlSettings { max_image_pixels: 1_000_000, ..lib.settings() });
    let refused = lib.crawl_by(&low, json!({})).await;
    assert_eq!(count(&refused, "failed"), 1, "{refused}");
    let again = lib.crawl_by(&low, json!({})).await;
    assert_eq!((count(&again, "failed"), count(&again, "bytes_hashed")), (1, 0), "{again}");
    let raised = lib.crawl().await;
    assert_eq!((count(&raised, "ingested"), count(&raised, "failed")), (1, 0), "{raised}");
    assert_eq!(lib.remembered().await, 0);
}

/// A known photo whose file is written over with damaged bytes keeps its asset, whether the file is read (and fails)
/// or, remembered, passed over: a file not read is never taken for one gone.
#[tokio::test]
async fn a_known_photo_written_over_with_damaged_bytes_keeps_its_asset_while_remembered() {
    let lib = library().await;
    lib.write("photo.jpg", &photo(4));
    lib.crawl().await;
    let damaged = photo(5);
    lib.write("photo.jpg", &damaged[..damaged.len() / 3]);
    for _ in 0..2 {
        let result = lib.crawl().await;
        assert_eq!((count(&result, "failed"), count(&result, "soft_deleted")), (1, 0), "{result}");
        let active = lib.count("SELECT count(*) AS n FROM media_assets WHERE NOT is_soft_deleted").await;
        assert_eq!(active, 1, "the asset stays: {result}");
    }
    assert_eq!(lib.remembered().await, 1);
}

/// A good file moved onto the path of a damaged copy remembered as failed, with the same size and mtime (a copy
/// that kept its times, `cp -p`, from a failing card): it is another file (its inode and the inode's change time),
/// read, and found to be the asset moved, never passed over with the asset then taken for gone.
#[tokio::test]
async fn a_good_file_moved_onto_a_remembered_damaged_copy_of_the_same_size_and_time_is_read() {
    let lib = library().await;
    let good = fixtures::png(640, 480, 6);
    let mut damaged = fixtures::png_claiming(60_000, 60_000);
    assert!(damaged.len() < good.len());
    damaged.resize(good.len(), 0);
    let original = lib.write("a/x.png", &good);
    lib.crawl().await;
    let copy = lib.write("b/x.png", &damaged);
    let mtime = std::fs::metadata(&original).unwrap().modified().unwrap();
    std::fs::File::options().write(true).open(&copy).unwrap().set_modified(mtime).unwrap();
    let failed = lib.crawl().await;
    assert_eq!(count(&failed, "failed"), 1, "{failed}");
    assert_eq!(lib.remembered().await, 1);

    std::fs::rename(&original, &copy).unwrap();
    let moved = lib.crawl().await;
    assert_eq!((count(&moved, "moved"), count(&moved, "soft_deleted"), count(&moved, "failed")), (1, 0, 0), "{moved}");
    let active = lib.count("SELECT count(*) AS n FROM media_assets WHERE NOT is_soft_deleted").await;
    assert_eq!(active, 1);
    assert_eq!(lib.remembered().await, 0, "read well: forgotten");
}
