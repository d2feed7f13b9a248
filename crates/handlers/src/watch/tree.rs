//! The root's folders, watched one by one (ADR 0014, amendment 1). A recursive watch would watch every folder,
//! the NAS's own among them (Synology's `@eaDir` holds a folder per photo), and a large library would reach the
//! kernel's watch limit for folders the crawl never reads. So each folder the crawl reads is watched on its own,
//! the crawl's skipped names passed over and links never followed, and a folder that appears (made, or moved in)
//! is watched with everything beneath it when its event comes.
//!
//! A folder that appears is watched first and listed after: a file made in it before its watch was set is found
//! by the listing, one made after raises an event; either way none is missed. The proxy root, when it is mounted
//! inside the library, is passed over with everything beneath it, as the crawl passes it over (`avoid`, its
//! identity): its folders would count against the watch limit, and every proxy written would be a change.
//! Blocking: run on a blocking thread.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use notify::{RecursiveMode, Watcher as _};
use tokio_util::sync::CancellationToken;

use super::sentinel::Guard;
use crate::crawl::{is_skipped_name, reads_file_named};

/// The watches of one root's folders.
pub struct WatchedTree {
    watcher: notify::RecommendedWatcher,
    /// Folders watched since the start (a folder gone gives its watch back on its own: this only grows).
    added: usize,
    /// Folders whose watch could not be set (not readable when they were walked, say): a change of their attributes
    /// is looked at as a folder that appeared, since it may have made them readable.
    unwatched: std::collections::HashSet<PathBuf>,
    /// The proxy root's identity, passed over.
    avoid: Option<(u64, u64)>,
    /// The sentinel's watches of the root and the mounts beneath it, given back with these.
    _guard: Option<Guard>,
}

/// What is in a folder: its subfolders and its files, the crawl's skipped names passed over (links are neither).
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub folders: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
    /// A digest of what in the folder the crawl would look at: its subfolders' names, and the names and inodes
    /// of the files it reads ([`reads_file_named`]). The same whatever order the entries are listed in; another
    /// when one of those is made, removed, renamed or replaced by a rename, and not when another file is.
    pub read: u64,
    /// Whether the folder was read to its end: not when it could not be opened, or its listing broke off (a
    /// directory block that took a bad write, a network share's hiccup). Then what was read is all there is.
    pub complete: bool,
}

/// Lists a folder, by each entry's type (a link is not followed); what could be read when it cannot be read
/// whole (the crawl judges it), saying so. Polling and the watches list folders by it.
pub(super) fn list(folder: &Path) -> Listing {
    let mut listing = Listing::default();
    let Ok(entries) = std::fs::read_dir(folder) else { return listing };
    listing.complete = true;
    for entry in entries {
        let Ok(entry) = entry else {
            listing.complete = false;
            break;
        };
        let name = entry.file_name();
        if is_skipped_name(name.as_bytes()) {
            continue;
        }
        // Entries' digests are added, so the listing's order does not matter (names are unique in a folder).
        let digest = |inode: Option<u64>| {
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&(name.as_bytes(), inode), &mut hasher);
            std::hash::Hasher::finish(&hasher)
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => {
                listing.read = listing.read.wrapping_add(digest(None));
                listing.folders.push(entry.path());
            }
            Ok(t) if t.is_file() => {
                if reads_file_named(name.as_bytes()) {
                    listing.read = listing.read.wrapping_add(digest(Some(entry.ino())));
                }
                listing.files.push(entry.path());
            }
            _ => {}
        }
    }
    listing
}

/// Walks `top` and the folders beneath it (a link to a folder is not one, nor the folder whose identity is
/// `avoid`), until `stop`: `enter` says of each folder, before it is listed, whether to list it (an error ends the
/// walk), and each listing's files go to `files`.
fn walk<E>(
    top: &Path,
    avoid: Option<(u64, u64)>,
    stop: &CancellationToken,
    mut enter: impl FnMut(&Path) -> Result<bool, E>,
    mut files: impl FnMut(Vec<PathBuf>),
) -> Result<(), E> {
    let mut todo = vec![top.to_path_buf()];
    while let Some(folder) = todo.pop() {
        if stop.is_cancelled() {
            break;
        }
        // Only a folder, not a link to one (the kernel would follow it), and not the proxy root.
        let walked = std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir() && Some((m.dev(), m.ino())) != avoid);
        if !walked || !enter(&folder)? {
            continue;
        }
        let listing = list(&folder);
        todo.extend(listing.folders);
        files(listing.files);
    }
    Ok(())
}

/// The files in `top` and the folders beneath it (not the one whose identity is `avoid`), none watched.
pub(super) fn files_beneath(top: &Path, avoid: Option<(u64, u64)>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let stop = CancellationToken::new();
    let Ok(()) = walk::<std::convert::Infallible>(top, avoid, &stop, |_| Ok(true), |f| found.extend(f));
    found
}

impl WatchedTree {
    /// Watches every folder beneath `root` (its own included) but the one whose identity is `avoid` (the proxy
    /// root) and what is beneath it, with `handler` receiving their events; stops adding watches once `stop` is
    /// cancelled. Fails when the watcher cannot start or the kernel's watch limit is reached
    /// (`notify::ErrorKind::MaxFilesWatch`).
    pub fn start<H: notify::EventHandler>(
        root: &Path,
        avoid: Option<(u64, u64)>,
        handler: H,
        stop: &CancellationToken,
    ) -> notify::Result<Self> {
        // Links are never followed, as the crawl never follows them.
        let config = notify::Config::default().with_follow_symlinks(false);
        let watcher = notify::RecommendedWatcher::new(handler, config)?;
        let unwatched = std::collections::HashSet::new();
        let mut tree = Self { watcher, added: 0, avoid, unwatched, _guard: None };
        tree.watch_subtree(root, stop, |_| {})?;
        Ok(tree)
    }

    /// The same, holding `guard` (the sentinel's watches set for it) while it watches.
    pub(super) fn guarded(self, guard: Option<Guard>) -> Self {
        Self { _guard: guard, ..self }
    }

    /// How many folders were watched.
    pub fn added(&self) -> usize {
        self.added
    }

    /// Whether `event` is a change of the attributes of a folder that is watched (`chmod`, `chown`, a folder's
    /// times set by `rsync -a`, an ACL a NAS's permission editor applies to every folder of a share): nothing in
    /// the library changed. Before, each was taken for a folder that appeared: its whole subtree was watched and
    /// listed again, every file in it asked about, and its parent crawled (the whole library, for a folder at the
    /// top). Only a folder whose watch could not be set, or beneath which nothing could be, is looked at again.
    pub fn attributes_of_a_watched_folder(&self, event: &notify::Event) -> bool {
        matches!(event.kind, notify::EventKind::Modify(notify::event::ModifyKind::Metadata(_)))
            && event.paths.iter().all(|p| {
                std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) && !self.unwatched.contains(p.as_path())
            })
    }

    /// Watches a folder that appeared beneath the root and every folder beneath it; answers the files found in
    /// them (made before their folder's watch was set, or moved in with it).
    pub fn arrived(&mut self, folder: &Path, stop: &CancellationToken) -> notify::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        self.watch_subtree(folder, stop, |found| files.extend(found))?;
        Ok(files)
    }

    /// Watches `top` and the folders beneath it, each before it is listed, handing each listing's files to
    /// `files`. A folder gone or unreadable by now is passed over.
    fn watch_subtree(
        &mut self,
        top: &Path,
        stop: &CancellationToken,
        files: impl FnMut(Vec<PathBuf>),
    ) -> notify::Result<()> {
        let watch = |folder: &Path| {
            let watched = watched(self.watcher.watch(folder, RecursiveMode::NonRecursive))?;
            self.added += usize::from(watched);
            // A folder that can be listed but not entered (no search right: `chmod -R 644` by mistake) is watched,
            // but nothing beneath it can be: once its rights are given back, its attributes' change walks it again.
            let enterable = std::fs::symlink_metadata(folder.join(".")).is_ok();
            if watched && enterable {
                self.unwatched.remove(folder);
            } else {
                self.unwatched.insert(folder.to_path_buf());
            }
            Ok(watched)
        };
        walk(top, self.avoid, stop, watch, files)
    }
}

/// Whether a folder's watch was set, from what setting it answered; an error only when the kernel's watch limit
/// is reached. A folder gone or not readable is passed over: nothing in it can be crawled either.
fn watched(set: notify::Result<()>) -> notify::Result<bool> {
    match set {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => Err(e),
        Err(_) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_watch_limit_stops_the_watches_a_folder_gone_or_unreadable_is_passed_over() {
        assert!(watched(Ok(())).unwrap());
        let limit = watched(Err(notify::Error::new(notify::ErrorKind::MaxFilesWatch))).unwrap_err();
        assert!(matches!(limit.kind, notify::ErrorKind::MaxFilesWatch));
        for kind in [std::io::ErrorKind::NotFound, std::io::ErrorKind::PermissionDenied] {
            assert!(!watched(Err(notify::Error::io(kind.into()))).unwrap(), "{kind:?}");
        }
        assert!(!watched(Err(notify::Error::path_not_found())).unwrap());
    }

    #[test]
    fn a_folder_that_appears_is_watched_then_listed_with_what_is_beneath_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/@eaDir/x.jpg")).unwrap();
        let stop = CancellationToken::new();
        let mut tree = WatchedTree::start(root, None, |_| {}, &stop).unwrap();
        assert_eq!(tree.added(), 2, "the root and a; not the NAS's folder");
        std::fs::create_dir_all(root.join("b/c/.hidden")).unwrap();
        std::fs::write(root.join("b/one.jpg"), b"1").unwrap();
        std::fs::write(root.join("b/c/two.jpg"), b"2").unwrap();
        std::fs::write(root.join("b/c/.hidden/three.jpg"), b"3").unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("b/link")).unwrap();
        let mut files = tree.arrived(&root.join("b"), &stop).unwrap();
        files.sort();
        assert_eq!(files, [root.join("b/c/two.jpg"), root.join("b/one.jpg")]);
        assert_eq!(tree.added(), 4, "b and b/c");
        assert!(tree.arrived(&root.join("gone"), &stop).unwrap().is_empty());
        assert!(tree.arrived(&root.join("b/link"), &stop).unwrap().is_empty(), "a link is not followed");
        assert_eq!(tree.added(), 4);
    }

    #[test]
    fn the_proxy_root_mounted_inside_the_library_is_neither_watched_nor_listed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["a", "proxies/c1/ab/hash"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("proxies/c1/ab/hash/thumbnail.jpg"), b"t").unwrap();
        // What a bind mount of the proxy root inside the library looks like from the walk: that very folder.
        let avoid = almanac_media::identity(&root.join("proxies"));
        let stop = CancellationToken::new();
        let mut tree = WatchedTree::start(root, avoid, |_| {}, &stop).unwrap();
        assert_eq!(tree.added(), 2, "the root and a; nothing of the proxy root");
        assert!(tree.arrived(&root.join("proxies"), &stop).unwrap().is_empty(), "the proxy root arriving");
        assert_eq!(tree.added(), 2);
        assert!(files_beneath(root, avoid).is_empty());
        assert_eq!(files_beneath(root, None), [root.join("proxies/c1/ab/hash/thumbnail.jpg")], "without it, found");
        assert_eq!(WatchedTree::start(root, None, |_| {}, &stop).unwrap().added(), 6, "without it, watched");
    }
}
