//! Crawl benchmarks (run through `cargo xtask bench crawl`): JSON on stdout.
//!
//! Side by side in one run, on the same cores:
//! - first crawl of N 12-megapixel JPEGs with EXIF (all three proxies each) vs `vipsthumbnail` making 300 px
//!   thumbnails of the same files;
//! - first crawl of a mixed library (PNG, WebP, TIFF, GIF, HEIC, AVIF of 3 megapixels) vs `vipsthumbnail` on
//!   the same files, and RAW files (DNG through their embedded 12-megapixel preview), which vipsthumbnail does
//!   not read that way, on their own;
//! - re-crawl of M unchanged small files vs `find ROOT -printf '%s %T@\n'`;
//! - peak RSS after each phase, and each re-crawl's own peak RSS growth and open files; with more than 100,000
//!   files (`cargo xtask bench crawl --files 1000000`) the re-crawl runs at 100,000 too, as the baseline.
//!
//! `ALMANAC_BENCH_IMAGES` (default 300), `ALMANAC_BENCH_MIXED` (files per format in the mix, default 10) and
//! `ALMANAC_BENCH_FILES` (default 100000) change the sizes; `ALMANAC_BENCH_ROUNDS` the re-crawl's rounds (default
//! 5 at 100,000 files, 3 above).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use almanac_domain::{
    CrawlArgs, CrawlReport, NewWorkItem, Scope, StorageConfigId, WorkKind, WorkQueue, WorkerId,
    ports::{ClaimRequest, LeaseDuration, ServedConfigs},
};
use almanac_executor::{HandlerContext, ProgressReporter, WorkHandler};
use almanac_handlers::{CrawlHandler, CrawlSettings};
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
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

async fn crawl(store: &Arc<PgStore>, config: StorageConfigId, proxies: &Path) -> (Duration, CrawlReport) {
    store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    // Claimed as a Worker would, so the crawl's fenced writes hold (the lease outlasts any benchmark run).
    let claim = ClaimRequest {
        worker_id: WorkerId::new("bench").unwrap(),
        served: ServedConfigs::All,
        kinds: vec![WorkKind::Crawl],
        lease: LeaseDuration::new(Duration::from_secs(86_400)).unwrap(),
    };
    let claimed = store.claim(&claim).await.unwrap().expect("the crawl just enqueued");
    // As the Worker runs it: its shipped crawl settings.
    let mut settings = CrawlSettings::new(proxies.to_owned());
    // The library was seeded moments ago, and nothing writes it now: no file is left to settle.
    settings.settle_time = Duration::ZERO;
    let handler = CrawlHandler::new(store.clone(), settings);
    let ctx = HandlerContext {
        item: claimed.item,
        fence: claimed.fence,
        cancel: CancellationToken::new(),
        progress: ProgressReporter::default(),
    };
    let started = Instant::now();
    let report = handler.work(CrawlArgs::default(), ctx).await.expect("crawl");
    let result = serde_json::to_value(&report).expect("a crawl's report is JSON");
    store.complete(claimed.fence, Some(&result)).await.expect("complete");
    (started.elapsed(), report)
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

/// The mixed library: `per_format` files of each format vipsthumbnail also reads (returned), and as many DNGs
/// with a 12-megapixel preview under `raw/` (not returned).
fn generate_mixed(root: &Path, per_format: usize, threads: usize) -> Vec<PathBuf> {
    use almanac_media::fixtures::exif_block::{Block, app1};
    std::fs::create_dir_all(root.join("raw")).unwrap();
    let formats = ["png", "webp", "tiff", "gif", "heic", "avif"];
    let jobs: Vec<(usize, &str)> = formats
        .iter()
        .flat_map(|f| (0..per_format).map(move |i| (i, *f)))
        .chain((0..per_format).map(|i| (i, "dng")))
        .collect();
    std::thread::scope(|s| {
        for t in 0..threads {
            let jobs = &jobs;
            s.spawn(move || {
                for (j, (i, format)) in jobs.iter().enumerate().filter(|(j, _)| j % threads == t) {
                    let (i, seed) = (*i, j as u32);
                    let path = root.join(format!("{format}_{i:03}.{format}"));
                    match *format {
                        "png" => std::fs::write(&path, fixtures::png(2000, 1500, seed)).unwrap(),
                        "webp" => std::fs::write(&path, fixtures::encoded(2000, 1500, seed, image::ImageFormat::WebP))
                            .unwrap(),
                        "tiff" => std::fs::write(&path, fixtures::encoded(2000, 1500, seed, image::ImageFormat::Tiff))
                            .unwrap(),
                        "gif" => {
                            std::fs::write(&path, fixtures::encoded(2000, 1500, seed, image::ImageFormat::Gif)).unwrap()
                        }
                        "heic" => fixtures::heic(&path, 2000, 1500, seed),
                        "avif" => fixtures::avif(&path, 2000, 1500, seed),
                        _ => {
                            let plain = fixtures::jpeg(4000, 3000, seed, true, &FixtureExif::default());
                            let block = Block::camera(i % 2 == 0).bytes();
                            let preview = [&plain[..2], &app1(&block), &plain[2..]].concat();
                            let raw = root.join(format!("raw/DNG_{i:03}.dng"));
                            std::fs::write(raw, fixtures::tiff_raw(&block, &preview)).unwrap();
                        }
                    }
                }
            });
        }
    });
    formats.iter().flat_map(|f| (0..per_format).map(move |i| root.join(format!("{f}_{i:03}.{f}")))).collect()
}

/// Resets this process's peak RSS (VmHWM) to its current RSS, so the next phase's peak is its own.
fn reset_peak_rss() {
    // Linux ≥ 4.0; where it is refused the peak stays the process's own, which the report says.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn current_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// The most file descriptors this process had open at once while `work` ran, sampled every 5 ms.
async fn peak_open_files<T>(work: impl std::future::Future<Output = T>) -> (T, usize) {
    let open = || std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut peak = open();
            while !std::sync::atomic::AtomicBool::load(&stop, std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(open());
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        }
    });
    let out = work.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (out, sampler.join().expect("the sampler"))
}

/// `files` small unchanged files in a library of their own, catalogued as a previous crawl would have left
/// them, re-crawled beside `find` over the same tree (find then ours each round, on the same warm cache).
async fn recrawl_unchanged(
    store: &Arc<PgStore>,
    url: &str,
    dir: &Path,
    proxies: &Path,
    files: usize,
    cores: usize,
) -> serde_json::Value {
    let small = dir.join(format!("small-{files}"));
    let generation = Instant::now();
    generate_small(&small, files, cores);
    let (_, config) = store
        .add_storage_config(&NewStorageConfig { username: "bench".into(), root_path: small.clone() })
        .await
        .unwrap();
    seed_catalogue(url, config.id, files, proxies, cores).await;
    eprintln!("{files} files generated and catalogued in {:.0} s", generation.elapsed().as_secs_f64());
    // Medians compared (one round alone varies by ±15% on this machine).
    let rounds = env_usize("ALMANAC_BENCH_ROUNDS", if files > 100_000 { 3 } else { 5 }).max(1);
    let (mut finds, mut ours_runs, mut peaks, mut fds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let find = Command::new("find").arg(&small).args(["-printf", "%s %T@\n"]).output().unwrap();
        assert!(find.status.success());
        finds.push(started.elapsed().as_secs_f64());
        drop(find);
        reset_peak_rss();
        let before = current_rss_kib();
        let ((recrawl, result), open) = peak_open_files(crawl(store, config.id, proxies)).await;
        assert_eq!(result.counts.unchanged, files as u64, "{result:?}");
        assert_eq!(result.counts.bytes_hashed, 0);
        ours_runs.push(recrawl.as_secs_f64());
        peaks.push(peak_rss_kib().saturating_sub(before));
        fds.push(open);
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (find_time, recrawl) = (median(&finds), median(&ours_runs));
    serde_json::json!({
        "files": files,
        "rounds": rounds,
        "ours_seconds_median": recrawl,
        "find_seconds_median": find_time,
        "ours_over_find": recrawl / find_time,
        "ours_seconds_each": ours_runs,
        "find_seconds_each": finds,
        "target_ratio_at_most": 1.2,
        "peak_rss_growth_kib_each": peaks,
        "peak_open_files_each": fds,
    })
}

/// `files` files of 64 bytes, a thousand to a folder, all with one mtime.
fn generate_small(root: &Path, files: usize, threads: usize) {
    let fixed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    let folders = files.div_ceil(1000);
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                for folder in (0..folders).filter(|f| f % threads == t) {
                    let sub = root.join(format!("{folder:04}"));
                    std::fs::create_dir_all(&sub).unwrap();
                    for i in folder * 1000..((folder + 1) * 1000).min(files) {
                        let f = std::fs::File::create(sub.join(format!("{i}.jpg"))).unwrap();
                        f.set_len(64).unwrap();
                        f.set_modified(fixed).unwrap();
                    }
                }
            });
        }
    });
}

/// Catalogues the small files as already crawled (same size and mtime, all proxies, their files in the proxy
/// layout with the recorded size: the re-crawl looks at each), as a previous crawl would have left them.
async fn seed_catalogue(url: &str, config: StorageConfigId, files: usize, proxies: &Path, threads: usize) {
    let mut conn = AsyncPgConnection::establish(url).await.unwrap();
    conn.batch_execute(&format!(
        "INSERT INTO media_assets (id, storage_config_id, file_path, display_path, content_hash, size_bytes,
             file_modified_at, media_type, captured_at, captured_at_source, capture_month, capture_day)
         SELECT gen_random_uuid(), '{config}', convert_to(p, 'UTF8'), p, md5(p) || md5(p || 'x'), 64,
                to_timestamp(1600000000), 'image', to_timestamp(1600000000), 'file_mtime', 9, 13
           FROM (SELECT format('%s/%s.jpg', lpad((g / 1000)::text, 4, '0'), g) AS p
                   FROM generate_series(0, {last}) g) s;
         INSERT INTO proxy_files (id, asset_id, proxy_type, relative_path, inline_value, size_bytes)
         SELECT gen_random_uuid(), a.id, t,
                CASE WHEN t = 'blurhash' THEN NULL
                     ELSE a.storage_config_id::text || '/' || left(a.content_hash, 2) || '/' || a.content_hash || '/'
                          || t || '.jpg' END,
                CASE WHEN t = 'blurhash' THEN 'LKO2?U%2Tw=w' END, 1
           FROM media_assets a CROSS JOIN unnest(ARRAY['preview', 'thumbnail', 'blurhash']) AS t
          WHERE a.storage_config_id = '{config}';
",
        last = files - 1,
    ))
    .await
    .unwrap();
    #[derive(diesel::QueryableByName)]
    struct Proxy {
        #[diesel(sql_type = diesel::sql_types::Text)]
        relative_path: String,
    }
    let proxy_files: Vec<Proxy> = diesel::sql_query(format!(
        "SELECT p.relative_path FROM proxy_files p JOIN media_assets a ON a.id = p.asset_id
          WHERE a.storage_config_id = '{config}' AND p.relative_path IS NOT NULL"
    ))
    .load(&mut conn)
    .await
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..threads {
            let proxy_files = &proxy_files;
            s.spawn(move || {
                for p in proxy_files.iter().skip(t).step_by(threads) {
                    let file = proxies.join(&p.relative_path);
                    if std::fs::write(&file, b"x").is_err() {
                        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                        std::fs::write(&file, b"x").unwrap();
                    }
                }
            });
        }
    });
    // Vacuumed and analysed now, so autovacuum does not start on these rows in the middle of a round.
    conn.batch_execute("VACUUM ANALYZE media_assets").await.unwrap();
    conn.batch_execute("VACUUM ANALYZE proxy_files").await.unwrap();
}

fn vipsthumbnail(paths: &[PathBuf], out: &Path) -> Duration {
    std::fs::create_dir_all(out).unwrap();
    let started = Instant::now();
    let status = Command::new("vipsthumbnail")
        .args(["--size", "300"])
        .arg("-o")
        .arg(format!("{}/%s.jpg", out.display()))
        .args(paths)
        .status()
        .expect("vipsthumbnail (apt-get install -y libvips-tools)");
    assert!(status.success());
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let images = env_usize("ALMANAC_BENCH_IMAGES", 300);
    let files = env_usize("ALMANAC_BENCH_FILES", 100_000);
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), cores + 4, Duration::from_secs(30)).unwrap());

    // First crawl of 12 MP JPEGs vs vipsthumbnail on the same files: three rounds on a third of the images each
    // (its own library), vipsthumbnail then ours, so that drift on the machine falls on both alike.
    let proxies = dir.path().join("proxies");
    let (mut vips, mut ours) = (Duration::ZERO, Duration::ZERO);
    let mut round_ratios = Vec::new();
    for round in 0..3 {
        let photos = dir.path().join(format!("photos-{round}"));
        let count = images / 3 + usize::from(round < images % 3);
        let paths = generate_images(&photos, count, cores);
        let theirs = vipsthumbnail(&paths, &dir.path().join(format!("vips-{round}")));
        let (_, config) = store
            .add_storage_config(&NewStorageConfig { username: "bench".into(), root_path: photos.clone() })
            .await
            .unwrap();
        let (mine, result) = crawl(&store, config.id, &proxies).await;
        assert_eq!(result.counts.ingested, count as u64, "{result:?}");
        round_ratios.push(mine.as_secs_f64() / theirs.as_secs_f64());
        (vips, ours) = (vips + theirs, ours + mine);
    }
    let rss_after_first_crawl = peak_rss_kib();

    // First crawl of the mixed library: the formats vipsthumbnail reads, compared; then the RAWs alone.
    let per_format = env_usize("ALMANAC_BENCH_MIXED", 10);
    let mixed = dir.path().join("mixed");
    let mixed_paths = generate_mixed(&mixed, per_format, cores);
    let vips_mixed = vipsthumbnail(&mixed_paths, &dir.path().join("vips-mixed"));
    let raws = mixed.join("raw");
    let raw_staged = dir.path().join("raw-staged");
    std::fs::rename(&raws, &raw_staged).unwrap();
    let (_, mixed_config) = store
        .add_storage_config(&NewStorageConfig { username: "bench".into(), root_path: mixed.clone() })
        .await
        .unwrap();
    let (ours_mixed, result) = crawl(&store, mixed_config.id, &proxies).await;
    assert_eq!(result.counts.ingested, mixed_paths.len() as u64, "{result:?}");
    std::fs::rename(&raw_staged, &raws).unwrap();
    let (ours_raw, result) = crawl(&store, mixed_config.id, &proxies).await;
    assert_eq!(result.counts.ingested, per_format as u64, "{result:?}");
    let rss_after_mixed = peak_rss_kib();

    // Re-crawl of many unchanged small files vs find: at 100,000 files (the baseline) and, when more are asked
    // for, at that many too, each in a library of its own, so peak memory and open files can be compared.
    let mut recrawls = vec![recrawl_unchanged(&store, db.url(), dir.path(), &proxies, files.min(100_000), cores).await];
    if files > 100_000 {
        recrawls.push(recrawl_unchanged(&store, db.url(), dir.path(), &proxies, files, cores).await);
    }
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
            "ours_over_vipsthumbnail_each_round": round_ratios,
            "target_ratio_at_most": 1.0,
        },
        "first_crawl_mixed": {
            "formats": ["png", "webp", "tiff", "gif", "heic", "avif"],
            "files": mixed_paths.len(),
            "megapixels": 3,
            "ours_seconds": ours_mixed.as_secs_f64(),
            "vipsthumbnail_seconds": vips_mixed.as_secs_f64(),
            "ours_over_vipsthumbnail": ours_mixed.as_secs_f64() / vips_mixed.as_secs_f64(),
            "raw_dng_files": per_format,
            "raw_preview_megapixels": 12,
            "raw_seconds": ours_raw.as_secs_f64(),
            "raw_files_per_second": per_format as f64 / ours_raw.as_secs_f64(),
        },
        "recrawl_unchanged": recrawls,
        "peak_rss_kib": {
            "after_first_crawl": rss_after_first_crawl,
            "after_mixed_crawl": rss_after_mixed,
            "after_recrawl": rss_after_recrawl,
        },
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
