//! A proxy is whole or absent (docs/safety.md, invariant 10), seen from the crawl: proxy files that went missing or
//! were cut short after they were made are found by the next crawl and made again, and a crawl that can write no
//! proxy at all fails with one error naming `storage.proxy_root`. Real files, a real catalogue.

mod support;

use almanac_media::fixtures::{self, FixtureExif};
use almanac_media::scratch_volume::ScratchVolume;
use diesel::sql_query;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
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

/// Every proxy row points at a file of its recorded size, and each JPEG decodes to its end.
async fn assert_rows_point_at_whole_files(lib: &Library) {
    let rows = lib.proxy_rows().await;
    assert!(!rows.is_empty());
    for row in rows {
        let file = lib.proxies.join(&row.relative_path);
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{row:?}: {e}"));
        assert_eq!(bytes.len() as i64, row.size_bytes, "{row:?}");
        if row.relative_path.ends_with(".jpg") {
            image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg)
                .unwrap_or_else(|e| panic!("{row:?} does not decode: {e}"));
        }
    }
}

#[tokio::test]
async fn proxies_deleted_or_cut_short_after_the_crawl_are_made_again_by_the_next_one() {
    let lib = library().await;
    lib.write("a.jpg", &photo(1));
    lib.write("b.jpg", &photo(2));
    lib.write("c.jpg", &photo(3));
    fixtures::video(&lib.root.join("d.mp4"), 1.0, 320, 240, "2021-06-01T10:00:00Z");
    let first = lib.crawl().await;
    assert_eq!(first["ingested"], 4, "{first}");

    // Behind the catalogue's back: a preview deleted, a thumbnail and a poster cut short (as a full disk or an
    // older bug left them), the catalogue still saying every proxy is there.
    std::fs::remove_file(lib.proxy_file("a.jpg", "preview").await).unwrap();
    let thumbnail = lib.proxy_file("b.jpg", "thumbnail").await;
    let bytes = std::fs::read(&thumbnail).unwrap();
    std::fs::write(&thumbnail, &bytes[..bytes.len() / 2]).unwrap();
    let poster = lib.proxy_file("d.mp4", "poster").await;
    let bytes = std::fs::read(&poster).unwrap();
    std::fs::write(&poster, &bytes[..8192.min(bytes.len() - 1)]).unwrap();

    let second = lib.crawl().await;
    assert_eq!(
        (second["proxies_regenerated"].as_u64(), second["unchanged"].as_u64(), second["failed"].as_u64()),
        (Some(3), Some(1), Some(0)),
        "the three assets with a broken proxy had their proxies made again: {second}"
    );
    assert_rows_point_at_whole_files(&lib).await;
    assert_eq!(lib.active_count().await, 4, "the same assets, none new");

    let third = lib.crawl().await;
    assert_eq!(
        (third["unchanged"].as_u64(), third["bytes_hashed"].as_u64()),
        (Some(4), Some(0)),
        "whole proxies are only looked at, nothing is read: {third}"
    );
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
