//! What a change event means for the crawl (ADR 0014, decision 5): the folder(s) to look at again, the files
//! seen closed after writing, or that the events can no longer be trusted (an overflow, the watch limit).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use almanac_domain::ClosedFile;
use almanac_media::{Writers, writers};
use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};
use notify::{Event, EventKind};
use tokio::time::Instant;

use super::window::Window;
use crate::crawl::is_skipped_name;

/// What one event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Nothing the crawl cares about (a read, a hidden or temporary file, a NAS's own folders).
    Ignored,
    /// A change, recorded in the window.
    Changed,
    /// Events may have been lost (why): the config falls back to polling and a whole-root crawl.
    FallBack(String),
}

/// Records what `event` (as notify delivers it, an error included) says changed under `root` into `window`.
pub fn handle(root: &Path, event: notify::Result<Event>, window: &mut Window, at: Instant) -> Handled {
    let event = match event {
        Ok(event) => event,
        Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => {
            return Handled::FallBack(format!(
                "the watch limit was reached ({e}): raise fs.inotify.max_user_watches, or keep the config polled"
            ));
        }
        // An error reading the events: some may be lost.
        Err(e) => return Handled::FallBack(format!("the change events could not be read: {e}")),
    };
    if event.need_rescan() {
        return Handled::FallBack(
            "the kernel's event queue overflowed (events were lost): raise fs.inotify.max_queued_events".into(),
        );
    }
    let root_gone = matches!(event.kind, EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_)));
    if root_gone && event.paths.iter().any(|p| p == root) {
        return Handled::FallBack("the root was removed or renamed: its folders' watches see nothing more".into());
    }
    let renamed = written_aside(root, &event, window);
    let mut changed = false;
    for (i, path) in event.paths.iter().enumerate() {
        let Some(rel) = Rel::of(root, path) else { continue };
        changed = true;
        match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => {
                window.folder(rel.parent(), at);
                match stamped(path, &rel) {
                    Some(closed) => window.closed(closed, at),
                    None => window.file(rel.path, at),
                }
            }
            EventKind::Create(CreateKind::Folder) | EventKind::Remove(RemoveKind::Folder) => {
                window.folder(rel.path, at);
            }
            // Both ends of a rename: the first path is where it was, the second where it is.
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => arrived(path, rel, window, at),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if i == 1 => arrived(path, rel, window, at),
            // Gone: a file or a folder, no telling which now; its parent holds either.
            EventKind::Modify(ModifyKind::Name(_)) => window.folder(rel.parent(), at),
            EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(_) => {
                window.folder(rel.parent(), at);
                window.file(rel.path, at);
            }
            EventKind::Access(_) | EventKind::Any | EventKind::Other => changed = false,
        }
    }
    if let Some(closed) = renamed {
        window.closed(closed, at);
    }
    if changed { Handled::Changed } else { Handled::Ignored }
}

/// Sync tools (rsync, Syncthing, Nextcloud, …) write a file under a hidden or temporary name, close it, then
/// rename it: a file closed under such a name is remembered, and renamed unchanged to a name the crawl reads it
/// is as closed after writing under that name (answered, to be recorded after the rename itself).
fn written_aside(root: &Path, event: &Event, window: &mut Window) -> Option<ClosedFile> {
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {
            for path in event.paths.iter().filter(|p| p.starts_with(root) && Rel::of(root, p).is_none()) {
                if let Some((size, mtime_ns)) = stamp(path) {
                    window.aside(path.clone(), (size, mtime_ns));
                }
            }
            None
        }
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
            let [from, to] = event.paths.as_slice() else { return None };
            let written = window.take_aside(from)?;
            let closed = stamped(to, &Rel::of(root, to)?)?;
            ((closed.size, closed.mtime_ns) == written).then_some(closed)
        }
        _ => None,
    }
}

/// Something renamed to `path`: a folder is looked at itself, a file through its folder, read at once if no one
/// has it open for writing when its window closes (it arrived complete: a sync tool renames a file it finished).
fn arrived(path: &Path, rel: Rel, window: &mut Window, at: Instant) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        window.folder(rel.path, at);
    } else {
        Found::of(path, rel).record(window, at);
    }
}

/// The folder that appeared beneath `root` by `event`, to be watched and listed: made, or renamed or moved to;
/// its attributes changed (a folder that could not be read, and so not watched, when it was made may be
/// readable now); or said removed while a folder is there (a folder replaced by another of the same name: the
/// watch of the path went with the one removed). `None` for any other event, the root, or a folder the crawl
/// skips.
pub fn appeared_folder(root: &Path, event: &Event) -> Option<std::path::PathBuf> {
    let path = match event.kind {
        EventKind::Create(CreateKind::Folder)
        | EventKind::Modify(ModifyKind::Name(RenameMode::To) | ModifyKind::Metadata(_))
        | EventKind::Remove(RemoveKind::Folder) => event.paths.first()?,
        _ => return None,
    };
    if Rel::of(root, path)?.path.is_empty() {
        return None;
    }
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()).then(|| path.clone())
}

/// A file that arrived without being seen closed, as the window records it: its folder is crawled, and the file
/// read at once if no one has it open for writing when the window closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    folder: String,
    file: Result<ClosedFile, String>,
}

impl Found {
    /// The file at `path` found in a folder that appeared beneath `root` (see [`appeared_folder`]); `None` for
    /// a name the crawl skips. Blocking: it looks at the file.
    pub fn in_root(root: &Path, path: &Path) -> Option<Found> {
        Some(Self::of(path, Rel::of(root, path)?))
    }

    fn of(path: &Path, rel: Rel) -> Found {
        let folder = rel.parent();
        let file = stamped(path, &rel).ok_or(rel.path);
        Found { folder, file }
    }

    /// Records it in `window`, as seen at `at`.
    pub fn record(self, window: &mut Window, at: Instant) {
        window.folder(self.folder, at);
        match self.file {
            Ok(closed) => window.arrived(closed, at),
            Err(path) => window.file(path, at),
        }
    }
}

/// Of the files a window would read at once (`(path, arrived)`, as [`Window::unconfirmed`] lists them), those
/// someone may still be writing: a file seen closed that someone else still has open for writing (one of two
/// writers closed it), a file that arrived that anyone has open for writing or of which that cannot be told.
/// Answers too whether this process was not allowed to ask of some file (see [`Writers::NotAllowed`]).
/// Blocking: it opens each file (run it on a blocking thread).
pub fn still_written(root: &Path, candidates: Vec<(String, bool)>) -> (Vec<String>, bool) {
    let mut refused = false;
    let mut complete = |path: &str, arrived: bool| match writers(&root.join(path)) {
        Writers::None => true,
        Writers::Some => false,
        // A close was seen: trusted, as it was before leases were asked.
        Writers::NotAllowed => {
            refused = true;
            !arrived
        }
        Writers::Unknown => !arrived,
    };
    let written =
        candidates.into_iter().filter(|(path, arrived)| !complete(path, *arrived)).map(|(path, _)| path).collect();
    (written, refused)
}

/// The regular file at `path` with its size and mtime now, or `None` when it is gone, not one, or its path was
/// cut (a name not UTF-8).
fn stamped(path: &Path, rel: &Rel) -> Option<ClosedFile> {
    let (size, mtime_ns) = stamp(path).filter(|_| rel.whole)?;
    Some(ClosedFile { path: rel.path.clone(), size, mtime_ns })
}

/// A regular file's size and mtime (nanoseconds), or `None` when it is gone or not one.
fn stamp(path: &Path) -> Option<(u64, i64)> {
    let meta = std::fs::symlink_metadata(path).ok().filter(std::fs::Metadata::is_file)?;
    Some((meta.len(), ClosedFile::stat_nanos(meta.mtime(), meta.mtime_nsec())))
}

/// Names beneath the root as the crawl names their path: joined with `/`, cut before the first name that is not
/// UTF-8 (then a folder that holds the path); answers whether nothing was cut.
pub(super) fn crawl_path<'a>(names: impl IntoIterator<Item = &'a OsStr>) -> (String, bool) {
    let names: Vec<&OsStr> = names.into_iter().collect();
    let utf8: Vec<&str> = names.iter().map_while(|n| n.to_str()).collect();
    (utf8.join("/"), utf8.len() == names.len())
}

/// A path beneath the root, as the crawl names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rel {
    /// Relative to the root, `/`-separated; cut before the first name that is not UTF-8 (then a folder that
    /// holds the path).
    path: String,
    /// Whether `path` is the whole path (no name was cut).
    whole: bool,
}

impl Rel {
    /// `path` relative to `root`; `None` outside the root, or when a name in it is one the crawl skips (hidden,
    /// a NAS's own folders), or when it is a temporary file's (a folder's is kept).
    fn of(root: &Path, path: &Path) -> Option<Rel> {
        let rest = path.strip_prefix(root).ok()?;
        let mut names = Vec::new();
        for c in rest.components() {
            match c {
                Component::Normal(name) if !is_skipped_name(name.as_bytes()) => names.push(name),
                _ => return None,
            }
        }
        // A folder may have any name; a file with a temporary one is not media yet.
        if names.last().is_some_and(|n| is_temporary_name(n.as_bytes()))
            && !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
        {
            return None;
        }
        let (path, whole) = crawl_path(names);
        Some(Rel { path, whole })
    }

    /// The folder holding it (itself when a name was cut: then it already is one).
    fn parent(&self) -> String {
        if !self.whole {
            return self.path.clone();
        }
        self.path.rsplit_once('/').map_or_else(String::new, |(parent, _)| parent.to_owned())
    }
}

/// Names of files being downloaded or written before their rename (browsers, editors, sync tools, WinSCP,
/// qBittorrent): not media yet, and renamed when done, which is seen.
const TEMPORARY_SUFFIXES: [&[u8]; 9] =
    [b"~", b".tmp", b".temp", b".part", b".partial", b".crdownload", b".download", b".filepart", b".!qb"];

/// Whether a file name is a temporary file's.
fn is_temporary_name(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    TEMPORARY_SUFFIXES.iter().any(|s| lower.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn event(kind: EventKind, paths: &[&Path]) -> notify::Result<Event> {
        Ok(paths.iter().fold(Event::new(kind), |e, p| e.add_path(p.to_path_buf())))
    }

    /// What the watcher does as a window closes: files someone may still be writing are not read at once.
    fn confirm(root: &Path, window: &mut Window) {
        let candidates = window.unconfirmed();
        window.still_written(still_written(root, candidates).0);
    }

    fn folders_of(window: &mut Window) -> Vec<String> {
        window.take().map(|b| b.folders).unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_counts_for_its_folder_and_a_folder_for_itself() {
        let root = PathBuf::from("/lib");
        let mut w = Window::default();
        let at = Instant::now();
        let create = event(EventKind::Create(CreateKind::File), &[&root.join("2026/a.jpg")]);
        assert_eq!(handle(&root, create, &mut w, at), Handled::Changed);
        assert_eq!(w.pending_files(), 1);
        assert_eq!(folders_of(&mut w), ["2026"]);
        let made = event(EventKind::Create(CreateKind::Folder), &[&root.join("2026/trip")]);
        handle(&root, made, &mut w, at);
        assert_eq!(folders_of(&mut w), ["2026/trip"]);
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        handle(&root, event(rename, &[&root.join("a/x.jpg"), &root.join("b/x.jpg")]), &mut w, at);
        assert_eq!(folders_of(&mut w), ["a", "b"], "both ends of a rename");
    }

    #[tokio::test(start_paused = true)]
    async fn reads_hidden_and_temporary_files_and_nas_folders_are_ignored() {
        let root = PathBuf::from("/lib");
        let mut w = Window::default();
        let at = Instant::now();
        let ignored = [
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), "a/x.jpg"),
            (EventKind::Access(AccessKind::Close(AccessMode::Read)), "a/x.jpg"),
            (EventKind::Create(CreateKind::File), "a/@eaDir/x.jpg/SYNOPHOTO_THUMB_M.jpg"),
            (EventKind::Create(CreateKind::Folder), "@eaDir"),
            (EventKind::Modify(ModifyKind::Data(notify::event::DataChange::Any)), "a/.DS_Store"),
            (EventKind::Create(CreateKind::File), "a/.x.jpg.Ab12Cd"),
            (EventKind::Create(CreateKind::File), "a/x.jpg.part"),
            (EventKind::Create(CreateKind::File), "a/x.jpg.crdownload"),
            (EventKind::Other, "a"),
        ];
        for (kind, path) in ignored {
            assert_eq!(handle(&root, event(kind, &[&root.join(path)]), &mut w, at), Handled::Ignored, "{path}");
        }
        let elsewhere = event(EventKind::Create(CreateKind::File), &[Path::new("/other/x.jpg")]);
        assert_eq!(handle(&root, elsewhere, &mut w, at), Handled::Ignored);
        assert!(w.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_limit_reached_says_which_limit_and_other_errors_say_events_were_lost() {
        let root = PathBuf::from("/lib");
        let mut w = Window::default();
        let limit = Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch));
        let Handled::FallBack(why) = handle(&root, limit, &mut w, Instant::now()) else { panic!("no fall-back") };
        assert!(why.contains("fs.inotify.max_user_watches"), "{why}");
        let other = Err(notify::Error::generic("the queue broke"));
        let Handled::FallBack(why) = handle(&root, other, &mut w, Instant::now()) else { panic!("no fall-back") };
        assert!(why.contains("could not be read") && why.contains("the queue broke"), "{why}");
        assert!(!why.contains("max_user_watches"), "{why}");
    }

    /// A rename's two paths: where the file was counts for its folder only, where it is as a file that arrived.
    #[tokio::test(start_paused = true)]
    async fn a_renamed_file_arrives_where_it_is_renamed_to_and_only_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::fs::write(dir.path().join("b/x.jpg"), b"12345").unwrap();
        let mut w = Window::default();
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        let (from, to) = (dir.path().join("a/x.jpg"), dir.path().join("b/x.jpg"));
        assert_eq!(handle(dir.path(), event(rename, &[&from, &to]), &mut w, Instant::now()), Handled::Changed);
        assert_eq!(w.unconfirmed(), [("b/x.jpg".to_owned(), true)]);
        assert_eq!(w.pending_files(), 1);
        assert_eq!(folders_of(&mut w), ["a", "b"]);
    }

    /// A sync tool's way: written under a hidden name, closed, renamed. Renamed unchanged, the file is as closed
    /// after writing under its new name; changed in between, it only arrived.
    #[tokio::test(start_paused = true)]
    async fn a_file_written_under_a_hidden_name_and_renamed_unchanged_is_closed_after_writing() {
        let dir = tempfile::tempdir().unwrap();
        let (aside, file) = (dir.path().join(".x.jpg.Ab12Cd"), dir.path().join("x.jpg"));
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        for changed_between in [false, true] {
            let mut w = Window::default();
            std::fs::write(&aside, b"12345").unwrap();
            assert_eq!(handle(dir.path(), event(close, &[&aside]), &mut w, Instant::now()), Handled::Ignored);
            if changed_between {
                std::fs::write(&aside, b"123456").unwrap();
            }
            std::fs::rename(&aside, &file).unwrap();
            handle(dir.path(), event(rename, &[&aside, &file]), &mut w, Instant::now());
            assert_eq!(w.unconfirmed(), [("x.jpg".to_owned(), changed_between)], "changed between: {changed_between}");
        }
        // Closed under a name the crawl reads, then renamed: read as closed under that name, and only arrived
        // under the new one.
        let mut w = Window::default();
        let (y, z) = (dir.path().join("y.jpg"), dir.path().join("z.jpg"));
        std::fs::write(&y, b"12345").unwrap();
        handle(dir.path(), event(close, &[&y]), &mut w, Instant::now());
        std::fs::rename(&y, &z).unwrap();
        handle(dir.path(), event(rename, &[&y, &z]), &mut w, Instant::now());
        assert_eq!(w.unconfirmed(), [("y.jpg".to_owned(), false), ("z.jpg".to_owned(), true)]);
    }

    /// Before a window reads files at once: a file seen closed is trusted when whether anyone writes it cannot
    /// be told; one that only arrived is not. Both for a file that is no regular file and, as root, for another
    /// user's file asked about without `CAP_LEASE` (which is also reported).
    #[test]
    fn a_file_that_cannot_be_told_is_trusted_when_seen_closed_and_not_when_it_only_arrived() {
        use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
        let dir = tempfile::tempdir().unwrap();
        let fifo = rustix::fs::FileType::Fifo;
        for name in ["closed.jpg", "arrived.jpg"] {
            rustix::fs::mknodat(rustix::fs::CWD, dir.path().join(name), fifo, rustix::fs::Mode::RUSR, 0).unwrap();
        }
        let candidates = || vec![("closed.jpg".to_owned(), false), ("arrived.jpg".to_owned(), true)];
        assert_eq!(still_written(dir.path(), candidates()), (vec!["arrived.jpg".to_owned()], false));
        if !rustix::process::getuid().is_root() {
            return;
        }
        let others = tempfile::tempdir().unwrap();
        for name in ["closed.jpg", "arrived.jpg"] {
            std::fs::write(others.path().join(name), b"12345").unwrap();
            rustix::fs::chown(others.path().join(name), Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
        }
        let root = others.path().to_owned();
        let answer = std::thread::spawn(move || {
            let mut sets = capabilities(None).unwrap();
            sets.effective.remove(CapabilitySet::LEASE);
            set_capabilities(None, sets).unwrap();
            still_written(&root, candidates())
        });
        assert_eq!(answer.join().unwrap(), (vec!["arrived.jpg".to_owned()], true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_closed_after_writing_is_recorded_with_its_size_and_mtime() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let file = dir.path().join("a/x.jpg");
        std::fs::write(&file, b"12345").unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        let mut w = Window::default();
        let closed = event(EventKind::Access(AccessKind::Close(AccessMode::Write)), &[&file]);
        assert_eq!(handle(dir.path(), closed, &mut w, Instant::now()), Handled::Changed);
        let batch = w.take().unwrap();
        assert_eq!(batch.folders, ["a"]);
        let expected = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
        assert_eq!(batch.closed, [ClosedFile { path: "a/x.jpg".into(), size: 5, mtime_ns: expected }]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_renamed_in_is_read_at_once_unless_someone_still_writes_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let (root, at) = (dir.path(), Instant::now());
        let mut w = Window::default();
        let close = |p: &Path| event(EventKind::Access(AccessKind::Close(AccessMode::Write)), &[p]);
        let both = |from: &Path, to: &Path| event(EventKind::Modify(ModifyKind::Name(RenameMode::Both)), &[from, to]);
        let to = |p: &Path| event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[p]);
        // a.jpg: written under a sync tool's temporary name, closed, renamed.
        std::fs::write(root.join(".a.jpg.Xy12"), b"12345").unwrap();
        assert_eq!(handle(root, close(&root.join(".a.jpg.Xy12")), &mut w, at), Handled::Ignored);
        std::fs::rename(root.join(".a.jpg.Xy12"), root.join("a.jpg")).unwrap();
        assert_eq!(handle(root, both(&root.join(".a.jpg.Xy12"), &root.join("a.jpg")), &mut w, at), Handled::Changed);
        // b.jpg: closed once under its temporary name, written again and renamed while still open for writing.
        std::fs::write(root.join("b.jpg.part"), b"12345").unwrap();
        handle(root, close(&root.join("b.jpg.part")), &mut w, at);
        let mut writing = std::fs::OpenOptions::new().append(true).open(root.join("b.jpg.part")).unwrap();
        std::io::Write::write_all(&mut writing, b"6").unwrap();
        std::fs::rename(root.join("b.jpg.part"), root.join("b.jpg")).unwrap();
        handle(root, both(&root.join("b.jpg.part"), &root.join("b.jpg")), &mut w, at);
        // c.jpg: moved in from outside the root (no close seen), no one writing to it.
        std::fs::write(outside.path().join("c.jpg"), b"123").unwrap();
        std::fs::rename(outside.path().join("c.jpg"), root.join("c.jpg")).unwrap();
        assert_eq!(handle(root, to(&root.join("c.jpg")), &mut w, at), Handled::Changed);
        confirm(root, &mut w);
        let batch = w.take().unwrap();
        let closed: Vec<(&str, u64)> = batch.closed.iter().map(|c| (c.path.as_str(), c.size)).collect();
        assert_eq!(closed, [("a.jpg", 5), ("c.jpg", 3)], "b.jpg is still being written");
        assert_eq!(w.pending_files(), 0);
        drop(writing);
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_closed_by_one_writer_while_another_writes_on_is_not_read_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (root, at) = (dir.path(), Instant::now());
        let file = root.join("x.jpg");
        std::fs::write(&file, b"1").unwrap();
        let other = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
        let mut w = Window::default();
        handle(root, event(EventKind::Access(AccessKind::Close(AccessMode::Write)), &[&file]), &mut w, at);
        confirm(root, &mut w);
        assert_eq!((w.pending_files(), w.take().unwrap().closed.len()), (1, 0));
        drop(other);
    }

    #[tokio::test(start_paused = true)]
    async fn a_folder_that_appears_is_named_and_its_files_found_as_written_or_complete() {
        let dir = tempfile::tempdir().unwrap();
        let (root, at) = (dir.path(), Instant::now());
        std::fs::create_dir_all(root.join("trip/@eaDir")).unwrap();
        let made = |p: &Path| event(EventKind::Create(CreateKind::Folder), &[p]).unwrap();
        assert_eq!(appeared_folder(root, &made(&root.join("trip"))), Some(root.join("trip")));
        assert_eq!(appeared_folder(root, &made(&root.join("trip/@eaDir"))), None, "a NAS's folder");
        assert_eq!(appeared_folder(root, &made(&root.join("gone"))), None);
        let file = event(EventKind::Create(CreateKind::File), &[&root.join("trip")]).unwrap();
        assert_eq!(appeared_folder(root, &file), None);
        // Made unreadable, then readable (its attributes changed); or said removed while one is there (replaced).
        let attrib =
            event(EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)), &[&root.join("trip")]);
        assert_eq!(appeared_folder(root, &attrib.unwrap()), Some(root.join("trip")));
        let removed = event(EventKind::Remove(RemoveKind::Folder), &[&root.join("trip")]).unwrap();
        assert_eq!(appeared_folder(root, &removed), Some(root.join("trip")));
        let root_attrib = event(EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)), &[root]);
        assert_eq!(appeared_folder(root, &root_attrib.unwrap()), None, "the root is watched from the start");
        // A folder may have a name a temporary file would have.
        std::fs::create_dir(root.join("Trip~")).unwrap();
        assert_eq!(appeared_folder(root, &made(&root.join("Trip~"))), Some(root.join("Trip~")));
        std::fs::write(root.join("trip/done.jpg"), b"12").unwrap();
        std::fs::write(root.join("trip/busy.jpg"), b"1").unwrap();
        let busy = std::fs::OpenOptions::new().append(true).open(root.join("trip/busy.jpg")).unwrap();
        let mut w = Window::default();
        for name in ["done.jpg", "busy.jpg"] {
            Found::in_root(root, &root.join("trip").join(name)).unwrap().record(&mut w, at);
        }
        assert!(Found::in_root(root, &root.join("trip/x.jpg.part")).is_none(), "a temporary name");
        assert_eq!(w.pending_files(), 2);
        confirm(root, &mut w);
        let batch = w.take().unwrap();
        assert_eq!(batch.folders, ["trip"]);
        let closed: Vec<&str> = batch.closed.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(closed, ["trip/done.jpg"]);
        drop(busy);
    }

    #[tokio::test(start_paused = true)]
    async fn the_root_removed_or_renamed_falls_back() {
        let root = PathBuf::from("/lib");
        let mut w = Window::default();
        for kind in [EventKind::Remove(RemoveKind::Folder), EventKind::Modify(ModifyKind::Name(RenameMode::From))] {
            let handled = handle(&root, event(kind, &[&root]), &mut w, Instant::now());
            assert!(matches!(handled, Handled::FallBack(r) if r.contains("root was removed or renamed")), "{kind:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_overflow_or_the_watch_limit_falls_back() {
        let root = PathBuf::from("/lib");
        let mut w = Window::default();
        let at = Instant::now();
        let overflow = Ok(Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan));
        assert!(matches!(handle(&root, overflow, &mut w, at), Handled::FallBack(r) if r.contains("overflowed")));
        let limit = Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch));
        assert!(matches!(handle(&root, limit, &mut w, at), Handled::FallBack(r) if r.contains("max_user_watches")));
    }

    #[test]
    fn a_name_that_is_not_utf8_cuts_the_path_to_its_folder() {
        use std::os::unix::ffi::OsStringExt;
        let root = PathBuf::from("/lib");
        let odd = root.join("a").join(std::ffi::OsString::from_vec(b"caf\xe9".to_vec())).join("x.jpg");
        let rel = Rel::of(&root, &odd).unwrap();
        assert_eq!((rel.path.as_str(), rel.whole, rel.parent()), ("a", false, "a".to_owned()));
        let plain = Rel::of(&root, &root.join("a/b/x.jpg")).unwrap();
        assert_eq!(plain.parent(), "a/b");
        assert_eq!(Rel::of(&root, &root).unwrap().parent(), "");
    }
}
