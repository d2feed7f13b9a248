//! One config's watcher: follows the root's change events, or polls its folders, and enqueues what changed as
//! crawls, one per coalescing window (ADR 0014). It runs while its Worker holds the config's watch.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::ports::{DatabaseClock, WatchMode};
use almanac_domain::{Status as ItemStatus, StorageConfigId, WorkItem, WorkItemId, WorkQueue};
use chrono::{DateTime, Utc};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::events::{Found, Handled, appeared_folder, handle, one_turn, still_written};
use super::poll::FolderTree;
use super::sentinel::Guarding;
use super::status::{Status, WatchStatus};
use super::tree::{WatchedTree, files_beneath};
use super::window::Window;
use super::{InQuietHours, WatchIo, WatchSettings};

/// Why following events ended.
enum Ended {
    /// Asked to stop.
    Stopped,
    /// Events can no longer be trusted: poll from now on (why).
    FellBack(String),
}

/// The change events of a root, as notify delivers them.
pub type Events = UnboundedReceiver<notify::Result<notify::Event>>;

/// One config's watcher.
pub struct ConfigWatcher<S> {
    config: StorageConfigId,
    root: PathBuf,
    store: Arc<S>,
    settings: WatchSettings,
    io: WatchIo,
    status: WatchStatus,
    /// Whether the last enqueue failed (its warning is said once per outage).
    failing: bool,
    /// The crawl this watcher enqueued last: while it is still queued (its config busy, the quiet hours), the
    /// changes seen since wait and join the window, so that one queued crawl of changes per config at most
    /// exists and a flood becomes a few items however long it lasts.
    in_flight: Option<WorkItemId>,
    /// A closed window waits until then before its crawl's item is looked at again.
    held_until: Option<Instant>,
    /// The watches of the root's folders, in events mode.
    tree: Option<WatchedTree>,
    /// Folders that appeared (made, or moved in) since the last look: to be watched and listed.
    appeared: Vec<PathBuf>,
    /// Whether this watcher said that it may not ask whether a file is still being written (said once).
    said_leases_refused: bool,
    /// Whether files seen closed wait for the settle time like any other (`watch.trust_closed_files` is false,
    /// or the library is exported over NFS).
    closed_settle: bool,
    /// The Worker's proxy root: passed over, with everything beneath it, when it is mounted inside the library.
    /// Its identity is read where it is used (it may be mounted after the Worker started).
    proxy_root: Option<Arc<Path>>,
    /// The supervisor's sentinel, which hears the root's file system (or one mounted beneath it) unmounted.
    sentinel: Option<Guarding>,
}

impl<S: WorkQueue + DatabaseClock + 'static> ConfigWatcher<S> {
    /// A watcher of `config`'s `root` in `mode`, with `note` saying why when it is not the one chosen.
    pub fn new(
        store: Arc<S>,
        config: StorageConfigId,
        root: PathBuf,
        settings: WatchSettings,
        (mode, note): (WatchMode, Option<String>),
    ) -> Self {
        let status = Status { mode, note, last_change: None, pending_files: 0, ready: false };
        let status = WatchStatus(Arc::new(Mutex::new(status)));
        let io = WatchIo::default();
        let closed_settle = !settings.trust_closed_files;
        let (failing, in_flight, held_until, tree, appeared) = (false, None, None, None, Vec::new());
        Self {
            config,
            root,
            store,
            settings,
            io,
            status,
            failing,
            in_flight,
            held_until,
            tree,
            appeared,
            said_leases_refused: false,
            closed_settle,
            proxy_root: None,
            sentinel: None,
        }
    }

    /// The same, making `io`'s calls on the file system (a test's, to make a polling pass hang or fail).
    pub fn with_io(self, io: WatchIo) -> Self {
        Self { io, ..self }
    }

    /// The same, passing over the Worker's proxy root (and everything beneath it) where it is mounted inside the
    /// library, as the crawl does.
    pub fn avoiding(self, proxy_root: Option<Arc<Path>>) -> Self {
        Self { proxy_root, ..self }
    }

    /// The same, its watches guarded by the supervisor's `sentinel` (set before them): a file system they are on
    /// that is unmounted, which removes them, is heard there.
    pub(super) fn guarded_by(self, sentinel: Option<Guarding>) -> Self {
        Self { sentinel, ..self }
    }

    /// Its status, as it changes.
    pub fn status_handle(&self) -> WatchStatus {
        self.status.clone()
    }

    /// Watches until `stop`: in events mode a watch of each of the root's folders (polling from the moment events
    /// can no longer be trusted), in polling mode a pass over the folders every `poll_interval`, in `off` nothing.
    pub async fn run(mut self, stop: CancellationToken) {
        let events = match self.mode() {
            WatchMode::Events => self.start_watch(&stop).await,
            WatchMode::Polling | WatchMode::Off => tokio::sync::mpsc::unbounded_channel().1,
        };
        self.run_on(events, stop).await;
    }

    /// [`ConfigWatcher::run`], following `events` in events mode (a test gives its own, to inject an overflow).
    /// What was seen and not yet enqueued when it stops is enqueued then: a lost watch or a shutdown loses
    /// nothing.
    pub async fn run_on(mut self, mut events: Events, stop: CancellationToken) {
        let mut window = Window::default();
        if self.closed_settle {
            window.settle_closed_files();
        }
        if self.mode() == WatchMode::Events {
            self.ready(&mut window).await;
            match self.follow(&mut events, &mut window, &stop).await {
                Ended::Stopped => {}
                Ended::FellBack(reason) => self.fall_back(reason, &mut window).await,
            }
        }
        match self.mode() {
            WatchMode::Polling => self.poll(&mut window, &stop).await,
            WatchMode::Off => stop.cancelled().await,
            WatchMode::Events => {}
        }
        window.settle_written(Instant::now(), Duration::ZERO);
        self.flush(&mut window).await;
    }

    /// How long after its last write seen a file being written has its folder crawled: the settle time, and the
    /// debounce on top, so that the crawl, which judges by the file's mtime and another clock, finds it settled.
    fn written_wait(&self) -> Duration {
        self.settings.settle_time + self.settings.debounce
    }

    fn mode(&self) -> WatchMode {
        self.status.mode()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock()
    }

    /// Follows the events, coalesced into windows, each enqueued as it closes.
    async fn follow(&mut self, events: &mut Events, window: &mut Window, stop: &CancellationToken) -> Ended {
        let (debounce, max_delay, wait) = (self.settings.debounce, self.settings.max_delay, self.written_wait());
        loop {
            let closes = window.closes_at(debounce, max_delay).map(|at| self.held_until.map_or(at, |h| h.max(at)));
            let wakes = closes.into_iter().chain(window.written_settles_at(wait)).min();
            tokio::select! {
                () = stop.cancelled() => return Ended::Stopped,
                event = events.recv() => {
                    let Some(event) = event else { return Ended::FellBack("the watcher stopped".into()) };
                    if let Some(ended) = self.take_event(event, window, events) {
                        return ended;
                    }
                    if let Some(ended) = self.watch_appeared(window, stop).await {
                        return ended;
                    }
                }
                () = tokio::time::sleep_until(wakes.unwrap_or_else(Instant::now)), if wakes.is_some() => {
                    window.settle_written(Instant::now(), wait);
                    if closes.is_some_and(|at| at <= Instant::now()) {
                        self.flush_when_free(window).await;
                    }
                }
            }
        }
    }

    /// Handles one event and those already waiting behind it (a flood is taken a few thousand at a time, between
    /// looks at the window's clock); `Some` when events can no longer be trusted.
    fn take_event(
        &mut self,
        first: notify::Result<notify::Event>,
        window: &mut Window,
        events: &mut Events,
    ) -> Option<Ended> {
        for event in one_turn(first, events) {
            let now = Instant::now();
            if let Ok(e) = &event {
                if self.tree.as_ref().is_some_and(|t| t.attributes_of_a_watched_folder(e)) {
                    continue;
                }
                self.appeared.extend(appeared_folder(&self.root, e));
            }
            match handle(&self.root, event, window, now) {
                Handled::Ignored => {}
                Handled::Changed => {
                    let mut status = self.status();
                    status.last_change = Some(now);
                    status.pending_files = window.pending_files();
                }
                Handled::FallBack(reason) => return Some(Ended::FellBack(reason)),
            }
        }
        None
    }

    /// Watches each of the root's folders (on a blocking thread: a watch per folder), and reads whether the root
    /// is exported over NFS. A watch that cannot start answers its error as the first event, which makes the
    /// watcher fall back to polling.
    async fn start_watch(&mut self, stop: &CancellationToken) -> Events {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (root, failed, token, exports) = (self.root.clone(), tx.clone(), stop.clone(), self.io.exports.clone());
        let (proxy_root, sentinel, mountinfo, config) =
            (self.proxy_root.clone(), self.sentinel.clone(), self.io.mountinfo.clone(), self.config);
        let started = tokio::task::spawn_blocking(move || {
            let handler = move |event| {
                let _ = tx.send(event);
            };
            let avoid = proxy_root.as_deref().and_then(almanac_media::identity);
            // The sentinel's watches first: a file system unmounted after they are set is heard, whichever of the
            // watcher's own watches it took.
            let guard = sentinel.map(|s| s.guard_root(config, &root, &*mountinfo, avoid));
            (WatchedTree::start(&root, avoid, handler, &token).map(|tree| tree.guarded(guard)), exports(&root))
        })
        .await;
        let error = match started {
            Ok((tree, exported)) => {
                if let Some(export) = exported {
                    self.closed_settle_for_export(&export);
                }
                match tree {
                    Ok(tree) => {
                        self.tree = Some(tree);
                        return rx;
                    }
                    Err(e) => e,
                }
            }
            Err(e) => notify::Error::generic(&format!("the watch could not be started: {e}")),
        };
        let _ = failed.send(Err(error));
        rx
    }

    /// Files seen closed wait for the settle time: the root is exported over NFS at `export`.
    fn closed_settle_for_export(&mut self, export: &std::path::Path) {
        info!(event = "watch_closed_files_settle", config = %self.config, export = %export.display(),
              "the library is exported over NFS: files seen closed wait for the settle time");
        let why = format!(
            "files seen closed wait for the settle time: the library is exported over NFS at {}, whose server \
             closes a file while its writer pauses",
            export.display()
        );
        self.status().note.get_or_insert(why);
        self.closed_settle = true;
    }

    /// Watches the folders that appeared and everything beneath them, then lists them (on a blocking thread):
    /// the files found there (made before the folder's watch was set, or moved in with it) join the window.
    /// `Some` when the watch limit was reached.
    async fn watch_appeared(&mut self, window: &mut Window, stop: &CancellationToken) -> Option<Ended> {
        if self.appeared.is_empty() {
            return None;
        }
        let (folders, mut tree) = (std::mem::take(&mut self.appeared), self.tree.take());
        let (root, token, proxy_root) = (self.root.clone(), stop.clone(), self.proxy_root.clone());
        let listed = tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            for folder in &folders {
                let files = match tree.as_mut() {
                    Some(tree) => tree.arrived(folder, &token),
                    // Events given by a test: listed, not watched.
                    None => Ok(files_beneath(folder, proxy_root.as_deref().and_then(almanac_media::identity))),
                };
                match files {
                    Ok(files) => found.extend(files.iter().filter_map(|f| Found::in_root(&root, f))),
                    Err(e) => return (tree, Err(e)),
                }
            }
            (tree, Ok(found))
        })
        .await;
        let now = Instant::now();
        let found = match listed {
            Ok((tree, found)) => {
                self.tree = tree;
                found
            }
            Err(e) => Err(notify::Error::generic(&format!("a folder that appeared could not be watched: {e}"))),
        };
        match found {
            Ok(found) => {
                for file in found {
                    file.record(window, now);
                }
                self.status().pending_files = window.pending_files();
                None
            }
            Err(e) => match handle(&self.root, Err(e), window, now) {
                Handled::FallBack(reason) => Some(Ended::FellBack(reason)),
                Handled::Ignored | Handled::Changed => None,
            },
        }
    }

    /// Events can no longer be trusted: says so once, polls from now on, and crawls the whole root (anything
    /// may have changed).
    async fn fall_back(&mut self, reason: String, window: &mut Window) {
        warn!(event = "watch_fell_back_to_polling", config = %self.config, reason,
              "the config's changes can no longer be followed by events: it is polled from now on, and crawled whole");
        {
            let mut status = self.status();
            status.mode = WatchMode::Polling;
            status.note = Some(reason);
        }
        // The folders' watches are given back: polling reads them now.
        self.tree = None;
        window.everything(Instant::now());
        self.flush(window).await;
    }

    /// Polls the root's folders every `poll_interval`; the first pass is the baseline.
    async fn poll(&mut self, window: &mut Window, stop: &CancellationToken) {
        let Some((mut tree, _)) = self.pass(None, stop).await else { return };
        self.ready(window).await;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.settings.poll_interval) => {}
            }
            let Some(next) = self.pass(Some(tree), stop).await else { return };
            tree = next.0;
            let now = Instant::now();
            if !next.1.is_empty() {
                self.status().last_change = Some(now);
            }
            for folder in next.1 {
                window.folder(folder, now);
            }
            // Files seen being written before a fall-back to polling.
            window.settle_written(now, self.written_wait());
            self.flush_when_free(window).await;
        }
    }

    /// It watches now (the watch set, the baseline taken): what changed while no watcher ran (before a restart,
    /// a handover, an outage, or before the watch was set) is found by a whole-root crawl, under the config's
    /// crawl key (joining one queued).
    /// Once only: a fall-back to polling crawls the whole root itself.
    async fn ready(&mut self, window: &mut Window) {
        if self.status().ready {
            return;
        }
        window.everything(Instant::now());
        self.flush(window).await;
        self.status().ready = true;
    }

    /// One pass over `tree` (the baseline when `None`), at the Worker's low priority, on a blocking thread;
    /// `None` when it failed or `stop` came first (the pass sees it between folders and ends on its own).
    async fn pass(&self, tree: Option<FolderTree>, stop: &CancellationToken) -> Option<(FolderTree, Vec<String>)> {
        let (root, token, pass) = (self.root.clone(), stop.clone(), self.io.pass.clone());
        let proxy_root = self.proxy_root.clone();
        let blocking = tokio::task::spawn_blocking(move || {
            almanac_media::gently(|| pass(&root, proxy_root.as_deref().and_then(almanac_media::identity), tree, &token))
        });
        let passed = tokio::select! {
            passed = blocking => passed,
            () = stop.cancelled() => return None,
        };
        match passed {
            Ok(passed) => Some(passed),
            Err(e) => {
                warn!(event = "watch_failed", config = %self.config, error = %e,
                      "the polling pass ended abnormally: the config is no longer watched until its watch is taken again");
                None
            }
        }
    }

    /// Enqueues what the window saw unless the crawl enqueued last is still queued and waited for
    /// ([`Self::waits_for`]): then the window stays open (it is looked at again a debounce later, or at the next
    /// pass), and what it saw joins what comes next.
    /// A crawl that has started walks after the changes it was enqueued for, so the next one is enqueued then.
    async fn flush_when_free(&mut self, window: &mut Window) {
        if let Some(id) = self.in_flight
            && let Ok(Some(item)) = self.store.get(id).await
            && item.status == ItemStatus::Queued
            && self.waits_for(&item).await
        {
            self.held_until = Some(Instant::now() + self.settings.debounce);
            return;
        }
        self.held_until = None;
        self.flush(window).await;
    }

    /// Whether what the window saw waits for `queued`, the crawl enqueued last, still queued: it will walk after
    /// those changes. Not when it was never tried and is not due yet (a scheduled crawl held to the end of the quiet
    /// hours, which a watcher's start joins), unless watched changes wait for the quiet hours too
    /// (`watch.in_quiet_hours = "wait"`, inside them): changes that ingest now then go as a crawl of their own. One
    /// tried before (waiting out a retry's backoff) is waited for: a crawl of each window would fail as it did.
    async fn waits_for(&self, queued: &WorkItem) -> bool {
        if queued.attempt > 0 {
            return true;
        }
        match self.store.db_now().await {
            Ok(now) if queued.run_after > now => self.quiet_until_at(now).is_some(),
            _ => true,
        }
    }

    /// Enqueues what the window saw as one crawl (waiting for the end of the quiet hours if so set); puts it
    /// back when the queue does not answer, to be tried again.
    async fn flush(&mut self, window: &mut Window) {
        self.confirm(window).await;
        let Some(batch) = window.take() else { return };
        let mut item = batch.item(self.config);
        if let Some(until) = self.quiet_until().await {
            item = item.with_run_after(until);
        }
        match self.store.enqueue(&item).await {
            Ok(enqueued) => {
                self.failing = false;
                self.in_flight = Some(enqueued.item.id);
                info!(event = "watch_enqueued", config = %self.config, item = %enqueued.item.id,
                      folders = batch.folders.len(), closed = batch.closed.len(), joined = !enqueued.created,
                      "changes seen under the root enqueued as a crawl");
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    warn!(event = "watch_enqueue_failed", config = %self.config, error = %e,
                          "the changes seen could not be enqueued; they are kept and tried again");
                }
                window.restore(batch, Instant::now());
            }
        }
        self.status().pending_files = window.pending_files();
    }

    /// Asks, on a blocking thread, whether the library is exported over NFS now (an export made after the
    /// watcher started: then no file is read at once from now on) and whether someone still writes the files the
    /// window would read at once; those wait for the settle time or their close (all of them when the answers do
    /// not come).
    async fn confirm(&mut self, window: &mut Window) {
        let candidates = window.unconfirmed();
        if candidates.is_empty() {
            return;
        }
        let all: Vec<String> = candidates.iter().map(|(path, _)| path.clone()).collect();
        let (root, exports) = (self.root.clone(), self.io.exports.clone());
        let answers = tokio::task::spawn_blocking(move || (exports(&root), still_written(&root, candidates))).await;
        match answers {
            Ok((Some(export), _)) => {
                self.closed_settle_for_export(&export);
                window.settle_closed_files();
            }
            Ok((None, (written, refused))) => {
                window.still_written(written);
                if refused && !std::mem::replace(&mut self.said_leases_refused, true) {
                    warn!(event = "watch_leases_refused", config = %self.config,
                          "this Worker may not ask whether a file is still being written (it does not own the \
                           library's files and lacks CAP_LEASE): a file moved into the library waits for the settle \
                           time; grant CAP_LEASE to read it at once");
                }
            }
            Err(_) => window.still_written(all),
        }
    }

    /// When the quiet hours end, if the watched changes wait for that and now is inside them.
    async fn quiet_until(&self) -> Option<DateTime<Utc>> {
        self.quiet_until_at(self.store.db_now().await.ok()?)
    }

    /// When the quiet hours end, if the watched changes wait for that and `now` is inside them.
    fn quiet_until_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let quiet = self.settings.quiet_hours.filter(|_| self.settings.in_quiet_hours == InQuietHours::Wait)?;
        quiet.ends(now)
    }
}
