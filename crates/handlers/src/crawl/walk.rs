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

/// Walks `root`, sending each candidate file on `tx`. Blocking: run it on a blocking thread.
pub fn walk(root: &Path, tx: &mpsc::Sender<WalkEntry>, cancel: &CancellationToken) -> WalkReport {
    let mut report = WalkReport::default();
    let mut stack: Vec<(PathBuf, Vec<u8>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel_dir)) = stack.pop() {
        if cancel.is_cancelled() {
            report.stopped = true;
            return report;
        }
        // Read the whole folder, then close it: one open handle at a time however deep the tree.
        let names = match std::fs::read_dir(&dir)
            .and_then(|rd| rd.map(|e| e.map(|e| e.file_name())).collect::<Result<Vec<_>, _>>())
        {
            Ok(mut names) => {
                names.sort();
                names
            }
            Err(e) => {
                report.unreadable.push((dir.display().to_string(), e.to_string()));
                continue;
            }
        };
        let mut subdirs = Vec::new();
        for name in names {
            let bytes = name.as_bytes();
            if is_skipped_name(bytes) {
                continue;
            }
            let abs = dir.join(&name);
            let mut rel = rel_dir.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(bytes);
            let meta = match std::fs::symlink_metadata(&abs) {
                Ok(m) => m,
                // Vanished between listing and looking: it is simply not there.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    report.unreadable.push((abs.display().to_string(), e.to_string()));
                    continue;
                }
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                report.links += 1;
            } else if kind.is_dir() {
                subdirs.push((abs, rel));
            } else if kind.is_file() {
                let media = Path::new(&name)
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| MEDIA_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
                if !media {
                    report.unsupported += 1;
                    continue;
                }
                let entry = WalkEntry { abs, rel, size: meta.len(), mtime: mtime_of(&meta) };
                if tx.blocking_send(entry).is_err() {
                    report.stopped = true;
                    return report;
                }
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    report
}
