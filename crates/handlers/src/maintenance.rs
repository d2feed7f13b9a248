//! Purge, proxy deletion, proxy sweep, token cleanup and work item retention.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::os::unix::ffi::OsStrExt;

use almanac_domain::{
    AssetId, MaintenanceStore, ProxyDeletionArgs, ProxyPath, Scope, StorageConfigId, StoredProxy, WorkKind,
};
use almanac_executor::{BoxFuture, Handler, HandlerContext, HandlerError};
use almanac_media::{Entry, EntryKind, Removal, RootFolder};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::store_error;

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Deletes a proxy file beneath the proxy root (no link followed on the way; a link in its place goes, never
/// its target); a file that is already gone counts as deleted. Empty folders it leaves are removed. Only a
/// path in the exact proxy layout is deleted, and, when `config` is given, only one in that config's folder:
/// a bad row (hand-written SQL, an old catalogue) cannot make us delete anything else.
fn delete_proxy_file(proxy_root: &RootFolder, relative: &str, config: Option<StorageConfigId>) -> Result<(), String> {
    match ProxyPath::parse(relative) {
        None => return Err(format!("{relative}: not a path in the proxy layout; it is left alone")),
        Some(p) if config.is_some_and(|c| c != p.config) => {
            return Err(format!("{relative}: in another storage config's proxy folder; it is left alone"));
        }
        Some(_) => {}
    }
    match proxy_root.remove_file(relative.as_bytes(), |_| true) {
        Ok(Removal::Removed | Removal::Gone) => {
            remove_parents(proxy_root, relative);
            Ok(())
        }
        Ok(Removal::Kept) => Err(format!("{relative}: a folder, not a proxy file")),
        Err(e) => Err(format!("{relative}: {e}")),
    }
}

/// Removes the now empty folders above a deleted proxy file, up to (not including) the proxy root.
fn remove_parents(proxy_root: &RootFolder, relative: &str) {
    if let Some(parent) = Path::new(relative).parent() {
        proxy_root.remove_empty_folders(parent.as_os_str().as_bytes());
    }
}

/// Opens the proxy root; `None` when it does not exist yet (nothing was ever written).
fn open_proxy_root(path: &Path) -> Result<Option<RootFolder>, HandlerError> {
    match RootFolder::open(path) {
        Ok(root) => Ok(Some(root)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HandlerError::retryable(format!(
            "the proxy root {} cannot be opened ({e}); check storage.proxy_root and its permissions",
            path.display()
        ))),
    }
}

/// Rows deleted per batch by the cleanup handlers.
const DELETE_BATCH: i64 = 1000;

/// Calls `batch` with the batch size until it deletes fewer than that, honouring cancellation between batches
/// and reporting the running total as progress. Returns the total deleted.
async fn delete_in_batches<F, Fut>(ctx: &HandlerContext, mut batch: F) -> Result<u64, HandlerError>
where
    F: FnMut(i64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, almanac_domain::CatalogueError>>,
{
    let mut deleted = 0;
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        let n = batch(DELETE_BATCH).await.map_err(store_error)?;
        deleted += n;
        ctx.progress.report(serde_json::json!({"deleted": deleted}));
        if n < DELETE_BATCH as u64 {
            return Ok(deleted);
        }
    }
}

/// Deletes the files of these proxies and reports which assets had a file that could not be deleted.
fn delete_files(
    proxy_root: &Path,
    proxies: &[StoredProxy],
    config: Option<StorageConfigId>,
) -> Result<(HashSet<AssetId>, Vec<String>), HandlerError> {
    let mut blocked = HashSet::new();
    let mut problems = Vec::new();
    let Some(root) = open_proxy_root(proxy_root)? else { return Ok((blocked, problems)) };
    for p in proxies {
        if let Some(rel) = &p.relative_path
            && let Err(e) = delete_proxy_file(&root, rel, config)
        {
            blocked.insert(p.asset_id);
            problems.push(e);
        }
    }
    Ok((blocked, problems))
}

/// Purge's settings.
#[derive(Debug, Clone)]
pub struct PurgeSettings {
    /// Where proxies live.
    pub proxy_root: PathBuf,
    /// Soft-deleted assets older than this are purged (default 30 days).
    pub purge_after: Duration,
    /// Assets per batch.
    pub batch: i64,
}

impl PurgeSettings {
    /// Assets purged per batch (one transaction each).
    pub const DEFAULT_BATCH: i64 = 100;

    /// Purge of soft-deleted assets older than `purge_after`, whose proxies live under `proxy_root`.
    pub fn new(proxy_root: PathBuf, purge_after: Duration) -> Self {
        Self { proxy_root, purge_after, batch: Self::DEFAULT_BATCH }
    }
}

/// The purge handler (kind `purge`): proxy files first, then rows, each batch's rows in one transaction that
/// re-checks every asset is still soft-deleted. Safe beside a crawl only because no crawl of the same config
/// runs meanwhile (ADR 0008). Originals are never touched.
pub struct PurgeHandler<M> {
    store: Arc<M>,
    settings: PurgeSettings,
}

impl<M> PurgeHandler<M> {
    /// A purge handler over this store.
    pub fn new(store: Arc<M>, settings: PurgeSettings) -> Self {
        Self { store, settings }
    }
}

impl<M: MaintenanceStore + 'static> Handler for PurgeHandler<M> {
    fn kind(&self) -> WorkKind {
        WorkKind::Purge
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let config = ctx.config()?;
            let cutoff = self.store.db_now().await.map_err(store_error)? - chrono_duration(self.settings.purge_after);
            let (mut purged, mut files_kept) = (0usize, Vec::new());
            loop {
                if ctx.cancel.is_cancelled() {
                    return Err(HandlerError::cancelled());
                }
                let batch =
                    self.store.purge_candidates(config, cutoff, self.settings.batch).await.map_err(store_error)?;
                if batch.is_empty() {
                    break;
                }
                let mut to_delete = Vec::new();
                for candidate in &batch {
                    // Before each asset's files: a stopped attempt deletes nothing more (a takeover may be
                    // reviving this very content).
                    if ctx.cancel.is_cancelled() {
                        return Err(HandlerError::cancelled());
                    }
                    // Proxy files derive from (config, content): while an active asset has the same content,
                    // they are its files too and stay.
                    let (blocked, problems) = if candidate.content_still_active {
                        (HashSet::new(), Vec::new())
                    } else {
                        let root = self.settings.proxy_root.clone();
                        let proxies = candidate.proxies.clone();
                        tokio::task::spawn_blocking(move || delete_files(&root, &proxies, Some(config)))
                            .await
                            .map_err(|e| {
                                HandlerError::retryable(format!("deleting proxy files ended abnormally: {e}"))
                            })??
                    };
                    if blocked.is_empty() {
                        to_delete.push(candidate.asset_id);
                    } else {
                        files_kept.extend(problems);
                    }
                }
                let deleted =
                    self.store.purge_rows(ctx.fence, config, &to_delete, cutoff).await.map_err(store_error)?;
                purged += deleted.len();
                ctx.progress.report(serde_json::json!({"purged": purged, "kept": files_kept.len()}));
                // A batch that purged nothing holds only assets whose files cannot be deleted: try next time.
                if deleted.is_empty() || (batch.len() as i64) < self.settings.batch {
                    break;
                }
            }
            info!(event = "purged", purged, kept = files_kept.len(), "purge finished");
            if !files_kept.is_empty() {
                warn!(event = "purge_incomplete", files = ?files_kept.iter().take(20).collect::<Vec<_>>(),
                      "some proxy files could not be deleted; their assets stay soft-deleted and are retried next time");
            }
            Ok(Some(serde_json::json!({"purged": purged, "not_deleted": files_kept})))
        })
    }
}

/// The proxy deletion handler (kind `proxy_deletion`, arguments [`ProxyDeletionArgs`]: the assets, and
/// optionally which types of proxy). Deletes the files, then the rows, so the next crawl can regenerate them.
pub struct ProxyDeletionHandler<M> {
    store: Arc<M>,
    proxy_root: PathBuf,
}

impl<M> ProxyDeletionHandler<M> {
    /// A proxy deletion handler.
    pub fn new(store: Arc<M>, proxy_root: PathBuf) -> Self {
        Self { store, proxy_root }
    }
}

impl<M: MaintenanceStore + 'static> Handler for ProxyDeletionHandler<M> {
    fn kind(&self) -> WorkKind {
        WorkKind::ProxyDeletion
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let ProxyDeletionArgs { asset_ids: assets, proxy_types: types } = ctx.args()?;
            // A config-scoped item touches only its config: ids of another config's assets are refused, and
            // nothing is deleted.
            if let Scope::Config(config) = ctx.item.scope {
                let foreign = self.store.assets_of_other_configs(config, &assets).await.map_err(store_error)?;
                if !foreign.is_empty() {
                    return Err(HandlerError::permanent(format!(
                        "{} of the asset ids belong to another storage config than {config}, which this item is \
                         scoped to; nothing was deleted. Enqueue proxy_deletion for their own config, or without \
                         a config. Foreign ids: {}",
                        foreign.len(),
                        foreign.iter().take(20).map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            let mut deleted = 0u64;
            let mut problems = Vec::new();
            for chunk in assets.chunks(500) {
                if ctx.cancel.is_cancelled() {
                    return Err(HandlerError::cancelled());
                }
                let proxies = self.store.proxies_of(chunk, types.as_deref()).await.map_err(store_error)?;
                let (root, files) = (self.proxy_root.clone(), proxies.clone());
                let scope = ctx.item.scope.storage_config();
                let (blocked, p) = tokio::task::spawn_blocking(move || delete_files(&root, &files, scope))
                    .await
                    .map_err(|e| HandlerError::retryable(format!("deleting proxy files ended abnormally: {e}")))??;
                problems.extend(p);
                let gone: Vec<StoredProxy> = proxies.into_iter().filter(|p| !blocked.contains(&p.asset_id)).collect();
                deleted += self.store.delete_proxy_rows(ctx.fence, &gone).await.map_err(store_error)?;
                ctx.progress.report(serde_json::json!({"deleted": deleted}));
            }
            info!(event = "proxies_deleted", deleted, "proxies deleted");
            if !problems.is_empty() {
                return Err(HandlerError::retryable(format!(
                    "{} proxy file(s) could not be deleted (their rows are kept): {}",
                    problems.len(),
                    problems.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
                )));
            }
            Ok(Some(serde_json::json!({"deleted": deleted})))
        })
    }
}

/// The proxy sweep handler (kind `proxy_sweep`): deletes only what is ours and orphaned. A file is deleted
/// only when its path under the proxy root has the exact proxy layout (`<config id>/<2 hex>/<64 hex>/<proxy or
/// temporary name>`, [`ProxyPath`]), its config exists, no proxy row references it, and, checked again right
/// before the unlink, it is still a regular file older than `min_age` (default one hour, so a crawl's freshly
/// written proxies survive until their rows commit). Anything else under the proxy root is left alone and
/// reported once per sweep. No link is followed; nothing above the proxy root is touched.
pub struct ProxySweepHandler<M> {
    store: Arc<M>,
    proxy_root: PathBuf,
    min_age: Duration,
}

impl<M> ProxySweepHandler<M> {
    /// A proxy sweep handler.
    pub fn new(store: Arc<M>, proxy_root: PathBuf, min_age: Duration) -> Self {
        Self { store, proxy_root, min_age }
    }

    /// The files it leaves, for a Worker whose tools run within `limits`: younger than an hour, or than a file's
    /// proxies can wait for their rows (a long video's poster is written before its transcode), with ten minutes
    /// to spare.
    pub fn min_age_for(limits: almanac_media::ToolLimits) -> Duration {
        (limits.longest_proxy_write() + Duration::from_secs(600)).max(Duration::from_secs(3600))
    }
}

/// Files found under the proxy root, sorted into ours (old enough to be considered) and the rest.
#[derive(Debug, Default)]
struct SweepListing {
    /// In the exact proxy layout, of an existing config, and older than the age floor.
    candidates: Vec<String>,
    /// Not in the layout, or of a config that does not exist: never deleted, reported.
    not_ours: Vec<String>,
    /// How many entries were not ours in all (`not_ours` keeps the first few).
    not_ours_total: u64,
    /// Folders that could not be read.
    unreadable: Vec<String>,
}

/// How many paths that are not ours a sweep names in its report (the count is always complete).
const NOT_OURS_LISTED: usize = 20;

/// Whether a file's mtime makes it at least `min_age` old.
fn old_enough(mtime: chrono::DateTime<chrono::Utc>, min_age: Duration) -> bool {
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_micros(u64::try_from(mtime.timestamp_micros()).unwrap_or(0));
    SystemTime::now().duration_since(mtime).is_ok_and(|age| age >= min_age)
}

/// Lists the proxy root, no link followed, and sorts what it finds; stops early (what was found so far) at
/// `stop`. Blocking.
fn list_proxy_root(
    root: &RootFolder,
    configs: &HashSet<StorageConfigId>,
    min_age: Duration,
    stop: &CancellationToken,
) -> SweepListing {
    let mut out = SweepListing::default();
    let not_ours = |out: &mut SweepListing, rel: String| {
        out.not_ours_total += 1;
        if out.not_ours.len() < NOT_OURS_LISTED {
            out.not_ours.push(rel);
        }
    };
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(dir) = stack.pop() {
        if stop.is_cancelled() {
            break;
        }
        let listed = root.open_folder(&dir).and_then(|folder| root.list(&folder, &dir));
        let entries = match listed {
            Ok(entries) => entries,
            Err(e) => {
                out.unreadable.push(e.to_string());
                continue;
            }
        };
        for entry in entries {
            let mut rel = dir.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(entry.name.as_bytes());
            if entry.kind == EntryKind::Folder {
                stack.push(rel);
                continue;
            }
            let text = String::from_utf8_lossy(&rel).into_owned();
            let ours = (entry.kind == EntryKind::File)
                .then(|| std::str::from_utf8(&rel).ok().and_then(ProxyPath::parse))
                .flatten()
                .filter(|p| configs.contains(&p.config));
            match ours {
                Some(_) if old_enough(entry.mtime, min_age) => out.candidates.push(text),
                Some(_) => {}
                None => not_ours(&mut out, text),
            }
        }
    }
    out.candidates.sort();
    out
}

impl<M: MaintenanceStore + 'static> Handler for ProxySweepHandler<M> {
    fn kind(&self) -> WorkKind {
        WorkKind::ProxySweep
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let Some(root) = open_proxy_root(&self.proxy_root)? else {
                return Ok(Some(serde_json::json!({"deleted": 0, "note": "no proxy root yet"})));
            };
            let root = Arc::new(root);
            let configs: HashSet<StorageConfigId> =
                self.store.storage_config_ids().await.map_err(store_error)?.into_iter().collect();
            let (listing_root, min_age, stop) = (root.clone(), self.min_age, ctx.cancel.clone());
            let listing = tokio::task::spawn_blocking(move || list_proxy_root(&listing_root, &configs, min_age, &stop))
                .await
                .map_err(|e| HandlerError::retryable(format!("walking the proxy root ended abnormally: {e}")))?;
            if listing.not_ours_total > 0 {
                warn!(
                    event = "proxy_root_not_ours",
                    count = listing.not_ours_total,
                    examples = ?listing.not_ours,
                    "files under the proxy root that are not in the proxy layout (or of a config that does not \
                     exist) were left alone; nothing but Almanac's proxies belongs there"
                );
            }
            let mut deleted = 0u64;
            let mut problems = Vec::new();
            for chunk in listing.candidates.chunks(500) {
                if ctx.cancel.is_cancelled() {
                    return Err(HandlerError::cancelled());
                }
                let referenced: HashSet<String> =
                    self.store.referenced_proxy_paths(chunk).await.map_err(store_error)?.into_iter().collect();
                for orphan in chunk.iter().filter(|p| !referenced.contains(*p)) {
                    // Re-check right before the delete: a row may have been committed since the batch query.
                    let again =
                        self.store.referenced_proxy_paths(std::slice::from_ref(orphan)).await.map_err(store_error)?;
                    if !again.is_empty() {
                        continue;
                    }
                    // And the file itself: still a regular file, still older than the floor (a retry of a
                    // crawl may have just rewritten it).
                    let confirm = |e: &Entry| e.kind == EntryKind::File && old_enough(e.mtime, self.min_age);
                    match root.remove_file(orphan.as_bytes(), confirm) {
                        Ok(Removal::Removed) => {
                            deleted += 1;
                            remove_parents(&root, orphan);
                        }
                        Ok(Removal::Gone | Removal::Kept) => {}
                        Err(e) => problems.push(e.to_string()),
                    }
                }
                ctx.progress.report(serde_json::json!({"checked": listing.candidates.len(), "deleted": deleted}));
            }
            info!(event = "proxies_swept", deleted, not_deleted = problems.len(), "proxy sweep finished");
            Ok(Some(serde_json::json!({
                "deleted": deleted,
                "not_deleted": problems,
                "left_alone": listing.not_ours_total,
                "left_alone_examples": listing.not_ours,
                "unreadable_folders": listing.unreadable,
            })))
        })
    }
}

/// What the start-up clean-up of temporary files did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DebrisReport {
    /// Temporary files removed.
    pub removed: u64,
    /// Files that could not be removed, or folders that could not be read, with why.
    pub problems: Vec<String>,
}

/// At a Worker's start: removes the temporary files that a Worker killed while writing (`kill -9`, a power cut)
/// left under the proxy root, those it can prove are debris. A file goes only when all of these hold:
///
/// - it is in the exact proxy layout ([`ProxyPath`]) of a storage config that exists;
/// - its name is one of the temporary names we write ([`almanac_domain::is_temporary_file_name`]): a finished
///   proxy is never touched here (the sweep, which checks the rows, deletes those);
/// - it is older than the proxy sweep's age floor ([`ProxySweepHandler::min_age_for`]), checked again right
///   before the unlink: no write of ours lasts that long, while a younger file may be one another Worker (on
///   this host, or another sharing the proxy root) is writing right now. Younger debris is overwritten when its
///   original is crawled again, or left to the sweep.
///
/// Nothing is followed out of the root. Stops at `stop`; problems are logged and reported, never fatal.
pub async fn remove_temporary_debris<M: MaintenanceStore + 'static>(
    store: Arc<M>,
    proxy_root: PathBuf,
    limits: almanac_media::ToolLimits,
    stop: CancellationToken,
) -> DebrisReport {
    let min_age = ProxySweepHandler::<M>::min_age_for(limits);
    let mut report = DebrisReport::default();
    let listed = async {
        let Some(root) = open_proxy_root(&proxy_root).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let root = Arc::new(root);
        let configs: HashSet<StorageConfigId> =
            store.storage_config_ids().await.map_err(|e| e.to_string())?.into_iter().collect();
        let (listing_root, listing_stop) = (root.clone(), stop.clone());
        let listing =
            tokio::task::spawn_blocking(move || list_proxy_root(&listing_root, &configs, min_age, &listing_stop))
                .await
                .map_err(|e| format!("walking the proxy root ended abnormally: {e}"))?;
        Ok::<_, String>(Some((root, listing)))
    };
    match listed.await {
        Ok(Some((root, listing))) => {
            report.problems.extend(listing.unreadable);
            let temporary = |rel: &&String| rel.rsplit('/').next().is_some_and(almanac_domain::is_temporary_file_name);
            for rel in listing.candidates.iter().filter(temporary) {
                if stop.is_cancelled() {
                    break;
                }
                let (root, rel) = (root.clone(), rel.clone());
                let removed = tokio::task::spawn_blocking(move || {
                    // Still a regular file, still older than the floor: a retry may have just rewritten it.
                    let confirm = |e: &Entry| e.kind == EntryKind::File && old_enough(e.mtime, min_age);
                    let removed = root.remove_file(rel.as_bytes(), confirm);
                    if matches!(removed, Ok(Removal::Removed)) {
                        remove_parents(&root, &rel);
                    }
                    removed.map_err(|e| e.to_string())
                })
                .await
                .unwrap_or_else(|e| Err(format!("removing a temporary file ended abnormally: {e}")));
                match removed {
                    Ok(Removal::Removed) => report.removed += 1,
                    Ok(Removal::Gone | Removal::Kept) => {}
                    Err(e) => report.problems.push(e),
                }
            }
        }
        Ok(None) => {}
        Err(e) => report.problems.push(e),
    }
    if report.removed > 0 {
        info!(
            event = "temporary_debris_removed",
            removed = report.removed,
            "removed temporary files that a Worker killed while writing proxies left under the proxy root"
        );
    }
    if !report.problems.is_empty() {
        warn!(
            event = "temporary_debris_not_removed",
            problems = ?report.problems,
            "temporary files a killed Worker left under the proxy root could not all be looked for or removed; \
             check the proxy root's permissions (the proxy sweep tries again)"
        );
    }
    report
}

/// The token cleanup handler (kind `token_cleanup`): deletes refresh tokens expired or revoked longer than
/// `grace` ago, in batches.
pub struct TokenCleanupHandler<M> {
    store: Arc<M>,
    grace: Duration,
}

impl<M> TokenCleanupHandler<M> {
    /// How long expired share tokens are kept before they are deleted.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(7 * 86_400);

    /// A token cleanup handler.
    pub fn new(store: Arc<M>, grace: Duration) -> Self {
        Self { store, grace }
    }
}

impl<M: MaintenanceStore + 'static> Handler for TokenCleanupHandler<M> {
    fn kind(&self) -> WorkKind {
        WorkKind::TokenCleanup
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let cutoff = self.store.db_now().await.map_err(store_error)? - chrono_duration(self.grace);
            let deleted =
                delete_in_batches(&ctx, |limit| self.store.delete_refresh_tokens(ctx.fence, cutoff, cutoff, limit))
                    .await?;
            info!(event = "tokens_deleted", deleted, "token cleanup finished");
            Ok(Some(serde_json::json!({"deleted": deleted})))
        })
    }
}

/// Retention of finished work items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Succeeded and cancelled items are kept this long (default 7 days).
    pub done: Duration,
    /// Failed items are kept this long (default 30 days).
    pub failed: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self { done: Duration::from_secs(7 * 86_400), failed: Duration::from_secs(30 * 86_400) }
    }
}

/// The retention handler (kind `work_item_retention`): deletes finished items past retention, in batches;
/// never a queued or running one.
pub struct WorkItemRetentionHandler<M> {
    store: Arc<M>,
    settings: RetentionSettings,
}

impl<M> WorkItemRetentionHandler<M> {
    /// A retention handler.
    pub fn new(store: Arc<M>, settings: RetentionSettings) -> Self {
        Self { store, settings }
    }
}

impl<M: MaintenanceStore + 'static> Handler for WorkItemRetentionHandler<M> {
    fn kind(&self) -> WorkKind {
        WorkKind::WorkItemRetention
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let now = self.store.db_now().await.map_err(store_error)?;
            let (done, failed) =
                (now - chrono_duration(self.settings.done), now - chrono_duration(self.settings.failed));
            let deleted =
                delete_in_batches(&ctx, |limit| self.store.delete_finished_work(ctx.fence, done, failed, limit))
                    .await?;
            info!(event = "work_items_deleted", deleted, "retention finished");
            Ok(Some(serde_json::json!({"deleted": deleted})))
        })
    }
}

#[cfg(test)]
mod tests {
    use almanac_domain::ContentHash;
    use almanac_media::ToolLimits;

    use super::*;

    #[test]
    fn the_sweep_leaves_files_younger_than_an_hour_or_the_longest_proxy_write_and_ten_minutes() {
        type Sweep = ProxySweepHandler<()>;
        let quick = ToolLimits { quick: Duration::from_secs(10), transcode: Duration::from_secs(60) };
        assert_eq!(Sweep::min_age_for(quick), Duration::from_secs(3600));
        // Default limits: three quick tools (6 min) and an hour's transcode, plus ten minutes.
        assert_eq!(Sweep::min_age_for(ToolLimits::default()), Duration::from_secs(360 + 3600 + 600));
        assert_eq!(PurgeSettings::new("/p".into(), Duration::from_secs(1)).batch, PurgeSettings::DEFAULT_BATCH);
    }

    #[test]
    fn proxy_paths_must_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        let config = StorageConfigId::new();
        let ours = ContentHash::from_bytes([0xab; 32]).proxy_dir(config).join("preview.jpg");
        let ours = ours.to_str().unwrap();
        for bad in ["/etc/passwd", "../x.jpg", "a/../../x.jpg", "./a.jpg", "photos/IMG_0001.jpg", "a/b/missing.jpg"] {
            std::fs::create_dir_all(dir.path().join("photos")).unwrap();
            std::fs::write(dir.path().join("photos/IMG_0001.jpg"), b"an original").unwrap();
            assert!(delete_proxy_file(&root, bad, None).is_err(), "{bad}");
        }
        assert!(dir.path().join("photos/IMG_0001.jpg").exists());
        let other = StorageConfigId::new();
        std::fs::create_dir_all(dir.path().join(ours).parent().unwrap()).unwrap();
        std::fs::write(dir.path().join(ours), b"p").unwrap();
        assert!(delete_proxy_file(&root, ours, Some(other)).unwrap_err().contains("another storage config"));
        assert_eq!(delete_proxy_file(&root, ours, Some(config)), Ok(()));
        assert!(!dir.path().join(ours).exists());
        assert_eq!(delete_proxy_file(&root, ours, None), Ok(()), "already gone counts as deleted");
    }

    #[test]
    fn empty_folders_are_removed_up_to_the_root_only() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = dir.path().join("proxies");
        let config = StorageConfigId::new();
        let file = ContentHash::from_bytes([0xab; 32]).proxy_dir(config).join("thumbnail.jpg");
        let sibling = root_path.join(config.to_string()).join("cd");
        std::fs::create_dir_all(root_path.join(&file).parent().unwrap()).unwrap();
        std::fs::create_dir_all(&sibling).unwrap();
        std::fs::write(root_path.join(&file), b"x").unwrap();
        let root = RootFolder::open(&root_path).unwrap();
        delete_proxy_file(&root, file.to_str().unwrap(), Some(config)).unwrap();
        assert!(!root_path.join(config.to_string()).join("ab").exists());
        assert!(sibling.exists(), "a non-empty parent stops the walk up");
        remove_parents(&root, &format!("{config}/cd/x.jpg"));
        assert!(root_path.exists() && !root_path.join(config.to_string()).exists(), "the root itself stays");
    }
}
