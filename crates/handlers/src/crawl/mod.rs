//! The crawl: walk a storage config's folder of originals, ingest new and changed media with their proxies,
//! follow moves, revive what came back, and soft-delete what vanished, but never when the share looks
//! unavailable.

//!
//! One subject per file: this one runs a crawl's steps in order; `root` checks the root before anything is
//! read; `walk` lists the tree; `ingest` is one file's journey (placed against the catalogue, proxies made,
//! dates read); `settle` deals with what the walk did not find and pairs Live Photos; `report` counts. `rules`
//! holds the pure decisions (placement, the deletion guard, pairing).

mod ingest;
mod report;
mod root;
mod rules;
mod settle;
mod walk;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use almanac_domain::{
    BurstDetectionArgs, CrawlArgs, CrawlReport, DedupKey, NewWorkItem, Scope, StorageConfigId, WorkKind,
    ports::{CatalogueError, CatalogueStore, KnownFile, ProxyPath},
};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, ProgressReporter, WorkHandler};
use almanac_media::{PixelBudget, RootFolder, ToolLimits};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use ingest::{FileProblem, Run};
use report::bump;
use settle::Settle;

use crate::report_progress;

pub use rules::{LIVE_PHOTO_MAX_GAP, MassDeletionGuard, Placement, is_skipped_name, pair_live_photos, place};
pub use walk::{Seen, WalkEntry, WalkReport, Walked, classify, list_tree};

/// Progress is reported every this many files (and at the end).
const PROGRESS_EVERY: u64 = 64;

/// How often one file's journey is tried again when the catalogue became unavailable during it (a killed
/// backend, a dropped connection), waiting 100 ms, then twice as long each time (up to 2 s): about 12 s in all.
/// A file's journey may run again whole: it reads what the catalogue holds first, and every write is fenced.
/// An outage longer than that ends the crawl as an outage (released, no failure counted); an outage that also
/// stops the heartbeats self-stops the attempt sooner.
const FILE_OUTAGE_RETRIES: u32 = 8;

/// The crawl's settings.
#[derive(Debug, Clone)]
pub struct CrawlSettings {
    /// Where proxies are written: `<proxy_root>/<config>/<hash[0..2]>/<hash>/`.
    pub proxy_root: PathBuf,
    /// Files processed at once inside one crawl.
    pub max_concurrent_files: usize,
    /// Time limits for ffmpeg and friends.
    pub tool_limits: ToolLimits,
    /// When a crawl refuses to soft-delete what it did not find.
    pub mass_deletion: MassDeletionGuard,
    /// Stills whose header claims more pixels than this are refused before decoding (a decompression bomb).
    pub max_image_pixels: u64,
}

impl CrawlSettings {
    /// Files processed at once inside one crawl, unless configured.
    pub const DEFAULT_MAX_CONCURRENT_FILES: usize = 4;

    /// The defaults, writing proxies under `proxy_root`: four files at once, the tools' default time limits,
    /// the default mass-deletion guard, and stills of up to 250 megapixels.
    pub fn new(proxy_root: PathBuf) -> Self {
        Self {
            proxy_root,
            max_concurrent_files: Self::DEFAULT_MAX_CONCURRENT_FILES,
            tool_limits: ToolLimits::default(),
            mass_deletion: MassDeletionGuard::default(),
            max_image_pixels: almanac_media::DEFAULT_MAX_PIXELS,
        }
    }
}

/// The crawl handler (kind `crawl`).
pub struct CrawlHandler<C> {
    catalogue: Arc<C>,
    settings: CrawlSettings,
    /// Shared by every crawl this handler runs (the Worker makes one handler for all its slots), so that large
    /// stills decoded side by side stay within `max_image_pixels` in all.
    pixel_budget: PixelBudget,
}

impl<C> CrawlHandler<C> {
    /// A crawl handler over the catalogue port (whose writes, the follow-up enqueue included, are fenced).
    pub fn new(catalogue: Arc<C>, settings: CrawlSettings) -> Self {
        let pixel_budget = PixelBudget::new(settings.max_image_pixels);
        Self { catalogue, settings, pixel_budget }
    }
}

impl<C: CatalogueStore + 'static> WorkHandler for CrawlHandler<C> {
    type Args = CrawlArgs;

    fn work(&self, args: CrawlArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<CrawlReport, HandlerError>> {
        Box::pin(self.crawl(args, ctx))
    }
}

impl<C: CatalogueStore + 'static> CrawlHandler<C> {
    /// A crawl's steps: check and open the root, list it beside the catalogue's known files, process what
    /// changed, settle what vanished, pair Live Photos, and ask for burst detection.
    async fn crawl(&self, args: CrawlArgs, ctx: HandlerContext) -> Result<CrawlReport, HandlerError> {
        let config = ctx.config()?;
        let storage = self
            .catalogue
            .storage_config(config)
            .await
            .map_err(catalogue_error)?
            .ok_or_else(|| HandlerError::permanent(format!("storage config {config} does not exist")))?;
        root::check_roots_apart(&*self.catalogue, &storage, &self.settings.proxy_root).await?;
        // A proxy root that can take no file would fail every file one by one: one clear error instead.
        root::check_proxy_root(&self.settings.proxy_root)
            .await
            .map_err(|e| root::proxy_root_unwritable(e, "Nothing was read"))?;
        let (root, is_mount_point) = root::open_root(&storage, args)?;
        let root = Arc::new(root);
        let (files, walk, known, active) = self.list(config, &root, &ctx.cancel).await?;
        // A walk stops early only when cancelled: what it did not list must never look vanished.
        if walk.stopped {
            return Err(HandlerError::cancelled());
        }
        root::check_not_emptied(&storage, args, active, files.len())?;

        let run = Run {
            catalogue: &*self.catalogue,
            settings: &self.settings,
            pixel_budget: &self.pixel_budget,
            config,
            fence: ctx.fence,
            root,
            known,
            counters: Default::default(),
            total: files.len() as u64,
            since: std::time::Instant::now(),
            seen: Mutex::default(),
            hash_locks: Mutex::default(),
            cancel: ctx.cancel.clone(),
        };
        self.process(&run, files, &ctx.progress).await?;
        report_progress(&ctx.progress, &run.counts());

        let settle = Settle { catalogue: &*self.catalogue, fence: ctx.fence, storage: &storage, cancel: &ctx.cancel };
        // Every file was listed and processed (or the crawl ended above); only a folder that could not be read
        // leaves the walk incomplete.
        let soft_deleted = if walk.unreadable.is_empty() {
            let unseen = settle::unseen(&run.known, &run.seen.lock().expect("poisoned"));
            let guard = &self.settings.mass_deletion;
            settle.vanished(unseen, active, guard, args, is_mount_point, &run.counters).await?
        } else {
            warn!(
                event = "soft_delete_skipped",
                unreadable = walk.unreadable.len(),
                "some folders could not be read; nothing is soft-deleted this time"
            );
            0
        };
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        // Pairs can only form where this crawl ingested, moved or revived something.
        let paired = if run.counters.changed_assets() { settle.pair_live_photos().await? } else { 0 };
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        self.ask_for_bursts(&ctx, config).await?;
        Ok(run.counters.report(run.counts(), &walk, soft_deleted, paired))
    }

    /// Lists the tree while the catalogue's known files load (neither needs the other): the files the walk
    /// found, what it passed over, the known files by path, and how many of them are active assets.
    async fn list(
        &self,
        config: StorageConfigId,
        root: &Arc<RootFolder>,
        cancel: &CancellationToken,
    ) -> Result<(Vec<WalkEntry>, WalkReport, Arc<HashMap<Vec<u8>, KnownFile>>, usize), HandlerError> {
        let (listing_root, cancel) = (root.clone(), cancel.clone());
        let avoid = almanac_media::identity(&self.settings.proxy_root);
        let listing = tokio::task::spawn_blocking(move || list_tree(&listing_root, avoid, &cancel));
        let known_files = self.catalogue.known_files(config).await.map_err(catalogue_error)?;
        let active = known_files.iter().filter(|k| !k.extra).count();
        // Indexed by path while the walk goes on (on a blocking thread: 100,000 files take tens of ms), and
        // each asset's proxy files looked at meanwhile.
        let proxy_root = self.settings.proxy_root.clone();
        let known = tokio::task::spawn_blocking(move || {
            // The path moves into the key (the map's value keeps an empty one): no copy of 100,000 paths.
            let mut known = HashMap::with_capacity(known_files.len());
            for mut k in known_files {
                known.insert(std::mem::take(&mut k.facts.file_path), k);
            }
            mark_broken_proxies(&proxy_root, known.values_mut());
            Arc::new(known)
        })
        .await
        .map_err(|e| HandlerError::retryable(format!("indexing the known files ended abnormally: {e}")))?;
        let (files, walk) =
            listing.await.map_err(|e| HandlerError::retryable(format!("the folder walk ended abnormally: {e}")))?;
        Ok((files, walk, known, active))
    }

    /// Processes the listed files, a few at a time: unchanged ones are only marked seen, the others go through
    /// [`Run::file`]. Answers whether the walk handed over every file (nothing may be soft-deleted otherwise);
    /// stops at cancellation or at the first catalogue error.
    async fn process(
        &self,
        run: &Run<'_, C>,
        files: Vec<WalkEntry>,
        progress: &ProgressReporter,
    ) -> Result<(), HandlerError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Walked>(256);
        let known = run.known.clone();
        let walker = tokio::task::spawn_blocking(move || {
            classify(files, &tx, |entry| {
                // Unchanged means same path, size and mtime, the same sidecar (an asset's date is read again
                // when its sidecar appears, changes or vanishes), and nothing missing: an asset whose proxies
                // were deleted (to be made again), or whose proxy files were found broken when the known files
                // were indexed, is read again and its proxies made again.
                let k = known.get(&entry.rel).filter(|k| {
                    k.facts.size == entry.size
                        && k.facts.mtime == entry.mtime
                        && k.proxies_complete
                        && (k.extra || k.sidecar == entry.sidecar)
                })?;
                Some(if k.extra { Seen::Extra(entry.rel.clone()) } else { Seen::Asset(k.asset_id) })
            })
        });
        let fatal: Mutex<Option<HandlerError>> = Mutex::default();
        let stream = futures_util::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|w| (w, rx)) });
        stream
            .for_each_concurrent(self.settings.max_concurrent_files.max(1), |walked| {
                self.take(run, walked, progress, &fatal)
            })
            .await;
        let handed_over =
            walker.await.map_err(|e| HandlerError::retryable(format!("the folder walk ended abnormally: {e}")))?;
        if run.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        if let Some(e) = fatal.into_inner().expect("poisoned") {
            return Err(e);
        }
        if !handed_over {
            return Err(HandlerError::retryable(
                "the folder walk stopped before it handed over every file; nothing was soft-deleted, and the crawl \
                 will be retried",
            ));
        }
        Ok(())
    }

    /// One entry the walk handed over: an unchanged batch is only marked seen; a file goes through its journey,
    /// unless the crawl is cancelled or already stopping. A problem that stops the crawl is kept in `fatal`
    /// (the first one wins).
    async fn take(
        &self,
        run: &Run<'_, C>,
        walked: Walked,
        progress: &ProgressReporter,
        fatal: &Mutex<Option<HandlerError>>,
    ) {
        let entry = match walked {
            Walked::Unchanged(marks) => {
                let n = marks.len() as u64;
                run.counters.found.fetch_add(n, Ordering::Relaxed);
                run.counters.unchanged.fetch_add(n, Ordering::Relaxed);
                run.seen.lock().expect("poisoned").extend(marks);
                report_progress(progress, &run.counts());
                return;
            }
            Walked::File(entry) => entry,
        };
        if run.cancel.is_cancelled() || fatal.lock().expect("poisoned").is_some() {
            return;
        }
        let found = run.counters.found.fetch_add(1, Ordering::Relaxed) + 1;
        if let Err(problem) = run.file_through_outages(&entry).await
            && let Some(e) = self.file_problem(run, &entry, problem).await
        {
            fatal.lock().expect("poisoned").get_or_insert(e);
        }
        if found.is_multiple_of(PROGRESS_EVERY) {
            report_progress(progress, &run.counts());
        }
    }

    /// What a file's problem comes to: counted against the file (the crawl goes on), or the error that stops
    /// the crawl.
    async fn file_problem(&self, run: &Run<'_, C>, entry: &WalkEntry, problem: FileProblem) -> Option<HandlerError> {
        match problem {
            FileProblem::Cancelled => None,
            FileProblem::Skipped(reason) => {
                bump(&run.counters.skipped);
                tracing::debug!(path = %run.abs(entry).display(), reason, "skipped");
                None
            }
            FileProblem::Failed(reason) => {
                warn!(event = "file_failed", path = %run.abs(entry).display(), reason, "file skipped");
                run.counters.failed(display(&entry.rel), reason);
                None
            }
            FileProblem::ProxyNotWritten(reason) => {
                // One file's trouble, unless the proxy root can take no file now (the volume filled up, went
                // read-only): then the crawl stops with that one error.
                match root::check_proxy_root(&self.settings.proxy_root).await {
                    Ok(()) => {
                        warn!(event = "file_failed", path = %run.abs(entry).display(), reason, "file skipped");
                        run.counters.failed(display(&entry.rel), reason);
                        None
                    }
                    Err(e) => Some(root::proxy_root_unwritable(e, "The crawl stopped before its end")),
                }
            }
            FileProblem::ProxyVolume(e) => Some(root::proxy_root_unwritable(e, "The crawl stopped before its end")),
            FileProblem::Catalogue(e) => Some(catalogue_error(e)),
        }
    }

    /// Enqueues the config's burst detection (once: it joins one already queued), fenced like every write.
    async fn ask_for_bursts(&self, ctx: &HandlerContext, config: StorageConfigId) -> Result<(), HandlerError> {
        let scope = Scope::Config(config);
        let bursts = NewWorkItem::from_args(&BurstDetectionArgs::default(), scope)
            .map_err(|e| HandlerError::permanent(e.to_string()))?
            .with_dedup_key(DedupKey::for_work(WorkKind::BurstDetection, scope));
        self.catalogue
            .enqueue_follow_up(ctx.fence, &bursts)
            .await
            .map_err(|e| crate::store_error_while("could not enqueue burst detection: ", e))?;
        Ok(())
    }
}

/// Marks the assets whose proxy files are not all whole ([`proxies_whole`]) as missing proxies, as a
/// `proxy_deletion` would: the crawl reads them again and makes their proxies again, so their rows never point
/// at a file that is gone or cut short. A stat per proxy file, nothing read, spread over a few threads (it runs
/// beside the walk). Blocking.
fn mark_broken_proxies<'a>(proxy_root: &Path, known: impl Iterator<Item = &'a mut KnownFile>) {
    let mut assets: Vec<&mut KnownFile> = known.filter(|k| !k.extra && k.proxies_complete).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let chunk = assets.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for part in assets.chunks_mut(chunk) {
            scope.spawn(move || {
                for k in part {
                    if !proxies_whole(proxy_root, k) {
                        k.proxies_complete = false;
                    }
                }
            });
        }
    });
}

/// Whether an asset's proxy files are all there as its rows record them: each path in the proxy layout
/// ([`ProxyPath`]) and a file (not a link) of the recorded size, found with one `lstat` and nothing read. A proxy
/// deleted, cut short or replaced since it was made fails this. An asset always has proxy files, so none
/// recorded fails it too.
fn proxies_whole(proxy_root: &Path, known: &KnownFile) -> bool {
    !known.proxy_files.is_empty()
        && known.proxy_files.iter().all(|p| {
            ProxyPath::parse(&p.relative_path).is_some()
                && std::fs::symlink_metadata(proxy_root.join(&p.relative_path))
                    .is_ok_and(|m| m.is_file() && m.len() == p.size)
        })
}

fn catalogue_error(e: CatalogueError) -> HandlerError {
    crate::store_error_while("the crawl stopped because the catalogue did not answer: ", e)
}

/// A path beneath the root, for people (lossy UTF-8).
fn display(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}

impl<C: CatalogueStore> Run<'_, C> {
    /// One file's journey, tried again while the catalogue is unavailable (see [`FILE_OUTAGE_RETRIES`]).
    async fn file_through_outages(&self, entry: &WalkEntry) -> Result<(), FileProblem> {
        let mut wait = std::time::Duration::from_millis(100);
        for _ in 0..FILE_OUTAGE_RETRIES {
            match self.file(entry).await {
                Err(FileProblem::Catalogue(CatalogueError::Unavailable(e))) => {
                    tracing::info!(event = "catalogue_retry", path = %self.abs(entry).display(), error = %e,
                        retry_in_ms = wait.as_millis() as u64, "the catalogue was unavailable; trying the file again");
                }
                other => return other,
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.cancel.cancelled() => return Err(FileProblem::Cancelled),
            }
            wait = (wait * 2).min(std::time::Duration::from_secs(2));
        }
        self.file(entry).await
    }
}
