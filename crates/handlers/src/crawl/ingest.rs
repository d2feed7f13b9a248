//! One file's journey through a crawl: read and hashed (by the media crate), placed against the catalogue
//! (new, touched, moved, a copy, revived), and written: proxies made, capture time read, rows changed.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use almanac_domain::{
    AssetId, CaptureSource, CaptureTime, ContentHash, MediaType, ProxyType, StorageConfigId,
    ports::{CatalogueStore, Fence, FileFacts, IngestOutcome, KnownFile, NewAsset, NewProxy},
};
use almanac_media::{Content, MediaFormat, Original, PixelBudget, ProxyFolder, ReadError, ReadOriginal, RootFolder};
use tokio_util::sync::CancellationToken;

use super::CrawlSettings;
use super::display;
use super::merge::same_facts;
use super::problems::FileProblem;
use super::report::{Counters, bump};
use super::rules::{Placement, place, takes_a_path};
use super::settling::{self, CrawlClock};
use super::walk::{Seen, WalkEntry};

/// A file's metadata and freshly made proxies.
struct Made {
    media_type: MediaType,
    capture: CaptureTime,
    metadata: almanac_domain::AssetMetadata,
    proxies: Vec<NewProxy>,
}

/// One crawl's shared state, for the files processed side by side.
pub(super) struct Run<'a, C> {
    pub catalogue: &'a C,
    pub settings: &'a CrawlSettings,
    pub pixel_budget: &'a PixelBudget,
    pub config: StorageConfigId,
    pub fence: Fence,
    pub root: Arc<RootFolder>,
    /// Shared with the walk, which counts the files it lists.
    pub counters: Arc<Counters>,
    /// When the crawl's processing began.
    pub since: std::time::Instant,
    /// The config's active assets when the first file was held back ([`Run::hold_back`]): asked only then, so a
    /// crawl that replaces nothing (a watcher's crawl of a folder) does not count the library.
    pub library: tokio::sync::OnceCell<u64>,
    /// Files that would take another asset's own path, held back until the guard has weighed them
    /// ([`Run::hold_back`]).
    pub held_back: Mutex<Vec<(WalkEntry, KnownFile)>>,
    /// Whether an operator confirmed deletions for this attempt (`allow_mass_deletion`).
    pub confirmed: bool,
    /// The time mtimes are judged by (the database's).
    pub clock: CrawlClock,
    /// The known files processing found (a move, a copy, a touched file): what the walk found unchanged is
    /// never marked, so this grows with what changed.
    pub seen: Mutex<HashSet<Seen>>,
    /// One lock per content hash: two files of the same content are placed one after the other.
    pub hash_locks: Mutex<HashMap<ContentHash, Arc<tokio::sync::Mutex<()>>>>,
    pub cancel: CancellationToken,
    /// Stops the walk (a child of `cancel`): cancelled too when a problem stops the crawl.
    pub halt: CancellationToken,
    /// The files remembered as failed for their content under the crawl's scope.
    pub failures: super::failed::Remembered,
}

impl<C: CatalogueStore> Run<'_, C> {
    /// The counts so far, for progress and the report.
    pub fn counts(&self) -> almanac_domain::CrawlCounts {
        self.counters.counts(self.since)
    }

    pub fn mark(&self, seen: Seen) {
        self.seen.lock().expect("poisoned").insert(seen);
    }

    /// A file's absolute path, for messages and tools' error text only: files are opened beneath the root by
    /// their relative path, never by this one.
    pub fn abs(&self, entry: &WalkEntry) -> PathBuf {
        self.root.path().join(std::ffi::OsStr::from_bytes(&entry.rel))
    }

    /// Every write after hashing is preceded by this: a cancelled (or self-stopped) attempt writes nothing more.
    fn still_wanted(&self) -> Result<(), FileProblem> {
        if self.cancel.is_cancelled() { Err(FileProblem::Cancelled) } else { Ok(()) }
    }

    /// Reads, places and writes one changed or new file. Unchanged files never get here: the walk reports them
    /// without opening them. A known path that changed is handled here (re-read, replaced or relocated), so it
    /// does not count as vanished; nor does one still being written, which is left as the catalogue knows it.
    /// A file that would take another asset's own path is held back ([`Run::hold_back`]) unless `held_back` says it
    /// is one the guard has let through.
    pub async fn file(&self, entry: &WalkEntry, known: Option<&KnownFile>, held_back: bool) -> Result<(), FileProblem> {
        if let Some(k) = known.filter(|k| !k.extra) {
            self.mark(Seen::Asset(k.asset_id));
        }
        let done = match self.failures.unchanged(entry) {
            Some(reason) => Err(FileProblem::FailedBefore(reason)),
            None => self.settled_file(entry, known, held_back).await,
        };
        if let Some(k) = known.filter(|k| k.extra) {
            let keeps_its_place = match &done {
                // A copy being written over keeps its place until it has settled.
                Err(FileProblem::Settling) => true,
                // A copy read only because a watcher saw it closed, its facts those the catalogue has, keeps its place
                // when it cannot be read, as it would have unread.
                Err(FileProblem::Failed(_) | FileProblem::Damaged(_) | FileProblem::FailedBefore(_)) => {
                    same_facts(k, entry)
                }
                _ => false,
            };
            if keeps_its_place {
                self.mark(Seen::Extra(k.facts.file_path.clone(), k.asset_id));
            }
        }
        done
    }

    /// [`Run::file`], once the file is known to be no longer written: modified within the settle time, it is
    /// not read; changed while it was read, nothing is written for it.
    async fn settled_file(
        &self,
        entry: &WalkEntry,
        known: Option<&KnownFile>,
        held_back: bool,
    ) -> Result<(), FileProblem> {
        // Before the size: a file being written may be empty yet. One a watcher saw closed, as it is now, is not.
        if !entry.closed && settling::modified_recently(entry.mtime, self.clock.now(), self.settings.settle_time) {
            return Err(FileProblem::Settling);
        }
        if entry.size == 0 {
            return Err(FileProblem::Skipped("empty file".into()));
        }
        let read = self.read(entry).await?;
        self.still_wanted()?;
        let lock = self.hash_locks.lock().expect("poisoned").entry(read.hash.clone()).or_default().clone();
        let _guard = lock.lock().await;
        // Waiting for the lock can take a whole transcode of the same content.
        self.still_wanted()?;
        let placement = self.placement(entry, &read.hash).await?;
        let takes_a_path = takes_a_path(known, placement);
        if takes_a_path && !held_back && !self.confirmed {
            return self.hold_back(entry, known, placement).await;
        }
        match placement {
            Placement::Touched(id) => self.touched(entry, known, read, id).await?,
            Placement::Moved(id) => {
                self.mark(Seen::Asset(id));
                // A file moves with (or away from) its sidecar, and its name may carry a date: read it again.
                self.relocate_and_redate(entry, read, id).await?;
                bump(&self.counters.moved);
            }
            Placement::Copy(id) => self.copy(entry, id).await?,
            Placement::Revived(id) => {
                self.mark(Seen::Asset(id));
                self.relocate_and_redate(entry, read, id).await?;
                bump(&self.counters.revived);
            }
            Placement::New => {
                let replaces = known.filter(|k| !k.extra).map(|k| k.asset_id);
                let asset = self.new_asset(entry, read, replaces).await?;
                self.still_wanted()?;
                match self.catalogue.ingest(self.fence, &asset).await? {
                    IngestOutcome::Ingested(_) => bump(&self.counters.ingested),
                    IngestOutcome::ContentExists(id) => self.copy(entry, id).await?,
                }
            }
        }
        if takes_a_path {
            bump(&self.counters.replaced);
        }
        Ok(())
    }

    /// Holds back a file that would take another asset's own path (that asset soft-deleted, or moved to a copy, by
    /// its write): written only after the walk, once the guard has weighed all of them with what vanished
    /// ([`super::CrawlHandler::replace_held_back`]), so a refused crawl replaces nothing, and its next attempt meets
    /// the library as this one did. Marks what its write would have marked, so the asset it places here is not taken
    /// for vanished. More held back than the guard lets go at once (another disk or card mounted where the library
    /// was, its files under the same names) stops the crawl at once.
    async fn hold_back(
        &self,
        entry: &WalkEntry,
        known: Option<&KnownFile>,
        placement: Placement,
    ) -> Result<(), FileProblem> {
        match placement {
            Placement::Moved(id) | Placement::Revived(id) => self.mark(Seen::Asset(id)),
            Placement::Copy(id) => self.mark(Seen::Extra(entry.rel.clone(), id)),
            Placement::Touched(_) | Placement::New => {}
        }
        let Some(known) = known.cloned() else { return Ok(()) };
        let n = {
            let mut held = self.held_back.lock().expect("poisoned");
            held.push((entry.clone(), known));
            held.len() as u64
        };
        bump(&self.counters.held_back);
        let library = *self.library.get_or_try_init(|| self.catalogue.active_assets(self.config)).await?;
        let guard = &self.settings.mass_deletion;
        if !guard.refuses_of(library, library, n) {
            return Ok(());
        }
        Err(FileProblem::Replacing(super::rules::too_many_replaced(n, self.root.path(), guard, self.config)))
    }

    /// Who has this content: the asset at this very path (only size or mtime changed), another active asset (a
    /// move or a copy), or a soft-deleted one (a revival). Asked per changed file, so the known-files load at
    /// the start need not carry every hash. A config holds one active asset per content; among soft-deleted
    /// ones the store lists the most recently deleted first, and that one is revived.
    async fn placement(&self, entry: &WalkEntry, hash: &ContentHash) -> Result<Placement, FileProblem> {
        let matches = self.catalogue.find_by_hash(self.config, hash).await?;
        let active = matches.iter().find(|m| !m.soft_deleted);
        let same_at_path = active.filter(|m| m.file_path == entry.rel).map(|m| m.asset_id);
        // Whether its own path still exists matters only when it is elsewhere (a copy, or a move); looked at off the
        // runtime, as every look at the share.
        let active = match active {
            Some(m) if same_at_path.is_none() => {
                let (root, own) = (self.root.clone(), m.file_path.clone());
                let looking = "looking for the asset's own file";
                // Given up on when the crawl stops (a cancel, a share that stopped answering): not a failed file.
                let exists = super::root::read_by_the_crawl(&self.halt, looking, move || root.exists(&own)).await?;
                Some((m.asset_id, exists))
            }
            Some(m) => Some((m.asset_id, true)),
            None => None,
        };
        let soft_deleted = matches.iter().find(|m| m.soft_deleted).map(|m| m.asset_id);
        Ok(place(same_at_path, active, soft_deleted))
    }

    /// The same content at the same path with another size or time: its missing proxies made again, its date
    /// read again when its sidecar changed or its date was read with a rule since corrected, its facts recorded.
    async fn touched(
        &self,
        entry: &WalkEntry,
        known: Option<&KnownFile>,
        read: ReadOriginal,
        id: AssetId,
    ) -> Result<(), FileProblem> {
        self.mark(Seen::Asset(id));
        // What the catalogue knew at this path is this asset's only if it is this asset (a held-back replacement
        // tried again after an outage finds its own write done, where another asset was known).
        let known = known.filter(|k| k.asset_id == id);
        // An asset found at a path the crawl did not know it at when it started got there during this crawl:
        // an earlier try of this very file relocated it, and the try's answer (or its redate) was lost with its
        // connection. Its date is read again, as that try would have.
        let date_to_read = known.is_none_or(|k| k.sidecar != entry.sidecar || !k.date_current);
        if known.is_some_and(|k| !k.proxies_complete) {
            let made = self.make(entry, read).await?;
            self.still_wanted()?;
            self.catalogue.put_proxies(self.fence, id, &made.proxies, &made.metadata).await?;
            if date_to_read {
                self.catalogue.redate(self.fence, id, Some(&made.capture), entry.sidecar.as_ref()).await?;
            }
            bump(&self.counters.regenerated);
        } else if date_to_read {
            let capture = self.capture_again(entry, read).await?;
            self.still_wanted()?;
            // Moved here by the earlier try: dated as a move is ([`Self::relocate_and_redate`]).
            let capture = if known.is_none() { moved_keeping_its_date(capture.as_ref()) } else { capture.as_ref() };
            self.catalogue.redate(self.fence, id, capture, entry.sidecar.as_ref()).await?;
            bump(&self.counters.redated);
        } else if known.is_some_and(|k| same_facts(k, entry)) {
            // Read only because a watcher saw it closed, and it holds what it held: nothing to write.
            bump(&self.counters.unchanged);
            return Ok(());
        } else {
            bump(&self.counters.touched);
        }
        self.catalogue.relocate(self.fence, id, &facts(entry)).await?;
        Ok(())
    }

    /// A known asset found at this path (moved here, or back from deletion): relocated and dated again.
    async fn relocate_and_redate(&self, entry: &WalkEntry, read: ReadOriginal, id: AssetId) -> Result<(), FileProblem> {
        let capture = self.capture_again(entry, read).await?;
        self.still_wanted()?;
        self.catalogue.relocate(self.fence, id, &facts(entry)).await?;
        self.catalogue.redate(self.fence, id, moved_keeping_its_date(capture.as_ref()), entry.sidecar.as_ref()).await?;
        Ok(())
    }

    /// This path is a copy of asset `id`. When it was another asset's own path (overwritten with this content),
    /// that asset loses it in the same fenced write: it moves to one of its copies, or is soft-deleted.
    async fn copy(&self, entry: &WalkEntry, id: AssetId) -> Result<(), FileProblem> {
        self.mark(Seen::Extra(entry.rel.clone(), id));
        self.catalogue.record_extra_path(self.fence, self.config, id, &facts(entry)).await?;
        bump(&self.counters.copies);
        Ok(())
    }

    /// Opens the file beneath the root (no link followed), confirms its format by its content, and hashes it
    /// through the open file, which is kept for the tools that read it next (on a blocking thread). Then looks
    /// at the open file again: another size or mtime than the walk listed means it is still being written
    /// ([`FileProblem::Settling`]), and so does a file that could not be read, or was not media by its content,
    /// and has changed since (its first bytes not yet written, or it grew past a still's limit).
    async fn read(&self, entry: &WalkEntry) -> Result<ReadOriginal, FileProblem> {
        let (root, listed, cancel) = (self.root.clone(), entry.clone(), self.halt.clone());
        let (read, changed) = super::root::read_by_the_crawl(&self.halt, "hashing", move || {
            let read = almanac_media::read_original(&root, &listed.rel, almanac_media::MAX_STILL_BYTES, &cancel);
            let now = match &read {
                Ok(read) => Some(read.original.size_and_mtime()),
                Err(ReadError::NotMedia | ReadError::Unreadable(_)) => {
                    root.open_file(&listed.rel).ok().map(|again| again.size_and_mtime())
                }
                Err(ReadError::Vanished | ReadError::Cancelled) => None,
            };
            // A file that cannot be looked at again is judged by what was read of it.
            let changed = now.and_then(Result::ok).is_some_and(|now| settling::changed_since_listed(&listed, now));
            (read, changed)
        })
        .await?;
        if let Ok(read) = &read {
            self.counters.bytes_hashed.fetch_add(read.bytes, Ordering::Relaxed);
        }
        if changed {
            return Err(FileProblem::Settling);
        }
        Ok(read?)
    }

    /// A new asset at this path (`replaces` the asset the path held before, if another content).
    async fn new_asset(
        &self,
        entry: &WalkEntry,
        read: ReadOriginal,
        replaces: Option<AssetId>,
    ) -> Result<NewAsset, FileProblem> {
        let hash = read.hash.clone();
        let made = self.make(entry, read).await?;
        Ok(NewAsset {
            storage_config_id: self.config,
            facts: facts(entry),
            content_hash: hash,
            media_type: made.media_type,
            capture: made.capture,
            metadata: made.metadata,
            proxies: made.proxies,
            replaces,
            sidecar: entry.sidecar.clone(),
        })
    }

    /// Reads a file's metadata and makes its proxies (in its folder under the proxy root).
    async fn make(&self, entry: &WalkEntry, read: ReadOriginal) -> Result<Made, FileProblem> {
        self.still_wanted()?;
        let ReadOriginal { original, format, content, hash, .. } = read;
        // The proxies' folders made first, no link followed, and held open: every proxy is written through the
        // folder's handle, so a link swapped in meanwhile redirects nothing.
        let (root, relative) = (self.settings.proxy_root.clone(), hash.proxy_dir(self.config));
        let folder = tokio::task::spawn_blocking(move || almanac_media::make_proxy_folder(&root, &relative))
            .await
            .map_err(|e| FileProblem::Failed(format!("making the proxies' folder ended abnormally: {e}")))??;
        let folder = Arc::new(folder);
        let made = match content {
            Content::Still(bytes) => self.make_still(entry, &original, format, bytes, &hash, &folder).await,
            Content::Video => self.make_video(entry, &original, &hash, &folder).await,
        };
        let made = match made {
            Ok(made) => still_in_place(&folder).await.map(|()| made),
            Err(e) => Err(e),
        };
        if made.is_err() {
            // No empty folder is left for a file whose proxies were not made (the sweep removes a folder only once
            // it deleted a file in it); one that holds anything stays. Under the content's lock: nothing else makes
            // this folder now.
            let _ = tokio::task::spawn_blocking(move || folder.remove_if_empty()).await;
        }
        made
    }

    /// The path of each of a file's proxies relative to the proxy root.
    fn proxy_file(&self, hash: &ContentHash) -> impl Fn(ProxyType) -> String {
        let relative_dir = hash.proxy_dir(self.config);
        move |t: ProxyType| relative_dir.join(t.file_name().expect("file proxy")).display().to_string()
    }

    /// A still's proxies (preview, thumbnail, BlurHash) and metadata. HEIC and AVIF are turned into a JPEG
    /// first, by a tool reading the open file (killed when the crawl stops); a RAW passes its embedded preview.
    async fn make_still(
        &self,
        entry: &WalkEntry,
        original: &Original,
        format: MediaFormat,
        content: Vec<u8>,
        hash: &ContentHash,
        folder: &Arc<ProxyFolder>,
    ) -> Result<Made, FileProblem> {
        let (rel_file, proxies) = (self.proxy_file(hash), folder.clone());
        let (abs, max_pixels) = (self.abs(entry), self.settings.max_image_pixels);
        // Held while the pixels are decoded and scaled (large PNGs and TIFFs decode at full size, and heif-convert
        // decodes a HEIF whole). A crawl stopped by a problem (`halt`) waits for no pixels.
        let _pixels =
            self.pixel_budget.reserve(almanac_media::full_decode_pixels(&content, format), &self.halt).await?;
        let converted = match format {
            MediaFormat::Heic | MediaFormat::Avif => {
                let limits = self.settings.tool_limits;
                Some(almanac_media::heic_to_jpeg(original, &content, max_pixels, folder, limits, &self.halt).await?)
            }
            _ => None,
        };
        let (facts, made) = tokio::task::spawn_blocking(move || {
            // A RAW's preview is found once: its pixels, and its EXIF when the RAW keeps none.
            let preview = matches!(format, MediaFormat::Raw(_)).then(|| almanac_media::raw_preview(&abs, &content));
            let facts =
                almanac_media::read_still_facts(&content, preview.as_ref().and_then(|p| p.as_ref().ok().copied()));
            let made = match (&converted, preview) {
                // heic_to_jpeg's JPEG is upright already: with the HEIF's own format it is not turned again by
                // `facts.orientation`, which then only gives back the stored size.
                (Some(jpeg), _) => Ok((jpeg.as_slice(), format)),
                (None, Some(preview)) => preview.map(|p| (p, MediaFormat::Jpeg)),
                (None, None) => Ok((content.as_slice(), format)),
            }
            .and_then(|(pixels, pixels_format)| {
                almanac_media::make_still_proxies(&abs, pixels, pixels_format, facts.orientation, max_pixels, &proxies)
            });
            (facts, made)
        })
        .await
        .map_err(|e| FileProblem::Failed(format!("decoding ended abnormally: {e}")))?;
        let made = made?;
        let capture = self.best_capture(entry, facts.dates.iter().copied()).await?;
        let mut metadata = facts.metadata;
        (metadata.width, metadata.height) = (Some(made.width), Some(made.height));
        let file = |proxy_type, size_bytes| NewProxy {
            proxy_type,
            relative_path: Some(rel_file(proxy_type)),
            inline_value: None,
            size_bytes,
        };
        let blurhash = NewProxy {
            proxy_type: ProxyType::Blurhash,
            relative_path: None,
            inline_value: Some(made.blurhash),
            size_bytes: 0,
        };
        let proxies = vec![
            file(ProxyType::Preview, made.preview_bytes),
            file(ProxyType::Thumbnail, made.thumbnail_bytes),
            blurhash,
        ];
        Ok(Made { media_type: MediaType::Image, capture, metadata, proxies })
    }

    /// A video's proxies (poster, web video) and metadata, by ffprobe and ffmpeg reading the open file.
    async fn make_video(
        &self,
        entry: &WalkEntry,
        original: &Original,
        hash: &ContentHash,
        folder: &ProxyFolder,
    ) -> Result<Made, FileProblem> {
        let rel_file = self.proxy_file(hash);
        let (limits, max_pixels) = (self.settings.tool_limits, self.settings.max_image_pixels);
        let probed = almanac_media::probe_video(original, limits, max_pixels, &self.halt).await?;
        // Held while ffmpeg decodes it for its proxies, as a still's decoder holds its share (on a small machine, a
        // few 4K videos made at once beside large stills would not fit in memory).
        let charge = almanac_media::video_decode_pixels(probed.metadata.width, probed.metadata.height);
        let _pixels = self.pixel_budget.reserve(charge, &self.halt).await?;
        let made = almanac_media::make_video_proxies(original, folder, limits, max_pixels, &self.halt).await?;
        let capture = self.video_capture(entry, &probed).await?;
        let file = |proxy_type, size_bytes| NewProxy {
            proxy_type,
            relative_path: Some(rel_file(proxy_type)),
            inline_value: None,
            size_bytes,
        };
        let proxies = vec![file(ProxyType::Poster, made.poster_bytes), file(ProxyType::WebVideo, made.web_video_bytes)];
        Ok(Made { media_type: MediaType::Video, capture, metadata: probed.metadata, proxies })
    }
}

/// Whether the folder the proxies were written into is still at its path: nothing is recorded at a path that leads
/// elsewhere now (a proxy would be read through whatever stands there).
async fn still_in_place(folder: &Arc<ProxyFolder>) -> Result<(), FileProblem> {
    let folder = folder.clone();
    match tokio::task::spawn_blocking(move || folder.still_in_place()).await {
        Ok(in_place) => Ok(in_place?),
        Err(e) => Err(FileProblem::Failed(format!("checking the proxies' folder ended abnormally: {e}"))),
    }
}

/// A file's facts as the walk found them.
fn facts(entry: &WalkEntry) -> FileFacts {
    FileFacts { file_path: entry.rel.clone(), display_path: display(&entry.rel), size: entry.size, mtime: entry.mtime }
}

/// The date read again of an asset found at another path than it was (moved, revived): a file's time is the last
/// guess, and a copy or a restore sets it anew, so such an asset keeps the date it has instead (`None`).
fn moved_keeping_its_date(capture: Option<&CaptureTime>) -> Option<&CaptureTime> {
    capture.filter(|c| c.source != CaptureSource::FileMtime)
}
