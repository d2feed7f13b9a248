//! The right day for every file: a mixed library (every format the Worker reads; dates in EXIF, broken EXIF,
//! embedded XMP, sidecars, containers and file names; a decompression bomb; truncated files) crawled on real
//! files generated here and a real PostgreSQL catalogue.

mod support;

use almanac_media::fixtures::exif_block::{self, Block};
use almanac_media::fixtures::{self, FixtureExif};
use diesel::sql_query;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::RunQueryDsl;
use support::{Library, library};

#[derive(Debug, Clone, diesel::QueryableByName)]
struct Dated {
    #[diesel(sql_type = Text)]
    display_path: String,
    #[diesel(sql_type = Text)]
    source: String,
    #[diesel(sql_type = Text)]
    day: String,
    #[diesel(sql_type = Text)]
    content_hash: String,
    #[diesel(sql_type = Text)]
    media_type: String,
    #[diesel(sql_type = Nullable<Text>)]
    camera_make: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    orientation: Option<i64>,
}

impl Library {
    /// Each active asset's date source and its "on this day" index as `MM-DD`.
    async fn dated(&self) -> Vec<Dated> {
        sql_query(
            "SELECT a.display_path, a.captured_at_source AS source,
                    lpad(a.capture_month::text, 2, '0') || '-' || lpad(a.capture_day::text, 2, '0') AS day,
                    a.content_hash, a.media_type, m.camera_make, m.orientation_degrees::bigint AS orientation
               FROM media_assets a LEFT JOIN asset_metadata m ON m.asset_id = a.id
              WHERE NOT a.is_soft_deleted ORDER BY a.display_path",
        )
        .load(&mut self.conn().await)
        .await
        .unwrap()
    }

    fn preview_of(&self, hash: &str) -> std::path::PathBuf {
        self.proxies.join(self.config.to_string()).join(&hash[..2]).join(hash).join("preview.jpg")
    }
}

fn find<'a>(rows: &'a [Dated], path: &str) -> &'a Dated {
    rows.iter().find(|r| r.display_path == path).unwrap_or_else(|| panic!("{path} was not ingested: {rows:#?}"))
}

/// A JPEG with no metadata at all (its date then comes from elsewhere).
fn bare_jpeg(seed: u32) -> Vec<u8> {
    fixtures::jpeg(64, 48, seed, false, &FixtureExif::default())
}

/// A camera block (orientation 6, dated 2019-07-04 18:30 +02:00) from a writer that leaves out the Exif
/// sub-IFD's next-IFD pointer.
fn broken_block(little_endian: bool) -> Vec<u8> {
    Block { exif_without_next_pointer: true, ..Block::camera(little_endian) }.bytes()
}

/// A still of 64x48 with orientation 6: its preview must be upright, 48 wide and 64 high.
fn assert_upright(lib: &Library, row: &Dated) {
    assert_eq!(row.orientation, Some(90), "{}", row.display_path);
    let dims = image::image_dimensions(lib.preview_of(&row.content_hash)).unwrap();
    assert_eq!(dims, (48, 64), "{}: the preview is turned upright", row.display_path);
}

#[tokio::test]
async fn a_mixed_library_gets_the_right_day_for_every_file() {
    let lib = library().await;
    let preview_with_exif = |seed: u32| {
        let plain = fixtures::jpeg(64, 48, seed, false, &FixtureExif::default());
        let block = broken_block(seed.is_multiple_of(2));
        [&plain[..2], &exif_block::app1(&block), &plain[2..]].concat()
    };

    // EXIF, intact and broken, in every still container that carries it.
    lib.write(
        "exif/camera.jpg",
        &fixtures::jpeg(64, 48, 1, false, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00")),
    );
    lib.write("exif/broken_le.jpg", &preview_with_exif(2));
    lib.write("exif/broken_be.jpg", &preview_with_exif(3));
    lib.write("exif/broken.png", &exif_block::png(&broken_block(true)));
    lib.write("exif/broken.webp", &exif_block::webp(&broken_block(false)));
    // Embedded XMP only, sidecars of both naming forms, a date in the file name only.
    lib.write(
        "xmp/embedded.jpg",
        &fixtures::with_xmp(&bare_jpeg(4), &fixtures::xmp("photoshop:DateCreated", "2018-03-05T10:00:00")),
    );
    lib.write("xmp/darktable.jpg", &bare_jpeg(5));
    lib.write("xmp/darktable.jpg.xmp", fixtures::xmp("exif:DateTimeOriginal", "2017-02-14T09:00:00").as_bytes());
    lib.write("xmp/DSC_0006.JPG", &bare_jpeg(6));
    lib.write("xmp/DSC_0006.XMP", fixtures::xmp("xmp:CreateDate", "2016-12-25T08:00:00").as_bytes());
    lib.write("names/IMG-20170809-WA0001.jpg", &bare_jpeg(7));
    lib.write("names/Screenshot_2016-02-03-10-11-12.png", &fixtures::png(40, 30, 8));
    // EXIF outranks the sidecar and the name.
    lib.write(
        "names/IMG_20100101_000000.jpg",
        &fixtures::jpeg(64, 48, 9, false, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00")),
    );
    lib.write(
        "names/IMG_20100101_000000.jpg.xmp",
        fixtures::xmp("exif:DateTimeOriginal", "2011-11-11T11:11:11").as_bytes(),
    );
    // Other still formats.
    lib.write("formats/IMG_20150310_120000.tif", &fixtures::encoded(40, 30, 10, image::ImageFormat::Tiff));
    lib.write("formats/IMG_20150311_120000.gif", &fixtures::encoded(40, 30, 11, image::ImageFormat::Gif));
    lib.write("formats/IMG_20150312_120000.webp", &fixtures::encoded(40, 30, 12, image::ImageFormat::WebP));
    fixtures::avif(&lib.root.join("formats/IMG_20150313_120000.avif"), 40, 30, 13);
    // RAW: TIFF-based with its own EXIF, RAF and CR3 whose EXIF sits elsewhere.
    lib.write("raw/DSC_0001.NEF", &fixtures::tiff_raw(&broken_block(true), &bare_jpeg(14)));
    // An iPhone's portrait photo: stored sideways with an `irot` that libheif applies, and EXIF orientation 6 too.
    let iphone = FixtureExif { orientation: Some(6), ..FixtureExif::camera("2019:07:04 18:30:05", "+02:00") };
    std::fs::create_dir_all(lib.root.join("heic")).unwrap();
    fixtures::heic_transformed(&lib.root.join("heic/IMG_0005.HEIC"), 64, 48, 15, &iphone, &[fixtures::irot(3)]);
    lib.write("raw/IMG_0002.CR2", &fixtures::tiff_raw(&broken_block(true), &bare_jpeg(15)));
    lib.write("raw/DSCF0003.RAF", &fixtures::raf(&preview_with_exif(16)));
    let camera = Block::camera(true);
    let ifd0 = Block { exif: vec![], gps: vec![], ..camera.clone() }.bytes();
    let exif_ifd = Block { ifd0: camera.exif.clone(), exif: vec![], gps: vec![], ..camera.clone() }.bytes();
    lib.write("raw/IMG_0004.CR3", &fixtures::cr3(&ifd0, &exif_ifd, &bare_jpeg(17)));
    // Videos: container dates in Matroska and QuickTime, a name date in an AVI, an MTS with neither.
    fixtures::video_in(&lib.root.join("video/clip.mkv"), 0.6, 64, 48, Some("2014-05-06T07:08:09Z"));
    fixtures::video_in(&lib.root.join("video/clip.webm"), 0.6, 64, 48, Some("2014-05-07T07:08:09Z"));
    fixtures::video_in(&lib.root.join("video/VID_20130405_101112.avi"), 0.6, 64, 48, None);
    fixtures::video_in(&lib.root.join("video/VID_20130406_101112.3gp"), 0.6, 64, 48, None);
    fixtures::video_in(&lib.root.join("video/00001.MTS"), 0.6, 64, 48, None);
    fixtures::video_in(&lib.root.join("video/MVI_20130407.mpg"), 0.6, 64, 48, None);
    // iPhone videos: the local time with its offset (no colon) beside the UTC instant, on either side of midnight.
    let iphone = |name: &str, local: &str, utc: &str| {
        let path = lib.root.join("video").join(name);
        fixtures::quicktime_video(&path, utc, &[("com.apple.quicktime.creationdate", local)]);
    };
    iphone("IMG_0001.MOV", "2024-01-01T00:05:00+0100", "2023-12-31T23:05:00Z");
    iphone("IMG_0002.MOV", "2023-12-24T20:15:00-0500", "2023-12-25T01:15:00Z");
    // The key without an offset (an editor's): the UTC time, with the offset the two are apart. An unset clock in
    // the key: the UTC time alone.
    iphone("IMG_0003.MOV", "2024-01-01T00:05:00", "2023-12-31T23:05:00Z");
    iphone("IMG_0004.MOV", "1904-01-01T00:00:00+0000", "2022-03-04T10:00:00Z");
    // An Android phone's: named by the local time it started, its creation time in UTC.
    fixtures::video_in(&lib.root.join("video/20231224_201500.mp4"), 0.6, 64, 48, Some("2023-12-25T01:15:00Z"));
    // Hostile and damaged files.
    lib.write("bad/bomb.png", &fixtures::png_claiming(60_000, 60_000));
    lib.write("bad/bomb.jpg", &fixtures::jpeg_claiming(60_000, 60_000));
    let tiff = fixtures::encoded(40, 30, 20, image::ImageFormat::Tiff);
    lib.write("bad/cut.tif", &tiff[..tiff.len() / 2]);
    let gif = fixtures::encoded(40, 30, 21, image::ImageFormat::Gif);
    lib.write("bad/cut.gif", &gif[..gif.len() / 2]);
    let webp = fixtures::encoded(40, 30, 22, image::ImageFormat::WebP);
    lib.write("bad/cut.webp", &webp[..webp.len() / 2]);
    // A RAW cut inside its large preview (its small thumbnail intact): the preview's header promises more than
    // the file holds, and that is a failure, not a thumbnail passed off as the photo.
    let preview = fixtures::jpeg(640, 480, 23, true, &FixtureExif::default());
    let nef = fixtures::tiff_raw(&broken_block(true), &preview);
    lib.write("bad/cut.nef", &nef[..nef.len() - preview.len() / 2]);
    let avif = std::fs::read(lib.root.join("formats/IMG_20150313_120000.avif")).unwrap();
    lib.write("bad/cut.avif", &avif[..avif.len() / 2]);
    // An AVIF whose image claims 60,000 × 60,000 (its `ispe`: version and flags, then width and height), which
    // heif-convert would decode whole; a JPEG drawn in 600 scans more than its ten.
    let mut bomb = avif.clone();
    let ispe = bomb.windows(4).position(|w| w == b"ispe").expect("an ispe box");
    for at in [ispe + 8, ispe + 12] {
        bomb[at..at + 4].copy_from_slice(&60_000u32.to_be_bytes());
    }
    lib.write("bad/bomb.avif", &bomb);
    lib.write("bad/scans.jpg", &fixtures::with_last_scan_again(&fixtures::progressive_jpeg(64, 48), 600));

    let result = lib.crawl().await;
    let rows = lib.dated().await;
    let expect = |path: &str, source: &str, day: &str| {
        let row = find(&rows, path);
        assert_eq!((row.source.as_str(), row.day.as_str()), (source, day), "{path}");
    };
    for path in ["exif/camera.jpg", "exif/broken_le.jpg", "exif/broken_be.jpg", "exif/broken.png", "exif/broken.webp"] {
        expect(path, "exif_original", "07-04");
    }
    expect("xmp/embedded.jpg", "xmp_embedded", "03-05");
    expect("xmp/darktable.jpg", "xmp_sidecar", "02-14");
    expect("xmp/DSC_0006.JPG", "xmp_sidecar", "12-25");
    expect("names/IMG-20170809-WA0001.jpg", "file_name", "08-09");
    expect("names/Screenshot_2016-02-03-10-11-12.png", "file_name", "02-03");
    expect("names/IMG_20100101_000000.jpg", "exif_original", "07-04");
    expect("formats/IMG_20150310_120000.tif", "file_name", "03-10");
    expect("formats/IMG_20150311_120000.gif", "file_name", "03-11");
    expect("formats/IMG_20150312_120000.webp", "file_name", "03-12");
    expect("formats/IMG_20150313_120000.avif", "file_name", "03-13");
    for path in ["raw/DSC_0001.NEF", "raw/IMG_0002.CR2", "raw/DSCF0003.RAF", "raw/IMG_0004.CR3"] {
        expect(path, "exif_original", "07-04");
        assert_eq!(find(&rows, path).camera_make.as_deref(), Some("Almanac"), "{path}: burst detection needs it");
        assert_eq!(find(&rows, path).media_type, "image");
    }
    expect("video/clip.mkv", "container", "05-06");
    expect("video/clip.webm", "container", "05-07");
    expect("video/VID_20130405_101112.avi", "file_name", "04-05");
    expect("video/VID_20130406_101112.3gp", "file_name", "04-06");
    expect("video/MVI_20130407.mpg", "file_name", "04-07");
    expect("video/IMG_0001.MOV", "container", "01-01");
    expect("video/IMG_0002.MOV", "container", "12-24");
    expect("video/IMG_0003.MOV", "container", "01-01");
    expect("video/IMG_0004.MOV", "container", "03-04");
    expect("video/20231224_201500.mp4", "container", "12-24");
    let mts = find(&rows, "video/00001.MTS");
    assert_eq!((mts.source.as_str(), mts.media_type.as_str()), ("file_mtime", "video"));

    // Every rotated photo has an upright preview, RAW previews included.
    for path in [
        "exif/broken_le.jpg",
        "exif/broken_be.jpg",
        "raw/DSC_0001.NEF",
        "raw/IMG_0002.CR2",
        "raw/DSCF0003.RAF",
        "heic/IMG_0005.HEIC",
    ] {
        assert_upright(&lib, find(&rows, path));
    }

    // The hostile and damaged files are recorded failures with their reasons; nothing of them is stored.
    assert!(rows.iter().all(|r| !r.display_path.starts_with("bad/")), "{rows:#?}");
    let failures = result["failures"].as_array().unwrap_or_else(|| panic!("{result}"));
    let reason = |name: &str| -> String {
        failures
            .iter()
            .find(|f| f["path"].as_str().is_some_and(|p| p.ends_with(name)))
            .unwrap_or_else(|| panic!("{name} is not among the failures: {result}"))["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for bomb in ["bomb.png", "bomb.jpg", "bomb.avif"] {
        let why = reason(bomb);
        assert!(why.contains("60000x60000") && why.contains("max_image_megapixels"), "{bomb}: {why}");
    }
    for cut in ["cut.tif", "cut.gif", "cut.webp", "cut.nef", "cut.avif"] {
        assert!(!reason(cut).is_empty());
    }
    assert!(reason("scans.jpg").contains("more than 500 scans"), "{}", reason("scans.jpg"));
    assert_eq!(result["failed"], 9, "{result}");
    assert_eq!(rows.len(), 31, "{rows:#?}");
}

#[tokio::test]
async fn a_sidecar_that_appears_changes_or_vanishes_changes_the_date_at_the_next_crawl() {
    let lib = library().await;
    lib.write("2019/holiday.jpg", &bare_jpeg(1));
    lib.write("2019/IMG_20120101_101010.jpg", &bare_jpeg(2));
    let first = lib.crawl().await;
    assert_eq!(first["ingested"], 2, "{first}");
    let day = |rows: &[Dated], path: &str| {
        let r = find(rows, path);
        (r.source.clone(), r.day.clone())
    };
    let rows = lib.dated().await;
    assert_eq!(day(&rows, "2019/holiday.jpg").0, "file_mtime");
    assert_eq!(day(&rows, "2019/IMG_20120101_101010.jpg"), ("file_name".into(), "01-01".into()));

    // A sidecar appears: the date is read again without the photo being re-ingested.
    lib.write("2019/holiday.jpg.xmp", fixtures::xmp("exif:DateTimeOriginal", "2019-07-04T18:30:05+02:00").as_bytes());
    lib.write("2019/IMG_20120101_101010.xmp", fixtures::xmp("xmp:CreateDate", "2012-01-02T10:10:10").as_bytes());
    let second = lib.crawl().await;
    assert_eq!((second["redated"].as_u64(), second["ingested"].as_u64()), (Some(2), Some(0)), "{second}");
    let rows = lib.dated().await;
    assert_eq!(day(&rows, "2019/holiday.jpg"), ("xmp_sidecar".into(), "07-04".into()));
    assert_eq!(day(&rows, "2019/IMG_20120101_101010.jpg"), ("xmp_sidecar".into(), "01-02".into()));

    // Unchanged: nothing is read again.
    let third = lib.crawl().await;
    assert_eq!((third["redated"].as_u64(), third["unchanged"].as_u64()), (Some(0), Some(2)), "{third}");

    // The sidecar changes (an edit in darktable): the new date.
    std::thread::sleep(std::time::Duration::from_millis(20));
    lib.write("2019/holiday.jpg.xmp", fixtures::xmp("exif:DateTimeOriginal", "2019-08-15T12:00:00").as_bytes());
    let fourth = lib.crawl().await;
    assert_eq!(fourth["redated"], 1, "{fourth}");
    assert_eq!(day(&lib.dated().await, "2019/holiday.jpg"), ("xmp_sidecar".into(), "08-15".into()));

    // The sidecar vanishes: back to the next best source.
    std::fs::remove_file(lib.root.join("2019/IMG_20120101_101010.xmp")).unwrap();
    let fifth = lib.crawl().await;
    assert_eq!(fifth["redated"], 1, "{fifth}");
    assert_eq!(day(&lib.dated().await, "2019/IMG_20120101_101010.jpg"), ("file_name".into(), "01-01".into()));
}

#[tokio::test]
async fn a_sidecar_reached_through_a_link_is_not_read() {
    let lib = library().await;
    lib.write("a/holiday.jpg", &bare_jpeg(1));
    let outside = lib.dir.path().join("outside.xmp");
    std::fs::write(&outside, fixtures::xmp("exif:DateTimeOriginal", "2001-01-01T00:00:00")).unwrap();
    std::os::unix::fs::symlink(&outside, lib.root.join("a/holiday.jpg.xmp")).unwrap();
    let result = lib.crawl().await;
    assert_eq!(result["ingested"], 1, "{result}");
    assert_eq!(find(&lib.dated().await, "a/holiday.jpg").source, "file_mtime", "the link is never followed");
}

#[tokio::test]
async fn a_photo_moved_with_its_sidecar_keeps_the_sidecar_date_at_once() {
    let lib = library().await;
    lib.write("inbox/holiday.jpg", &bare_jpeg(1));
    lib.crawl().await;
    assert_eq!(find(&lib.dated().await, "inbox/holiday.jpg").source, "file_mtime");
    // Sorted into a folder, with a sidecar written by the tool that sorted it.
    std::fs::create_dir_all(lib.root.join("2019")).unwrap();
    std::fs::rename(lib.root.join("inbox/holiday.jpg"), lib.root.join("2019/holiday.jpg")).unwrap();
    lib.write("2019/holiday.xmp", fixtures::xmp("photoshop:DateCreated", "2019-07-04").as_bytes());
    let moved = lib.crawl().await;
    assert_eq!(moved["moved"], 1, "{moved}");
    let row = find(&lib.dated().await, "2019/holiday.jpg").clone();
    assert_eq!((row.source.as_str(), row.day.as_str()), ("xmp_sidecar", "07-04"));
    let again = lib.crawl().await;
    assert_eq!((again["unchanged"].as_u64(), again["redated"].as_u64()), (Some(1), Some(0)), "{again}");
}

/// A photo with no date but its file's time keeps that date when a tool that does not keep times copies it
/// elsewhere (`cp` without `-p`) or a backup brings it back after it was deleted: the file time of the copy or the
/// restore is not the day it was taken. Before, the moved or revived asset took the new file's time.
#[tokio::test]
async fn a_photo_dated_by_its_file_time_keeps_its_day_when_copied_away_or_restored() {
    let lib = library().await;
    let at = |y: i32, m: u32, d: u32| {
        let t = chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap().and_hms_opt(12, 0, 0).unwrap().and_utc();
        std::time::SystemTime::from(t)
    };
    let put = |rel: &str, when| {
        let path = lib.write(rel, &bare_jpeg(7));
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
    };
    put("inbox/scan.jpg", at(2015, 6, 1));
    lib.crawl().await;
    let row = find(&lib.dated().await, "inbox/scan.jpg").clone();
    assert_eq!((row.source.as_str(), row.day.as_str()), ("file_mtime", "06-01"));

    put("2015/scan.jpg", at(2020, 1, 1));
    std::fs::remove_file(lib.root.join("inbox/scan.jpg")).unwrap();
    let moved = lib.crawl().await;
    assert_eq!(moved["moved"], 1, "{moved}");
    assert_eq!(find(&lib.dated().await, "2015/scan.jpg").day, "06-01", "the copy's time is not the day");

    std::fs::remove_file(lib.root.join("2015/scan.jpg")).unwrap();
    lib.write("other.jpg", &bare_jpeg(8));
    lib.crawl().await;
    put("restored/scan.jpg", at(2021, 3, 3));
    let revived = lib.crawl().await;
    assert_eq!(revived["revived"], 1, "{revived}");
    assert_eq!(find(&lib.dated().await, "restored/scan.jpg").day, "06-01", "nor the restore's");
    let again = lib.crawl().await;
    assert_eq!(again["redated"].as_u64().unwrap_or(0), 0, "read once: {again}");
}

/// Large stills decoded side by side share one pixel budget (the largest image allowed): four files that each
/// take the whole budget, and smaller ones, all get through one at a time instead of all at once (the budget's
/// own test shows the waiting), and one over the limit is refused, not decoded.
#[tokio::test]
async fn stills_that_fill_the_pixel_budget_are_all_crawled() {
    use almanac_handlers::CrawlSettings;
    let lib = library().await;
    for i in 0..4 {
        lib.write(&format!("big/IMG_2019070{i}_120000.png"), &fixtures::png(1000, 1000, i));
    }
    for i in 0..3 {
        lib.write(&format!("small/IMG_2019071{i}_120000.png"), &fixtures::png(800, 600, 10 + i));
    }
    lib.write("over/IMG_20190720_120000.png", &fixtures::png(1001, 1000, 20));
    let handler = lib.crawler(CrawlSettings { max_concurrent_files: 8, max_image_pixels: 1_000_000, ..lib.settings() });
    let item = lib.item(serde_json::json!({})).await;
    let result = lib.run_handler(&handler, item).await.expect("the crawl succeeds");
    assert_eq!(result["ingested"], 7, "{result}");
    assert_eq!(result["failed"], 1, "{result}");
    // How far it came, as `status` reads it: all 8 files listed, all 8 done.
    assert_eq!((result["total"].as_u64(), result["done"].as_u64()), (Some(8), Some(8)), "{result}");
    let estimate = almanac_domain::ProgressEstimate::from_progress(&result).expect("done and total");
    assert_eq!(estimate.percent, Some(100.0));
    let reason = result["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("1001x1000") && reason.contains("max_image_megapixels"), "{reason}");
}

/// A phone's video dated by its UTC `creation_time` alone is put on the day it was taken in the household's zone
/// (the Worker's): a Pixel names its videos by the UTC time, so the name gives no offset, and the UTC day is the
/// next day in New York for a video taken on Christmas Eve at 20:15. An Android phone that names its videos by the
/// local time keeps the offset the name says (a traveller's), and a camera that writes its local clock as UTC
/// (no phone's keys in its container: a GoPro) is left as it reads.
#[tokio::test]
async fn a_phones_video_dated_in_utc_alone_is_on_its_day_in_the_households_zone() {
    use almanac_handlers::CrawlSettings;
    let lib = library().await;
    let android = [("com.android.version", "13")];
    fixtures::quicktime_video(&lib.root.join("PXL_20231225_011500123.mp4"), "2023-12-25T01:15:00Z", &android);
    // Another content than the Pixel's (a copy would be one asset).
    let samsung = [("com.android.version", "14")];
    fixtures::quicktime_video(&lib.root.join("20231224_231500.mp4"), "2023-12-25T01:15:00Z", &samsung);
    fixtures::quicktime_video(&lib.root.join("GX010001.MP4"), "2023-12-25T01:15:00Z", &[]);
    // Named by the local time in London in winter, UTC itself: the name says the offset is zero.
    let london = [("com.android.version", "15")];
    fixtures::quicktime_video(&lib.root.join("20231225_011500.mp4"), "2023-12-25T01:15:00Z", &london);
    // An iPhone's video edited elsewhere: Apple's keys, its local time gone, only the UTC instant left.
    fixtures::quicktime_video(
        &lib.root.join("IMG_0001.MOV"),
        "2023-12-25T01:15:00Z",
        &[("com.apple.quicktime.make", "Apple")],
    );
    let new_york = chrono::FixedOffset::west_opt(5 * 3600).unwrap();
    let handler = lib.crawler(CrawlSettings { zone: almanac_domain::Zone::Fixed(new_york), ..lib.settings() });
    let result = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.expect("the crawl succeeds");
    assert_eq!(result["ingested"], 5, "{result}");
    let offset = |path: &str| {
        format!("SELECT captured_offset_minutes::bigint AS n FROM media_assets WHERE display_path = '{path}'")
    };
    let rows = lib.dated().await;
    for (path, day, minutes) in [
        ("PXL_20231225_011500123.mp4", "12-24", -300),
        ("IMG_0001.MOV", "12-24", -300),
        ("20231224_231500.mp4", "12-24", -120),
    ] {
        assert_eq!((find(&rows, path).source.as_str(), find(&rows, path).day.as_str()), ("container", day), "{path}");
        assert_eq!(lib.count(&offset(path)).await, minutes, "{path}");
    }
    assert_eq!(find(&rows, "GX010001.MP4").day, "12-25", "a camera's time is left as it reads");
    assert_eq!(find(&rows, "20231225_011500.mp4").day, "12-25", "a name at UTC keeps the UTC day");
    let unknown = "SELECT count(*) AS n FROM media_assets WHERE captured_offset_minutes IS NULL
                     AND display_path IN ('GX010001.MP4', '20231225_011500.mp4')";
    assert_eq!(lib.count(unknown).await, 2);
}

/// A known video moved after the pixel limit was lowered below its frames keeps its date and its proxies: its
/// content was read when the limit allowed it, so the move is recorded rather than failed at the reading of its
/// date.
#[tokio::test]
async fn a_known_video_moved_after_the_limit_was_lowered_below_it_is_moved_and_keeps_its_date() {
    use almanac_handlers::CrawlSettings;
    let lib = library().await;
    let name = "VID_20190720_120000.mp4";
    fixtures::video_in(&lib.root.join("a").join(name), 0.5, 640, 480, Some("2019-07-20T10:00:00Z"));
    lib.crawl().await;
    std::fs::create_dir_all(lib.root.join("b")).unwrap();
    std::fs::rename(lib.root.join("a").join(name), lib.root.join("b").join(name)).unwrap();
    let handler = lib.crawler(CrawlSettings { max_image_pixels: 100_000, ..lib.settings() });
    let result = lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.expect("the crawl succeeds");
    assert_eq!((result["moved"].as_u64(), result["failed"].as_u64()), (Some(1), Some(0)), "{result}");
    let rows = lib.dated().await;
    assert_eq!(
        (find(&rows, &format!("b/{name}")).source.as_str(), find(&rows, &format!("b/{name}")).day.as_str()),
        ("container", "07-20")
    );
}

/// Every file under `dir` named `name`, at any depth.
fn files_named(dir: &std::path::Path, name: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .map(|e| e.unwrap().path())
        .map(|p| if p.is_dir() { files_named(&p, name) } else { usize::from(p.file_name().unwrap() == name) })
        .sum()
}

/// A video's frames are held to the pixel limit a still is, in every container and codec a camera writes (H.264
/// in MP4, MPEG-2 in a DVD camcorder's MPG, VP8 in WebM, AV1 through dav1d): each over it fails with its frame's size and the setting
/// to raise, no proxy of it is left, and the rest of the library is crawled.
#[tokio::test]
async fn videos_whose_frames_are_over_the_pixel_limit_fail_and_the_rest_is_crawled() {
    use almanac_handlers::CrawlSettings;
    let lib = library().await;
    for name in ["VID_20190720_120000.mp4", "MOV_0001.mpg", "clip.webm"] {
        fixtures::video_in(&lib.root.join("over").join(name), 0.5, 640, 480, None);
    }
    fixtures::av1_video(&lib.root.join("over/av1.mp4"), 0.5, 640, 480);
    fixtures::video_in(&lib.root.join("within/VID_20190721_120000.mp4"), 0.5, 320, 240, None);
    lib.write("within/IMG_20190721_120001.jpg", &fixtures::jpeg(64, 48, 1, true, &FixtureExif::default()));
    // 320 x 240 is 76,800 pixels, 640 x 480 is 307,200.
    let handler = lib.crawler(CrawlSettings { max_image_pixels: 100_000, ..lib.settings() });
    let item = lib.item(serde_json::json!({})).await;
    let result = lib.run_handler(&handler, item).await.expect("the crawl succeeds");
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(2), Some(4)), "{result}");
    for failure in result["failures"].as_array().unwrap() {
        let (path, reason) = (failure["path"].as_str().unwrap(), failure["reason"].as_str().unwrap());
        assert!(path.starts_with("over/"), "{path}: {reason}");
        assert!(reason.contains("a frame of the video claims 640x480 pixels"), "{path}: {reason}");
        assert!(reason.contains("storage.max_image_megapixels"), "{path}: {reason}");
    }
    assert_eq!(files_named(&lib.proxies, "poster.jpg"), 1, "only the video within the limit has a poster");
    assert_eq!(files_named(&lib.proxies, "web.mp4"), 1, "and a web video");
}

const DATES_READ_AGAIN_UP: &str = include_str!("../../../migrations/2026-12-06-000038_dates_read_again/up.sql");
const DATES_READ_AGAIN_DOWN: &str = include_str!("../../../migrations/2026-12-06-000038_dates_read_again/down.sql");

/// iPhone videos catalogued before migration 000038 were put on the day of their UTC `creation_time`. The
/// migration asks for their dates again (and those of every other video dated by its container without an offset),
/// and the next crawl reads them: the day is set right, and nothing else is made again. A still and a video whose
/// offset was known are not read again.
#[tokio::test]
async fn videos_dated_before_the_offsets_were_read_get_their_day_at_the_next_crawl() {
    let lib = library().await;
    let video = lib.root.join("IMG_0001.MOV");
    fixtures::quicktime_video(
        &video,
        "2023-12-31T23:05:00Z",
        &[("com.apple.quicktime.creationdate", "2024-01-01T00:05:00+0100")],
    );
    lib.write("photo.jpg", &fixtures::jpeg(64, 48, 1, false, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00")));
    lib.crawl().await;
    let mut conn = lib.conn().await;
    diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, DATES_READ_AGAIN_DOWN).await.unwrap();
    // As the crawl before the fix dated the video: its UTC creation time, no offset, the UTC day.
    sql_query(
        "UPDATE media_assets SET captured_at = '2023-12-31T23:05:00Z', captured_offset_minutes = NULL,
                capture_month = 12, capture_day = 31
          WHERE display_path = 'IMG_0001.MOV'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, DATES_READ_AGAIN_UP).await.unwrap();
    let outdated = lib.count("SELECT count(*) AS n FROM media_assets WHERE date_outdated").await;
    assert_eq!(outdated, 1, "the video dated by its container without an offset, not the photo");

    let result = lib.crawl().await;
    let rows = lib.dated().await;
    assert_eq!(find(&rows, "IMG_0001.MOV").day, "01-01", "{result}");
    assert_eq!(find(&rows, "photo.jpg").day, "07-04");
    assert_eq!(result["redated"], 1, "{result}");
    assert_eq!(lib.count("SELECT count(*) AS n FROM media_assets WHERE date_outdated").await, 0);
    let again = lib.crawl().await;
    assert_eq!(again["redated"].as_u64().unwrap_or(0), 0, "read once: {again}");
}

const PHONE_VIDEOS_UP: &str =
    include_str!("../../../migrations/2026-12-07-000040_phone_videos_in_the_households_zone/up.sql");

/// Pixel videos catalogued before migration 000040 were on the UTC day. The migration asks for the dates of the
/// videos dated by their container without an offset, and the next crawl puts the phone's on its day in the
/// household's zone; a camera's reads the same and keeps its day.
#[tokio::test]
async fn phone_videos_dated_in_utc_before_get_their_households_day_at_the_next_crawl() {
    use almanac_handlers::CrawlSettings;
    let lib = library().await;
    fixtures::quicktime_video(
        &lib.root.join("PXL_20231225_011500123.mp4"),
        "2023-12-25T01:15:00Z",
        &[("com.android.version", "13")],
    );
    fixtures::quicktime_video(&lib.root.join("GX010001.MP4"), "2023-12-25T01:15:00Z", &[]);
    let new_york = chrono::FixedOffset::west_opt(5 * 3600).unwrap();
    let handler = lib.crawler(CrawlSettings { zone: almanac_domain::Zone::Fixed(new_york), ..lib.settings() });
    let crawl = async || lib.run_handler(&handler, lib.item(serde_json::json!({})).await).await.unwrap();
    crawl().await;
    let mut conn = lib.conn().await;
    // As the crawl before the fix dated the Pixel's video: its UTC creation time, no offset, the UTC day.
    sql_query(
        "UPDATE media_assets SET captured_offset_minutes = NULL, capture_month = 12, capture_day = 25
          WHERE display_path = 'PXL_20231225_011500123.mp4'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, PHONE_VIDEOS_UP).await.unwrap();
    assert_eq!(lib.count("SELECT count(*) AS n FROM media_assets WHERE date_outdated").await, 2, "both videos");

    let result = crawl().await;
    let rows = lib.dated().await;
    assert_eq!(find(&rows, "PXL_20231225_011500123.mp4").day, "12-24", "{result}");
    assert_eq!(find(&rows, "GX010001.MP4").day, "12-25");
    assert_eq!(result["redated"], 2, "both read again: {result}");
    assert_eq!(lib.count("SELECT count(*) AS n FROM media_assets WHERE date_outdated").await, 0);
}

const HEIF_TURNED_TWICE_UP: &str = include_str!("../../../migrations/2026-12-06-000039_heif_turned_twice/up.sql");

/// iPhone portrait photos catalogued before migration 000039 had proxies turned twice (on their side). The migration
/// asks for the proxies of every HEIF photo recorded as turned, and the next crawl makes them again, upright; a JPEG
/// turned by its EXIF, whose proxies were right, is not read again.
#[tokio::test]
async fn heif_photos_turned_twice_before_get_upright_proxies_at_the_next_crawl() {
    let lib = library().await;
    let iphone = FixtureExif { orientation: Some(6), ..FixtureExif::camera("2019:07:04 18:30:05", "+02:00") };
    fixtures::heic_transformed(&lib.root.join("IMG_0005.HEIC"), 64, 48, 15, &iphone, &[fixtures::irot(3)]);
    lib.write("turned.jpg", &fixtures::jpeg(64, 48, 16, false, &iphone));
    lib.crawl().await;
    let rows = lib.dated().await;
    let heic = find(&rows, "IMG_0005.HEIC");
    // As the crawl before the fix left it: the preview on its side.
    let sideways = fixtures::jpeg(64, 48, 17, false, &FixtureExif::default());
    std::fs::write(lib.preview_of(&heic.content_hash), &sideways).unwrap();
    // And its sides as the upright picture's, with the quarter turn on top.
    let sides = "SELECT (m.width * 100000 + m.height)::bigint AS n FROM asset_metadata m JOIN media_assets a \
                 ON a.id = m.asset_id WHERE a.display_path = 'IMG_0005.HEIC'";
    assert_eq!(lib.count(sides).await, 64 * 100_000 + 48, "the stored sides");
    let mut conn = lib.conn().await;
    sql_query(
        "UPDATE asset_metadata SET width = 48, height = 64
          WHERE asset_id = (SELECT id FROM media_assets WHERE display_path = 'IMG_0005.HEIC')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, HEIF_TURNED_TWICE_UP).await.unwrap();
    let asked = lib.count("SELECT count(*) AS n FROM media_assets WHERE proxies_missing").await;
    assert_eq!(asked, 1, "the HEIF, not the JPEG");

    let result = lib.crawl().await;
    assert_eq!(result["proxies_regenerated"], 1, "{result}");
    assert_upright(&lib, find(&lib.dated().await, "IMG_0005.HEIC"));
    assert_upright(&lib, find(&lib.dated().await, "turned.jpg"));
    assert_eq!(lib.count("SELECT count(*) AS n FROM media_assets WHERE proxies_missing").await, 0);
    assert_eq!(lib.count(sides).await, 64 * 100_000 + 48, "the stored sides, read again");
}

/// `path`'s mtime set to `at` (UTC).
fn set_mtime(path: &std::path::Path, at: &str) {
    let at: chrono::DateTime<chrono::Utc> = at.parse().unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(at.into()).unwrap();
}

/// A file with no date but its mtime is on the mtime's day in the household's zone: a scan made at 20:15 on
/// Christmas Eve in New York (01:15 UTC on the 25th) is on the 24th, one made at noon on its UTC day, and a
/// household in Tokyo puts the same instant on the 25th. Before, every such file was on the UTC day.
#[tokio::test]
async fn a_file_dated_by_its_mtime_is_on_its_day_in_the_households_zone() {
    use almanac_handlers::CrawlSettings;
    let lib = library().await;
    set_mtime(&lib.write("scans/evening.jpg", &bare_jpeg(21)), "2023-12-25T01:15:00Z");
    set_mtime(&lib.write("scans/noon.jpg", &bare_jpeg(22)), "2023-12-25T17:00:00Z");
    let in_zone = |hours: i32| {
        let zone = almanac_domain::Zone::Fixed(chrono::FixedOffset::east_opt(hours * 3600).unwrap());
        lib.crawler(CrawlSettings { zone, ..lib.settings() })
    };
    let new_york = in_zone(-5);
    lib.run_handler(&new_york, lib.item(serde_json::json!({})).await).await.expect("the crawl succeeds");
    let rows = lib.dated().await;
    for (path, day) in [("scans/evening.jpg", "12-24"), ("scans/noon.jpg", "12-25")] {
        assert_eq!((find(&rows, path).source.as_str(), find(&rows, path).day.as_str()), ("file_mtime", day), "{path}");
    }
    let offsets = "SELECT count(*) AS n FROM media_assets WHERE captured_offset_minutes = -300";
    assert_eq!(lib.count(offsets).await, 2, "the household's offset at that instant is kept with the date");

    // An mtime the catalogue cannot hold is read as unknown (the epoch): no instant, so no offset either.
    set_mtime(&lib.write("scans/unknown.jpg", &bare_jpeg(24)), "1970-01-01T00:00:00Z");
    lib.run_handler(&new_york, lib.item(serde_json::json!({})).await).await.expect("the crawl succeeds");
    assert_eq!(find(&lib.dated().await, "scans/unknown.jpg").day, "01-01");
    assert_eq!(lib.count(offsets).await, 2, "not the unknown time's");

    // The same instant in Tokyo (+09:00): 10:15 on the 25th.
    set_mtime(&lib.write("tokyo/evening.jpg", &bare_jpeg(23)), "2023-12-25T01:15:00Z");
    lib.run_handler(&in_zone(9), lib.item(serde_json::json!({})).await).await.expect("the crawl succeeds");
    assert_eq!(find(&lib.dated().await, "tokyo/evening.jpg").day, "12-25");
}

/// A video is charged to the pixel budget while ffmpeg makes its proxies, as a still's decoder is: with the whole
/// budget held (another crawl's large files), the crawl waits before ffmpeg decodes the video, and goes on once
/// the pixels are given back. Before, a small machine's budget bounded stills only, and videos decoded beside them
/// whatever it said.
#[tokio::test]
async fn a_video_waits_for_the_pixel_budget_before_its_proxies_are_made() {
    let lib = library().await;
    fixtures::quicktime_video(&lib.root.join("clip.mp4"), "2023-12-25T01:15:00Z", &[]);
    let handler = lib.crawler(lib.settings());
    let cancel = tokio_util::sync::CancellationToken::new();
    let held = handler.pixel_budget().reserve(u64::MAX, &cancel).await.unwrap();
    let crawl = lib.run_handler(&handler, lib.item(serde_json::json!({})).await);
    tokio::pin!(crawl);
    support::until_a_file_waits_for_pixels(&handler, crawl.as_mut(), "the video").await;
    assert_eq!(files_named(&lib.proxies, "poster.jpg"), 0, "no poster while it waits");
    drop(held);
    let result = crawl.await.expect("the crawl succeeds");
    assert_eq!(result["ingested"], 1, "{result}");
    assert_eq!(files_named(&lib.proxies, "poster.jpg"), 1);
}

/// The catalogue as the crawl sees it, except that the first relocation's answer is lost: the relocation is
/// written, then the connection goes (an outage), so the crawl tries the file again and finds the asset already at
/// the file's path.
struct RelocationAnswerLost {
    inner: std::sync::Arc<almanac_store_pg::PgStore>,
    lost: std::sync::atomic::AtomicBool,
}

impl support::twist::RealStore for RelocationAnswerLost {
    fn store(&self) -> &almanac_store_pg::PgStore {
        &self.inner
    }
}

impl support::twist::CatalogueTwist for RelocationAnswerLost {
    async fn relocate(
        &self,
        fence: almanac_domain::ports::Fence,
        asset: almanac_domain::AssetId,
        facts: &almanac_domain::ports::FileFacts,
    ) -> Result<(), almanac_domain::ports::CatalogueError> {
        use almanac_domain::ports::CatalogueStore;
        self.inner.relocate(fence, asset, facts).await?;
        if self.lost.swap(false, std::sync::atomic::Ordering::SeqCst) {
            let gone = almanac_domain::Cause::new("the connection went before the answer");
            return Err(almanac_domain::ports::CatalogueError::Unavailable(gone));
        }
        Ok(())
    }
}

/// The same photo dated by its file's time, copied away without its time, when the answer of its move is lost:
/// the crawl tries the file again and finds the asset already moved there, and it keeps its day as a move whose
/// answer came does. Before, the second try dated it again by the copy's time.
#[tokio::test]
async fn a_photo_dated_by_its_file_time_keeps_its_day_when_the_answer_of_its_move_is_lost() {
    let lib = library().await;
    let put = |rel: &str, at: &str| {
        let path = lib.write(rel, &bare_jpeg(9));
        let at: chrono::DateTime<chrono::Utc> = at.parse().unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(at.into()).unwrap();
    };
    put("inbox/scan.jpg", "2015-06-01T12:00:00Z");
    lib.crawl().await;
    assert_eq!(find(&lib.dated().await, "inbox/scan.jpg").day, "06-01");

    put("2015/scan.jpg", "2020-01-01T12:00:00Z");
    std::fs::remove_file(lib.root.join("inbox/scan.jpg")).unwrap();
    let twisted = RelocationAnswerLost { inner: lib.store.clone(), lost: true.into() };
    let crawl =
        almanac_handlers::CrawlHandler::new(std::sync::Arc::new(support::twist::Twisted(twisted)), lib.settings());
    let (lines, result) = support::logs::capture(lib.run_handler(&crawl, lib.item(serde_json::json!({})).await)).await;
    let result = result.expect("the crawl succeeds");
    assert_eq!(support::logs::events(&lines, "catalogue_retry").len(), 1, "the file tried again: {result}");
    let row = find(&lib.dated().await, "2015/scan.jpg").clone();
    assert_eq!((row.source.as_str(), row.day.as_str()), ("file_mtime", "06-01"), "not the copy's day: {result}");
}
