//! Files that failed for their content (damaged, not what their name says, over the pixel limit), remembered in the
//! catalogue (`failed_files`) so that a later crawl does not read them again while each is the same file (its size,
//! mtime, inode and the inode's change time) read by the same rules ([`read_by`]). A watcher crawls a folder at each change in it: a phone syncing
//! into a folder all day made every one of those crawls hash and decode its damaged files again. Each is still
//! reported as failed, with its reason. A failure is forgotten when its file is read well, or gone from the scope of
//! a crawl that ended ([`Remembered::forget_recovered`]); read by other rules (a new Worker, another
//! `storage.max_image_megapixels`), it is read again.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use almanac_domain::{
    StorageConfigId,
    ports::{CatalogueError, CatalogueStore, FailedFile, Fence},
};

use super::CrawlSettings;
use super::walk::{FolderNotWalked, WalkEntry};

/// The rules a file is read by, as far as they decide its fate: the Worker's build (a digest of the sources of its
/// readers, decoders and crawl, `build.rs`) and the pixel limit. A failure remembered under other rules is read
/// again. The system's ffmpeg and libheif are not in it: after upgrading them, `touch` a file to have it read again.
pub(super) fn read_by(settings: &CrawlSettings) -> String {
    format!(
        "almanac-worker {} (sources {}), pixel limit {}",
        env!("CARGO_PKG_VERSION"),
        env!("ALMANAC_READING_DIGEST"),
        settings.max_image_pixels
    )
}

/// The failures remembered under a crawl's scope, and those of this crawl.
pub(super) struct Remembered {
    /// What was remembered at the crawl's start, by path.
    known: HashMap<Vec<u8>, FailedFile>,
    /// The paths that failed for their content in this crawl, read again or not.
    failing: Mutex<HashSet<Vec<u8>>>,
    read_by: String,
}

impl Remembered {
    /// The failures remembered in the folders `under` (the whole config: `None`).
    pub(super) async fn load(
        catalogue: &impl CatalogueStore,
        config: StorageConfigId,
        under: Option<&[Vec<u8>]>,
        settings: &CrawlSettings,
    ) -> Result<Self, CatalogueError> {
        let known = catalogue.failed_files(config, under).await?;
        Ok(Self {
            known: known.into_iter().map(|f| (f.file_path.clone(), f)).collect(),
            failing: Mutex::default(),
            read_by: read_by(settings),
        })
    }

    /// Why the file at `entry` failed before, when it is the same file read by the same rules: it is not read
    /// again, and the reason says so.
    pub(super) fn unchanged(&self, entry: &WalkEntry) -> Option<String> {
        let failed = self.known.get(&entry.rel)?;
        let same = (failed.size, failed.mtime, failed.inode) == (entry.size, entry.mtime, entry.inode);
        if !same || failed.read_by != self.read_by {
            return None;
        }
        self.failing.lock().expect("poisoned").insert(entry.rel.clone());
        Some(format!(
            "{} (not read again: unchanged since it failed on {})",
            failed.reason,
            failed.failed_at.format("%Y-%m-%d %H:%M UTC")
        ))
    }

    /// The file at `entry` failed for its content now, for `reason`: what to remember of it.
    pub(super) fn failed(&self, entry: &WalkEntry, reason: &str) -> FailedFile {
        self.failing.lock().expect("poisoned").insert(entry.rel.clone());
        FailedFile {
            file_path: entry.rel.clone(),
            size: entry.size,
            mtime: entry.mtime,
            inode: entry.inode,
            reason: reason.to_owned(),
            read_by: self.read_by.clone(),
            // The store writes its own time.
            failed_at: entry.mtime,
        }
    }

    /// Forgets, at the end of a crawl, the failures remembered in its scope whose file did not fail for its content
    /// this time: read well, changed and not read yet, or gone. Those under a folder the walk did not walk (one it
    /// could not read, a loop) are kept. A write refused (an outage, the attempt lost) forgets nothing, and the next
    /// crawl reads those files again.
    pub(super) async fn forget_recovered(
        &self,
        catalogue: &impl CatalogueStore,
        fence: Fence,
        config: StorageConfigId,
        not_walked: &[&FolderNotWalked],
    ) {
        let failing = self.failing.lock().expect("poisoned").clone();
        let looked_at = |p: &Vec<u8>| !not_walked.iter().any(|f| f.holds(p));
        let recovered: Vec<Vec<u8>> =
            self.known.keys().filter(|p| !failing.contains(*p) && looked_at(p)).cloned().collect();
        if let Err(e) = catalogue.forget_failed_files(fence, config, &recovered).await {
            tracing::info!(error = %e, files = recovered.len(), "remembered failures could not be forgotten now");
        }
    }
}
