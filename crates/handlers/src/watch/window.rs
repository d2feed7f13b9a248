//! Coalescing (ADR 0014, decision 5): what a watcher saw change in one window becomes one crawl of the changed
//! folders. Pure: the times come in (tokio's clock, so paused-time tests see them).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use almanac_domain::{ClosedFile, CrawlArgs, DedupKey, NewWorkItem, Scope, StorageConfigId, WorkKind};
use tokio::time::Instant;

/// At most this many files closed under temporary names are remembered until renamed.
const MAX_ASIDE: usize = 10_000;

/// At most this many files being written are followed until they settle; the folder of one more is crawled at
/// once, as every file's was before.
const MAX_WRITTEN: usize = 10_000;

/// At most this many files seen closed go with one crawl (the item's payload stays small when thousands are
/// dropped at once); the others are read once they have settled, like any file.
pub const MAX_CLOSED: usize = 1000;

/// The changes seen since the last item was enqueued.
#[derive(Debug, Default)]
pub struct Window {
    folders: BTreeSet<String>,
    closed: BTreeMap<String, ClosedFile>,
    /// Of `closed`, the files that arrived without a close being seen: read at once only if no one at all has
    /// them open for writing when the window closes.
    arrived: HashSet<String>,
    /// Files seen changing in this window (the report's pending files).
    files: HashSet<String>,
    /// Anything may have changed (an overflow): the whole root.
    whole_root: bool,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Files closed after writing under names the crawl skips (a sync tool's temporary names), with their size
    /// and mtime, until renamed; kept across windows.
    aside: HashMap<PathBuf, (u64, i64)>,
    /// Files seen closed wait for the settle time like any other (the library is exported over NFS, whose
    /// server closes a file while its writer pauses); kept across windows.
    settle_closed: bool,
    /// Files seen being written (made, or their data changed) and neither closed nor settled since, each with
    /// the last write seen (see [`Window::written`]); kept across windows.
    written: HashMap<String, Instant>,
}

/// What one window asks to crawl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The folders, none inside another; empty: the whole root.
    pub folders: Vec<String>,
    /// The files seen closed after writing, inside those folders.
    pub closed: Vec<ClosedFile>,
}

impl Window {
    /// A folder (relative to the root, `""` the root) changed at `at`.
    pub fn folder(&mut self, folder: String, at: Instant) {
        self.folders.insert(folder);
        self.touch(at);
    }

    /// A file (relative to the root) changed at `at`: it is pending until the window closes; a file changing
    /// again after it was closed is no longer read at once.
    pub fn file(&mut self, path: String, at: Instant) {
        self.closed.remove(&path);
        self.arrived.remove(&path);
        self.written.remove(&path);
        self.files.insert(path);
        self.touch(at);
    }

    /// A file (relative to the root, its path whole) made or written at `at`: its folder is crawled when the file is
    /// seen closed, or once no write came for the settle time ([`Window::settle_written`]), and not at every
    /// window while it is written. A copy that takes minutes, or a camera recording into the library all day,
    /// had its folder crawled every `max_delay`, each crawl finding the file still settling.
    pub fn written(&mut self, path: String, at: Instant) {
        self.closed.remove(&path);
        self.arrived.remove(&path);
        if self.written.len() >= MAX_WRITTEN && !self.written.contains_key(&path) {
            self.folder(parent(&path), at);
            return self.file(path, at);
        }
        self.written.insert(path, at);
    }

    /// What was at `path` (a file or a folder) is gone, or went elsewhere: the files being written there, or
    /// beneath it, are no longer followed (their folder has its change already).
    pub fn gone(&mut self, path: &str) {
        self.written.retain(|written, _| !inside(written, path));
    }

    /// When the first file being written settles: `wait` after its last write seen.
    pub fn written_settles_at(&self, wait: Duration) -> Option<Instant> {
        self.written.values().map(|at| *at + wait).min()
    }

    /// The files being written whose last write seen is `wait` or more before `now` join this window, as changes
    /// of their folders seen `now`: the crawl finds them settled. A `wait` of zero takes them all (a watcher that
    /// stops or falls back leaves none behind).
    pub fn settle_written(&mut self, now: Instant, wait: Duration) {
        let settled: Vec<String> =
            self.written.iter().filter(|(_, at)| **at + wait <= now).map(|(path, _)| path.clone()).collect();
        for path in settled {
            self.written.remove(&path);
            self.folder(parent(&path), now);
            self.files.insert(path);
        }
    }

    /// Files seen closed wait for the settle time from now on, like any other (see [`Window::closed`]), those
    /// seen so far too.
    pub fn settle_closed_files(&mut self) {
        self.settle_closed = true;
        self.closed.clear();
        self.arrived.clear();
    }

    /// A file seen closed after writing at `at`, as it was then: read at once, unless closed files settle.
    pub fn closed(&mut self, file: ClosedFile, at: Instant) {
        if self.settle_closed {
            return self.written(file.path, at);
        }
        self.written.remove(&file.path);
        self.folder(parent(&file.path), at);
        self.files.insert(file.path.clone());
        self.arrived.remove(&file.path);
        self.closed.insert(file.path.clone(), file);
        self.touch(at);
    }

    /// A file that arrived complete, as far as can be seen (renamed or moved in, found in a folder that appeared):
    /// read at once if no one has it open for writing when the window closes, unless closed files settle.
    pub fn arrived(&mut self, file: ClosedFile, at: Instant) {
        let path = file.path.clone();
        self.closed(file, at);
        if self.closed.contains_key(&path) {
            self.arrived.insert(path);
        }
    }

    /// The files this window would read at once, each with whether it arrived (see [`Window::arrived`]): to be
    /// looked at (`events::still_written`) before the window is taken.
    pub fn unconfirmed(&self) -> Vec<(String, bool)> {
        self.closed.keys().map(|p| (p.clone(), self.arrived.contains(p))).collect()
    }

    /// Files someone may still be writing: they wait for the settle time, or for their close.
    pub fn still_written(&mut self, paths: Vec<String>) {
        for path in paths {
            self.closed.remove(&path);
            self.arrived.remove(&path);
        }
    }

    /// A file closed after writing under a name the crawl skips, as it was then (the last 10,000 at most).
    pub fn aside(&mut self, path: PathBuf, stamp: (u64, i64)) {
        if self.aside.len() >= MAX_ASIDE {
            self.aside.clear();
        }
        self.aside.insert(path, stamp);
    }

    /// The size and mtime a file had when it was closed under a name the crawl skips, if it was.
    pub fn take_aside(&mut self, path: &Path) -> Option<(u64, i64)> {
        self.aside.remove(path)
    }

    /// Anything under the root may have changed (an overflow, a fall-back to polling).
    pub fn everything(&mut self, at: Instant) {
        self.whole_root = true;
        self.touch(at);
    }

    fn touch(&mut self, at: Instant) {
        self.first.get_or_insert(at);
        self.last = Some(at);
    }

    /// Whether nothing was seen.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Files seen changing and not yet handed to a crawl (those being written too).
    pub fn pending_files(&self) -> u64 {
        (self.files.len() + self.written.keys().filter(|p| !self.files.contains(*p)).count()) as u64
    }

    /// When the window closes: `debounce` after its last change, or `max_delay` after its first, whichever
    /// comes first; `None` while it is empty.
    pub fn closes_at(&self, debounce: Duration, max_delay: Duration) -> Option<Instant> {
        Some((self.last? + debounce).min(self.first? + max_delay))
    }

    /// Empties the window into what it asks to crawl (`None` when it saw nothing).
    pub fn take(&mut self) -> Option<Batch> {
        if self.is_empty() {
            return None;
        }
        let (aside, written) = (std::mem::take(&mut self.aside), std::mem::take(&mut self.written));
        let window = std::mem::take(self);
        (self.aside, self.written, self.settle_closed) = (aside, written, window.settle_closed);
        let mut folders = outermost(window.folders);
        if window.whole_root || folders.len() > CrawlArgs::MAX_FOLDERS || folders.iter().any(String::is_empty) {
            folders.clear();
        }
        let closed = window
            .closed
            .into_values()
            .filter(|f| folders.is_empty() || folders.iter().any(|d| inside(&f.path, d)))
            .take(MAX_CLOSED)
            .collect();
        Some(Batch { folders, closed })
    }

    /// Puts a batch that could not be enqueued back, as changes seen at `at`.
    pub fn restore(&mut self, batch: Batch, at: Instant) {
        if batch.folders.is_empty() {
            self.everything(at);
        }
        for folder in batch.folders {
            self.folder(folder, at);
        }
        for file in batch.closed {
            self.closed(file, at);
        }
    }
}

impl Batch {
    /// The crawl item of `config` this batch asks for. A whole-root crawl takes the key of the config's crawl
    /// (the scheduler's and the operator's), joining one already queued; a crawl of folders has none, so that
    /// no later window's folders are lost by joining it.
    pub fn item(&self, config: StorageConfigId) -> NewWorkItem {
        let scope = Scope::Config(config);
        let args = CrawlArgs::of_folders(self.folders.clone(), self.closed.clone());
        let item = NewWorkItem::from_args(&args, scope).expect("a crawl takes a config's scope");
        if args.is_whole_root() { item.with_dedup_key(DedupKey::for_work(WorkKind::Crawl, scope)) } else { item }
    }
}

/// The folder holding a file's path (`""`: the root).
pub(super) fn parent(path: &str) -> String {
    path.rsplit_once('/').map_or_else(String::new, |(folder, _)| folder.to_owned())
}

/// Whether `path` is `folder` or beneath it (`""` is the root, above everything).
pub fn inside(path: &str, folder: &str) -> bool {
    folder.is_empty() || path == folder || path.strip_prefix(folder).is_some_and(|rest| rest.starts_with('/'))
}

/// The folders that are not inside another of them, in order.
fn outermost(folders: BTreeSet<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    // In byte order a folder comes right before the folders beneath it (`a` < `a/b` < `a0`), though not always
    // right before: `a`, `a b`, `a/b`. So each is checked against every folder kept that is a prefix of it.
    for folder in folders {
        if !kept.iter().any(|k| inside(&folder, k)) {
            kept.push(folder);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(path: &str) -> ClosedFile {
        ClosedFile { path: path.into(), size: 1, mtime_ns: 2 }
    }

    #[test]
    fn folders_inside_another_are_dropped() {
        let set = ["a", "a b", "a/b", "a/b/c", "ab", "b/c"].map(String::from).into_iter().collect();
        assert_eq!(outermost(set), ["a", "a b", "ab", "b/c"]);
        assert!(inside("a/b", ""));
        assert!(!inside("ab", "a"));
    }

    #[test]
    fn files_closed_aside_are_remembered_until_taken_the_last_ten_thousand_at_most() {
        let mut w = Window::default();
        w.aside("a.tmp".into(), (1, 10));
        w.aside("b.tmp".into(), (2, 20));
        assert_eq!(w.take_aside(Path::new("a.tmp")), Some((1, 10)));
        assert_eq!(w.take_aside(Path::new("a.tmp")), None, "taken once");
        assert_eq!(w.take_aside(Path::new("b.tmp")), Some((2, 20)));
        for i in 0..MAX_ASIDE {
            w.aside(format!("{i}.tmp").into(), (3, 30));
        }
        assert_eq!(w.take_aside(Path::new("0.tmp")), Some((3, 30)), "ten thousand kept");
        w.aside("0.tmp".into(), (3, 30));
        w.aside("one too many.tmp".into(), (4, 40));
        assert_eq!(w.take_aside(Path::new("0.tmp")), None, "forgotten beyond the limit");
        assert_eq!(w.take_aside(Path::new("one too many.tmp")), Some((4, 40)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_closes_after_the_debounce_or_the_max_delay_from_its_first_change() {
        let (debounce, max_delay) = (Duration::from_secs(1), Duration::from_secs(10));
        let mut w = Window::default();
        assert_eq!(w.closes_at(debounce, max_delay), None);
        let t0 = Instant::now();
        w.folder("a".into(), t0);
        assert_eq!(w.closes_at(debounce, max_delay), Some(t0 + debounce));
        w.folder("b".into(), t0 + Duration::from_millis(9500));
        assert_eq!(w.closes_at(debounce, max_delay), Some(t0 + max_delay));
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_crawls_the_outermost_folders_with_the_files_closed_inside_them() {
        let (mut w, at) = (Window::default(), Instant::now());
        w.folder("2026/12".into(), at);
        w.folder("2026/12/trip".into(), at);
        w.closed(closed("2026/12/trip/a.jpg"), at);
        w.closed(closed("2026/12/b.jpg"), at);
        w.file("2026/12/b.jpg".into(), at);
        assert_eq!(w.pending_files(), 2);
        let batch = w.take().unwrap();
        assert_eq!(batch.folders, ["2026/12"]);
        assert_eq!(batch.closed, [closed("2026/12/trip/a.jpg")], "b.jpg changed after it was closed");
        assert!(w.is_empty() && w.take().is_none());
        let config = StorageConfigId::new();
        let item = batch.item(config);
        assert_eq!(item.dedup_key, None);
        let args: CrawlArgs = almanac_domain::WorkArgs::from_payload(item.payload()).unwrap();
        assert_eq!(args.folders, ["2026/12"]);
    }

    #[tokio::test(start_paused = true)]
    async fn too_many_folders_or_an_overflow_is_a_whole_root_crawl_joined_with_the_scheduled_one() {
        let (mut w, at) = (Window::default(), Instant::now());
        for i in 0..CrawlArgs::MAX_FOLDERS {
            w.folder(format!("f{i}"), at);
        }
        assert_eq!(w.take().unwrap().folders.len(), CrawlArgs::MAX_FOLDERS, "as many as a crawl takes");
        for i in 0..=CrawlArgs::MAX_FOLDERS {
            w.folder(format!("f{i}"), at);
        }
        let batch = w.take().unwrap();
        assert!(batch.folders.is_empty(), "one more: the whole root");
        let config = StorageConfigId::new();
        let key = DedupKey::for_work(WorkKind::Crawl, Scope::Config(config));
        assert_eq!(batch.item(config).dedup_key, Some(key));
        w.folder("a".into(), at);
        w.everything(at);
        assert!(w.take().unwrap().folders.is_empty());
        w.folder(String::new(), at);
        assert!(w.take().unwrap().folders.is_empty(), "the root itself");
        for i in 0..=MAX_CLOSED {
            w.closed(closed(&format!("a/{i}.jpg")), at);
        }
        assert_eq!(w.take().unwrap().closed.len(), MAX_CLOSED, "the payload stays small");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_put_back_is_taken_again() {
        let (mut w, at) = (Window::default(), Instant::now());
        w.folder("a".into(), at);
        w.closed(closed("a/x.jpg"), at);
        let batch = w.take().unwrap();
        w.restore(batch.clone(), at);
        assert_eq!(w.take(), Some(batch));
    }

    #[tokio::test(start_paused = true)]
    async fn closed_files_that_settle_are_pending_in_every_window_after() {
        let (mut w, at) = (Window::default(), Instant::now());
        w.settle_closed_files();
        for window in 0..2 {
            w.folder("a".into(), at);
            w.closed(closed("a/x.jpg"), at);
            assert_eq!(w.pending_files(), 1);
            let batch = w.take().unwrap();
            assert_eq!((batch.folders.as_slice(), batch.closed.len()), (["a".to_owned()].as_slice(), 0), "{window}");
        }
    }

    /// A file being written asks for no crawl while writes come; its folder joins the window once none came for
    /// the wait, or when it is seen closed (read at once), or when the watcher stops. So does a file seen closed
    /// where closed files settle (a library exported over NFS).
    #[tokio::test(start_paused = true)]
    async fn a_file_being_written_asks_for_its_folder_once_it_settles_or_closes_not_at_each_window() {
        let (mut w, t0, wait) = (Window::default(), Instant::now(), Duration::from_secs(11));
        for second in 0..60 {
            w.written("cam/rec.mp4".into(), t0 + Duration::from_secs(second));
            w.settle_written(t0 + Duration::from_secs(second), wait);
            assert!(w.take().is_none(), "written for {second} s");
        }
        assert_eq!(w.pending_files(), 1, "it is pending meanwhile");
        let last = t0 + Duration::from_secs(59);
        assert_eq!(w.written_settles_at(wait), Some(last + wait));
        w.settle_written(last + wait - Duration::from_millis(1), wait);
        assert!(w.is_empty(), "a millisecond early");
        w.settle_written(last + wait, wait);
        assert_eq!(w.closes_at(Duration::from_secs(1), wait), Some(last + wait + Duration::from_secs(1)));
        assert_eq!(w.take().unwrap().folders, ["cam"]);
        assert_eq!((w.written_settles_at(wait), w.pending_files()), (None, 0), "once");

        w.written("cam/a.jpg".into(), t0);
        w.closed(closed("cam/a.jpg"), t0);
        assert_eq!(w.written_settles_at(wait), None, "closed: no longer waited for");
        assert_eq!(w.take().unwrap().closed, [closed("cam/a.jpg")]);

        w.written("x/b.mov".into(), t0);
        w.written("y/c.mov".into(), t0);
        w.settle_written(t0, Duration::ZERO);
        assert_eq!(w.take().unwrap().folders, ["x", "y"], "a watcher that stops takes them all");

        w.settle_closed_files();
        w.closed(closed("nfs/d.jpg"), t0);
        assert!(w.is_empty(), "closed files settle: it waits");
        w.settle_written(t0 + wait, wait);
        assert_eq!(w.take().unwrap().folders, ["nfs"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_being_written_that_goes_elsewhere_is_no_longer_followed() {
        let (mut w, at, wait) = (Window::default(), Instant::now(), Duration::from_secs(11));
        for path in ["a/x.mov", "a/b/y.mov", "ab/z.mov"] {
            w.written(path.into(), at);
        }
        w.gone("a/x.mov");
        w.gone("a/b");
        w.settle_written(at + wait, wait);
        assert_eq!(w.take().unwrap().folders, ["ab"], "a folder gone takes what is beneath it, and only that");
    }

    #[tokio::test(start_paused = true)]
    async fn beyond_ten_thousand_files_being_written_one_more_is_a_change_of_its_folder_at_once() {
        let (mut w, at) = (Window::default(), Instant::now());
        for i in 0..MAX_WRITTEN {
            w.written(format!("a/{i}.jpg"), at);
        }
        assert!(w.is_empty());
        w.written("a/0.jpg".into(), at);
        assert!(w.is_empty(), "one already followed is followed still");
        w.written("b/one too many.jpg".into(), at);
        assert_eq!(w.take().unwrap().folders, ["b"]);
    }
}
