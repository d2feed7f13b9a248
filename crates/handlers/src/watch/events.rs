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

use super::watcher::Events;
use super::window::Window;
use crate::crawl::{is_skipped_name, reads_file_named};

/// How many events a watcher takes at once before it looks at its window's clock (and at being stopped) again.
const EVENTS_PER_TURN: usize = 4096;

/// An event and those already waiting behind it, [`EVENTS_PER_TURN`] at most: a flood is taken a few thousand at
/// a time, the rest at the next turn.
pub fn one_turn(first: notify::Result<Event>, events: &mut Events) -> impl Iterator<Item = notify::Result<Event>> {
    std::iter::once(first).chain(std::iter::from_fn(|| events.try_recv().ok())).take(EVENTS_PER_TURN)
}

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
        if a_file_not_read(path, event.kind, i) {
            continue;
        }
        changed = true;
        match event.kind {
            // Its folder with it (unless closed files settle, when a close is a write).
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => match stamped(path, &rel) {
                Some(closed) => window.closed(closed, at),
                None => {
                    window.folder(rel.parent(), at);
                    window.file(rel.path, at);
                }
            },
            EventKind::Create(CreateKind::Folder) => window.folder(rel.path, at),
            EventKind::Remove(RemoveKind::Folder) => {
                window.gone(&rel.path);
                window.folder(rel.path, at);
            }
            // Both ends of a rename: the first path is where it was, the second where it is.
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => arrived(path, rel, window, at),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if i == 1 => arrived(path, rel, window, at),
            // Gone: a file or a folder, no telling which now; its parent holds either.
            EventKind::Modify(ModifyKind::Name(_)) => {
                window.gone(&rel.path);
                window.folder(rel.parent(), at);
            }
            // A folder's attributes (one not watched until now, which may be readable now): the folder itself.
            EventKind::Modify(ModifyKind::Metadata(_)) if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) => {
                window.folder(rel.path, at)
            }
            // Another name for a file there already (a hard link: `cp -l`, `rsync --link-dest`): complete.
            EventKind::Create(CreateKind::File) if std::fs::symlink_metadata(path).is_ok_and(|m| m.nlink() > 1) => {
                arrived(path, rel, window, at)
            }
            // Being written: its folder is crawled once it is closed or has settled.
            EventKind::Create(CreateKind::File) | EventKind::Modify(ModifyKind::Data(_)) if rel.whole => {
                window.written(rel.path, at);
            }
            EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(_) => {
                window.gone(&rel.path);
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

/// Whether the `i`th path of an event of `kind` is a file the crawl does not read ([`reads_file_named`]): an app's
/// database beside the photos (digiKam's, Lightroom's catalogue and its journal), written all day while the app
/// is open, would otherwise have its folder crawled at every window, the whole library when it lies in the root.
/// A path that is a folder, or may be one (gone, and the event does not say which), is never passed over.
fn a_file_not_read(path: &Path, kind: EventKind, i: usize) -> bool {
    if path.file_name().is_none_or(|name| reads_file_named(name.as_bytes())) {
        return false;
    }
    match kind {
        EventKind::Create(CreateKind::File)
        | EventKind::Remove(RemoveKind::File)
        | EventKind::Modify(ModifyKind::Data(_))
        | EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Create(CreateKind::Folder) | EventKind::Remove(RemoveKind::Folder) => false,
        // Where a rename's file was: gone, a file or a folder, no telling which.
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => false,
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if i == 0 => false,
        // Anything else is looked at: there now, and not a folder.
        _ => std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir()),
    }
}

/// Sync tools (rsync, Syncthing, Nextcloud, …) write a file under a hidden or temporary name, close it, then
/// rename it: a file closed under such a name is remembered, and renamed unchanged to a name the crawl reads it
/// is as closed after writing under that name (answered, to be recorded after the rename itself). Renamed to a
/// name the crawl does not read (an app's database synced in), it is nothing.
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
            if !reads_file_named(to.file_name()?.as_bytes()) {
                return None;
            }
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
    /// a name the crawl skips or a file it does not read. Blocking: it looks at the file.
    pub fn in_root(root: &Path, path: &Path) -> Option<Found> {
        let rel = Rel::of(root, path)?;
        reads_file_named(path.file_name()?.as_bytes()).then(|| Self::of(path, rel))
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
        super::window::parent(&self.path)
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
mod tests;
