//! A library on a disk whose inode table took a bad write: a folder lists a photo's name that the kernel then
//! refuses to look up ("Structure needs cleaning"). The volume is an ext4 file system in an image file mounted on
//! the library's root, damaged with `debugfs`; where it cannot be made or mounted (not root, no loop devices) the
//! test says SKIPPED and passes.

mod support;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_media::scratch_volume::ScratchVolume;
use diesel::sql_query;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use support::{Library, library};

#[derive(diesel::QueryableByName)]
struct Path {
    #[diesel(sql_type = Text)]
    display_path: String,
}

async fn active_paths(lib: &Library) -> Vec<String> {
    let rows: Vec<Path> =
        sql_query("SELECT display_path FROM media_assets WHERE NOT is_soft_deleted ORDER BY file_path")
            .load(&mut lib.conn().await)
            .await
            .unwrap();
    rows.into_iter().map(|r| r.display_path).collect()
}

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(320, 240, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

/// The damaged photo's asset is kept and the crawl names it; a photo added beside it is catalogued, and so is one
/// in a damaged entry's sibling folder. Before, the whole folder counted as unreadable, at every crawl while the
/// disk stayed so: nothing new in it was ever catalogued.
#[tokio::test]
async fn a_damaged_entry_keeps_its_asset_and_the_photos_beside_it_are_catalogued() {
    let lib = library().await;
    let Some(mut volume) = ScratchVolume::ext4(&lib.root) else { return };
    lib.write("trip/a.jpg", &photo(1));
    lib.write("trip/b.jpg", &photo(2));
    lib.write("trip/notes.txt", b"packing list");
    let first = lib.crawl().await;
    assert_eq!(active_paths(&lib).await, ["trip/a.jpg", "trip/b.jpg"], "{first}");

    volume.damage_inode("trip/b.jpg");
    volume.damage_inode("trip/notes.txt");
    lib.write("trip/c.jpg", &photo(3));
    lib.write("trip/later/d.jpg", &photo(4));
    let result = lib.crawl().await;

    assert_eq!(active_paths(&lib).await, ["trip/a.jpg", "trip/b.jpg", "trip/c.jpg", "trip/later/d.jpg"], "{result}");
    assert_eq!(result["soft_deleted"].as_u64().unwrap_or(0), 0, "{result}");
    let not_walked = result["unreadable_folders"].as_array().cloned().unwrap_or_default();
    assert_eq!(not_walked.len(), 1, "the damaged photo, not the damaged text file: {result}");
    let path = not_walked[0]["path"].as_str().unwrap();
    let reason = not_walked[0]["reason"].as_str().unwrap();
    assert!(path.ends_with("trip/b.jpg"), "{result}");
    assert!(reason.contains("Structure needs cleaning") && reason.contains("kept"), "{result}");
}

/// A damaged folder that holds every photo of the library: the crawl is refused as for a root found empty, and its
/// error names the folder and why instead of only asking whether the share is mounted. Confirmed, the crawl still
/// keeps what the catalogue has under the folder it could not read.
#[tokio::test]
async fn a_damaged_folder_holding_every_photo_is_named_when_the_crawl_is_refused() {
    let lib = library().await;
    let Some(mut volume) = ScratchVolume::ext4(&lib.root) else { return };
    lib.write("trip/a.jpg", &photo(1));
    lib.write("trip/b.jpg", &photo(2));
    lib.crawl().await;
    volume.damage_inode("trip");

    let refused = lib.crawl_with(serde_json::json!({}), Default::default()).await.unwrap_err();
    assert!(refused.retryable, "{refused:?}");
    assert!(refused.message.contains("1 of its folders or entries could not be read"), "{refused:?}");
    assert!(refused.message.contains("trip: it could not be looked at"), "{refused:?}");
    assert!(refused.message.contains("Structure needs cleaning"), "{refused:?}");
    let confirmed = lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), Default::default()).await;
    let result = confirmed.expect("a confirmed crawl");
    assert_eq!(active_paths(&lib).await, ["trip/a.jpg", "trip/b.jpg"], "kept: {result}");
}

/// A damaged sidecar would leave its photo read without it, and dated again without the date the sidecar holds:
/// its folder is not walked at all, and the photo keeps its date.
#[tokio::test]
async fn a_damaged_sidecar_keeps_its_folder_as_it_was() {
    let lib = library().await;
    let Some(mut volume) = ScratchVolume::ext4(&lib.root) else { return };
    // No date of its own: the sidecar's wins.
    lib.write("raw/a.jpg", &fixtures::jpeg(64, 48, 1, false, &FixtureExif::default()));
    let xmp = r#"<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
        <rdf:Description xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:DateTimeOriginal="2001-02-03T04:05:06"/>
        </rdf:RDF></x:xmpmeta>"#;
    lib.write("raw/a.jpg.xmp", xmp.as_bytes());
    lib.write("other/c.jpg", &photo(3));
    lib.crawl().await;
    let sql =
        "SELECT (capture_month * 100 + capture_day)::bigint AS n FROM media_assets WHERE display_path = 'raw/a.jpg'";
    let day = async || lib.count(sql).await;
    assert_eq!(day().await, 203, "the sidecar's date");

    volume.damage_inode("raw/a.jpg.xmp");
    lib.write("raw/b.jpg", &photo(2));
    let result = lib.crawl().await;
    assert_eq!(active_paths(&lib).await, ["other/c.jpg", "raw/a.jpg"], "the folder not walked: {result}");
    assert_eq!(day().await, 203, "the sidecar's date kept: {result}");
    let not_walked = result["unreadable_folders"].as_array().cloned().unwrap_or_default();
    let reason = not_walked[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("a.jpg.xmp") && reason.contains("Structure needs cleaning"), "{result}");
}

/// An asset whose own path is damaged, with the same photo beside it under another name: in doubt whether its own
/// path is there, the asset stays where it is and the other file is recorded as its copy (before, the asset moved
/// to the copy, its own path dropped from the catalogue).
#[tokio::test]
async fn an_asset_whose_own_path_is_damaged_stays_there_and_a_duplicate_is_its_copy() {
    let lib = library().await;
    let Some(mut volume) = ScratchVolume::ext4(&lib.root) else { return };
    lib.write("trip/a.jpg", &photo(1));
    lib.crawl().await;
    volume.damage_inode("trip/a.jpg");
    lib.write("trip/a (1).jpg", &photo(1));
    let result = lib.crawl().await;
    assert_eq!(active_paths(&lib).await, ["trip/a.jpg"], "{result}");
    assert_eq!(lib.count("SELECT count(*) AS n FROM asset_extra_paths").await, 1, "{result}");
}
