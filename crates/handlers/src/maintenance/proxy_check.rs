//! Whether proxy files are whole, one `<config id>/<2 hex>` folder of the proxy root at a time: the files found
//! there against the rows that reference them. Orphans (ours, referenced by no row, old) are for the sweep to
//! delete; rows of active assets whose file is missing, not a regular file or not of its recorded size make
//! their asset a suspect, which [`confirm`] looks at again right before anything is done about it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use almanac_domain::{
    AssetId,
    ports::{ProxyPath, StoredProxy},
};
use almanac_media::{Entry, EntryKind, RootFolder};
use chrono::{DateTime, Utc};

use super::proxy_files::{AgeFloor, list_folder};

/// A file found in a folder: what it is, its size and its mtime, from its `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) kind: EntryKind,
    pub(super) size: u64,
    pub(super) mtime: DateTime<Utc>,
}

impl From<&Entry> for Found {
    fn from(e: &Entry) -> Self {
        Self { kind: e.kind, size: e.size, mtime: e.mtime }
    }
}

/// What one look at a row's file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Look {
    /// A regular file of the recorded size.
    Whole,
    /// Of another size, but younger than the age floor: a crawl may be writing it and its row may follow (a
    /// long video's poster waits for its transcode), so it is not judged yet.
    Young,
    /// Nothing there.
    Missing,
    /// A link, a folder or a device in its place, another size, or a row outside the proxy layout.
    NotWhole,
}

/// Looks at a row's file as found (`None`: nothing there).
pub(super) fn look(row: &StoredProxy, file: Option<Found>, floor: AgeFloor) -> Look {
    let Some(path) = row.relative_path.as_deref() else { return Look::Whole };
    if ProxyPath::parse(path).is_none() {
        return Look::NotWhole;
    }
    match file {
        None => Look::Missing,
        Some(f) if f.kind != EntryKind::File => Look::NotWhole,
        Some(f) if f.size == row.size_bytes => Look::Whole,
        Some(f) if floor.old_enough(f.mtime) => Look::NotWhole,
        Some(_) => Look::Young,
    }
}

/// What a folder holds, as its files were compared with its rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Verdict {
    /// Files in the exact proxy layout, regular, referenced by no row and older than the age floor.
    pub(super) orphans: Vec<String>,
    /// Files that are not ours: outside the layout, or not a regular file and referenced by no row.
    pub(super) not_ours: Vec<String>,
    /// Active assets with a file that did not look whole.
    pub(super) suspects: BTreeSet<AssetId>,
    /// Rows of active assets looked at.
    pub(super) checked: u64,
}

/// Compares the files found in one folder with the paths rows reference there (`referenced`, any asset's) and
/// the rows of active assets there (`to_check`), both read before the folder was listed: a row is committed
/// only after its file is written, so a row read first has its file in the listing unless it went bad.
pub(super) fn judge(
    referenced: &HashSet<String>,
    to_check: &[StoredProxy],
    files: &HashMap<String, Found>,
    floor: AgeFloor,
) -> Verdict {
    let mut verdict = Verdict::default();
    for (path, file) in files {
        if referenced.contains(path) {
            continue;
        }
        match (ProxyPath::parse(path), file.kind) {
            (Some(_), EntryKind::File) if floor.old_enough(file.mtime) => verdict.orphans.push(path.clone()),
            (Some(_), EntryKind::File) => {}
            _ => verdict.not_ours.push(path.clone()),
        }
    }
    verdict.orphans.sort();
    verdict.not_ours.sort();
    for row in to_check.iter().filter(|r| r.relative_path.is_some()) {
        verdict.checked += 1;
        let file = row.relative_path.as_ref().and_then(|p| files.get(p)).copied();
        if matches!(look(row, file, floor), Look::Missing | Look::NotWhole) {
            verdict.suspects.insert(row.asset_id);
        }
    }
    verdict
}

/// Assets whose proxies are confirmed broken, with how many of their files are missing.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Confirmed {
    /// Each broken asset and how many of its files are missing (not there at all).
    pub(super) broken: BTreeMap<AssetId, u64>,
    /// Folders that could not be read: their rows are not judged.
    pub(super) unreadable: Vec<String>,
}

/// Looks again at the files of `rows` (the suspects' rows, read again after the listing), each with a fresh
/// `lstat`, no link followed: an asset is broken only if one of its rows read now still records a file that is
/// missing, not a regular file, or not of its size. A crawl that wrote a proxy and its row since the folder's
/// rows were read, or a deletion that took both, leaves nothing to confirm. Blocking.
pub(super) fn confirm(root: &RootFolder, rows: &[StoredProxy], floor: AgeFloor) -> Confirmed {
    let mut out = Confirmed::default();
    let mut folders: HashMap<&Path, Option<HashMap<Vec<u8>, Found>>> = HashMap::new();
    for row in rows {
        let Some(path) = row.relative_path.as_deref() else { continue };
        let (parent, name) = match Path::new(path).parent() {
            Some(parent) => (parent, Path::new(path).file_name().map(|n| n.as_bytes().to_vec())),
            None => (Path::new(""), None),
        };
        let listed = folders.entry(parent).or_insert_with(|| match list_folder(root, parent.as_os_str().as_bytes()) {
            Ok(entries) => {
                Some(entries.unwrap_or_default().iter().map(|e| (e.name.as_bytes().to_vec(), Found::from(e))).collect())
            }
            Err(e) => {
                out.unreadable.push(e);
                None
            }
        });
        let Some(listed) = listed else { continue };
        let file = name.and_then(|n| listed.get(&n).copied());
        match look(row, file, floor) {
            Look::Whole | Look::Young => {}
            Look::Missing => *out.broken.entry(row.asset_id).or_default() += 1,
            Look::NotWhole => {
                out.broken.entry(row.asset_id).or_default();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use almanac_domain::{ContentHash, ProxyType, StorageConfigId};

    use super::*;

    fn row(asset: AssetId, path: &str, size: u64) -> StoredProxy {
        StoredProxy {
            asset_id: asset,
            proxy_type: ProxyType::Preview,
            relative_path: Some(path.to_owned()),
            size_bytes: size,
        }
    }

    fn file(kind: EntryKind, size: u64, age_secs: i64) -> Found {
        Found { kind, size, mtime: Utc::now() - chrono::Duration::seconds(age_secs) }
    }

    #[test]
    fn a_folder_s_files_against_its_rows() {
        let config = StorageConfigId::new();
        let path = |n: u8, name: &str| {
            ContentHash::from_bytes([0xa0 + n; 32]).proxy_dir(config).join(name).display().to_string()
        };
        let hour = AgeFloor { now: Utc::now(), min_age: Duration::from_secs(3600) };
        let [whole, gone, short, linked, fresh] = [0, 1, 2, 3, 4].map(|_| AssetId::new());
        let to_check = [
            row(whole, &path(0, "preview.jpg"), 10),
            row(gone, &path(1, "preview.jpg"), 10),
            row(short, &path(2, "preview.jpg"), 10),
            row(linked, &path(3, "preview.jpg"), 10),
            row(fresh, &path(4, "preview.jpg"), 10),
        ];
        let mut referenced: HashSet<String> = to_check.iter().filter_map(|r| r.relative_path.clone()).collect();
        // A soft-deleted asset's file is referenced (never an orphan) but not checked.
        referenced.insert(path(5, "preview.jpg"));
        let files: HashMap<String, Found> = [
            (path(0, "preview.jpg"), file(EntryKind::File, 10, 0)),
            (path(2, "preview.jpg"), file(EntryKind::File, 5, 7200)),
            (path(3, "preview.jpg"), file(EntryKind::Link, 10, 7200)),
            (path(4, "preview.jpg"), file(EntryKind::File, 12, 60)),
            (path(5, "preview.jpg"), file(EntryKind::File, 1, 7200)),
            (path(6, "thumbnail.jpg"), file(EntryKind::File, 3, 7200)),
            (path(7, "thumbnail.jpg"), file(EntryKind::File, 3, 60)),
            (path(6, "notes.txt"), file(EntryKind::File, 3, 7200)),
            (path(7, "preview.jpg"), file(EntryKind::Link, 3, 7200)),
        ]
        .into_iter()
        .collect();
        let verdict = judge(&referenced, &to_check, &files, hour);
        assert_eq!(verdict.orphans, [path(6, "thumbnail.jpg")], "old, ours, referenced by no row");
        assert_eq!(verdict.not_ours, [path(6, "notes.txt"), path(7, "preview.jpg")]);
        assert_eq!(verdict.suspects, BTreeSet::from([gone, short, linked]), "{verdict:?}");
        assert_eq!(verdict.checked, 5);
    }

    #[test]
    fn a_row_outside_the_layout_is_not_whole_and_a_blurhash_is() {
        let asset = AssetId::new();
        let hour = AgeFloor { now: Utc::now(), min_age: Duration::from_secs(3600) };
        assert_eq!(look(&row(asset, "../etc/passwd", 1), Some(file(EntryKind::File, 1, 7200)), hour), Look::NotWhole);
        let blurhash = StoredProxy { relative_path: None, ..row(asset, "", 0) };
        assert_eq!(look(&blurhash, None, hour), Look::Whole);
    }

    #[test]
    fn confirming_looks_at_each_file_again_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfigId::new();
        let folder = ContentHash::from_bytes([0xcd; 32]).proxy_dir(config);
        std::fs::create_dir_all(dir.path().join(&folder)).unwrap();
        std::fs::write(dir.path().join(&folder).join("preview.jpg"), b"0123456789").unwrap();
        std::fs::write(dir.path().join("outside.jpg"), b"0123456789").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.jpg"), dir.path().join(&folder).join("thumbnail.jpg"))
            .unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        let rel = |name: &str| folder.join(name).display().to_string();
        let [whole, linked, gone, elsewhere] = [0, 1, 2, 3].map(|_| AssetId::new());
        let _ = whole;
        let other = ContentHash::from_bytes([0xee; 32]).proxy_dir(config).join("preview.jpg");
        let rows = [
            row(whole, &rel("preview.jpg"), 10),
            row(linked, &rel("thumbnail.jpg"), 10),
            row(gone, &rel("poster.jpg"), 10),
            row(elsewhere, &other.display().to_string(), 10),
        ];
        let confirmed = confirm(&root, &rows, AgeFloor { now: Utc::now(), min_age: Duration::ZERO });
        assert_eq!(confirmed.broken, BTreeMap::from([(linked, 0), (gone, 1), (elsewhere, 1)]));
        assert!(confirmed.unreadable.is_empty());
    }
}
