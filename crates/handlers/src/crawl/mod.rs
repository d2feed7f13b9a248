//! The crawl: walk a storage config's folder of originals, ingest new and changed media with their proxies,
//! follow moves, revive what came back, and soft-delete what vanished, but never when the share looks
//! unavailable.

//!
//! One subject per file: this one runs a crawl's steps in order; `root` checks the root before anything is
//! read; `scope` tells what one crawl covers (the whole root, or the folders a watcher saw change); `walk` lists
//! the tree in the byte order of paths; `merge` steps the catalogue's known files beside it; `ingest` is one
//! file's journey (placed against the catalogue, proxies made, dates read); `settling` tells files still being
//! written; `settle` deals with what the walk did not find and pairs Live Photos; `copies` looks, for a crawl
//! of some folders, at the copies outside them of what vanished; `report` counts. `rules` holds the pure
//! decisions (placement, the deletion guard, pairing).

mod copies;
mod dating;
mod failed;
mod ingest;
mod merge;
mod mounts;
mod outcomes;
mod problems;
mod report;
mod root;
mod rules;
mod scope;
mod settings;
mod settle;
mod settling;
mod walk;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use almanac_domain::{
    BurstDetectionArgs, CrawlArgs, CrawlReport, DedupKey, NewWorkItem, Scope, StorageConfig, StorageConfigId, WorkKind,
    ports::{CatalogueError, CatalogueStore, DatabaseClock, KnownFile},
};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, ProgressReporter, WorkHandler};
use almanac_media::PixelBudget;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use ingest::Run;
use merge::{Leftover, walk_beside};
use scope::CrawlScope;
pub use settings::CrawlSettings;
use settle::Settle;

use crate::report_progress;

pub use rules::{
    LIVE_PHOTO_MAX_GAP, MassDeletionGuard, Placement, is_skipped_name, pair_live_photos, passes_over, place,
    reads_file_named,
};
use walk::Walked;
pub use walk::{WalkEntry, WalkReport, list_tree, walk_tree};

/// Progress is reported every this many files (and at the end).
const PROGRESS_EVERY: u64 = 64;

/// Known files loaded at once (about 1.5 MB): after each folder's first page ([`FIRST_KNOWN_FILES_PAGE`]), the
/// catalogue is read in pages of this many, beside the walk.
const KNOWN_FILES_PAGE: i64 = 10_000;

/// The first page of each folder's known files: small, so the walk, which waits for it at its first file, starts
/// merging after a short read rather than after a whole page (a page of 10,000 takes the server and the
/// decoding about 15 ms, most of a small crawl's time).
const FIRST_KNOWN_FILES_PAGE: i64 = 1_000;

/// How often one file's journey is tried again when the catalogue became unavailable during it (a killed
/// backend, a dropped connection), waiting 100 ms, then twice as long each time (up to 2 s): about 12 s in all.
/// A file's journey may run again whole: it reads what the catalogue holds first, and every write is fenced.
/// An outage longer than that ends the crawl as an outage (released, no failure counted); an outage that also
/// stops the heartbeats self-stops the attempt sooner.
const FILE_OUTAGE_RETRIES: u32 = 8;

/// The crawl handler (kind `crawl`).
pub struct CrawlHandler<C> {
    catalogue: Arc<C>,
    settings: CrawlSettings,
    /// Shared by every crawl this handler runs (the Worker makes one handler for all its slots), so that large
    /// stills decoded side by side stay within `max_image_pixels` in all.
    pixel_budget: PixelBudget,
    /// Since when files have been found still being written, for every crawl this handler runs.
    still_written: settling::StillWritten,
}

impl<C> CrawlHandler<C> {
    /// A crawl handler over the catalogue port (whose writes, the follow-up enqueues included, are fenced) and
    /// the database's clock (which judges whether a file is still being written).
    pub fn new(catalogue: Arc<C>, settings: CrawlSettings) -> Self {
        let pixel_budget = PixelBudget::new(settings.max_image_pixels);
        Self { catalogue, settings, pixel_budget, still_written: settling::StillWritten::default() }
    }

    /// The pixels its crawls' decoders may hold at once (stills decoded at full size, videos made into proxies),
    /// shared by every crawl this handler runs.
    pub fn pixel_budget(&self) -> &PixelBudget {
        &self.pixel_budget
    }
}

impl<C: CatalogueStore + DatabaseClock + 'static> WorkHandler for CrawlHandler<C> {
    type Args = CrawlArgs;

    fn work(&self, args: CrawlArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<CrawlReport, HandlerError>> {
        Box::pin(self.crawl(args, ctx))
    }
}

/// The arguments this attempt runs with ([`rules::confirmation_for_this_attempt`]), saying so when a confirmation
/// is not carried over.
fn confirmation_for_this_attempt(args: CrawlArgs, attempt: almanac_domain::ports::Attempt) -> CrawlArgs {
    let now = rules::confirmation_for_this_attempt(args.clone(), attempt);
    if now.allow_mass_deletion != args.allow_mass_deletion {
        warn!(
            event = "confirmation_not_carried_over",
            attempt = attempt.get(),
            "this crawl's confirmation of deletions held for its first attempt only: this one is guarded"
        );
    }
    now
}

impl<C: CatalogueStore + DatabaseClock + 'static> CrawlHandler<C> {
    /// What is checked before anything is read: roots apart, the proxies' folder in place, the proxy root and the
    /// config's proxy folders writable.
    async fn check_before_reading(
        &self,
        storage: &StorageConfig,
        cancel: &CancellationToken,
    ) -> Result<(), HandlerError> {
        let looks = (cancel, self.settings.answer_limit());
        root::check_roots_apart(&*self.catalogue, storage, &self.settings.proxy_root, looks).await?;
        root::check_proxies_in_place(&*self.catalogue, storage, &self.settings.proxy_root, looks).await?;
        // A proxy root that can take no file would fail every file one by one: one clear error instead.
        root::check_proxy_root(&self.settings.proxy_root)
            .await
            .map_err(|e| root::proxy_root_unwritable(e, "Nothing was read"))?;
        root::check_proxy_folders(&self.settings.proxy_root, storage)
            .await
            .map_err(|e| root::proxy_root_unwritable(e, "Nothing was read"))
    }

    /// A crawl's steps: check and open the root, list it (or the folders it is asked for) beside the
    /// catalogue's known files, process what changed, settle what vanished, pair Live Photos, and ask for burst
    /// detection (and for a crawl again when files were still being written).
    async fn crawl(&self, args: CrawlArgs, ctx: HandlerContext) -> Result<CrawlReport, HandlerError> {
        let config = ctx.config()?;
        let args = confirmation_for_this_attempt(args, ctx.fence.attempt);
        let scope = CrawlScope::of(&args)?;
        let storage = self
            .catalogue
            .storage_config(config)
            .await
            .map_err(catalogue_error)?
            .ok_or_else(|| HandlerError::permanent(format!("storage config {config} does not exist")))?;
        let mounts = mounts::Mounts::new(config, storage.mounts_below.clone(), args.root_moved);
        let scope = Arc::new(scope.with_mounts(mounts));
        self.check_before_reading(&storage, &ctx.cancel).await?;
        let (at, confirmed) = (storage.clone(), args.clone());
        let opening = format!("opening the storage root {}", storage.root_path.display());
        let (look, within) = (move || root::open_root(&at, &confirmed), self.settings.answer_limit());
        let (root, is_mount_point) =
            root::answered_in_time(&ctx.cancel, (&storage.root_path, root::Holds::Library), within, &opening, look)
                .await??;
        let clock = settling::CrawlClock::new(self.catalogue.db_now().await.map_err(catalogue_error)?);
        let under = (!scope.is_whole_root()).then(|| scope.folders());
        let failures = failed::Remembered::load(&*self.catalogue, config, under, &self.settings).await;
        let run = self.run(&ctx, config, root, clock, args.allow_mass_deletion, failures.map_err(catalogue_error)?);
        let (walk, leftover) = self.walk_and_process(&run, &scope, &ctx.progress).await?;
        if scope.is_whole_root() {
            root::check_not_emptied(&storage, &args, leftover.active, run.counters.listed(), &walk.unreadable)?;
        }
        report_progress(&ctx.progress, &run.counts());

        let settle = Settle { catalogue: &*self.catalogue, fence: ctx.fence, storage: &storage, cancel: &ctx.cancel };
        // Every file was listed and processed (or the crawl ended above); only a folder the walk did not walk (one
        // it could not read, or a loop) leaves it incomplete, there: what the catalogue knows under it is kept as
        // it is, and the copies there of assets that vanished elsewhere are looked at one by one.
        if !walk.unreadable.is_empty() {
            warn!(
                event = "soft_delete_skipped",
                unreadable = walk.unreadable.len(),
                "some folders could not be read; nothing under them is soft-deleted this time"
            );
        }
        let listed = leftover.active;
        let not_walked: Vec<_> = walk.unreadable.iter().chain(&walk.folder_loops).collect();
        let mut unseen = settle::unseen(leftover, &run.seen.lock().expect("poisoned"), &not_walked);
        let stop = (&run.cancel, self.settings.answer_limit());
        copies::look_at_held(&run.root, &scope, &mut unseen, stop).await?;
        if !scope.is_whole_root() {
            let catalogue = &*self.catalogue;
            copies::outside_the_folders(catalogue, config, &run.root, &scope, &mut unseen, stop).await?;
        }
        let active = scope.active_for_guard(&*self.catalogue, &storage, &args, listed, &unseen).await?;
        let replaced = self.replace_held_back(&run, &storage, &unseen, active, &ctx.progress);
        let (stop, limit) = ((&*run.root, &run.halt), self.settings.answer_limit());
        let (replaced, silent) = root::while_it_answers(stop, limit, replaced).await;
        silent.map_or(replaced, Err)?;
        unseen.forget_seen(&run.seen.lock().expect("poisoned"));
        let guard = &self.settings.mass_deletion;
        // Only a walk of the whole root tells what the root is now, and what is mounted beneath it.
        let identity =
            scope.is_whole_root().then(|| (is_mount_point, scope.mounts().to_record(&walk.mounts_below, &not_walked)));
        let under = scope.pairs_under(&unseen);
        let soft_deleted = settle.vanished(unseen, active, guard, &args, identity, &run.counters).await?;
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        // Pairs can only form where this crawl ingested, moved or revived something.
        let paired = if run.counters.changed_assets() { settle.pair_live_photos(under).await? } else { 0 };
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        self.ask_for_bursts(&ctx, config).await?;
        if let Some((again, due)) = self.again(config, &scope, &run.counters.settling_in, &run.clock)? {
            self.ask_again(&ctx, again, due).await?;
        }
        run.failures.forget_recovered(&*self.catalogue, ctx.fence, config, &not_walked).await;
        Ok(run.counters.report(run.counts(), &walk, soft_deleted, paired))
    }

    /// A crawl's shared state, for the files processed side by side.
    fn run(
        &self,
        ctx: &HandlerContext,
        config: StorageConfigId,
        root: almanac_media::RootFolder,
        clock: settling::CrawlClock,
        confirmed: bool,
        failures: failed::Remembered,
    ) -> Run<'_, C> {
        Run {
            catalogue: &*self.catalogue,
            settings: &self.settings,
            pixel_budget: &self.pixel_budget,
            config,
            fence: ctx.fence,
            root: Arc::new(root),
            counters: Arc::default(),
            since: std::time::Instant::now(),
            library: tokio::sync::OnceCell::new(),
            held_back: Mutex::default(),
            confirmed,
            clock,
            seen: Mutex::default(),
            hash_locks: Mutex::default(),
            cancel: ctx.cancel.clone(),
            halt: ctx.cancel.child_token(),
            failures,
        }
    }

    /// Walks the scope's folders beside their known files, both in path order (on a blocking thread, the known
    /// files loading page by page meanwhile), and processes what is new or changed as the walk hands it over, a
    /// few files at a time; unchanged files are only counted. Answers what the walk passed over and what the
    /// merge kept for the settling. Stops at cancellation, at the first problem that stops the crawl, or when
    /// the catalogue does not answer; a walk that ends early never reaches the settling.
    async fn walk_and_process(
        &self,
        run: &Run<'_, C>,
        scope: &Arc<CrawlScope>,
        progress: &ProgressReporter,
    ) -> Result<(WalkReport, Leftover), HandlerError> {
        // A few pages ahead (about 6 MB at most), so a slow answer from a busy server does not stall the walk.
        let (pages_tx, pages_rx) = tokio::sync::mpsc::channel::<Vec<KnownFile>>(4);
        // Unbounded: the walk runs ahead of the processing, so the total is known early; what waits is only
        // what changed (a first crawl's every file, about 150 bytes each), never the unchanged library.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Walked>();
        let mut walker = {
            let (root, counters, halt, within) =
                (run.root.clone(), run.counters.clone(), run.halt.clone(), scope.clone());
            let proxy_root = self.settings.proxy_root.clone();
            let look = move || almanac_media::identity(&proxy_root);
            let (at, limit) = ((&*self.settings.proxy_root, root::Holds::Proxies), self.settings.answer_limit());
            let avoid = root::answered_in_time(&run.cancel, at, limit, "looking at the proxy root", look).await?;
            // At the Worker's priority for reads (`worker.nice`, `worker.io_priority`), like the files' reads.
            tokio::task::spawn_blocking(move || {
                almanac_media::gently(|| walk_beside(&root, &within, avoid, &halt, &counters, pages_rx, &tx))
            })
        };
        // A walk waiting on a share that stopped answering (in a listing, which no token interrupts) takes no more
        // pages, hands over no more files and never ends: once the crawl stops (`halt`: cancelled, or a problem
        // that stops it), none of them is waited for. The walk only lists; its thread ends when the share answers.
        let loading = async {
            tokio::select! {
                loaded = self.load_known(run.config, scope.folders(), pages_tx) => loaded,
                () = run.halt.cancelled() => Ok(()),
            }
        };
        // A share that stops answering in the middle (a NAS turned off or asleep): its calls are given up on and the
        // crawl stops, its slot free, as after a look at the root that did not answer (`root::while_it_answers`).
        let work = async { tokio::join!(loading, self.process(run, rx, progress)) };
        let stop = (&*run.root, &run.halt);
        let ((loaded, fatal), silent) = root::while_it_answers(stop, self.settings.answer_limit(), work).await;
        // A problem the crawl met first is said, not the silence it may have met while it wound down.
        let fatal = fatal.or(silent);
        let walked = tokio::select! {
            biased;
            walked = &mut walker => walked,
            // Stopped: by a cancel, or by a problem (`fatal`, set before `halt` is).
            () = run.halt.cancelled() => match fatal {
                Some(e) if !run.cancel.is_cancelled() => return Err(e),
                _ => return Err(HandlerError::cancelled()),
            },
        };
        let (walk, merged) =
            walked.map_err(|e| HandlerError::retryable(format!("the folder walk ended abnormally: {e}")))?;
        if run.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        if let Some(e) = fatal {
            return Err(e);
        }
        loaded.map_err(catalogue_error)?;
        let leftover = merged.map_err(catalogue_error)?;
        // A walk stops early only when cancelled: what it did not list must never look vanished.
        if walk.stopped {
            return Err(HandlerError::cancelled());
        }
        Ok((walk, leftover))
    }

    /// Processes what the walk hands over, a few files at a time, until it is done; answers the first problem
    /// that stops the crawl, if one did.
    async fn process(
        &self,
        run: &Run<'_, C>,
        mut walked: tokio::sync::mpsc::UnboundedReceiver<Walked>,
        progress: &ProgressReporter,
    ) -> Option<HandlerError> {
        let fatal: Mutex<Option<HandlerError>> = Mutex::default();
        // Until the walk ends, or the crawl stops (the files being taken then end, their reads given up on).
        futures_util::stream::poll_fn(|cx| walked.poll_recv(cx))
            .take_until(run.halt.cancelled())
            .for_each_concurrent(self.settings.max_concurrent_files.max(1), |w| self.take(run, w, progress, &fatal))
            .await;
        fatal.into_inner().expect("poisoned")
    }

    /// Loads the known files inside `folders` (in the walk's order; `[""]`: the whole root) page by page, in
    /// path order, for the walk, each folder until its first empty page; an empty page ends them all. Ends early,
    /// without an error, when the walk no longer wants them.
    async fn load_known(
        &self,
        config: StorageConfigId,
        folders: &[Vec<u8>],
        pages: tokio::sync::mpsc::Sender<Vec<KnownFile>>,
    ) -> Result<(), CatalogueError> {
        for folder in folders {
            let mut after: Option<KnownFile> = None;
            loop {
                let size = if after.is_none() { FIRST_KNOWN_FILES_PAGE } else { KNOWN_FILES_PAGE };
                let page = self.catalogue.known_files(config, folder, after.as_ref(), size).await?;
                // Only an empty page ends a folder: a statement more per folder than stopping at a short page,
                // and no count to get wrong (a page cut at the wrong length loses files or never ends).
                let Some(last) = page.last().cloned() else { break };
                if pages.send(page).await.is_err() {
                    return Ok(());
                }
                after = Some(last);
            }
        }
        // The walk needs an empty page to know the end.
        let _ = pages.send(Vec::new()).await;
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
        let (entry, known) = match walked {
            Walked::Unchanged(n) => {
                run.counters.found.fetch_add(n, Ordering::Relaxed);
                run.counters.unchanged.fetch_add(n, Ordering::Relaxed);
                report_progress(progress, &run.counts());
                return;
            }
            Walked::File(file) => *file,
        };
        if run.cancel.is_cancelled() || fatal.lock().expect("poisoned").is_some() {
            return;
        }
        // Progress goes out at the first file and at every PROGRESS_EVERY after it.
        let found_before = run.counters.found.fetch_add(1, Ordering::Relaxed);
        self.one_file(run, &entry, known.as_ref(), false, fatal).await;
        if found_before.is_multiple_of(PROGRESS_EVERY) {
            report_progress(progress, &run.counts());
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

    /// The crawl asked for again for the files still being written, if any ([`CrawlScope::again`]), and when it
    /// is due ([`settling::StillWritten::wait`], told what this crawl found whatever it found).
    fn again(
        &self,
        config: StorageConfigId,
        scope: &CrawlScope,
        settling: &std::sync::Mutex<scope::SettlingFolders>,
        clock: &settling::CrawlClock,
    ) -> Result<Option<(NewWorkItem, chrono::DateTime<chrono::Utc>)>, HandlerError> {
        let settling = settling.lock().expect("poisoned");
        let files = settling.files.as_deref();
        let wait = self.still_written.wait(config, scope, files, clock.now(), self.settings.settle_time);
        if files.is_some_and(<[_]>::is_empty) {
            return Ok(None);
        }
        Ok(Some((scope.again(config, &settling)?, clock.after(wait))))
    }

    /// Enqueues `again` (a crawl of the config, or of the folders of the files still being written:
    /// [`CrawlScope::again`]) due once those files may have settled (`due`: [`settling::StillWritten`]), fenced like
    /// every write. It joins a crawl already queued under its key, which then finds them; it carries no
    /// confirmation of this one.
    async fn ask_again(
        &self,
        ctx: &HandlerContext,
        again: NewWorkItem,
        due: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), HandlerError> {
        let again = again.with_run_after(due);
        self.catalogue
            .enqueue_follow_up(ctx.fence, &again)
            .await
            .map_err(|e| crate::store_error_while("could not enqueue a crawl for the files still being written: ", e))
    }
}

fn catalogue_error(e: CatalogueError) -> HandlerError {
    crate::store_error_while("the crawl stopped: ", e)
}

/// A path beneath the root, for people (lossy UTF-8).
fn display(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}
