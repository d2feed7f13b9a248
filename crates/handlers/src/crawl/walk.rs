//! Walking a config's folder: one directory handle open at a time, links never followed, system folders and
//! hidden files skipped, names kept as the exact bytes the file system gave.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use almanac_domain::ports::{KnownFile, Sidecar};
use almanac_media::{
    Entry, EntryKind, OpenError, RootFolder, Unexamined, is_media_name, is_sidecar_name, join_beneath, sidecar_names,
};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::mounts::Mounts;
use super::rules::{is_skipped_name, reads_file_named};
use super::scope::CrawlScope;

/// What the walk hands to the crawl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Walked {
    /// A file that is new or changed, and may be media, with what the catalogue knew at its path (if anything).
    File(Box<(WalkEntry, Option<KnownFile>)>),
    /// This many known files found unchanged (path, size and mtime match): never opened, never read.
    Unchanged(u64),
}

/// A known file the crawl found while processing what changed (a moved, touched or revived asset, a copy):
/// what the walk found unchanged needs no mark.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Seen {
    /// An asset's own path.
    Asset(almanac_domain::AssetId),
    /// An extra path (a copy), with the asset whose copy it was found to be: a path whose content now belongs
    /// to another asset is that asset's, never a surviving copy of the one the catalogue knew it for.
    Extra(Vec<u8>, almanac_domain::AssetId),
}

/// A file that may be media.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkEntry {
    /// Path relative to the root, as bytes.
    pub rel: Vec<u8>,
    /// Size.
    pub size: u64,
    /// Modification time, truncated to microseconds (what the database keeps).
    pub mtime: DateTime<Utc>,
    /// Its inode number and when the inode last changed (`st_ctime`): with the size and mtime, what tells that a
    /// file remembered as failed is still the same file ([`super::failed`]).
    pub inode: (u64, DateTime<Utc>),
    /// Its XMP sidecar in the same folder, if there is one (`NAME.EXT.xmp` before `NAME.xmp`, any case).
    pub sidecar: Option<Sidecar>,
    /// A watcher saw it closed after writing, and it still has the size and mtime it had then: it is read at
    /// once, whatever its age (set by the crawl, beside the walk).
    pub closed: bool,
}

/// What the walk passed over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkReport {
    /// Folders that could not be read, with the reason. Nothing the catalogue knows under them is soft-deleted.
    pub unreadable: Vec<FolderNotWalked>,
    /// Symbolic links passed over (never followed).
    pub links: u64,
    /// Files that are not of a media type by name, and FIFOs, sockets and devices.
    pub unsupported: u64,
    /// Folders passed over because they are the proxy root, mounted inside the library (never crawled).
    pub proxy_root_inside: Vec<String>,
    /// Folders passed over because each is one of the folders above it again (a bind mount of a parent, a loop of
    /// the file system): walking them would walk the same files again without end. Nothing the catalogue knows
    /// under them is soft-deleted (an identity can repeat on a file system whose inode numbers are not unique).
    pub folder_loops: Vec<FolderNotWalked>,
    /// True when the walk stopped early (cancelled): the crawl then ends without settling anything.
    pub stopped: bool,
    /// Folders beneath the root found to be mount points (on another device than the folder above them).
    pub mounts_below: Vec<Vec<u8>>,
}

/// A folder the walk did not walk: one it could not read, or one it passed over as a folder above it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderNotWalked {
    /// Its path beneath the root, as the exact bytes: what the catalogue knows under it is kept as it is.
    pub rel: Vec<u8>,
    /// Its absolute path, for people.
    pub path: String,
    /// Why.
    pub reason: String,
}

impl FolderNotWalked {
    /// The folder at `rel` beneath `root`, not walked for `reason`.
    fn new(root: &RootFolder, rel: &[u8], reason: String) -> Self {
        Self { rel: rel.to_vec(), path: display_of(root, rel), reason }
    }

    /// Whether `path` (beneath the root) is this folder or lies under it.
    pub fn holds(&self, path: &[u8]) -> bool {
        self.rel.is_empty()
            || path.strip_prefix(self.rel.as_slice()).is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
    }
}

impl WalkReport {
    /// Records that the folder at `rel` could not be read, and why.
    pub(super) fn unreadable_folder(&mut self, root: &RootFolder, rel: &[u8], reason: String) {
        self.unreadable.push(FolderNotWalked::new(root, rel, reason));
    }
}

/// Walks the candidate files under the root in the byte order of their paths (the order the catalogue pages
/// its known files in, so the two can be merged without holding either whole), handing each to `on_file`, which
/// answers false to stop the walk. One folder handle open at a time: a folder is read whole (names and their
/// lstat, relative to the open folder) and closed before anything in it is handed over; each is opened beneath
/// the root with no link followed, so a folder swapped for a link after it was listed is refused, not followed.
/// What is held is the unvisited rest of each folder on the way down, never the tree. Blocking: run it on a
/// blocking thread.
///
/// A folder whose identity is `avoid` (the proxy root, when it is bind-mounted inside the library) is passed
/// over and reported: our proxies are never crawled as photos.
pub fn walk_tree(
    root: &RootFolder,
    avoid: Option<(u64, u64)>,
    cancel: &CancellationToken,
    on_file: impl FnMut(WalkEntry) -> bool,
) -> WalkReport {
    walk_folders(root, &[Vec::new()], avoid, &Mounts::default(), cancel, on_file)
}

/// [`walk_tree`] of some folders beneath the root, each with everything below it, one after the other: given in
/// the walk's order and none inside another ([`super::scope::CrawlScope::folders`]), their paths come out in
/// byte order too. `[""]` is the whole root. Whether a folder is walked at all is
/// [`super::scope::CrawlScope::enter`]'s decision. A folder beneath them recorded as a mount point (`mounts`) and
/// on the device of the folder above it now is not walked ([`Mounts`]); the mount points found are reported.
pub(super) fn walk_folders(
    root: &RootFolder,
    folders: &[Vec<u8>],
    avoid: Option<(u64, u64)>,
    mounts: &Mounts,
    cancel: &CancellationToken,
    mut on_file: impl FnMut(WalkEntry) -> bool,
) -> WalkReport {
    let mut report = WalkReport::default();
    for folder in folders {
        if CrawlScope::enter(root, folder, avoid, mounts, &mut report) {
            walk_below(&Walk { root, avoid, mounts, cancel }, folder.clone(), &mut on_file, &mut report);
        }
        if report.stopped {
            break;
        }
    }
    report
}

/// What one walk goes by.
struct Walk<'a> {
    root: &'a RootFolder,
    avoid: Option<(u64, u64)>,
    mounts: &'a Mounts,
    cancel: &'a CancellationToken,
}

impl Walk<'_> {
    /// Whether the folder at `rel` (identity `own`), entered from the folder whose identity is `parent`, is a mount
    /// point (reported), or one recorded as a mount point that is not one now (not walked: answers why).
    fn mount(
        &self,
        rel: &[u8],
        own: Option<Identity>,
        parent: Option<Identity>,
        report: &mut WalkReport,
    ) -> Option<String> {
        let (own, parent) = (own?, parent?);
        // The listing's look does not trigger an automount (an NFSv4 submount, autofs): the folder opened does.
        let mounted = || self.root.open_folder(rel).ok().and_then(|f| self.root.identity_of(&f));
        if own.0 != parent.0 || (self.mounts.was_mounted(rel) && mounted().is_some_and(|m| m.0 != parent.0)) {
            report.mounts_below.push(rel.to_vec());
            return None;
        }
        self.mounts.not_mounted(rel)
    }

    /// The recorded mount points right beneath the listed folder `rel_dir` that it does not list as folders (a disk
    /// unmounted whose mount point was removed, as udisks does, or a link or a file there now): not walked, so what
    /// the catalogue has under them is kept, unless the crawl is confirmed.
    fn missing_mounts(&self, rel_dir: &[u8], listing: &almanac_media::Listing, report: &mut WalkReport) {
        // A folder there, or an entry that could not be looked at (reported as such unless listed as a file); a
        // link or a file there now is no folder of the disk.
        let listed = |name: &[u8]| {
            listing.entries.iter().any(|e| e.name.as_bytes() == name && e.kind == EntryKind::Folder)
                || listing.unexamined.iter().any(|u| u.name.as_bytes() == name && u.listed_as != Some(EntryKind::File))
        };
        for (rel, name) in self.mounts.right_beneath(rel_dir) {
            if !listed(name)
                && let Some(why) = self.mounts.gone(rel)
            {
                report.unreadable_folder(self.root, rel, why);
            }
        }
    }
}

/// Walks one folder and everything below it (see [`walk_tree`]).
fn walk_below(walk: &Walk<'_>, folder: Vec<u8>, on_file: &mut impl FnMut(WalkEntry) -> bool, report: &mut WalkReport) {
    let (root, avoid, cancel) = (walk.root, walk.avoid, walk.cancel);
    // Each listed folder's items still to walk, with the folder's identity: a folder that is one of those above it
    // again (a bind mount of a parent, a loop of the file system) is passed over, never walked into for ever.
    let mut stack: Vec<(std::vec::IntoIter<Item>, Option<Identity>)> = Vec::new();
    let mut next_folder = Some((folder, None));
    loop {
        if let Some((rel_dir, identity)) = next_folder.take() {
            if cancel.is_cancelled() {
                report.stopped = true;
                return;
            }
            let parent = stack.last().and_then(|(_, above)| *above);
            let listed = if identity.is_some() && stack.iter().any(|(_, above)| *above == identity) {
                passed_over_loop(root, &rel_dir, report);
                Ok(None)
            } else if let Some(why) = walk.mount(&rel_dir, identity, parent, report) {
                report.unreadable_folder(root, &rel_dir, why);
                Ok(None)
            } else {
                root.open_folder(&rel_dir).and_then(|folder| {
                    // The folder opened, not the listing's look at it: opening may have mounted it (an automount).
                    let own = root.identity_of(&folder).or(identity);
                    root.list_each(&folder, &rel_dir).map(|listing| Some((listing, own)))
                })
            };
            match listed {
                Ok(None) => {}
                // A sidecar that cannot be looked up would leave its photo read without it (and dated again without
                // the date it holds): the folder is not walked at all, as one that cannot be read.
                Ok(Some((listing, own))) => match listing.unexamined.iter().find(|u| is_sidecar(u)) {
                    Some(sidecar) => {
                        let why = format!(
                            "its sidecar {} could not be looked at ({}); what the catalogue has in the folder is kept",
                            sidecar.name.display(),
                            sidecar.error
                        );
                        report.unreadable_folder(root, &rel_dir, why);
                    }
                    None => {
                        walk.missing_mounts(&rel_dir, &listing, report);
                        not_examined(root, &rel_dir, listing.unexamined, report);
                        stack.push((sort_folder(root, &rel_dir, listing.entries, avoid, report).into_iter(), own));
                    }
                },
                // Gone since its parent was listed: deleted, or renamed to a name the walk has passed (its files are
                // somewhere this walk will not look). Either way the walk is not complete there: nothing under it is
                // soft-deleted.
                Err(OpenError::Vanished(_)) => report.unreadable_folder(
                    root,
                    &rel_dir,
                    "it vanished while the walk ran (renamed or deleted); the next crawl looks again".into(),
                ),
                Err(e) => report.unreadable_folder(root, &rel_dir, e.to_string()),
            }
        }
        let Some((folder, _)) = stack.last_mut() else { return };
        match folder.next() {
            None => {
                stack.pop();
            }
            Some(Item::Folder(rel, identity)) => next_folder = Some((rel, Some(identity))),
            Some(Item::File(entry)) => {
                if !on_file(entry) {
                    report.stopped = true;
                    return;
                }
            }
        }
    }
}

/// Records each entry of the folder at `rel_dir` that could not be looked up as a path the walk did not walk: it may
/// be a photo or a whole folder of them, so what the catalogue has there is kept as it is, and the rest of the
/// folder is walked (before, one damaged entry left every new photo beside it out, at every crawl).
/// An entry the listing says is a file of no kind the crawl takes (a `.txt`) is left out as it would be if it could
/// be looked up. (A sidecar that cannot be looked up keeps its whole folder from being walked: see `walk_below`.)
fn not_examined(root: &RootFolder, rel_dir: &[u8], entries: Vec<Unexamined>, report: &mut WalkReport) {
    for entry in entries {
        let name = entry.name.as_bytes();
        let ignored = entry.listed_as == Some(EntryKind::File) && !is_media_name(OsStr::from_bytes(name));
        if is_skipped_name(name) || ignored {
            continue;
        }
        let why = format!("it could not be looked at ({}); what the catalogue has there is kept", entry.error);
        report.unreadable_folder(root, &join_beneath(rel_dir, name), why);
    }
}

/// Whether an entry that could not be looked up is named as an XMP sidecar is (whatever its folder says it is).
fn is_sidecar(entry: &Unexamined) -> bool {
    !is_skipped_name(entry.name.as_bytes()) && is_sidecar_name(entry.name.as_bytes())
}

/// Lists the candidate files under the root, in the walk's order ([`walk_tree`]), into memory: for tests and
/// tools; the crawl itself never holds the listing.
pub fn list_tree(
    root: &RootFolder,
    avoid: Option<(u64, u64)>,
    cancel: &CancellationToken,
) -> (Vec<WalkEntry>, WalkReport) {
    let mut files = Vec::new();
    let report = walk_tree(root, avoid, cancel, |entry| {
        files.push(entry);
        true
    });
    (files, report)
}

/// A folder's file-system identity (device, inode).
type Identity = (u64, u64);

/// One thing of a listed folder, in the walk's order.
enum Item {
    File(WalkEntry),
    Folder(Vec<u8>, Identity),
}

/// The order of a folder's entries that makes the walk's paths come out in byte order: by name, a folder's
/// name taken with the `/` its paths continue with (so `a.jpg` comes before the folder `a`'s `a/b.jpg`, and
/// `a/b.jpg` before `a0.jpg`).
fn walk_order(a: &Entry, b: &Entry) -> std::cmp::Ordering {
    // The names' common length compared as slices (one `memcmp`), then the byte each continues with: its own,
    // or the folder's `/`, or none. A name holds no `/`, so two different keys never tie there.
    fn after(e: &Entry, at: usize) -> Option<u8> {
        e.name.as_bytes().get(at).copied().or((e.kind == EntryKind::Folder).then_some(b'/'))
    }
    let (x, y) = (a.name.as_bytes(), b.name.as_bytes());
    let common = x.len().min(y.len());
    x[..common].cmp(&y[..common]).then_with(|| after(a, common).cmp(&after(b, common)))
}

/// Sorts one listed folder (`rel_dir` beneath the root): media files (with their XMP sidecars) and subfolders in
/// the walk's order; what is passed over is counted in `report`.
fn sort_folder(
    root: &RootFolder,
    rel_dir: &[u8],
    mut entries: Vec<Entry>,
    avoid: Option<(u64, u64)>,
    report: &mut WalkReport,
) -> Vec<Item> {
    entries.retain(|e| !is_skipped_name(e.name.as_bytes()));
    entries.sort_unstable_by(walk_order);
    let mut items = Vec::new();
    let mut rel = rel_dir.to_vec();
    if !rel.is_empty() {
        rel.push(b'/');
    }
    let prefix = rel.len();
    // The folder's XMP sidecars, by lower-case name, for the media files beside them.
    let sidecars: HashMap<Vec<u8>, Sidecar> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::File && is_sidecar_name(e.name.as_bytes()))
        .map(|e| {
            let path = [&rel[..], e.name.as_bytes()].concat();
            (e.name.as_bytes().to_ascii_lowercase(), Sidecar { path, size: e.size, mtime: e.mtime })
        })
        .collect();
    for entry in entries {
        rel.truncate(prefix);
        rel.extend_from_slice(entry.name.as_bytes());
        match entry.kind {
            EntryKind::Link => report.links += 1,
            EntryKind::Folder if Some(entry.identity) == avoid => passed_over_proxy_root(root, &rel, report),
            EntryKind::Folder => items.push(Item::Folder(rel.clone(), entry.identity)),
            EntryKind::Other => report.unsupported += 1,
            EntryKind::File if !reads_file_named(entry.name.as_bytes()) => report.unsupported += 1,
            EntryKind::File if is_sidecar_name(entry.name.as_bytes()) => {}
            EntryKind::File => items.push(Item::File(WalkEntry {
                rel: rel.clone(),
                size: entry.size,
                mtime: entry.mtime,
                inode: (entry.identity.1, entry.changed),
                // Most folders hold no sidecar: no names are made for them.
                sidecar: if sidecars.is_empty() {
                    None
                } else {
                    sidecar_names(entry.name.as_bytes())
                        .iter()
                        .find_map(|name| sidecars.get(&name.to_ascii_lowercase()))
                        .cloned()
                },
                closed: false,
            })),
        }
    }
    items
}

/// The folder at `rel` is the proxy root, mounted inside the library: passed over, said, and reported.
pub(super) fn passed_over_proxy_root(root: &RootFolder, rel: &[u8], report: &mut WalkReport) {
    let folder = display_of(root, rel);
    tracing::warn!(
        event = "proxy_root_inside_library",
        folder,
        "the proxy root is mounted inside this library; it was passed over. Mount it outside every library"
    );
    report.proxy_root_inside.push(folder);
}

/// Reports a folder passed over because it is one of the folders above it again.
fn passed_over_loop(root: &RootFolder, rel: &[u8], report: &mut WalkReport) {
    let passed = FolderNotWalked::new(root, rel, "one of the folders above it again".into());
    tracing::warn!(
        event = "folder_loop_passed_over",
        folder = passed.path,
        "this folder is one of the folders above it again (a bind mount of a parent, a loop of the file system); it \
         was passed over, as walking it would walk the same files again without end"
    );
    report.folder_loops.push(passed);
}

/// A path beneath the root, for people.
pub(super) fn display_of(root: &RootFolder, rel: &[u8]) -> String {
    root.path().join(OsStr::from_bytes(rel)).display().to_string()
}

#[cfg(test)]
mod tests;
