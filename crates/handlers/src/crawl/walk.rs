//! Walking a config's folder: one directory handle open at a time, links never followed, system folders and
//! hidden files skipped, names kept as the exact bytes the file system gave.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use almanac_domain::ports::Sidecar;
use almanac_media::{Entry, EntryKind, OpenError, RootFolder, is_media_name, is_sidecar_name, sidecar_names};
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::rules::is_skipped_name;

/// What the walk hands to the crawl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walked {
    /// A file that is new or changed, and may be media.
    File(WalkEntry),
    /// Known files found unchanged (path, size and mtime match): never opened, never read.
    Unchanged(Vec<Seen>),
}

/// A known file the walk found unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seen {
    /// An asset's own path.
    Asset(almanac_domain::AssetId),
    /// An extra path (a copy).
    Extra(Vec<u8>),
}

/// How many unchanged files are reported at once.
const UNCHANGED_BATCH: usize = 1024;

/// A file that may be media.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkEntry {
    /// Path relative to the root, as bytes.
    pub rel: Vec<u8>,
    /// Size.
    pub size: u64,
    /// Modification time, truncated to microseconds (what the database keeps).
    pub mtime: DateTime<Utc>,
    /// Its XMP sidecar in the same folder, if there is one (`NAME.EXT.xmp` before `NAME.xmp`, any case).
    pub sidecar: Option<Sidecar>,
}

/// What the walk passed over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkReport {
    /// Folders that could not be read, with the reason. When any exist, nothing is soft-deleted.
    pub unreadable: Vec<(String, String)>,
    /// Symbolic links passed over (never followed).
    pub links: u64,
    /// Files that are not of a media type by name, and FIFOs, sockets and devices.
    pub unsupported: u64,
    /// Folders passed over because they are the proxy root, mounted inside the library (never crawled).
    pub proxy_root_inside: Vec<String>,
    /// True when the walk stopped early (cancelled): the crawl then ends without settling anything.
    pub stopped: bool,
}

/// Lists the candidate files under the root (one folder handle open at a time, each opened beneath the root
/// with no link followed, so a folder swapped for a link after it was listed is refused, not followed).
/// Blocking: run it on a blocking thread. It needs nothing from the catalogue, so it runs while the
/// catalogue's known files load.
///
/// A folder whose identity is `avoid` (the proxy root, when it is bind-mounted inside the library) is passed
/// over and reported: our proxies are never crawled as photos.
pub fn list_tree(
    root: &RootFolder,
    avoid: Option<(u64, u64)>,
    cancel: &CancellationToken,
) -> (Vec<WalkEntry>, WalkReport) {
    let mut report = WalkReport::default();
    let mut files = Vec::new();
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel_dir) = stack.pop() {
        if cancel.is_cancelled() {
            report.stopped = true;
            return (files, report);
        }
        // Read the whole folder (names and their lstat, relative to the open folder), then close it: one open
        // handle at a time however deep the tree.
        let listed = root.open_folder(&rel_dir).and_then(|folder| root.list(&folder, &rel_dir));
        let entries = match listed {
            Ok(entries) => entries,
            // Gone since its parent was listed: it is simply not there.
            Err(OpenError::Vanished(_)) => continue,
            Err(e) => {
                report.unreadable.push((display_of(root, &rel_dir), e.to_string()));
                continue;
            }
        };
        let subdirs = sort_folder(root, &rel_dir, entries, avoid, &mut files, &mut report);
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    (files, report)
}

/// Sorts one listed folder (`rel_dir` beneath the root): media files (with their XMP sidecars) go to `files`,
/// what is passed over is counted in `report`; answers its subfolders, in name order.
fn sort_folder(
    root: &RootFolder,
    rel_dir: &[u8],
    mut entries: Vec<Entry>,
    avoid: Option<(u64, u64)>,
    files: &mut Vec<WalkEntry>,
    report: &mut WalkReport,
) -> Vec<Vec<u8>> {
    entries.retain(|e| !is_skipped_name(e.name.as_bytes()));
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let mut subdirs = Vec::new();
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
            EntryKind::Folder if Some(entry.identity) == avoid => {
                let folder = display_of(root, &rel);
                tracing::warn!(
                    event = "proxy_root_inside_library",
                    folder,
                    "the proxy root is mounted inside this library; it was passed over. Mount it outside every \
                     library"
                );
                report.proxy_root_inside.push(folder);
            }
            EntryKind::Folder => subdirs.push(rel.clone()),
            EntryKind::Other => report.unsupported += 1,
            EntryKind::File if is_sidecar_name(entry.name.as_bytes()) => {}
            EntryKind::File if !is_media_name(&entry.name) => report.unsupported += 1,
            EntryKind::File => files.push(WalkEntry {
                rel: rel.clone(),
                size: entry.size,
                mtime: entry.mtime,
                // Most folders hold no sidecar: no names are made for them.
                sidecar: if sidecars.is_empty() {
                    None
                } else {
                    sidecar_names(entry.name.as_bytes())
                        .iter()
                        .find_map(|name| sidecars.get(&name.to_ascii_lowercase()))
                        .cloned()
                },
            }),
        }
    }
    subdirs
}

fn display_of(root: &RootFolder, rel: &[u8]) -> String {
    root.path().join(OsStr::from_bytes(rel)).display().to_string()
}

/// Hands the listed files to the crawl: known files found unchanged (`unchanged` says which) in batches,
/// never opened; the others one by one. Returns false when the receiver went away. Blocking.
pub fn classify(
    files: Vec<WalkEntry>,
    tx: &mpsc::Sender<Walked>,
    unchanged: impl Fn(&WalkEntry) -> Option<Seen>,
) -> bool {
    let mut seen = Vec::with_capacity(UNCHANGED_BATCH);
    for entry in files {
        if let Some(mark) = unchanged(&entry) {
            seen.push(mark);
            if seen.len() >= UNCHANGED_BATCH && tx.blocking_send(Walked::Unchanged(std::mem::take(&mut seen))).is_err()
            {
                return false;
            }
        } else if tx.blocking_send(Walked::File(entry)).is_err() {
            return false;
        }
    }
    seen.is_empty() || tx.blocking_send(Walked::Unchanged(seen)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_with_the_avoided_identity_is_passed_over_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ann");
        for rel in ["2019/IMG_1.jpg", "proxies/ab/thumbnail.jpg", "2020/IMG_2.JPG"] {
            std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
            std::fs::write(root.join(rel), b"x").unwrap();
        }
        // The proxy root, as a bind mount inside the library would show it: the same folder, seen in the walk.
        let avoid = almanac_media::identity(&root.join("proxies"));
        let folder = RootFolder::open(&root).unwrap();
        let (files, report) = list_tree(&folder, avoid, &CancellationToken::new());
        let rels: Vec<_> = files.iter().map(|f| String::from_utf8_lossy(&f.rel).into_owned()).collect();
        assert_eq!(rels, ["2019/IMG_1.jpg", "2020/IMG_2.JPG"]);
        assert_eq!(report.proxy_root_inside.len(), 1);
        assert!(report.proxy_root_inside[0].ends_with("ann/proxies"), "{:?}", report.proxy_root_inside);
        let (all, _) = list_tree(&folder, None, &CancellationToken::new());
        assert_eq!(all.len(), 3, "without it, the folder is walked");
    }
}
