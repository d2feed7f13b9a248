//! Watching libraries (ADR 0014) on real files and a real queue: what a watcher sees becomes crawls of the
//! changed folders, coalesced; polling finds what events would not; an overflow falls back to polling with one
//! warning and a whole-root crawl; two Workers watching one config enqueue one copy of each change; a watcher
//! that starts crawls the whole root once (what changed while none ran). The supervisor where a file system or
//! the queue is hostile (a hung file system, a hung or failing polling pass) is in `supervisor.rs`.

mod supervisor;
#[path = "../support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::ports::{self, ServedConfigs, WatchChoice, WatchMode, WatchStore};
use almanac_domain::{
    CrawlArgs, DedupKey, QueueError, Scope, Status, WorkArgs, WorkItem, WorkItemId, WorkKind, WorkQueue, WorkerId,
};
use almanac_handlers::watch::{Batch, ConfigWatcher, FolderTree, WatchIo, WatchStatus};
use almanac_handlers::{InQuietHours, WatchSettings, Watching};
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::{NewStorageConfig, PgStore};
use diesel::sql_query;
use diesel::sql_types::Uuid;
use diesel_async::RunQueryDsl;
use support::{Library, library};
use tokio_util::sync::CancellationToken;

/// How long a test waits for what it expects before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

fn settings() -> WatchSettings {
    WatchSettings {
        poll_interval: Duration::from_millis(300),
        debounce: Duration::from_millis(300),
        max_delay: Duration::from_secs(5),
        ..WatchSettings::default()
    }
}

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(640, 480, seed, true, &FixtureExif::camera("2026:12:02 10:00:00", "+01:00"))
}

/// A file "copied" into the library: written beside it, then copied in (as `cp` does: create, write, close).
fn copy_in(lib: &Library, rel: &str, content: &[u8]) {
    let outside = lib.dir.path().join("outside.tmp");
    std::fs::write(&outside, content).unwrap();
    let target = lib.root.join(rel);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(&outside, target).unwrap();
}

#[derive(diesel::QueryableByName)]
struct Id {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
}

/// The crawls of changes (of folders) of the library's config enqueued so far (queued, or taken by
/// [`crawls_until`]), oldest first: not the whole-root crawls a watcher enqueues as it starts or falls back.
async fn crawls(lib: &Library) -> Vec<WorkItem> {
    all_crawls(lib).await.into_iter().filter(|i| !args(i).is_whole_root()).collect()
}

/// Every crawl of the library's config enqueued so far, oldest first.
async fn all_crawls(lib: &Library) -> Vec<WorkItem> {
    let ids: Vec<Id> = sql_query(
        "SELECT id FROM work_items WHERE kind = 'crawl' AND storage_config_id = $1 ORDER BY requested_at, id",
    )
    .bind::<Uuid, _>(lib.config.as_uuid())
    .load(&mut lib.conn().await)
    .await
    .unwrap();
    let mut items = Vec::new();
    for Id { id } in ids {
        items.push(lib.store.get(WorkItemId::from_uuid(id)).await.unwrap().unwrap());
    }
    items
}

fn args(item: &WorkItem) -> CrawlArgs {
    CrawlArgs::from_payload(&item.payload).unwrap()
}

/// Waits until the crawls of changes enqueued satisfy `done`, and answers them; fails after [`PATIENCE`].
/// Meanwhile each queued crawl (whole-root ones too) is taken and finished, as a Worker would run it: a watcher
/// holds what it sees while the crawl it enqueued last is still queued.
async fn crawls_until(lib: &Library, what: &str, done: impl Fn(&[WorkItem]) -> bool) -> Vec<WorkItem> {
    let take = async |item: WorkItem| {
        let fence = lib.start(item.id).await;
        lib.finish(fence).await;
    };
    crawls_taken_until(lib, what, done, take).await
}

/// [`crawls_until`], each queued crawl handed to `take` (which runs it to its end).
async fn crawls_taken_until(
    lib: &Library,
    what: &str,
    done: impl Fn(&[WorkItem]) -> bool,
    take: impl AsyncFn(WorkItem),
) -> Vec<WorkItem> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let all = all_crawls(lib).await;
        let items: Vec<WorkItem> = all.iter().filter(|i| !args(i).is_whole_root()).cloned().collect();
        if done(&items) {
            return items;
        }
        let seen: Vec<(Vec<String>, usize)> = items.iter().map(args).map(|a| (a.folders, a.closed.len())).collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {PATIENCE:?}; enqueued (folders, closed files): {seen:?}"
        );
        for item in all.into_iter().filter(|i| i.status == Status::Queued) {
            take(item).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a watcher watches (its recursive watch set, or its polling baseline taken).
async fn until_ready(status: &WatchStatus) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !status.is_ready() {
        assert!(tokio::time::Instant::now() < deadline, "the watcher did not start within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Worker's watchers after one look, and the status of its watcher of the library's config; the whole-root
/// crawl its watcher enqueued as it started is taken and finished.
async fn watching(lib: &Library, worker: &str, settings: WatchSettings) -> (Watching<PgStore>, Option<WatchStatus>) {
    started(lib, Watching::new(lib.store.clone(), WorkerId::new(worker).unwrap(), ServedConfigs::All, settings)).await
}

/// Worker `w1`'s watchers of every config, making `io`'s calls on the file system.
fn watchers(lib: &Library, settings: WatchSettings, io: WatchIo) -> Watching<PgStore> {
    Watching::new(lib.store.clone(), WorkerId::new("w1").unwrap(), ServedConfigs::All, settings).with_io(io)
}

/// [`watching`] of watchers made by the caller.
async fn started(lib: &Library, mut watching: Watching<PgStore>) -> (Watching<PgStore>, Option<WatchStatus>) {
    watching.look().await.unwrap();
    let status = watching.status(lib.config);
    if let Some(status) = &status {
        until_ready(status).await;
        let queued: Vec<WorkItem> = all_crawls(lib).await.into_iter().filter(|i| i.status == Status::Queued).collect();
        assert!(queued.iter().any(|i| args(i).is_whole_root()), "a watcher that starts crawls the whole root");
        for item in queued {
            let fence = lib.start(item.id).await;
            lib.finish(fence).await;
        }
    }
    (watching, status)
}

/// The key of the config's crawl, which the scheduler's and the watchers' whole-root crawls take.
fn crawl_key(lib: &Library) -> DedupKey {
    DedupKey::for_work(WorkKind::Crawl, Scope::Config(lib.config))
}

fn has_closed(items: &[WorkItem], path: &str) -> bool {
    items.iter().any(|i| args(i).closed.iter().any(|c| c.path == path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_copied_into_a_watched_library_becomes_a_crawl_of_its_folder_and_then_an_asset() {
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("2026/12")).unwrap();
    let (watching, status) = watching(&lib, "w1", settings()).await;
    let status = status.unwrap();
    assert_eq!(status.mode(), WatchMode::Events, "a local file system gets events");
    assert_eq!(status.report(Some(chrono::Utc::now())).last_change_at, None, "no change seen yet");
    let content = photo(1);
    let copied_at = chrono::Utc::now();
    copy_in(&lib, "2026/12/beach.jpg", &content);

    let items = crawls_until(&lib, "crawl with the closed photo", |i| has_closed(i, "2026/12/beach.jpg")).await;
    // The report dates the last change by the clock it is given (the database's).
    let now = chrono::Utc::now();
    let last = status.report(Some(now)).last_change_at.expect("the change is reported");
    let slack = chrono::Duration::seconds(1);
    assert!(last <= now && last >= copied_at - slack, "last change at {last}, copied at {copied_at}, now {now}");
    for item in &items {
        assert_eq!(args(item).folders, ["2026/12"], "only the photo's folder");
        assert_eq!(item.dedup_key, None, "a crawl of folders joins nothing");
    }
    let item = items.iter().find(|i| has_closed(std::slice::from_ref(i), "2026/12/beach.jpg")).unwrap();
    let closed = args(item).closed;
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].size, content.len() as u64);

    lib.run_handler(&lib.handler(), item.clone()).await.unwrap();
    let assets = format!(
        "SELECT count(*) AS n FROM media_assets WHERE storage_config_id = '{}' AND display_path = '2026/12/beach.jpg'",
        lib.config
    );
    assert_eq!(lib.count(&assets).await, 1);
    drop(watching);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_written_into_a_proxy_root_mounted_inside_the_library_are_no_change() {
    let lib = library().await;
    // The Worker's proxy root, inside the library (as a bind mount would put it); the crawl passes it over.
    let proxies = lib.root.join("proxies");
    std::fs::create_dir_all(proxies.join("c1/ab")).unwrap();
    std::fs::create_dir_all(lib.root.join("2026")).unwrap();
    let watching = Watching::new(lib.store.clone(), WorkerId::new("w1").unwrap(), ServedConfigs::All, settings());
    let (watching, status) = started(&lib, watching.avoiding(&proxies)).await;
    assert_eq!(status.unwrap().mode(), WatchMode::Events);
    // A proxy folder made and a proxy written, then a photo copied in: one window, if the proxies were seen.
    std::fs::create_dir_all(proxies.join("c1/ab/hash")).unwrap();
    std::fs::write(proxies.join("c1/ab/hash/thumbnail.jpg"), photo(2)).unwrap();
    std::fs::write(proxies.join("c1/ab/written.jpg"), photo(3)).unwrap();
    copy_in(&lib, "2026/beach.jpg", &photo(1));

    let items = crawls_until(&lib, "crawl of the photo", |i| has_closed(i, "2026/beach.jpg")).await;
    let folders: Vec<String> = items.iter().flat_map(|i| args(i).folders).collect();
    assert!(folders.iter().all(|f| !f.starts_with("proxies")), "the proxy root was watched: {folders:?}");
    assert!(folders.contains(&"2026".to_string()), "{folders:?}");
    drop(watching);
}

/// An app that keeps its database beside the photos (digiKam's in the library's root, Lightroom's catalogue
/// and its journal in a folder), writing it for as long as it is open, and a text file saved in another folder:
/// none of it is anything the crawl reads, so none of it asks for a crawl, whether the library is watched for
/// events or polled. Before, each window of it was a crawl of its folder: the whole library, for the root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_database_written_beside_the_photos_asks_for_no_crawl_watched_or_polled() {
    for choice in [WatchChoice::Events, WatchChoice::Polling] {
        let lib = library().await;
        for folder in ["2026/12", "lightroom", "notes"] {
            std::fs::create_dir_all(lib.root.join(folder)).unwrap();
        }
        std::fs::write(lib.root.join("digikam4.db"), b"SQLite format 3\0").unwrap();
        lib.store.set_storage_config_watch(lib.config, choice).await.unwrap();
        let (watching, status) = watching(&lib, "w1", settings()).await;
        let mode = status.unwrap().mode();
        assert_eq!(mode == WatchMode::Polling, choice == WatchChoice::Polling, "{choice:?}");
        // Several polling passes long, so that a pass sees the journals there and one sees them gone.
        for round in 0..12u8 {
            let mut db = std::fs::OpenOptions::new().append(true).open(lib.root.join("digikam4.db")).unwrap();
            std::io::Write::write_all(&mut db, &[round; 512]).unwrap();
            drop(db);
            for journal in ["digikam4.db-journal", "lightroom/Catalog.lrcat-wal"] {
                std::fs::write(lib.root.join(journal), [round; 64]).unwrap();
            }
            std::fs::write(lib.root.join("notes/todo.txt"), format!("round {round}")).unwrap();
            tokio::time::sleep(settings().poll_interval / 2).await;
            for journal in ["digikam4.db-journal", "lightroom/Catalog.lrcat-wal"] {
                std::fs::remove_file(lib.root.join(journal)).unwrap();
            }
            tokio::time::sleep(settings().poll_interval / 2).await;
        }
        // Then a photo: the first crawl after the start's is the photo's folder's alone (a crawl of the root, or
        // of the app's folders, would come first or take the photo's folder in).
        copy_in(&lib, "2026/12/beach.jpg", &photo(1));
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut all = all_crawls(&lib).await;
        while all.len() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "{choice:?}: no crawl within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            all = all_crawls(&lib).await;
        }
        assert!(args(&all[0]).is_whole_root(), "the start's crawl");
        assert_eq!(args(&all[1]).folders, ["2026/12"], "{choice:?}: only the photo's folder");
        drop(watching);
    }
}

/// A file written for longer than a window (a long copy, a camera recording into the library) asks for no crawl
/// while it is written: one crawl once it is closed, which reads it at once. Before, each window of its writes
/// was a crawl of its folder, each finding it still settling. A file written and then left open has its folder
/// crawled once no write came for the settle time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_for_longer_than_a_window_asks_for_one_crawl_once_closed_or_settled() {
    use std::io::Write;
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("cam")).unwrap();
    let settle_time = Duration::from_secs(2);
    let (watching, _) = watching(&lib, "w1", WatchSettings { settle_time, ..settings() }).await;
    let content = photo(1);
    let mut file = std::fs::File::create(lib.root.join("cam/clip.jpg")).unwrap();
    // Forty writes 200 ms apart: longer than `max_delay` (5 s), each within the debounce of the last.
    for chunk in content.chunks(content.len().div_ceil(40)) {
        file.write_all(chunk).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(all_crawls(&lib).await.len(), 1, "no crawl while it is written (the start's only)");
    drop(file);
    let items = crawls_until(&lib, "crawl with the closed clip", |i| has_closed(i, "cam/clip.jpg")).await;
    assert_eq!(items.len(), 1, "one crawl");
    assert_eq!(args(&items[0]).folders, ["cam"]);

    let mut open = std::fs::File::create(lib.root.join("cam/left open.jpg")).unwrap();
    open.write_all(&content).unwrap();
    let written = tokio::time::Instant::now();
    let items = crawls_until(&lib, "crawl of the folder of the file left open", |i| i.len() == 2).await;
    assert!(written.elapsed() >= settle_time, "not before it settled: {:?}", written.elapsed());
    assert_eq!((args(&items[1]).folders, args(&items[1]).closed), (vec!["cam".to_owned()], vec![]));
    drop((open, watching));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_photos_created_at_once_are_a_handful_of_crawls_and_all_are_catalogued() {
    const FLOOD: u32 = 10_000;
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("flood")).unwrap();
    // The shipped window (1 s of quiet, 2 s at most).
    let shipped = WatchSettings { poll_interval: settings().poll_interval, ..WatchSettings::default() };
    let (watching, _) = watching(&lib, "w1", shipped).await;
    let root = lib.root.clone();
    // Small photos, each its own content (bytes after the JPEG's end are part of the file, not of the picture).
    let base = fixtures::jpeg(16, 16, 1, false, &FixtureExif::camera("2026:12:02 10:00:00", "+01:00"));
    let writing = tokio::task::spawn_blocking(move || {
        for i in 0..FLOOD {
            let mut content = base.clone();
            content.extend_from_slice(&i.to_le_bytes());
            std::fs::write(root.join(format!("flood/{i:05}.jpg")), content).unwrap();
        }
        // Last, a folder: when a crawl of it is queued, every window before it closed.
        std::fs::create_dir(root.join("flood-done")).unwrap();
    });

    // A Worker runs each crawl as it comes (while the flood is still being written, too).
    let handler = lib.handler();
    let run = async |item: WorkItem| {
        lib.run_handler(&handler, item).await.unwrap();
    };
    let done = |i: &[WorkItem]| i.iter().any(|i| args(i).folders.contains(&"flood-done".to_owned()));
    let items = crawls_taken_until(&lib, "crawl of the last folder", done, run).await;
    writing.await.unwrap();
    for item in all_crawls(&lib).await.into_iter().filter(|i| i.status == Status::Queued) {
        lib.run_handler(&handler, item).await.unwrap();
    }
    println!("{FLOOD} photos created at once: {} crawl item(s)", items.len());
    assert!(items.len() <= 8, "{} items for one flood", items.len());
    for item in &items {
        let args = args(item);
        assert!(args.folders.iter().all(|f| f == "flood" || f == "flood-done"), "{:?}", args.folders);
        assert!(args.closed.len() <= almanac_handlers::watch::MAX_CLOSED);
    }
    let assets = format!(
        "SELECT count(*) AS n FROM media_assets WHERE storage_config_id = '{}' AND NOT is_soft_deleted",
        lib.config
    );
    assert_eq!(lib.count(&assets).await, i64::from(FLOOD), "every photo of the flood is catalogued");
    drop(watching);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_library_finds_a_new_file_at_the_next_pass_and_its_baseline_only_the_crawl_of_what_was_missed() {
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("phone/2026")).unwrap();
    std::fs::write(lib.root.join("phone/2026/old.jpg"), photo(2)).unwrap();
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Polling).await.unwrap();
    // The real passes, counted.
    let (passes, real) = (Arc::new(AtomicUsize::new(0)), WatchIo::default().pass);
    let counted = passes.clone();
    let pass = move |root: &Path, avoid: Option<(u64, u64)>, tree: Option<FolderTree>, stop: &CancellationToken| {
        counted.fetch_add(1, Ordering::SeqCst);
        real(root, avoid, tree, stop)
    };
    let io = WatchIo { pass: Arc::new(pass), ..WatchIo::default() };
    let watching = watchers(&lib, settings(), io);
    let (watching, status) = started(&lib, watching).await;
    let status = status.unwrap();
    assert_eq!(status.mode(), WatchMode::Polling);
    assert!(crawls(&lib).await.is_empty(), "the baseline enqueues no crawl of folders");
    assert_eq!(all_crawls(&lib).await.len(), 1, "only the whole-root crawl of the start");
    // The baseline and a pass that found nothing are over once a third starts.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while AtomicUsize::load(&passes, Ordering::SeqCst) < 3 {
        assert!(tokio::time::Instant::now() < deadline, "no third pass within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status.report(Some(chrono::Utc::now())).last_change_at, None, "a pass that found nothing is no change");

    std::fs::write(lib.root.join("phone/2026/new.jpg"), photo(3)).unwrap();
    let items = crawls_until(&lib, "crawl of the polled folder", |i| !i.is_empty()).await;
    assert_eq!(items.len(), 1);
    assert_eq!(args(&items[0]).folders, ["phone/2026"]);
    assert!(args(&items[0]).closed.is_empty(), "polling sees no close");
    assert!(status.report(Some(chrono::Utc::now())).last_change_at.is_some(), "the change found is reported");
    drop(watching);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_says_so_once_polls_from_then_on_and_crawls_the_whole_root() {
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("a")).unwrap();
    let watcher =
        ConfigWatcher::new(lib.store.clone(), lib.config, lib.root.clone(), settings(), (WatchMode::Events, None));
    let status = watcher.status_handle();
    let (events, rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let overflow = || Ok(notify::Event::new(notify::EventKind::Other).set_flag(notify::event::Flag::Rescan));

    let steps = async {
        until_ready(&status).await;
        events.send(overflow()).unwrap();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while status.mode() != WatchMode::Polling {
            assert!(tokio::time::Instant::now() < deadline, "no fall-back within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let items = all_crawls(&lib).await;
        assert_eq!(items.len(), 1, "the overflow's whole-root crawl joins the one of the start, still queued");
        assert!(args(&items[0]).is_whole_root());
        assert_eq!(items[0].dedup_key.as_deref(), Some(crawl_key(&lib).as_str()), "joined with the scheduled crawl");
        let report = status.report(None);
        assert!(report.note.unwrap().contains("overflowed"));
        // Nothing more comes of events, and a watch limit reached later says nothing more.
        events.send(overflow()).unwrap();
        events.send(Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch))).unwrap();
        until_ready(&status).await;
        std::fs::write(lib.root.join("a/new.jpg"), photo(4)).unwrap();
        crawls_until(&lib, "crawl of the polled folder", |i| i.iter().any(|i| args(i).folders == ["a"])).await;
        stop.cancel();
    };
    let (lines, _) = support::logs::capture(async { tokio::join!(watcher.run_on(rx, stop.clone()), steps) }).await;
    let warnings = support::logs::events(&lines, "watch_fell_back_to_polling");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["level"], "WARN");
    assert_eq!(warnings[0]["fields"]["config"], lib.config.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_one_config_run_one_watcher_and_enqueue_each_change_once() {
    // Two Workers, and two given the same Worker id (two containers with one host name): one watcher either way.
    for (first_id, second_id) in [("w1", "w2"), ("w1", "w1")] {
        let lib = library().await;
        for d in ["x", "y"] {
            std::fs::create_dir_all(lib.root.join(d)).unwrap();
        }
        let (mut first, held_first) = watching(&lib, first_id, settings()).await;
        let (mut second, held_second) = watching(&lib, second_id, settings()).await;
        assert!(held_first.is_some() && held_second.is_none(), "one watcher: the first Worker's");
        second.look().await.unwrap();
        assert!(second.watching().is_empty());

        copy_in(&lib, "x/one.jpg", &photo(5));
        crawls_until(&lib, "crawl of x", |i| has_closed(i, "x/one.jpg")).await;
        first.look().await.unwrap();
        second.look().await.unwrap();
        copy_in(&lib, "y/two.jpg", &photo(6));
        let items = crawls_until(&lib, "crawl of y", |i| has_closed(i, "y/two.jpg")).await;
        let folders: Vec<Vec<String>> = items.iter().map(|i| args(i).folders).collect();
        assert_eq!(folders, [["x"], ["y"]], "each change once");
        assert!(second.watching().is_empty());

        // A watch not renewed in time (a Worker cut off) is taken by the other, and its watcher stops at its look.
        sql_query(
            "UPDATE config_watches SET lease_expires_at = now() - interval '1 second' WHERE storage_config_id = $1",
        )
        .bind::<Uuid, _>(lib.config.as_uuid())
        .execute(&mut lib.conn().await)
        .await
        .unwrap();
        second.look().await.unwrap();
        first.look().await.unwrap();
        assert_eq!((first.watching(), second.watching()), (vec![], vec![lib.config]));
        first.look().await.unwrap();
        assert!(first.watching().is_empty(), "the first does not take it back while the second renews it");

        // The second gives its watch up (a shutdown): the first takes it at its next look.
        let stop = CancellationToken::new();
        stop.cancel();
        second.run(stop).await;
        first.look().await.unwrap();
        assert_eq!(first.watching(), [lib.config]);
    }
}

/// The watch of the library's config as stored: its holder and mode, if a Worker holds it.
async fn stored_watch(lib: &Library) -> Option<(String, WatchMode)> {
    let states = lib.store.watch_states().await.unwrap();
    let state = states.into_iter().find(|s| s.config == lib.config)?;
    state.held.map(|h| (h.worker_id.to_string(), h.report.mode))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_choice_restarts_or_stops_the_watcher_and_an_inactive_configs_watch_is_given_up() {
    let lib = library().await;
    // Another config, watched beside it and left alone.
    let other = lib.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let new = NewStorageConfig { username: "ann".into(), root_path: other };
    let other = lib.store.add_storage_config(&new).await.unwrap().1.id;
    let (mut watching, status) = watching(&lib, "w1", settings()).await;
    assert_eq!(status.unwrap().mode(), WatchMode::Events);
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Polling).await.unwrap();
    watching.look().await.unwrap();
    assert_eq!(watching.status(lib.config).unwrap().mode(), WatchMode::Polling, "restarted in the mode chosen");
    assert_eq!(stored_watch(&lib).await, Some(("w1".to_owned(), WatchMode::Polling)));

    lib.store.set_storage_config_watch(lib.config, WatchChoice::Off).await.unwrap();
    watching.look().await.unwrap();
    assert_eq!(watching.watching(), [other], "off: no watcher of its own");
    assert_eq!(stored_watch(&lib).await, Some(("w1".to_owned(), WatchMode::Off)), "held, reported off");

    lib.store.set_storage_config_active(lib.config, false).await.unwrap();
    watching.look().await.unwrap();
    assert_eq!(stored_watch(&lib).await, None, "an inactive config's watch is given up at once");
    assert_eq!(watching.watching(), [other]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_quiet_hours_watched_changes_ingest_or_wait_for_the_window_to_end_as_set() {
    let lib = library().await;
    let quiet = quiet_now();
    for (policy, waits) in [(InQuietHours::Ingest, false), (InQuietHours::Wait, true)] {
        let settings = WatchSettings { in_quiet_hours: policy, quiet_hours: quiet, ..settings() };
        let watcher =
            ConfigWatcher::new(lib.store.clone(), lib.config, lib.root.clone(), settings, (WatchMode::Events, None));
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let folder = format!("{policy:?}");
        events.send(created(&lib, &folder)).unwrap();
        let run = tokio::spawn(watcher.run_on(rx, stop.clone()));
        let items = crawls_until(&lib, "crawl", |i| i.iter().any(|i| args(i).folders == [folder.as_str()])).await;
        stop.cancel();
        run.await.unwrap();
        let item = items.iter().find(|i| args(i).folders == [folder.as_str()]).unwrap();
        let held = item.run_after > item.requested_at + chrono::Duration::minutes(60);
        assert_eq!(held, waits, "{policy:?}: run_after {} requested {}", item.run_after, item.requested_at);
    }
}

/// Quiet hours that hold now, whatever the time: from a minute ago to a minute before that, UTC.
fn quiet_now() -> Option<almanac_handlers::QuietHours> {
    let now = chrono::Utc::now();
    let (start, end) = (now - chrono::Duration::minutes(1), now - chrono::Duration::minutes(2));
    almanac_handlers::QuietHours::parse(&format!("{}-{} UTC", start.format("%H:%M"), end.format("%H:%M"))).unwrap()
}

/// What [`following`] answers: where the test sends the events, what stops the watcher, and its task (which
/// answers the lines it logged).
type Following = (
    tokio::sync::mpsc::UnboundedSender<notify::Result<notify::Event>>,
    CancellationToken,
    tokio::task::JoinHandle<(Vec<serde_json::Value>, ())>,
);

/// A watcher of the library's config in events mode, following the events the test sends, its lines captured.
fn following(lib: &Library) -> Following {
    following_on(lib, lib.store.clone())
}

/// [`following`], the watcher using `store` as its queue.
fn following_on<S: WorkQueue + ports::DatabaseClock + 'static>(lib: &Library, store: Arc<S>) -> Following {
    let watcher = ConfigWatcher::new(store, lib.config, lib.root.clone(), settings(), (WatchMode::Events, None));
    let (events, rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let run = tokio::spawn(support::logs::capture(watcher.run_on(rx, stop.clone())));
    (events, stop, run)
}

/// The event of a folder created under the library's root.
fn created(lib: &Library, folder: &str) -> notify::Result<notify::Event> {
    let event = notify::Event::new(notify::EventKind::Create(notify::event::CreateKind::Folder));
    Ok(event.add_path(lib.root.join(folder)))
}

/// The first crawl enqueued for the library's config (a watcher's start enqueues one of the whole root); fails
/// after [`PATIENCE`].
async fn first_crawl(lib: &Library) -> WorkItem {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(item) = all_crawls(lib).await.into_iter().next() {
            return item;
        }
        assert!(tokio::time::Instant::now() < deadline, "no crawl within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_the_queue_refuses_are_kept_tried_again_and_warned_of_once_each_time() {
    let lib = library().await;
    let (events, stop, run) = following(&lib);
    // Its start's whole-root crawl, run.
    let start = first_crawl(&lib).await;
    assert!(args(&start).is_whole_root());
    let fence = lib.start(start.id).await;
    lib.finish(fence).await;
    // Twice, the queue refuses new items for a while, counting each refusal (a sequence: its count survives the
    // rollback): a change seen meanwhile is tried three times at least, then enqueued once the queue takes items
    // again.
    let mut admin = lib.conn().await;
    let refuse = "CREATE SEQUENCE refusals;
        CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN PERFORM nextval('refusals'); RAISE EXCEPTION 'refused by the test'; END $$;";
    diesel_async::SimpleAsyncConnection::batch_execute(&mut admin, refuse).await.unwrap();
    #[derive(diesel::QueryableByName)]
    struct Refusals {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let count = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM refusals";
    for folder in ["Holiday", "Beach"] {
        let before = sql_query(count).get_result::<Refusals>(&mut admin).await.unwrap().n;
        sql_query("CREATE TRIGGER refuse BEFORE INSERT ON work_items FOR EACH ROW EXECUTE FUNCTION refuse()")
            .execute(&mut admin)
            .await
            .unwrap();
        events.send(created(&lib, folder)).unwrap();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while sql_query(count).get_result::<Refusals>(&mut admin).await.unwrap().n < before + 3 {
            assert!(tokio::time::Instant::now() < deadline, "{folder}: not tried three times within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        sql_query("DROP TRIGGER refuse ON work_items").execute(&mut admin).await.unwrap();
        // Run, so that the next change is not held behind it.
        let run = |i: &WorkItem| args(i).folders == [folder] && i.status == Status::Succeeded;
        crawls_until(&lib, "crawl of the folder", |i| i.iter().any(run)).await;
    }
    stop.cancel();
    let (lines, ()) = run.await.unwrap();
    let warned = support::logs::events(&lines, "watch_enqueue_failed");
    assert_eq!(warned.len(), 2, "warned of once each time the queue refuses: {lines:#?}");
}

/// A Worker that may not ask whether someone still writes a file (another user's, without `CAP_LEASE`) says so
/// once, and reads the files it saw closed all the same. Its runtime's threads run without `CAP_LEASE`.
#[test]
fn a_watcher_without_cap_lease_says_so_once() {
    if !rustix::process::getuid().is_root() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(almanac_media::fixtures::without_cap_lease)
        .build()
        .unwrap();
    runtime.block_on(async {
        let lib = library().await;
        let (events, stop, run) = following(&lib);
        std::fs::create_dir_all(lib.root.join("phone")).unwrap();
        for name in ["a.jpg", "b.jpg", "c.jpg"] {
            let (path, rel) = (lib.root.join("phone").join(name), format!("phone/{name}"));
            std::fs::write(&path, photo(1)).unwrap();
            rustix::fs::chown(&path, Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
            let closed = notify::Event::new(notify::EventKind::Access(notify::event::AccessKind::Close(
                notify::event::AccessMode::Write,
            )));
            events.send(Ok(closed.add_path(path))).unwrap();
            crawls_until(&lib, "crawl with the closed file", |i| has_closed(i, &rel)).await;
        }
        stop.cancel();
        let (lines, ()) = run.await.unwrap();
        let said = support::logs::events(&lines, "watch_leases_refused");
        assert_eq!(said.len(), 1, "said once, for three windows: {lines:#?}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_seen_while_the_last_crawl_is_still_queued_wait_for_it_to_start_then_go_as_one() {
    let lib = library().await;
    for folder in ["x", "y", "z"] {
        std::fs::create_dir_all(lib.root.join(folder)).unwrap();
    }
    let quick = WatchSettings { max_delay: Duration::from_secs(1), ..settings() };
    let (watching, status) = watching(&lib, "w1", quick).await;
    let status = status.unwrap();
    copy_in(&lib, "x/one.jpg", &photo(1));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let first = loop {
        if let [item] = &crawls(&lib).await[..]
            && has_closed(std::slice::from_ref(item), "x/one.jpg")
        {
            break item.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no crawl of x within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // The config is busy: the first crawl stays queued while more arrives, in two folders and past several
    // windows' worth of time.
    copy_in(&lib, "y/two.jpg", &photo(2));
    copy_in(&lib, "z/three.jpg", &photo(3));
    while status.report(None).pending_files < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the watcher did not see y and z within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(quick.max_delay + quick.debounce * 2).await;
    assert_eq!(crawls(&lib).await.len(), 1, "nothing more is enqueued while the first crawl waits");

    // It starts: what was held goes as one crawl.
    let fence = lib.start(first.id).await;
    let items =
        crawls_until(&lib, "crawl of y and z", |i| has_closed(i, "y/two.jpg") && has_closed(i, "z/three.jpg")).await;
    assert_eq!(items.len(), 2, "{:?}", items.iter().map(args).map(|a| a.folders).collect::<Vec<_>>());
    assert_eq!(args(&items[1]).folders, ["y", "z"]);
    lib.finish(fence).await;
    drop(watching);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_starts_crawls_the_whole_root_once_joining_a_queued_crawl() {
    let lib = library().await;
    let worker = WorkerId::new("w1").unwrap();
    // Nothing queued: the start enqueues one whole-root crawl, under the config's crawl key.
    let mut first = Watching::new(lib.store.clone(), worker.clone(), ServedConfigs::All, settings());
    first.look().await.unwrap();
    until_ready(&first.status(lib.config).unwrap()).await;
    let items = all_crawls(&lib).await;
    assert_eq!(items.len(), 1, "one crawl of what changed while no watcher ran");
    assert!(args(&items[0]).is_whole_root());
    assert_eq!(items[0].dedup_key.as_deref(), Some(crawl_key(&lib).as_str()));
    let stop = CancellationToken::new();
    stop.cancel();
    first.run(stop).await;
    let fence = lib.start(items[0].id).await;
    lib.finish(fence).await;

    // A scheduled crawl queued: a watcher starting (here polling, at its baseline) joins it.
    let scheduled = lib.enqueue(&Batch { folders: vec![], closed: vec![] }.item(lib.config)).await;
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Polling).await.unwrap();
    let mut second = Watching::new(lib.store.clone(), worker, ServedConfigs::All, settings());
    second.look().await.unwrap();
    until_ready(&second.status(lib.config).unwrap()).await;
    let ids: Vec<WorkItemId> = all_crawls(&lib).await.iter().map(|i| i.id).collect();
    assert_eq!(ids, [items[0].id, scheduled.id], "joined the queued crawl");
}

/// The inodes watched by this process's inotify instances, as the kernel lists them (`/proc/self/fdinfo`).
fn watched_inodes() -> std::collections::HashSet<u64> {
    let mut inodes = std::collections::HashSet::new();
    for fd in std::fs::read_dir("/proc/self/fd").unwrap().filter_map(Result::ok) {
        if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().contains("inotify")) {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.file_name().to_string_lossy()));
            let info = info.unwrap_or_default();
            // `inotify wd:1 ino:1b2c sdev:800001 mask:…`, one line per watch.
            for field in info.lines().filter(|l| l.starts_with("inotify")).flat_map(str::split_whitespace) {
                if let Some(hex) = field.strip_prefix("ino:") {
                    inodes.insert(u64::from_str_radix(hex, 16).unwrap());
                }
            }
        }
    }
    inodes
}

fn inode(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap())
}

/// Waits until the crawls of changes enqueued hold `path` as closed (each queued crawl taken and finished).
async fn until_closed(lib: &Library, path: &str) {
    crawls_until(lib, &format!("crawl with {path} closed"), |i| has_closed(i, path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_folders_the_crawl_reads_are_watched_and_a_folder_that_appears_is_watched_with_its_files_read_at_once()
{
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("2026/01")).unwrap();
    std::fs::create_dir_all(lib.root.join("in")).unwrap();
    let mut nas_folders = Vec::new();
    for i in 0..50 {
        // Synology's thumbnails: a folder per photo.
        let folder = lib.root.join(format!("2026/01/@eaDir/IMG_{i:04}.jpg"));
        std::fs::create_dir_all(&folder).unwrap();
        nas_folders.push(folder);
    }
    std::fs::create_dir_all(lib.root.join(".hidden/sub")).unwrap();
    nas_folders.extend([lib.root.join("2026/01/@eaDir"), lib.root.join(".hidden"), lib.root.join(".hidden/sub")]);
    let (watching, status) = watching(&lib, "w1", settings()).await;
    assert_eq!(status.unwrap().mode(), WatchMode::Events);
    let watched = watched_inodes();
    for folder in ["", "2026", "2026/01"] {
        assert!(watched.contains(&inode(&lib.root.join(folder))), "{folder:?} is watched");
    }
    let nas_watched: Vec<&std::path::PathBuf> = nas_folders.iter().filter(|f| watched.contains(&inode(f))).collect();
    assert!(nas_watched.is_empty(), "folders the crawl skips are not watched: {nas_watched:?}");

    // One copy makes a folder and a photo in it at once: the photo may be closed before the folder's watch is set.
    std::fs::create_dir_all(lib.root.join("2026/02/trip")).unwrap();
    std::fs::write(lib.root.join("2026/02/trip/a.jpg"), photo(10)).unwrap();
    // An album moved in from outside the library, with its photos.
    let album = lib.dir.path().join("album");
    std::fs::create_dir_all(album.join("day 1")).unwrap();
    std::fs::write(album.join("x.jpg"), photo(11)).unwrap();
    std::fs::write(album.join("day 1/y.jpg"), photo(12)).unwrap();
    std::fs::rename(&album, lib.root.join("in/album")).unwrap();
    for path in ["2026/02/trip/a.jpg", "in/album/x.jpg", "in/album/day 1/y.jpg"] {
        until_closed(&lib, path).await;
    }

    // The new folders are watched: a photo written later is seen closed there.
    std::fs::write(lib.root.join("2026/02/trip/b.jpg"), photo(13)).unwrap();
    std::fs::write(lib.root.join("in/album/day 1/z.jpg"), photo(14)).unwrap();
    until_closed(&lib, "2026/02/trip/b.jpg").await;
    until_closed(&lib, "in/album/day 1/z.jpg").await;
    // A folder moved inside the root (into a folder just made) is watched under its new name.
    std::fs::create_dir(lib.root.join("albums")).unwrap();
    std::fs::rename(lib.root.join("in/album"), lib.root.join("albums/2026")).unwrap();
    until_closed(&lib, "albums/2026/x.jpg").await;
    std::fs::write(lib.root.join("albums/2026/day 1/w.jpg"), photo(15)).unwrap();
    until_closed(&lib, "albums/2026/day 1/w.jpg").await;
    let stale = crawls(&lib).await.into_iter().flat_map(|i| args(&i).closed).filter(|c| c.path.ends_with("w.jpg"));
    assert!(stale.map(|c| c.path).all(|p| p == "albums/2026/day 1/w.jpg"), "no event under the folder's old name");
    drop(watching);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_library_exported_over_nfs_or_when_so_set_files_seen_closed_wait_for_the_settle_time() {
    // Exported when the watcher starts; exported after it started (`exportfs -ra`); or set so.
    for case in ["exported", "exported later", "set"] {
        let lib = library().await;
        std::fs::create_dir_all(lib.root.join("a")).unwrap();
        let export = lib.dir.path().to_path_buf();
        let now_exported = Arc::new(std::sync::atomic::AtomicBool::new(case == "exported"));
        let flag = now_exported.clone();
        let exports =
            move |_: &Path| std::sync::atomic::AtomicBool::load(&flag, Ordering::SeqCst).then(|| export.clone());
        let io = WatchIo { exports: Arc::new(exports), ..WatchIo::default() };
        let settings = WatchSettings { trust_closed_files: case != "set", ..settings() };
        let watcher =
            ConfigWatcher::new(lib.store.clone(), lib.config, lib.root.clone(), settings, (WatchMode::Events, None))
                .with_io(io);
        let status = watcher.status_handle();
        let stop = CancellationToken::new();
        let run = tokio::spawn(watcher.run(stop.clone()));
        until_ready(&status).await;
        now_exported.store(case != "set", Ordering::SeqCst);
        copy_in(&lib, "a/x.jpg", &photo(20));
        let items = crawls_until(&lib, "crawl of the folder", |i| !i.is_empty()).await;
        assert_eq!(args(&items[0]).folders, ["a"]);
        assert!(items.iter().all(|i| args(i).closed.is_empty()), "{case}: no file is read at once");
        if case != "set" {
            let note = status.report(None).note.unwrap();
            let export = lib.dir.path().display().to_string();
            assert!(note.contains("exported over NFS") && note.contains(&export), "{case}: {note}");
        }
        stop.cancel();
        run.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_mounted_over_a_watched_root_restarts_its_watcher_which_then_polls_and_other_mounts_change_nothing() {
    let lib = library().await;
    // The mounts and the root's file system as the test sets them: a local disk first.
    let table = Arc::new(Mutex::new(String::from("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n")));
    let magic = Arc::new(std::sync::atomic::AtomicU32::new(0xEF53));
    let (root, read_magic) = (lib.root.clone(), magic.clone());
    let fs_type = move |at: &Path| {
        if at == root {
            Ok(std::sync::atomic::AtomicU32::load(&read_magic, Ordering::SeqCst))
        } else {
            almanac_handlers::watch::fs_type(at)
        }
    };
    let read_table = table.clone();
    let mountinfo = move || Some(read_table.lock().unwrap().clone());
    let io = WatchIo { fs_type: Arc::new(fs_type), mountinfo: Arc::new(mountinfo), ..WatchIo::default() };
    let mut watching = watchers(&lib, settings(), io);
    let mount = |line: String| table.lock().unwrap().push_str(&line);

    let (lines, ()) = support::logs::capture(async {
        watching.look().await.unwrap();
        assert_eq!(watching.status(lib.config).unwrap().mode(), WatchMode::Events);
        // A USB disk mounted elsewhere, one beside the root with a name that only begins the same, and a snapshot
        // shown beneath the root under a name the crawl skips.
        mount("40 22 0:50 / /mnt/usb rw - vfat /dev/sdc1 rw\n".into());
        mount(format!("41 22 0:51 / {}2 rw - ext4 /dev/sdd1 rw\n", lib.root.display()));
        mount(format!("44 22 0:55 / {}/.zfs/snapshot/daily rw - zfs tank@daily rw\n", lib.root.display()));
        watching.look().await.unwrap();
        assert_eq!(watching.status(lib.config).unwrap().mode(), WatchMode::Events);
        // The NAS's share comes up after the Worker started, mounted over the root's folder.
        magic.store(0x6969, Ordering::SeqCst);
        mount(format!("42 22 0:52 / {} rw - nfs4 nas:/photos rw\n", lib.root.display()));
        watching.look().await.unwrap();
        let status = watching.status(lib.config).expect("watched again at once");
        assert_eq!(status.mode(), WatchMode::Polling, "the share is polled");
        assert!(status.report(None).note.unwrap().contains("NFS"));
        // The share mounted again between two looks, as another device: the table reads the same but for that.
        let again = table.lock().unwrap().replace("42 22 0:52", "43 22 0:53");
        *table.lock().unwrap() = again;
        watching.look().await.unwrap();
    })
    .await;
    let events = |name: &str| support::logs::events(&lines, name).into_iter().cloned().collect::<Vec<_>>();
    let remounted = events("watch_remounted");
    assert_eq!(remounted.len(), 2, "{remounted:?}");
    for event in &remounted {
        assert_eq!(event["fields"]["mount"], lib.root.display().to_string());
    }
    assert_eq!(events("watch_started").len(), 3, "started, then started again at each mount");
    drop(watching);
}

/// The library's store, counting the items it reads back: how often a watcher looks at the crawl it enqueued last.
struct CountingGets {
    store: Arc<PgStore>,
    gets: AtomicUsize,
}

impl WorkQueue for CountingGets {
    async fn enqueue(&self, item: &almanac_domain::NewWorkItem) -> Result<almanac_domain::Enqueued, QueueError> {
        self.store.enqueue(item).await
    }
    async fn claim(&self, request: &ports::ClaimRequest) -> Result<Option<ports::ClaimedItem>, QueueError> {
        self.store.claim(request).await
    }
    async fn heartbeat(
        &self,
        fence: ports::Fence,
        lease: ports::LeaseDuration,
        progress: Option<&serde_json::Value>,
    ) -> Result<ports::Heartbeat, QueueError> {
        self.store.heartbeat(fence, lease, progress).await
    }
    async fn complete(
        &self,
        fence: ports::Fence,
        result: Option<&serde_json::Value>,
    ) -> Result<ports::WriteOutcome, QueueError> {
        self.store.complete(fence, result).await
    }
    async fn fail(&self, fence: ports::Fence, failure: &ports::Failure) -> Result<ports::FailOutcome, QueueError> {
        self.store.fail(fence, failure).await
    }
    async fn succeeded_under(&self, fence: ports::Fence) -> Result<bool, QueueError> {
        self.store.succeeded_under(fence).await
    }
    async fn mark_cancelled(&self, fence: ports::Fence) -> Result<ports::WriteOutcome, QueueError> {
        self.store.mark_cancelled(fence).await
    }
    async fn release(&self, fence: ports::Fence) -> Result<ports::WriteOutcome, QueueError> {
        self.store.release(fence).await
    }
    async fn request_cancel(&self, id: WorkItemId) -> Result<almanac_domain::CancelOutcome, QueueError> {
        self.store.request_cancel(id).await
    }
    async fn recover_expired_leases(&self, max_stalls: i32) -> Result<Vec<ports::Recovered>, QueueError> {
        self.store.recover_expired_leases(max_stalls).await
    }
    async fn get(&self, id: WorkItemId) -> Result<Option<WorkItem>, QueueError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.store.get(id).await
    }
}

impl CountingGets {
    /// The items read back so far.
    fn gets(&self) -> usize {
        AtomicUsize::load(&self.gets, Ordering::SeqCst)
    }
}

impl ports::DatabaseClock for CountingGets {
    async fn db_now(&self) -> Result<chrono::DateTime<chrono::Utc>, ports::CatalogueError> {
        self.store.db_now().await
    }
}

/// A change seen while the crawl enqueued before it is still queued is held, and the watcher looks at that crawl
/// again once a debounce, not in a loop: three looks take at least two debounces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_held_behind_a_queued_crawl_is_looked_at_again_once_a_debounce() {
    let lib = library().await;
    let store = Arc::new(CountingGets { store: lib.store.clone(), gets: AtomicUsize::new(0) });
    let (events, stop, run) = following_on(&lib, store.clone());
    // Its start's whole-root crawl, enqueued; nobody runs it.
    assert!(args(&first_crawl(&lib).await).is_whole_root());
    // A change is held behind it.
    let (from, before) = (tokio::time::Instant::now(), store.gets());
    events.send(created(&lib, "Holiday")).unwrap();
    while store.gets() < before + 3 {
        assert!(tokio::time::Instant::now() < from + PATIENCE, "the held change not looked at within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = from.elapsed();
    assert_eq!(crawls(&lib).await, [], "the change is held while the crawl before it is queued");
    stop.cancel();
    run.await.unwrap();
    assert!(took >= 2 * settings().debounce, "three looks in {took:?}: the watcher looked in a loop");
    assert_eq!(crawls(&lib).await.len(), 1, "and enqueued when the watcher stops");
}

/// A change seen while the crawl before it is queued, never tried and not due (a scheduled crawl held to the end of
/// the quiet hours, which a watcher's start joins) is not held behind it: it goes at once as a crawl of its own, due
/// now. Before, a NAS whose watcher started at night, a scheduled crawl queued, held every photo synced until the
/// quiet hours ended, though watched changes ingest in them by default. A crawl that failed and waits out its retry's
/// backoff still holds what comes next: a crawl of each window would fail as it did, one more every few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_not_held_behind_a_queued_crawl_that_is_not_due() {
    let lib = library().await;
    let store = Arc::new(CountingGets { store: lib.store.clone(), gets: AtomicUsize::new(0) });
    let (events, stop, run) = following_on(&lib, store.clone());
    let first = first_crawl(&lib).await;
    assert!(args(&first).is_whole_root());
    let later =
        "UPDATE work_items SET run_after = now() + interval '1 hour', attempt = $2, failures = $2 WHERE id = $1";
    let not_due = async |id: WorkItemId, tried: i32| {
        let update = sql_query(later).bind::<Uuid, _>(id.as_uuid()).bind::<diesel::sql_types::Integer, _>(tried);
        update.execute(&mut lib.conn().await).await.unwrap();
    };
    not_due(first.id, 0).await;
    events.send(created(&lib, "Holiday")).unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let holiday = loop {
        if let Some(item) = crawls(&lib).await.into_iter().find(|i| args(i).folders == ["Holiday"]) {
            break item;
        }
        assert!(tokio::time::Instant::now() < deadline, "the change was held behind a crawl not due for an hour");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let due = format!("SELECT count(*) AS n FROM work_items WHERE id = '{}' AND run_after <= now()", holiday.id);
    assert_eq!(lib.count(&due).await, 1, "due now");
    assert_eq!(lib.store.get(first.id).await.unwrap().unwrap().status, Status::Queued, "the first is left as it was");

    // The crawl of Holiday failed and waits out its backoff: the next change is held behind it.
    not_due(holiday.id, 1).await;
    let before = store.gets();
    events.send(created(&lib, "Trip")).unwrap();
    while store.gets() < before + 3 && crawls(&lib).await.len() == 1 {
        assert!(tokio::time::Instant::now() < deadline, "the held change not looked at within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(crawls(&lib).await.len(), 1, "held behind the crawl that failed, not a crawl of its own");
    stop.cancel();
    run.await.unwrap();
}

/// With watched changes set to wait for the end of the quiet hours (`in_quiet_hours = "wait"`), inside them, a change
/// is held behind the watcher's own crawl, which is not due until the window ends: it joins what goes then, rather
/// than each window becoming a crawl of its own held to the same end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_quiet_hours_set_to_wait_a_change_is_held_behind_the_crawl_waiting_for_the_windows_end() {
    let lib = library().await;
    let quiet = quiet_now();
    let settings = WatchSettings { in_quiet_hours: InQuietHours::Wait, quiet_hours: quiet, ..settings() };
    let store = Arc::new(CountingGets { store: lib.store.clone(), gets: AtomicUsize::new(0) });
    let watcher = ConfigWatcher::new(store.clone(), lib.config, lib.root.clone(), settings, (WatchMode::Events, None));
    let (events, rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let run = tokio::spawn(watcher.run_on(rx, stop.clone()));
    let first = first_crawl(&lib).await;
    assert!(first.run_after > first.requested_at + chrono::Duration::minutes(60), "the start's crawl waits too");
    let (from, before) = (tokio::time::Instant::now(), store.gets());
    events.send(created(&lib, "Holiday")).unwrap();
    while store.gets() < before + 3 && crawls(&lib).await.is_empty() {
        assert!(tokio::time::Instant::now() < from + PATIENCE, "the held change not looked at within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(crawls(&lib).await, [], "held behind the crawl that waits for the window's end");
    stop.cancel();
    run.await.unwrap();
}

/// A folder's attributes changing (`chmod`, `chown`, a NAS's permission editor applying an ACL to every folder of a
/// share) changes nothing in the library: no folder is listed again, no file asked about, no crawl asked for.
/// Before, each was a folder that appeared: its files were read again and its parent crawled, the whole library for
/// a folder at the top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folders_attributes_changing_asks_for_no_crawl() {
    use std::os::unix::fs::PermissionsExt;
    let lib = library().await;
    std::fs::create_dir_all(lib.root.join("2019/trip")).unwrap();
    for i in 0..5 {
        std::fs::write(lib.root.join(format!("2019/trip/{i}.jpg")), photo(i)).unwrap();
    }
    std::fs::create_dir_all(lib.root.join("2020")).unwrap();
    let (watching, _) = watching(&lib, "w1", settings()).await;
    let before = all_crawls(&lib).await.len();
    for folder in ["2019", "2019/trip"] {
        std::fs::set_permissions(lib.root.join(folder), std::fs::Permissions::from_mode(0o750)).unwrap();
    }
    // A change after them, so that they were taken first.
    std::fs::write(lib.root.join("2020/a.jpg"), photo(9)).unwrap();
    until_closed(&lib, "2020/a.jpg").await;
    let after: Vec<CrawlArgs> = all_crawls(&lib).await.iter().skip(before).map(args).collect();
    assert!(!after.is_empty());
    for crawl in &after {
        assert!(!crawl.is_whole_root() && crawl.folders.iter().all(|f| f == "2020"), "{after:?}");
        assert!(crawl.closed.iter().all(|c| c.path == "2020/a.jpg"), "{after:?}");
    }
    drop(watching);
}
