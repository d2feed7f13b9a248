//! Crawl benchmarks (run through `cargo xtask bench crawl`): JSON on stdout.
//!
//! Side by side in one run, on the same cores:
//! - first crawl of N 12-megapixel JPEGs with EXIF (all three proxies each) vs `vipsthumbnail` making 300 px
//!   thumbnails of the same files;
//! - re-crawl of M unchanged small files vs `find ROOT -printf '%s %T@\n'`;
//! - peak RSS after each phase.
//!
//! `ALMANAC_BENCH_IMAGES` (default 300) and `ALMANAC_BENCH_FILES` (default 100000) change the sizes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use almanac_domain::{
    ClaimRequest, LeaseDuration, NewWorkItem, Scope, ServedConfigs, StorageConfigId, WorkKind, WorkQueue, WorkerId,
};
use almanac_executor::{Handler, HandlerContext, ProgressReporter};
use almanac_handlers::{CrawlHandler, CrawlSettings};
use almanac_media::ToolLimits;
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use tokio_util::sync::CancellationToken;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

async fn crawl(
    store: &Arc<PgStore>,
    config: StorageConfigId,
    proxies: &Path,
    cores: usize,
) -> (Duration, serde_json::Value) {
    store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    // Claimed as a Worker would, so the crawl's fenced writes hold (the lease outlasts any benchmark run).
    let claim = ClaimRequest {
        worker_id: WorkerId::new("bench").unwrap(),
        served: ServedConfigs::All,
        kinds: vec![WorkKind::Crawl],
        lease: LeaseDuration::new(Duration::from_secs(86_400)).unwrap(),
    };
    let claimed = store.claim(&claim).await.unwrap().expect("the crawl just enqueued");
    let settings = CrawlSettings {
        proxy_root: proxies.to_owned(),
        max_concurrent_files: cores,
        tool_limits: ToolLimits::default(),
        mass_deletion: almanac_handlers::MassDeletionGuard::default(),
        max_image_pixels: almanac_media::DEFAULT_MAX_PIXELS,
    };
    let handler = CrawlHandler::new(store.clone(), settings);
    let ctx = HandlerContext {
        item: claimed.item,
        fence: claimed.fence,
        cancel: CancellationToken::new(),
        progress: ProgressReporter::default(),
    };
    let started = Instant::now();
    let result = handler.run(ctx).await.expect("crawl").expect("result");
    store.complete(claimed.fence, Some(&result)).await.expect("complete");
    (started.elapsed(), result)
}

fn generate_images(root: &Path, n: usize, threads: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(root).unwrap();
    let paths: Vec<PathBuf> = (0..n).map(|i| root.join(format!("IMG_{i:04}.JPG"))).collect();
    std::thread::scope(|s| {
        for t in 0..threads {
            let paths = &paths;
            s.spawn(move || {
                for (i, p) in paths.iter().enumerate().filter(|(i, _)| i % threads == t) {
                    let exif = FixtureExif::camera(&format!("2020:05:{:02} 12:00:{:02}", 1 + i % 28, i % 60), "+02:00");
                    std::fs::write(p, fixtures::jpeg(4000, 3000, i as u32, i % 2 == 0, &exif)).unwrap();
                }
            });
        }
    });
    paths
}

#[tokio::main]
async fn main() {
    let images = env_usize("ALMANAC_BENCH_IMAGES", 300);
    let files = env_usize("ALMANAC_BENCH_FILES", 100_000);
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), cores + 4, Duration::from_secs(30)).unwrap());

    // First crawl of 12 MP JPEGs vs vipsthumbnail on the same files.
    let photos = dir.path().join("photos");
    let paths = generate_images(&photos, images, cores);
    let vips_out = dir.path().join("vips");
    std::fs::create_dir_all(&vips_out).unwrap();
    let started = Instant::now();
    let status = Command::new("vipsthumbnail")
        .args(["--size", "300"])
        .arg("-o")
        .arg(format!("{}/%s.jpg", vips_out.display()))
        .args(&paths)
        .status()
        .expect("vipsthumbnail (apt-get install -y libvips-tools)");
    assert!(status.success());
    let vips = started.elapsed();
    let (_, config) = store
        .add_storage_config(&NewStorageConfig { username: "bench".into(), root_path: photos.clone() })
        .await
        .unwrap();
    let proxies = dir.path().join("proxies");
    let (ours, result) = crawl(&store, config.id, &proxies, cores).await;
    assert_eq!(result["ingested"].as_u64(), Some(images as u64), "{result}");
    let rss_after_first_crawl = peak_rss_kib();

    // Re-crawl of many unchanged small files vs find.
    let small = dir.path().join("small");
    let fixed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    for i in 0..files {
        let sub = small.join(format!("{:03}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        let f = std::fs::File::create(sub.join(format!("{i}.jpg"))).unwrap();
        f.set_len(64).unwrap();
        f.set_modified(fixed).unwrap();
    }
    let (_, small_config) = store
        .add_storage_config(&NewStorageConfig { username: "bench".into(), root_path: small.clone() })
        .await
        .unwrap();
    // Catalogue them as already crawled (same size and mtime, all proxies), as a previous crawl would have left
    // them.
    let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
    conn.batch_execute(&format!(
        "INSERT INTO media_assets (id, storage_config_id, file_path, display_path, content_hash, size_bytes,
             file_modified_at, media_type, captured_at, captured_at_source, capture_month, capture_day)
         SELECT gen_random_uuid(), '{config}', convert_to(p, 'UTF8'), p, md5(p) || md5(p || 'x'), 64,
                to_timestamp(1600000000), 'image', to_timestamp(1600000000), 'file_mtime', 9, 13
           FROM (SELECT format('%s/%s.jpg', lpad((g / 1000)::text, 3, '0'), g) AS p
                   FROM generate_series(0, {last}) g) s;
         INSERT INTO proxy_files (id, asset_id, proxy_type, relative_path, inline_value, size_bytes)
         SELECT gen_random_uuid(), a.id, t,
                CASE WHEN t = 'blurhash' THEN NULL ELSE a.id::text || '/' || t || '.jpg' END,
                CASE WHEN t = 'blurhash' THEN 'LKO2?U%2Tw=w' END, 1
           FROM media_assets a CROSS JOIN unnest(ARRAY['preview', 'thumbnail', 'blurhash']) AS t
          WHERE a.storage_config_id = '{config}';
         ANALYZE media_assets;
         ANALYZE proxy_files;",
        config = small_config.id,
        last = files - 1,
    ))
    .await
    .unwrap();
    let started = Instant::now();
    let find = Command::new("find").arg(&small).args(["-printf", "%s %T@\n"]).output().unwrap();
    assert!(find.status.success());
    let find_time = started.elapsed();
    let (recrawl, result) = crawl(&store, small_config.id, &proxies, cores).await;
    assert_eq!(result["unchanged"].as_u64(), Some(files as u64), "{result}");
    assert_eq!(result["bytes_hashed"].as_u64(), Some(0));
    let rss_after_recrawl = peak_rss_kib();

    let report = serde_json::json!({
        "benchmark": "crawl",
        "cores": cores,
        "first_crawl": {
            "images": images,
            "megapixels": 12,
            "ours_seconds": ours.as_secs_f64(),
            "ours_images_per_second": images as f64 / ours.as_secs_f64(),
            "vipsthumbnail_seconds": vips.as_secs_f64(),
            "vipsthumbnail_images_per_second": images as f64 / vips.as_secs_f64(),
            "ours_over_vipsthumbnail": ours.as_secs_f64() / vips.as_secs_f64(),
            "target_ratio_at_most": 1.5,
        },
        "recrawl_unchanged": {
            "files": files,
            "ours_seconds": recrawl.as_secs_f64(),
            "find_seconds": find_time.as_secs_f64(),
            "ours_over_find": recrawl.as_secs_f64() / find_time.as_secs_f64(),
            "target_ratio_at_most": 2.0,
        },
        "peak_rss_kib": {
            "after_first_crawl": rss_after_first_crawl,
            "after_recrawl": rss_after_recrawl,
        },
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
