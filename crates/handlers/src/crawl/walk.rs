//! Walking a config's folder: one directory handle open at a time, links never followed, system folders and
//! hidden files skipped, names kept as the exact bytes the file system gave.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::rules::is_skipped_name;

/// Extensions the crawl looks at (the content is checked later by its first bytes).
const MEDIA_EXTENSIONS: [&str; 10] = ["jpg", "jpeg", "jpe", "png", "heic", "heif", "hif", "mov", "mp4", "m4v"];

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
    /// Absolute path, for opening it.
    pub abs: PathBuf,
    /// Path relative to the root, as bytes.
    pub rel: Vec<u8>,
    /// Size.
    pub size: u64,
    /// Modification time, truncated to microseconds (what the database keeps).
    pub mtime: DateTime<Utc>,
}

/// What the walk passed over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkReport {
    /// Folders that could not be read, with the reason. When any exist, nothing is soft-deleted.
    pub unreadable: Vec<(String, String)>,
    /// Symbolic links passed over (never followed).
    pub links: u64,
    /// Files that are not of a media type by name.
    pub unsupported: u64,
    /// True when the walk stopped early (cancelled, or the receiver went away).
    pub stopped: bool,
}

/// A file's mtime as the catalogue stores it (microseconds).
pub fn mtime_of(meta: &std::fs::Metadata) -> DateTime<Utc> {
    let t: DateTime<Utc> = meta.modified().map(DateTime::<Utc>::from).unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// Lists the candidate files under `root` (one folder handle open at a time). Blocking: run it on a blocking
/// thread. It needs nothing from the catalogue, so it runs while the catalogue's known files load.
pub fn list_tree(root: &Path, cancel: &CancellationToken) -> (Vec<WalkEntry>, WalkReport) {
    let mut report = WalkReport::default();
    let mut files = Vec::new();
    let mut stack: Vec<(PathBuf, Vec<u8>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel_dir)) = stack.pop() {
        if cancel.is_cancelled() {
            report.stopped = true;
            return (files, report);
        }
        // Read the whole folder (names and their lstat, relative to the open folder), then close it: one open
        // handle at a time however deep the tree.
        let listed: std::io::Result<Vec<(std::ffi::OsString, std::io::Result<std::fs::Metadata>)>> =
            std::fs::read_dir(&dir).and_then(|rd| {
                rd.filter_map(|e| match e {
                    Ok(e) if is_skipped_name(e.file_name().as_bytes()) => None,
                    Ok(e) => Some(Ok((e.file_name(), e.metadata()))),
                    Err(err) => Some(Err(err)),
                })
                .collect()
            });
        let mut entries = match listed {
            Ok(entries) => entries,
            Err(e) => {
                report.unreadable.push((dir.display().to_string(), e.to_string()));
                continue;
            }
        };
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        let mut rel = rel_dir.clone();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        let prefix = rel.len();
        for (name, meta) in entries {
            let bytes = name.as_bytes();
            rel.truncate(prefix);
            rel.extend_from_slice(bytes);
            let meta = match meta {
                Ok(m) => m,
                // Vanished between listing and looking: it is simply not there.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    report.unreadable.push((dir.join(&name).display().to_string(), e.to_string()));
                    continue;
                }
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                report.links += 1;
            } else if kind.is_dir() {
                subdirs.push((dir.join(&name), rel.clone()));
            } else if kind.is_file() {
                let media = Path::new(&name)
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| MEDIA_EXTENSIONS.iter().any(|m| m.eq_ignore_ascii_case(e)));
                if !media {
                    report.unsupported += 1;
                    continue;
                }
                files.push(WalkEntry {
                    abs: dir.join(&name),
                    rel: rel.clone(),
                    size: meta.len(),
                    mtime: mtime_of(&meta),
                });
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    (files, report)
}

/// Hands the listed files to the crawl: known files found unchanged (`unchanged` says which) in batches,
/// never opened; the others one by one. Returns false when the receiver went away. Blocking.
pub fn classify(
    files: Vec<WalkEntry>,
    tx: &mpsc::Sender<Walked>,
    unchanged: impl Fn(&[u8], u64, DateTime<Utc>) -> Option<Seen>,
) -> bool {
    let mut seen = Vec::with_capacity(UNCHANGED_BATCH);
    for entry in files {
        if let Some(mark) = unchanged(&entry.rel, entry.size, entry.mtime) {
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
