//! The watchers' supervisor (`Watching`) where a file system or the queue is hostile: a root whose file system
//! hangs holds up no other watch and is read once; a root changed while its old one is read is read anew; a
//! polling pass that never returns holds up no shutdown; a shutdown or a look that stops a watcher waits for it
//! to enqueue what it saw; a watch that cannot be renewed is given up before its lease runs out; the operator's
//! mode is used without reading the root's file system; a root that cannot be read is held off; a failing
//! polling pass gives its watch up; a disk unmounted and mounted again between two looks is watched anew.

use super::*;

/// The watch of `config` as stored: its holder's report and lease, if a Worker holds it.
async fn stored(lib: &Library, config: almanac_domain::StorageConfigId) -> Option<almanac_domain::ports::HeldWatch> {
    let states = lib.store.watch_states().await.unwrap();
    states.into_iter().find(|s| s.config == config)?.held
}

/// A second config, of the folder `share` beside the library, whose root's `statfs` blocks until the test sends
/// on `release`; the roots whose file system is read are recorded in `read`, in order.
struct HungShare {
    config: almanac_domain::StorageConfigId,
    root: std::path::PathBuf,
    release: std::sync::mpsc::Sender<()>,
    read: Arc<Mutex<Vec<std::path::PathBuf>>>,
}

impl HungShare {
    /// How many times the file system of the root at `path` was read.
    fn reads(&self, path: &Path) -> usize {
        self.read.lock().unwrap().iter().filter(|r| *r == path).count()
    }
}

/// [`HungShare`], and a Worker's watchers reading the file systems through it.
async fn a_hung_share(lib: &Library) -> (Watching<PgStore>, HungShare) {
    let root = lib.dir.path().join("share");
    std::fs::create_dir_all(&root).unwrap();
    let new = NewStorageConfig { username: "ann".into(), root_path: root.clone() };
    let config = lib.store.add_storage_config(&new).await.unwrap().1.id;
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (released, read) = (Mutex::new(released), Arc::new(Mutex::new(Vec::new())));
    let (reads, hung) = (read.clone(), root.clone());
    let fs_type = move |root: &Path| {
        reads.lock().unwrap().push(root.to_owned());
        if root == hung {
            let _ = released.lock().unwrap().recv();
        }
        almanac_handlers::watch::fs_type(root)
    };
    let io = WatchIo { fs_type: Arc::new(fs_type), ..WatchIo::default() };
    let watching = watchers(lib, settings(), io);
    (watching, HungShare { config, root, release, read })
}

/// Looks until a watcher of `config` runs; fails after [`PATIENCE`].
async fn look_until_watched(watching: &mut Watching<PgStore>, config: almanac_domain::StorageConfigId) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while watching.status(config).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "{config} was not watched within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        watching.look().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_whose_file_system_hangs_delays_no_other_watch_and_is_read_once() {
    let lib = library().await;
    let (mut watching, share) = a_hung_share(&lib).await;
    watching.look().await.unwrap();
    assert_eq!(watching.watching(), [lib.config], "the other config is watched at the first look");
    let held = stored(&lib, share.config).await.expect("the hung config's watch is held while its mode is decided");
    assert_eq!(held.report.mode, WatchMode::Off);
    assert!(held.report.note.unwrap().contains("deciding"));
    let before = stored(&lib, lib.config).await.unwrap().lease_expires_at;
    watching.look().await.unwrap();
    watching.look().await.unwrap();
    assert!(stored(&lib, lib.config).await.unwrap().lease_expires_at > before, "renewed while the share hangs");
    assert_eq!(share.reads(&share.root), 1, "no second statfs while the first hangs");

    share.release.send(()).unwrap();
    look_until_watched(&mut watching, share.config).await;
    let reported = stored(&lib, share.config).await.unwrap().report.mode;
    assert_eq!(reported, WatchMode::Events, "its mode reported once decided");
    assert_eq!(share.reads(&share.root), 1, "the answer is kept");
    watching.look().await.unwrap();
    assert_eq!(share.reads(&share.root), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_changed_while_its_old_root_is_read_is_read_anew_and_watched() {
    let lib = library().await;
    let (mut watching, share) = a_hung_share(&lib).await;
    watching.look().await.unwrap();
    assert!(watching.status(share.config).is_none(), "its old root's file system is still being read");

    // The root is moved (by the web backend, or by hand) while the old one's read hangs.
    let photos = lib.dir.path().join("photos");
    std::fs::create_dir_all(&photos).unwrap();
    sql_query("UPDATE storage_configs SET root_path = $1 WHERE id = $2")
        .bind::<diesel::sql_types::Text, _>(photos.to_str().unwrap())
        .bind::<Uuid, _>(share.config.as_uuid())
        .execute(&mut lib.conn().await)
        .await
        .unwrap();
    look_until_watched(&mut watching, share.config).await;
    assert_eq!(stored(&lib, share.config).await.unwrap().report.mode, WatchMode::Events);
    share.release.send(()).unwrap();
    watching.look().await.unwrap();
    for root in [&lib.root, &share.root, &photos] {
        assert_eq!(share.reads(root), 1, "{} read once: {:?}", root.display(), share.read.lock().unwrap());
    }
}

/// A polling pass that tells when it starts and then blocks until the test drops `release`.
fn hung_pass() -> (WatchIo, std::sync::mpsc::Sender<()>, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (entered, entering) = tokio::sync::mpsc::unbounded_channel();
    let released = Mutex::new(released);
    let pass = move |_: &Path, _: Option<(u64, u64)>, _: Option<FolderTree>, _: &CancellationToken| {
        let _ = entered.send(());
        let _ = released.lock().unwrap().recv();
        (FolderTree::default(), Vec::new())
    };
    (WatchIo { pass: Arc::new(pass), ..WatchIo::default() }, release, entering)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_pass_that_never_returns_holds_up_no_shutdown() {
    let lib = library().await;
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Polling).await.unwrap();
    let (io, release, mut entering) = hung_pass();
    let mut watching = watchers(&lib, settings(), io);
    watching.look().await.unwrap();
    tokio::time::timeout(PATIENCE, entering.recv()).await.expect("the pass did not start").unwrap();

    let stop = CancellationToken::new();
    stop.cancel();
    tokio::time::timeout(PATIENCE, watching.run(stop)).await.expect("the shutdown waited for the hung pass");
    assert!(stored(&lib, lib.config).await.is_none(), "its watch given up");
    drop(release);
}

/// A Worker's watchers after one look, their watcher of the library's config holding a copied photo in a window
/// that stays open (what it saw is enqueued when it stops), and a session whose lock holds up writes to the
/// queue until it rolls back (the queue takes a moment to answer).
async fn a_change_seen_and_the_queue_held(lib: &Library) -> (Watching<PgStore>, diesel_async::AsyncPgConnection) {
    let settings = WatchSettings { debounce: PATIENCE, max_delay: PATIENCE * 2, ..settings() };
    let (watching, status) = watching(lib, "w1", settings).await;
    let status = status.expect("watched at the first look");
    copy_in(lib, "Holiday/a.jpg", &photo(1));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while status.report(None).pending_files == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the copy was not seen within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut locking = lib.conn().await;
    sql_query("BEGIN").execute(&mut locking).await.unwrap();
    sql_query("LOCK TABLE work_items IN SHARE MODE").execute(&mut locking).await.unwrap();
    (watching, locking)
}

/// Waits for `task` (a Worker's watchers stopping a watcher of [`a_change_seen_and_the_queue_held`]): not over
/// while the queue is held, then over once it answers, with what the watcher saw enqueued by then.
async fn waits_for_the_change_enqueued<T>(
    lib: &Library,
    mut task: tokio::task::JoinHandle<T>,
    mut locking: diesel_async::AsyncPgConnection,
) -> T {
    let early = tokio::time::timeout(Duration::from_millis(300), &mut task).await;
    assert!(early.is_err(), "it went on without waiting for the watcher to enqueue what it saw");
    sql_query("ROLLBACK").execute(&mut locking).await.unwrap();
    let done = tokio::time::timeout(PATIENCE, task).await.expect("it did not end with its watcher").unwrap();
    let items = crawls(lib).await;
    assert!(items.iter().any(|i| args(i).folders == ["Holiday"]), "enqueued before it ended: {items:?}");
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_a_watcher_to_enqueue_what_it_saw() {
    let lib = library().await;
    let (watching, locking) = a_change_seen_and_the_queue_held(&lib).await;
    let stop = CancellationToken::new();
    stop.cancel();
    waits_for_the_change_enqueued(&lib, tokio::spawn(watching.run(stop)), locking).await;
    assert!(stored(&lib, lib.config).await.is_none(), "its watch given up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_that_stops_a_watcher_waits_for_it_to_enqueue_what_it_saw() {
    let lib = library().await;
    let (mut watching, locking) = a_change_seen_and_the_queue_held(&lib).await;
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Off).await.unwrap();
    let look = tokio::spawn(async move {
        watching.look().await.unwrap();
        watching
    });
    let watching = waits_for_the_change_enqueued(&lib, look, locking).await;
    assert!(watching.watching().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_whose_watch_cannot_be_renewed_stops_before_its_lease_runs_out() {
    let lib = library().await;
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Polling).await.unwrap();
    // A pass that tells when it starts, and when its watcher is told to stop (or the test gives up on that).
    let (entered, mut entering) = tokio::sync::mpsc::unbounded_channel();
    let (stopped, mut stopping) = tokio::sync::mpsc::unbounded_channel();
    let gave_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let giving_up = gave_up.clone();
    let pass = move |_: &Path, _: Option<(u64, u64)>, _: Option<FolderTree>, stop: &CancellationToken| {
        let _ = entered.send(());
        while !stop.is_cancelled() && !std::sync::atomic::AtomicBool::load(&giving_up, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = stopped.send(stop.is_cancelled());
        (FolderTree::default(), Vec::new())
    };
    let io = WatchIo { pass: Arc::new(pass), ..WatchIo::default() };
    let settings = WatchSettings { lease: Duration::from_secs(3), ..settings() };
    let watching = watchers(&lib, settings, io);
    let stop = CancellationToken::new();
    let run = tokio::spawn(watching.run(stop.clone()));
    tokio::time::timeout(PATIENCE, entering.recv()).await.expect("the pass did not start").unwrap();

    // The watches can no longer be renewed: their table is gone from under the Worker.
    let mut admin = lib.conn().await;
    sql_query("ALTER TABLE config_watches RENAME TO config_watches_away").execute(&mut admin).await.unwrap();
    let told = tokio::time::timeout(PATIENCE, stopping.recv()).await;
    gave_up.store(true, Ordering::SeqCst);
    assert_eq!(told.ok().flatten(), Some(true), "the watcher ran on, its watch not renewed for {PATIENCE:?}");
    sql_query("ALTER TABLE config_watches_away RENAME TO config_watches").execute(&mut admin).await.unwrap();
    stop.cancel();
    tokio::time::timeout(PATIENCE, run).await.expect("the shutdown did not end").unwrap();
}

/// Watchers whose reads of a root's file system type are counted, answering `answer` for each.
fn counting_reads(
    answer: impl Fn(&Path) -> Result<u32, String> + Send + Sync + 'static,
) -> (WatchIo, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let fs_type = move |root: &Path| {
        counted.fetch_add(1, Ordering::SeqCst);
        answer(root)
    };
    (WatchIo { fs_type: Arc::new(fs_type), ..WatchIo::default() }, reads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_the_operator_chose_is_used_without_reading_the_roots_file_system() {
    let lib = library().await;
    lib.store.set_storage_config_watch(lib.config, WatchChoice::Polling).await.unwrap();
    let (io, reads) = counting_reads(almanac_handlers::watch::fs_type);
    let mut watching = watchers(&lib, settings(), io);
    watching.look().await.unwrap();
    assert_eq!(watching.status(lib.config).expect("watched at the first look").mode(), WatchMode::Polling);
    assert_eq!(stored_watch(&lib).await, Some(("w1".to_owned(), WatchMode::Polling)));

    lib.store.set_storage_config_watch(lib.config, WatchChoice::Off).await.unwrap();
    watching.look().await.unwrap();
    watching.look().await.unwrap();
    assert_eq!(stored_watch(&lib).await, Some(("w1".to_owned(), WatchMode::Off)));
    assert_eq!(
        AtomicUsize::load(&reads, Ordering::SeqCst),
        0,
        "a chosen mode needs no statfs (a hung share delays it not)"
    );

    // `auto` reads it once, and again each time it is chosen anew.
    for (choice, read) in [(WatchChoice::Auto, 1), (WatchChoice::Polling, 1), (WatchChoice::Auto, 2)] {
        lib.store.set_storage_config_watch(lib.config, choice).await.unwrap();
        watching.look().await.unwrap();
        watching.look().await.unwrap();
        assert_eq!(AtomicUsize::load(&reads, Ordering::SeqCst), read, "{choice:?}");
        assert!(watching.status(lib.config).is_some(), "{choice:?}: watched");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_that_cannot_be_read_is_held_off_saying_why_read_again_at_each_look_and_given_up_at_stop() {
    let lib = library().await;
    let (io, reads) = counting_reads(|_| Err("the share is not mounted".to_owned()));
    let mut watching = watchers(&lib, settings(), io);
    watching.look().await.unwrap();
    assert!(watching.watching().is_empty(), "no watcher of a root that cannot be read");
    let held = stored(&lib, lib.config).await.expect("its watch is held, to tell the operator why");
    assert_eq!(held.report.mode, WatchMode::Off);
    assert!(held.report.note.unwrap().contains("the share is not mounted"));
    watching.look().await.unwrap();
    assert_eq!(AtomicUsize::load(&reads, Ordering::SeqCst), 2, "read again at the next look");

    let stop = CancellationToken::new();
    stop.cancel();
    tokio::time::timeout(PATIENCE, watching.run(stop)).await.expect("the shutdown did not end");
    assert!(stored(&lib, lib.config).await.is_none(), "its watch given up at stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_whose_polling_pass_fails_gives_its_watch_up_and_is_started_again_without_a_second_statfs() {
    let lib = library().await;
    // `auto` on NFS: polled.
    let (io, reads) = counting_reads(|_| Ok(0x6969));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let pass = move |root: &Path, avoid: Option<(u64, u64)>, tree: Option<FolderTree>, stop: &CancellationToken| {
        assert!(counted.fetch_add(1, Ordering::SeqCst) > 0, "the first pass fails");
        match tree {
            None => (FolderTree::baseline(root, avoid, stop), Vec::new()),
            Some(mut tree) => {
                let changed = tree.pass(root, avoid, stop);
                (tree, changed)
            }
        }
    };
    let io = WatchIo { pass: Arc::new(pass), ..io };
    let mut watching = watchers(&lib, settings(), io);
    watching.look().await.unwrap();
    assert_eq!(watching.watching(), [lib.config]);

    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !watching.watching().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the dead watcher kept its watch for {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        watching.look().await.unwrap();
    }
    assert!(stored(&lib, lib.config).await.is_none(), "the dead watcher's watch is given up");
    watching.look().await.unwrap();
    until_ready(&watching.status(lib.config).expect("taken again at the next look")).await;
    assert!(AtomicUsize::load(&calls, Ordering::SeqCst) >= 2);
    assert_eq!(watching.status(lib.config).unwrap().mode(), WatchMode::Polling);
    assert_eq!(AtomicUsize::load(&reads, Ordering::SeqCst), 1, "what auto decided is kept for the root");
}

/// A disk mounted on `disk` (the root, or a folder beneath it) with the folder `folder` of the library on it, watched
/// by events, then unmounted and mounted again between two looks: the mount table reads the same at both, and every
/// watch on the disk is gone. The watcher is started again at the look (its whole-root crawl catches up), and a photo
/// copied in afterwards is crawled. Skipped, saying so, where an ext4 image cannot be mounted.
async fn watched_anew_after_a_remount_between_two_looks(lib: &Library, disk: &Path, folder: &str) {
    let Some(mut volume) = almanac_media::scratch_volume::ScratchVolume::ext4(disk) else { return };
    std::fs::create_dir_all(lib.root.join(folder)).unwrap();
    let (mut watching, status) = started(lib, watchers(lib, settings(), WatchIo::default())).await;
    assert_eq!(status.unwrap().mode(), WatchMode::Events, "a local disk gets events");
    let (before, after) = (format!("{folder}/before.jpg"), format!("{folder}/after.jpg"));
    copy_in(lib, &before, &photo(1));
    crawls_until(lib, "crawl of the photo copied before", |items| has_closed(items, &before)).await;

    let (lines, ()) = support::logs::capture(async {
        volume.remount();
        watching.look().await.unwrap();
        until_ready(&watching.status(lib.config).expect("watched again at once")).await;
        copy_in(lib, &after, &photo(2));
        crawls_until(lib, "crawl of the photo copied once the disk was back", |items| has_closed(items, &after)).await;
    })
    .await;
    let remounted = support::logs::events(&lines, "watch_remounted");
    assert_eq!(remounted.len(), 1, "{remounted:?}");
    assert_eq!(remounted[0]["fields"]["mount"], disk.display().to_string());
    drop(watching);
    drop(volume);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_holding_the_root_unmounted_and_mounted_again_between_two_looks_is_watched_anew() {
    let lib = library().await;
    watched_anew_after_a_remount_between_two_looks(&lib, &lib.root.clone(), "trip").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_mounted_beneath_the_root_unmounted_and_mounted_again_between_two_looks_is_watched_anew() {
    let lib = library().await;
    watched_anew_after_a_remount_between_two_looks(&lib, &lib.root.join("usb"), "usb/trip").await;
}
