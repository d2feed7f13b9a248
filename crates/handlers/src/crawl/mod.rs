//! The crawl: walk a storage config's folder of originals, ingest new and changed media with their proxies,
//! follow moves, revive what came back, and soft-delete what vanished, but never when the share looks
//! unavailable.

mod rules;
mod walk;

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use almanac_domain::{
    AssetId, CatalogueError, CatalogueStore, ContentHash, DedupKey, Fence, FileFacts, IngestOutcome, KnownFile,
    MediaType, NewAsset, NewProxy, NewWorkItem, ProxyType, Scope, StorageConfig, StorageConfigId, WorkKind,
};
use almanac_executor::{BoxFuture, Handler, HandlerContext, HandlerError};
use almanac_media::{
    MAGIC_LEN, MediaError, MediaFormat, OpenError, Original, PixelBudget, RootFolder, ToolLimits, detect_format,
};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use rules::{LIVE_PHOTO_MAX_GAP, MassDeletionGuard, Placement, is_skipped_name, pair_live_photos, place};
pub use walk::{Seen, WalkEntry, WalkReport, Walked, classify, list_tree};

/// Most files whose failure is listed in a crawl's result (the count is always complete).
const MAX_LISTED_FAILURES: usize = 200;
/// Stills larger than this are not decoded (a 12 MP JPEG is about 5 MB).
const MAX_STILL_BYTES: u64 = 256 * 1024 * 1024;
/// Progress is reported every this many files (and at the end).
const PROGRESS_EVERY: u64 = 64;

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

impl<C: CatalogueStore + 'static> Handler for CrawlHandler<C> {
    fn kind(&self) -> WorkKind {
        WorkKind::Crawl
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(self.crawl(ctx))
    }
}

#[derive(Default)]
struct Counters {
    found: AtomicU64,
    unchanged: AtomicU64,
    ingested: AtomicU64,
    moved: AtomicU64,
    copies: AtomicU64,
    revived: AtomicU64,
    touched: AtomicU64,
    regenerated: AtomicU64,
    redated: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    bytes_hashed: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "found": get(&self.found),
            "unchanged": get(&self.unchanged),
            "ingested": get(&self.ingested),
            "moved": get(&self.moved),
            "copies": get(&self.copies),
            "revived": get(&self.revived),
            "touched": get(&self.touched),
            "proxies_regenerated": get(&self.regenerated),
            "redated": get(&self.redated),
            "skipped": get(&self.skipped),
            "failed": get(&self.failed),
            "bytes_hashed": get(&self.bytes_hashed),
        })
    }
}

/// One crawl's shared state.
struct Run<'a, C> {
    catalogue: &'a C,
    settings: &'a CrawlSettings,
    pixel_budget: &'a PixelBudget,
    config: StorageConfigId,
    fence: Fence,
    root: Arc<RootFolder>,
    /// The catalogue's files by path (the key; each value's `facts.file_path` is left empty).
    known: Arc<HashMap<Vec<u8>, KnownFile>>,
    counters: Counters,
    /// Files the listing found (what `done` counts up to), and when their processing began.
    total: u64,
    since: std::time::Instant,
    seen: Mutex<HashSet<Seen>>,
    failures: Mutex<Vec<serde_json::Value>>,
    hash_locks: Mutex<HashMap<ContentHash, Arc<tokio::sync::Mutex<()>>>>,
    cancel: CancellationToken,
}

/// A file's metadata and freshly made proxies.
struct Made {
    media_type: MediaType,
    capture: almanac_domain::CaptureTime,
    metadata: almanac_domain::AssetMetadata,
    proxies: Vec<NewProxy>,
}

/// What a complete walk did not find.
#[derive(Debug, Default)]
struct Unseen {
    /// Active assets whose files are gone.
    assets: Vec<AssetId>,
    /// Extra paths that are gone.
    extra_paths: Vec<Vec<u8>>,
    /// Assets whose own path is gone but a copy remains: they move to the copy.
    promotions: Vec<(AssetId, FileFacts)>,
}

/// A file opened beneath the root and hashed.
struct Hashed {
    original: Original,
    format: MediaFormat,
    /// A still's whole content (a video is not kept in memory).
    content: Option<Vec<u8>>,
    hash: ContentHash,
    bytes: u64,
}

/// Opens `rel` beneath the root with no link followed and hashes it through the open file, stopping at
/// cancellation. Blocking.
fn read_and_hash(root: &RootFolder, rel: &[u8], cancel: &CancellationToken) -> Result<Hashed, FileProblem> {
    use std::io::Read;
    let original = root.open_file(rel).map_err(|e| match e {
        OpenError::Vanished(_) => FileProblem::Skipped("vanished during the crawl".into()),
        other => FileProblem::Failed(other.to_string()),
    })?;
    let mut file = original.file();
    let mut head = [0u8; MAGIC_LEN];
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(FileProblem::Failed(format!("cannot read: {e}"))),
        }
    }
    let format = detect_format(Path::new(std::ffi::OsStr::from_bytes(rel)), &head[..n])
        .ok_or_else(|| FileProblem::Skipped("not a supported image or video by its content".into()))?;
    let (content, hashed) = match format.media_type() {
        MediaType::Image => {
            let len = file.metadata().map_err(|e| FileProblem::Failed(e.to_string()))?.len();
            if len > MAX_STILL_BYTES {
                return Err(FileProblem::Failed(format!("{len} bytes is too large for a still")));
            }
            let mut content = head[..n].to_vec();
            // Bounded: a file that grows while it is read is not read without end.
            file.take(MAX_STILL_BYTES + 1 - n as u64)
                .read_to_end(&mut content)
                .map_err(|e| FileProblem::Failed(format!("cannot read: {e}")))?;
            if content.len() as u64 > MAX_STILL_BYTES {
                return Err(FileProblem::Failed(format!("more than {MAX_STILL_BYTES} bytes is too large for a still")));
            }
            let hashed = almanac_media::hash_bytes(&content);
            (Some(content), hashed)
        }
        MediaType::Video => (None, almanac_media::hash_reader((&head[..n]).chain(file), original.path(), cancel)?),
    };
    Ok(Hashed { original, format, content, hash: hashed.hash, bytes: hashed.bytes })
}

/// Why one file was not ingested.
enum FileProblem {
    /// Not media after all, or empty: passed over.
    Skipped(String),
    /// Broken or unreadable: recorded with its reason; the crawl goes on.
    Failed(String),
    /// The catalogue did not answer: the crawl stops (retryable).
    Catalogue(CatalogueError),
    Cancelled,
}

impl From<CatalogueError> for FileProblem {
    fn from(e: CatalogueError) -> Self {
        FileProblem::Catalogue(e)
    }
}

impl From<MediaError> for FileProblem {
    fn from(e: MediaError) -> Self {
        match e {
            MediaError::Cancelled => FileProblem::Cancelled,
            other => FileProblem::Failed(other.to_string()),
        }
    }
}

fn catalogue_error(e: CatalogueError) -> HandlerError {
    HandlerError::retryable(format!("the crawl stopped because the catalogue did not answer: {e}"))
}

fn display(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}

impl<C: CatalogueStore + 'static> CrawlHandler<C> {
    /// Refuses a root that overlaps the proxy root or another config's root (an older catalogue may hold
    /// such roots; new ones are refused when registered): the sweep could delete originals, the crawl could
    /// ingest proxies, and two configs on one tree would make the per-config rule protect nothing.
    async fn check_roots_apart(&self, storage: &StorageConfig) -> Result<(), HandlerError> {
        let root = &storage.root_path;
        // An older catalogue may hold a root spelled with `..` or `.`: it may name another tree than it seems.
        if root.to_str().is_none_or(|r| almanac_domain::check_canonical_root(r).is_err()) {
            return Err(HandlerError::permanent(format!(
                "the storage root {} is not a canonical path (it has `.`, `..`, a doubled or trailing slash, or is \
                 /), so it may name another folder than the one registered; nothing was read. Deactivate it and \
                 register the library's real path with almanac-worker config add",
                root.display()
            )));
        }
        if almanac_media::trees_overlap(root, &self.settings.proxy_root) {
            return Err(HandlerError::permanent(format!(
                "the storage root {} and the proxy root {} overlap, so the crawl could take proxies for photos \
                 and the proxy sweep could delete originals. Nothing was done. Set storage.proxy_root to a folder \
                 outside every library",
                root.display(),
                self.settings.proxy_root.display()
            )));
        }
        let others = self.catalogue.overlapping_roots(storage.id).await.map_err(catalogue_error)?;
        if let Some(other) = others.first() {
            return Err(HandlerError::permanent(format!(
                "the storage root {} overlaps storage config {} at {}: two configs on one tree would be crawled \
                 at the same time. Nothing was done. Deactivate one of them (almanac-worker config deactivate \
                 {})",
                root.display(),
                other.id,
                other.root_path.display(),
                other.id
            )));
        }
        Ok(())
    }

    async fn crawl(&self, ctx: HandlerContext) -> Result<Option<serde_json::Value>, HandlerError> {
        let Scope::Config(config) = ctx.item.scope else {
            return Err(HandlerError::permanent("a crawl needs a storage config"));
        };
        let confirmed = payload_flag(&ctx, "allow_mass_deletion");
        let storage = self
            .catalogue
            .storage_config(config)
            .await
            .map_err(catalogue_error)?
            .ok_or_else(|| HandlerError::permanent(format!("storage config {config} does not exist")))?;
        self.check_roots_apart(&storage).await?;
        let root = Arc::new(open_root(&storage.root_path)?);
        let is_mount_point = root
            .is_mount_point()
            .map_err(|e| root_unavailable(&storage.root_path, &format!("cannot be examined ({e})")))?;
        if storage.root_is_mount_point == Some(true) && !is_mount_point && !payload_flag(&ctx, "root_moved") {
            return Err(root_unavailable(
                &storage.root_path,
                &format!(
                    "was a mount point at the last crawl and is not one now (a share that is not mounted leaves an \
                     ordinary folder behind). If the library really moved off its own mount, confirm with: \
                     almanac-worker enqueue crawl --config {config} --payload '{{\"root_moved\": true}}'"
                ),
            ));
        }
        // List the tree while the catalogue's known files load: neither needs the other.
        let (listing_root, cancel) = (root.clone(), ctx.cancel.clone());
        let avoid = almanac_media::identity(&self.settings.proxy_root);
        let listing = tokio::task::spawn_blocking(move || list_tree(&listing_root, avoid, &cancel));
        let known_files = self.catalogue.known_files(config).await.map_err(catalogue_error)?;
        let active = known_files.iter().filter(|k| !k.extra).count();
        // Indexed by path while the walk goes on (on a blocking thread: 100,000 files take tens of ms).
        let known = tokio::task::spawn_blocking(move || {
            // The path moves into the key (the map's value keeps an empty one): no copy of 100,000 paths.
            let mut known = HashMap::with_capacity(known_files.len());
            for mut k in known_files {
                known.insert(std::mem::take(&mut k.facts.file_path), k);
            }
            Arc::new(known)
        })
        .await
        .map_err(|e| HandlerError::retryable(format!("indexing the known files ended abnormally: {e}")))?;
        let (files, report) =
            listing.await.map_err(|e| HandlerError::retryable(format!("the folder walk ended abnormally: {e}")))?;
        // Decided on what the walk found, not on raw entries: a mount point left with `.DS_Store`, `@eaDir` or
        // `lost+found` holds no media.
        if active > 0 && files.is_empty() && !report.stopped && !confirmed {
            return Err(root_unavailable(
                &storage.root_path,
                &format!(
                    "holds no photos or videos while the catalogue has {active} active assets for it. If the \
                     library really is empty now, confirm with: almanac-worker enqueue crawl --config {config} \
                     --payload '{{\"allow_mass_deletion\": true}}'"
                ),
            ));
        }

        let run = Run {
            catalogue: &*self.catalogue,
            settings: &self.settings,
            pixel_budget: &self.pixel_budget,
            config,
            fence: ctx.fence,
            root: root.clone(),
            known: known.clone(),
            counters: Counters::default(),
            total: files.len() as u64,
            since: std::time::Instant::now(),
            seen: Mutex::default(),
            failures: Mutex::default(),
            hash_locks: Mutex::default(),
            cancel: ctx.cancel.clone(),
        };

        let (tx, rx) = tokio::sync::mpsc::channel::<Walked>(256);
        let walker = tokio::task::spawn_blocking(move || {
            classify(files, &tx, |entry| {
                // Unchanged means same path, size and mtime, the same sidecar (an asset's date is read again
                // when its sidecar appears, changes or vanishes), and nothing missing: an asset whose proxies
                // were deleted (to be made again) is read again.
                let k = known.get(&entry.rel).filter(|k| {
                    k.facts.size == entry.size
                        && k.facts.mtime == entry.mtime
                        && k.proxies_complete
                        && (k.extra || k.sidecar == entry.sidecar)
                })?;
                Some(if k.extra { Seen::Extra(entry.rel.clone()) } else { Seen::Asset(k.asset_id) })
            })
        });
        let fatal: Mutex<Option<CatalogueError>> = Mutex::default();
        tokio_stream_from(rx)
            .for_each_concurrent(self.settings.max_concurrent_files.max(1), |walked| {
                let (run, fatal, progress) = (&run, &fatal, &ctx.progress);
                async move {
                    let entry = match walked {
                        Walked::Unchanged(marks) => {
                            let n = marks.len() as u64;
                            run.counters.found.fetch_add(n, Ordering::Relaxed);
                            run.counters.unchanged.fetch_add(n, Ordering::Relaxed);
                            run.seen.lock().expect("poisoned").extend(marks);
                            progress.report(run.snapshot());
                            return;
                        }
                        Walked::File(entry) => entry,
                    };
                    if run.cancel.is_cancelled() || fatal.lock().expect("poisoned").is_some() {
                        return;
                    }
                    let found = run.counters.found.fetch_add(1, Ordering::Relaxed) + 1;
                    match run.file(&entry).await {
                        Ok(()) => {}
                        Err(FileProblem::Skipped(reason)) => {
                            run.counters.skipped.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(path = %run.abs(&entry).display(), reason, "skipped");
                        }
                        Err(FileProblem::Failed(reason)) => {
                            run.counters.failed.fetch_add(1, Ordering::Relaxed);
                            warn!(event = "file_failed", path = %run.abs(&entry).display(), reason, "file skipped");
                            let mut failures = run.failures.lock().expect("poisoned");
                            if failures.len() < MAX_LISTED_FAILURES {
                                failures.push(serde_json::json!({"path": display(&entry.rel), "reason": reason}));
                            }
                        }
                        Err(FileProblem::Catalogue(e)) => {
                            fatal.lock().expect("poisoned").get_or_insert(e);
                        }
                        Err(FileProblem::Cancelled) => {}
                    }
                    if found % PROGRESS_EVERY == 0 {
                        progress.report(run.snapshot());
                    }
                }
            })
            .await;
        let handed_over =
            walker.await.map_err(|e| HandlerError::retryable(format!("the folder walk ended abnormally: {e}")))?;
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        if let Some(e) = fatal.into_inner().expect("poisoned") {
            return Err(catalogue_error(e));
        }
        ctx.progress.report(run.snapshot());

        let soft_deleted = if report.unreadable.is_empty() && !report.stopped && handed_over {
            let unseen_files = run.unseen();
            let (active, unseen) = (active as u64, unseen_files.assets.len() as u64);
            if !confirmed && self.settings.mass_deletion.refuses(active, unseen) {
                return Err(HandlerError::retryable(format!(
                    "refusing to soft-delete {unseen} of {active} assets under {}: {} vanished at once, which \
                     usually means a share is only partly mounted. Nothing was deleted. If the files really are \
                     gone, confirm with: almanac-worker enqueue crawl --config {config} --payload \
                     '{{\"allow_mass_deletion\": true}}'",
                    storage.root_path.display(),
                    self.settings.mass_deletion.describe(),
                )));
            }
            if ctx.cancel.is_cancelled() {
                return Err(HandlerError::cancelled());
            }
            // Decided above with nothing written yet: a refused crawl changes nothing at all.
            for (asset, copy) in &unseen_files.promotions {
                self.catalogue.relocate(ctx.fence, *asset, copy).await.map_err(catalogue_error)?;
                run.counters.moved.fetch_add(1, Ordering::Relaxed);
            }
            let soft_deleted = self
                .catalogue
                .soft_delete(ctx.fence, config, &unseen_files.assets, &unseen_files.extra_paths)
                .await
                .map_err(catalogue_error)?;
            if storage.root_is_mount_point != Some(is_mount_point) {
                self.catalogue
                    .record_root_identity(ctx.fence, config, is_mount_point)
                    .await
                    .map_err(catalogue_error)?;
            }
            soft_deleted
        } else {
            warn!(
                event = "soft_delete_skipped",
                unreadable = report.unreadable.len(),
                "some folders could not be read; nothing is soft-deleted this time"
            );
            0
        };

        // Pairs can only form where this crawl ingested, moved or revived something.
        let changed = [
            &run.counters.ingested,
            &run.counters.moved,
            &run.counters.revived,
            &run.counters.touched,
            &run.counters.regenerated,
            &run.counters.redated,
        ]
        .iter()
        .any(|c| c.load(Ordering::Relaxed) > 0);
        let mut pairs = Vec::new();
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        if changed {
            let candidates = self.catalogue.pairing_candidates(config).await.map_err(catalogue_error)?;
            pairs = pair_live_photos(&candidates, LIVE_PHOTO_MAX_GAP);
            for (still, motion) in &pairs {
                self.catalogue.pair(ctx.fence, *still, *motion).await.map_err(catalogue_error)?;
            }
        }

        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        let bursts = NewWorkItem::new(WorkKind::BurstDetection, Scope::Config(config))
            .map_err(|e| HandlerError::permanent(e.to_string()))?
            .with_dedup_key(DedupKey::new(format!("burst_detection:{config}")).expect("a valid key"));
        self.catalogue
            .enqueue_follow_up(ctx.fence, &bursts)
            .await
            .map_err(|e| HandlerError::retryable(format!("could not enqueue burst detection: {e}")))?;

        let mut result = run.snapshot();
        result["soft_deleted"] = serde_json::json!(soft_deleted);
        result["live_photos_paired"] = serde_json::json!(pairs.len());
        result["links_skipped"] = serde_json::json!(report.links);
        result["unsupported"] = serde_json::json!(report.unsupported);
        if !report.proxy_root_inside.is_empty() {
            warn!(
                event = "proxy_root_inside_library",
                folders = ?report.proxy_root_inside,
                "the proxy root is mounted inside this library; it was passed over. Mount it outside every library"
            );
            result["proxy_root_inside"] = serde_json::json!(report.proxy_root_inside);
        }
        result["unreadable_folders"] = serde_json::json!(
            report.unreadable.iter().map(|(p, e)| serde_json::json!({"path": p, "reason": e})).collect::<Vec<_>>()
        );
        result["failures"] = serde_json::json!(*run.failures.lock().expect("poisoned"));
        let count = |name: &str| result[name].as_u64().unwrap_or(0);
        info!(
            event = "crawl_finished",
            files_found = count("found"),
            files_ingested = count("ingested"),
            files_failed = count("failed"),
            bytes_hashed = count("bytes_hashed"),
            result = %result,
            "crawl finished"
        );
        Ok(Some(result))
    }
}

fn tokio_stream_from<T: Send + 'static>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Opens the root: it must be reached without any link, be a folder and be readable. An unmounted
/// share must never look like a deleted library, and a root swapped for a link must never lead elsewhere.
fn open_root(root: &Path) -> Result<RootFolder, HandlerError> {
    RootFolder::open(root).map_err(|e| {
        if std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) {
            return HandlerError::permanent(format!(
                "the storage root {} is a link now, which is never followed: nothing was read. If the library \
                 really moved, deactivate this config and register its real path with almanac-worker config add",
                root.display()
            ));
        }
        match e.raw_os_error() {
            Some(20) => root_unavailable(root, "is not a folder, or a folder on the way to it is a link"),
            Some(40) => root_unavailable(root, "is reached through a link, which is never followed"),
            _ => root_unavailable(root, &format!("cannot be opened ({e})")),
        }
    })
}

fn payload_flag(ctx: &HandlerContext, key: &str) -> bool {
    ctx.item.payload.get(key).and_then(serde_json::Value::as_bool) == Some(true)
}

fn root_unavailable(root: &Path, what: &str) -> HandlerError {
    HandlerError::retryable(format!(
        "the storage root {} {what}; is the share mounted? Nothing was soft-deleted; the crawl will be retried",
        root.display()
    ))
}

impl<C: CatalogueStore> Run<'_, C> {
    /// The counters, with how far the crawl has come (`done` of `total` files in `seconds`, read by
    /// `ProgressEstimate`).
    fn snapshot(&self) -> serde_json::Value {
        let mut snapshot = self.counters.snapshot();
        snapshot["done"] = serde_json::json!(self.counters.found.load(Ordering::Relaxed));
        snapshot["total"] = serde_json::json!(self.total);
        snapshot["seconds"] = serde_json::json!((self.since.elapsed().as_secs_f64() * 10.0).round() / 10.0);
        snapshot
    }

    fn mark(&self, seen: Seen) {
        self.seen.lock().expect("poisoned").insert(seen);
    }

    /// What the catalogue knew that the walk did not find: active assets and extra paths. An asset whose own
    /// path vanished while one of its copies (extra paths) is still there is not vanished: it moves to the copy
    /// (returned as a promotion) instead.
    fn unseen(&self) -> Unseen {
        let seen = self.seen.lock().expect("poisoned");
        let mut out = Unseen::default();
        let mut surviving_copies: HashMap<AssetId, &Vec<u8>> = HashMap::new();
        for (path, k) in self.known.iter() {
            if !k.extra {
                continue;
            }
            if seen.contains(&Seen::Extra(path.clone())) {
                surviving_copies.entry(k.asset_id).or_insert(path);
            } else {
                out.extra_paths.push(path.clone());
            }
        }
        for k in self.known.values().filter(|k| !k.extra) {
            if seen.contains(&Seen::Asset(k.asset_id)) {
                continue;
            }
            match surviving_copies.get(&k.asset_id) {
                Some(path) => {
                    let copy = &self.known[*path].facts;
                    out.promotions.push((
                        k.asset_id,
                        FileFacts { file_path: path.to_vec(), display_path: display(path), ..copy.clone() },
                    ));
                }
                None => out.assets.push(k.asset_id),
            }
        }
        out
    }

    /// A file's absolute path, for messages and tools' error text only: files are opened beneath the root by
    /// their relative path, never by this one.
    fn abs(&self, entry: &WalkEntry) -> PathBuf {
        self.root.path().join(std::ffi::OsStr::from_bytes(&entry.rel))
    }

    fn facts(entry: &WalkEntry) -> FileFacts {
        FileFacts {
            file_path: entry.rel.clone(),
            display_path: display(&entry.rel),
            size: entry.size,
            mtime: entry.mtime,
        }
    }

    async fn file(&self, entry: &WalkEntry) -> Result<(), FileProblem> {
        // Unchanged files never get here: the walk reports them without opening them. A known path that
        // changed is handled here (re-read, replaced or relocated), so it does not count as vanished.
        let known = self.known.get(&entry.rel);
        if let Some(k) = known.filter(|k| !k.extra) {
            self.mark(Seen::Asset(k.asset_id));
        }
        if entry.size == 0 {
            return Err(FileProblem::Skipped("empty file".into()));
        }
        let Hashed { original, format, content, hash, .. } = self.read_and_hash(entry).await?;
        self.still_wanted()?;
        let lock = {
            let mut locks = self.hash_locks.lock().expect("poisoned");
            locks.entry(hash.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        // Waiting for the lock can take a whole transcode of the same content.
        self.still_wanted()?;
        let facts = Self::facts(entry);
        // Who has this content: the asset at this very path (only size or mtime changed), another active asset
        // (a move or a copy), or a soft-deleted one (a revival). Asked per changed file, so the known-files load
        // at the start need not carry every hash.
        let mut same_at_path = None;
        let mut active = None;
        let mut soft_deleted = None;
        for m in self.catalogue.find_by_hash(self.config, &hash).await? {
            match m.soft_deleted {
                false if m.file_path == entry.rel => same_at_path = Some(m.asset_id),
                false if active.is_none() => active = Some((m.asset_id, m.file_path)),
                true if soft_deleted.is_none() => soft_deleted = Some(m.asset_id),
                _ => {}
            }
        }
        let active = active.map(|(id, path): (AssetId, Vec<u8>)| (id, self.exists(&path)));
        match place(same_at_path, active, soft_deleted) {
            Placement::Touched(id) => {
                self.mark(Seen::Asset(id));
                let sidecar_changed = known.is_some_and(|k| k.sidecar != entry.sidecar);
                if known.is_some_and(|k| !k.proxies_complete) {
                    let made = self.make(entry, original, format, content, &hash).await?;
                    self.still_wanted()?;
                    self.catalogue.put_proxies(self.fence, id, &made.proxies).await?;
                    if sidecar_changed {
                        self.catalogue.redate(self.fence, id, &made.capture, entry.sidecar.as_ref()).await?;
                    }
                    self.counters.regenerated.fetch_add(1, Ordering::Relaxed);
                } else if sidecar_changed {
                    let capture = self.capture_again(entry, &original, format, content).await?;
                    self.still_wanted()?;
                    self.catalogue.redate(self.fence, id, &capture, entry.sidecar.as_ref()).await?;
                    self.counters.redated.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.counters.touched.fetch_add(1, Ordering::Relaxed);
                }
                self.catalogue.relocate(self.fence, id, &facts).await?;
            }
            Placement::Moved(id) => {
                self.mark(Seen::Asset(id));
                // A file moves with (or away from) its sidecar, and its name may carry a date: read it again.
                let capture = self.capture_again(entry, &original, format, content).await?;
                self.still_wanted()?;
                self.catalogue.relocate(self.fence, id, &facts).await?;
                self.catalogue.redate(self.fence, id, &capture, entry.sidecar.as_ref()).await?;
                self.counters.moved.fetch_add(1, Ordering::Relaxed);
            }
            Placement::Copy(id) => {
                self.mark(Seen::Extra(entry.rel.clone()));
                self.catalogue.record_extra_path(self.fence, self.config, id, &facts).await?;
                self.counters.copies.fetch_add(1, Ordering::Relaxed);
            }
            Placement::Revived(id) => {
                self.mark(Seen::Asset(id));
                let capture = self.capture_again(entry, &original, format, content).await?;
                self.still_wanted()?;
                self.catalogue.relocate(self.fence, id, &facts).await?;
                self.catalogue.redate(self.fence, id, &capture, entry.sidecar.as_ref()).await?;
                self.counters.revived.fetch_add(1, Ordering::Relaxed);
            }
            Placement::New => {
                let replaces = known.filter(|k| !k.extra).map(|k| k.asset_id);
                let asset = self.ingest_new(entry, original, format, content, hash, facts.clone(), replaces).await?;
                self.still_wanted()?;
                match self.catalogue.ingest(self.fence, &asset).await? {
                    IngestOutcome::Ingested(_) => {
                        self.counters.ingested.fetch_add(1, Ordering::Relaxed);
                    }
                    IngestOutcome::ContentExists(id) => {
                        self.mark(Seen::Extra(entry.rel.clone()));
                        self.catalogue.record_extra_path(self.fence, self.config, id, &facts).await?;
                        self.counters.copies.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(())
    }

    fn exists(&self, rel: &[u8]) -> bool {
        self.root.exists(rel)
    }

    /// Every write after hashing is preceded by this: a cancelled (or self-stopped) attempt writes nothing more.
    fn still_wanted(&self) -> Result<(), FileProblem> {
        if self.cancel.is_cancelled() { Err(FileProblem::Cancelled) } else { Ok(()) }
    }

    /// Opens the file beneath the root (no link followed), reads the head to confirm the format, then hashes
    /// through the open file: stills are read once into memory (their decoder needs the whole file anyway),
    /// videos are streamed. The open file is kept for the tools that read it next.
    async fn read_and_hash(&self, entry: &WalkEntry) -> Result<Hashed, FileProblem> {
        let root = self.root.clone();
        let rel = entry.rel.clone();
        let cancel = self.cancel.clone();
        let hashed = tokio::task::spawn_blocking(move || read_and_hash(&root, &rel, &cancel))
            .await
            .map_err(|e| FileProblem::Failed(format!("hashing ended abnormally: {e}")))??;
        self.counters.bytes_hashed.fetch_add(hashed.bytes, Ordering::Relaxed);
        Ok(hashed)
    }

    #[allow(clippy::too_many_arguments)]
    async fn ingest_new(
        &self,
        entry: &WalkEntry,
        original: Original,
        format: MediaFormat,
        content: Option<Vec<u8>>,
        hash: ContentHash,
        facts: FileFacts,
        replaces: Option<AssetId>,
    ) -> Result<NewAsset, FileProblem> {
        let made = self.make(entry, original, format, content, &hash).await?;
        Ok(NewAsset {
            storage_config_id: self.config,
            facts,
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
    async fn make(
        &self,
        entry: &WalkEntry,
        original: Original,
        format: MediaFormat,
        content: Option<Vec<u8>>,
        hash: &ContentHash,
    ) -> Result<Made, FileProblem> {
        if self.cancel.is_cancelled() {
            return Err(FileProblem::Cancelled);
        }
        let relative_dir = hash.proxy_dir(self.config);
        let dir = self.settings.proxy_root.join(&relative_dir);
        let rel_file = |t: ProxyType| relative_dir.join(t.file_name().expect("file proxy")).display().to_string();
        let (media_type, capture, metadata, proxies) = match (format.media_type(), content) {
            (MediaType::Image, Some(content)) => {
                // HEIC and AVIF are turned into a JPEG first, by a tool reading the open file (killed on
                // cancellation); a RAW passes its embedded preview.
                let converted = match format {
                    MediaFormat::Heic | MediaFormat::Avif => Some(
                        almanac_media::heic_to_jpeg(&original, &dir, self.settings.tool_limits, &self.cancel).await?,
                    ),
                    _ => None,
                };
                let abs = self.abs(entry);
                let out = dir.clone();
                let max_pixels = self.settings.max_image_pixels;
                // Held while the pixels are decoded and scaled (large PNGs and TIFFs decode at full size).
                let _pixels = self
                    .pixel_budget
                    .reserve(almanac_media::full_decode_pixels(&content, format), &self.cancel)
                    .await?;
                let (facts, made) = tokio::task::spawn_blocking(move || {
                    // A RAW's preview is found once: its pixels, and its EXIF when the RAW keeps none.
                    let preview =
                        matches!(format, MediaFormat::Raw(_)).then(|| almanac_media::raw_preview(&abs, &content));
                    let facts = almanac_media::read_still_facts(
                        &content,
                        preview.as_ref().and_then(|p| p.as_ref().ok().copied()),
                    );
                    let made = match (&converted, preview) {
                        (Some(jpeg), _) => Ok((jpeg.as_slice(), MediaFormat::Jpeg)),
                        (None, Some(preview)) => preview.map(|p| (p, MediaFormat::Jpeg)),
                        (None, None) => Ok((content.as_slice(), format)),
                    }
                    .and_then(|(pixels, pixels_format)| {
                        almanac_media::make_still_proxies(
                            &abs,
                            pixels,
                            pixels_format,
                            facts.orientation,
                            max_pixels,
                            &out,
                        )
                    });
                    (facts, made)
                })
                .await
                .map_err(|e| FileProblem::Failed(format!("decoding ended abnormally: {e}")))?;
                let made = made?;
                let capture = self.best_capture(entry, facts.dates.iter().copied()).await;
                let mut metadata = facts.metadata;
                metadata.width = Some(made.width);
                metadata.height = Some(made.height);
                let proxies = vec![
                    NewProxy {
                        proxy_type: ProxyType::Preview,
                        relative_path: Some(rel_file(ProxyType::Preview)),
                        inline_value: None,
                        size_bytes: made.preview_bytes,
                    },
                    NewProxy {
                        proxy_type: ProxyType::Thumbnail,
                        relative_path: Some(rel_file(ProxyType::Thumbnail)),
                        inline_value: None,
                        size_bytes: made.thumbnail_bytes,
                    },
                    NewProxy {
                        proxy_type: ProxyType::Blurhash,
                        relative_path: None,
                        inline_value: Some(made.blurhash),
                        size_bytes: 0,
                    },
                ];
                (MediaType::Image, capture, metadata, proxies)
            }
            _ => {
                let limits = self.settings.tool_limits;
                let probed = almanac_media::probe_video(&original, limits, &self.cancel).await?;
                let made = almanac_media::make_video_proxies(&original, &dir, limits, &self.cancel).await?;
                let capture = self.best_capture(entry, probed.created).await;
                let proxies = vec![
                    NewProxy {
                        proxy_type: ProxyType::Poster,
                        relative_path: Some(rel_file(ProxyType::Poster)),
                        inline_value: None,
                        size_bytes: made.poster_bytes,
                    },
                    NewProxy {
                        proxy_type: ProxyType::WebVideo,
                        relative_path: Some(rel_file(ProxyType::WebVideo)),
                        inline_value: None,
                        size_bytes: made.web_video_bytes,
                    },
                ];
                (MediaType::Video, capture, probed.metadata, proxies)
            }
        };
        Ok(Made { media_type, capture, metadata, proxies })
    }

    /// The capture time of a known asset found with another sidecar, at another path, or back from deletion:
    /// its own dates read again (no proxies made), ranked with the sidecar's and the file name's.
    async fn capture_again(
        &self,
        entry: &WalkEntry,
        original: &Original,
        format: MediaFormat,
        content: Option<Vec<u8>>,
    ) -> Result<almanac_domain::CaptureTime, FileProblem> {
        let own: Vec<almanac_domain::CaptureTime> = match content {
            Some(content) => tokio::task::spawn_blocking(move || {
                let preview = matches!(format, MediaFormat::Raw(_))
                    .then(|| almanac_media::raw_preview(Path::new(""), &content).ok())
                    .flatten();
                almanac_media::read_still_facts(&content, preview).dates
            })
            .await
            .map_err(|e| FileProblem::Failed(format!("reading metadata ended abnormally: {e}")))?,
            None => {
                let probed = almanac_media::probe_video(original, self.settings.tool_limits, &self.cancel).await?;
                probed.created.into_iter().collect()
            }
        };
        Ok(self.best_capture(entry, own).await)
    }

    /// The best capture time of a file: its own dates (EXIF, embedded XMP, the container's), its sidecar's, a
    /// date in its name, and at last its mtime, ranked by [`almanac_domain::CaptureSource::rank`].
    async fn best_capture(
        &self,
        entry: &WalkEntry,
        own: impl IntoIterator<Item = almanac_domain::CaptureTime>,
    ) -> almanac_domain::CaptureTime {
        let sidecar = match &entry.sidecar {
            Some(sidecar) => self.sidecar_date(sidecar).await,
            None => None,
        };
        let name = entry.rel.rsplit(|c| *c == b'/').next().unwrap_or(&entry.rel);
        let from_name = almanac_media::date_in_file_name(&String::from_utf8_lossy(name));
        almanac_domain::CaptureTime::best(own.into_iter().chain(sidecar).chain(from_name))
            .unwrap_or(almanac_domain::CaptureTime::file_mtime(entry.mtime))
    }

    /// The date in a sidecar, read beneath the root like an original (no link followed, bounded in size). A
    /// sidecar that cannot be read or parsed gives no date; the others still count.
    async fn sidecar_date(&self, sidecar: &almanac_domain::Sidecar) -> Option<almanac_domain::CaptureTime> {
        let root = self.root.clone();
        let path = sidecar.path.clone();
        let read = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
            use std::io::Read;
            let original = root.open_file(&path).map_err(|e| e.to_string())?;
            let mut bytes = Vec::new();
            original
                .file()
                .take(almanac_media::MAX_XMP_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| e.to_string())?;
            Ok(bytes)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        match read {
            Ok(bytes) => almanac_media::xmp_date(&bytes, almanac_domain::CaptureSource::XmpSidecar),
            Err(reason) => {
                let path = display(&sidecar.path);
                tracing::warn!(sidecar = %path, %reason, "an XMP sidecar could not be read; its date is not used");
                None
            }
        }
    }
}
