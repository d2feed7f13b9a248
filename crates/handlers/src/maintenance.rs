//! Purge, proxy deletion, proxy sweep, token cleanup and work item retention.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use almanac_domain::{AssetId, MaintenanceStore, ProxyType, Scope, StoredProxy, WorkKind};
use almanac_executor::{BoxFuture, Handler, HandlerContext, HandlerError};
use tracing::{info, warn};

use crate::store_error;

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Deletes a proxy file; a file that is already gone counts as deleted. Never follows a link, never leaves the
/// proxy root.
fn delete_proxy_file(proxy_root: &Path, relative: &str) -> Result<(), String> {
    let rel = Path::new(relative);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Err(format!("{relative}: not a path inside the proxy root"));
    }
    match std::fs::remove_file(proxy_root.join(rel)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{relative}: {e}")),
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

/// Removes `dir` and then its parents up to (not including) `root`, as long as each is empty.
fn remove_empty_dirs(root: &Path, mut dir: PathBuf) {
    while dir.starts_with(root) && dir != root {
        if std::fs::remove_dir(&dir).is_err() {
            return;
        }
        match dir.parent() {
            Some(p) => dir = p.to_path_buf(),
            None => return,
        }
    }
}

/// Deletes the files of these proxies and reports which assets had a file that could not be deleted.
fn delete_files(proxy_root: &Path, proxies: &[StoredProxy]) -> (HashSet<AssetId>, Vec<String>) {
    let mut blocked = HashSet::new();
    let mut problems = Vec::new();
    for p in proxies {
        if let Some(rel) = &p.relative_path {
            match delete_proxy_file(proxy_root, rel) {
                Ok(()) => {
                    if let Some(parent) = Path::new(rel).parent() {
                        remove_empty_dirs(proxy_root, proxy_root.join(parent));
                    }
                }
                Err(e) => {
                    blocked.insert(p.asset_id);
                    problems.push(e);
                }
            }
        }
    }
    (blocked, problems)
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
            let Scope::Config(config) = ctx.item.scope else {
                return Err(HandlerError::permanent("a purge needs a storage config"));
            };
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
                    // Proxy files derive from (config, content): while an active asset has the same content,
                    // they are its files too and stay.
                    let (blocked, problems) = if candidate.content_still_active {
                        (HashSet::new(), Vec::new())
                    } else {
                        let root = self.settings.proxy_root.clone();
                        let proxies = candidate.proxies.clone();
                        tokio::task::spawn_blocking(move || delete_files(&root, &proxies)).await.map_err(|e| {
                            HandlerError::retryable(format!("deleting proxy files ended abnormally: {e}"))
                        })?
                    };
                    if blocked.is_empty() {
                        to_delete.push(candidate.asset_id);
                    } else {
                        files_kept.extend(problems);
                    }
                }
                let deleted = self.store.purge_rows(config, &to_delete, cutoff).await.map_err(store_error)?;
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

/// The proxy deletion handler (kind `proxy_deletion`): payload `{"asset_ids": [...], "proxy_types": [...]}`
/// (types optional). Deletes the files, then the rows, so the next crawl can regenerate them.
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
            let payload = &ctx.item.payload;
            let assets: Vec<AssetId> = serde_json::from_value(payload.get("asset_ids").cloned().unwrap_or_default())
                .map_err(|e| HandlerError::permanent(format!("payload.asset_ids must be a list of asset ids: {e}")))?;
            let types: Option<Vec<ProxyType>> = match payload.get("proxy_types") {
                None | Some(serde_json::Value::Null) => None,
                Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                    HandlerError::permanent(format!(
                        "payload.proxy_types must list thumbnail, preview, blurhash, poster or web_video: {e}"
                    ))
                })?),
            };
            let mut deleted = 0u64;
            let mut problems = Vec::new();
            for chunk in assets.chunks(500) {
                if ctx.cancel.is_cancelled() {
                    return Err(HandlerError::cancelled());
                }
                let proxies = self.store.proxies_of(chunk, types.as_deref()).await.map_err(store_error)?;
                let (root, files) = (self.proxy_root.clone(), proxies.clone());
                let (blocked, p) = tokio::task::spawn_blocking(move || delete_files(&root, &files))
                    .await
                    .map_err(|e| HandlerError::retryable(format!("deleting proxy files ended abnormally: {e}")))?;
                problems.extend(p);
                let gone: Vec<StoredProxy> = proxies.into_iter().filter(|p| !blocked.contains(&p.asset_id)).collect();
                deleted += self.store.delete_proxy_rows(&gone).await.map_err(store_error)?;
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

/// The proxy sweep handler (kind `proxy_sweep`): deletes proxy files that no row references and that are
/// older than `min_age` (default one hour, so a crawl's freshly written proxies survive until their rows
/// commit), re-checking the database immediately before each delete. Never follows a link, never deletes
/// above the proxy root.
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
}

/// Regular files under `root` older than `min_age`, as paths relative to it (links and anything odd are
/// passed over).
fn old_files(root: &Path, min_age: Duration) -> Vec<String> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let path = e.path();
            if meta.file_type().is_dir() {
                stack.push(path);
            } else if meta.file_type().is_file() {
                let old =
                    meta.modified().ok().and_then(|m| now.duration_since(m).ok()).is_some_and(|age| age >= min_age);
                if let (true, Some(rel)) = (old, path.strip_prefix(root).ok().and_then(Path::to_str)) {
                    out.push(rel.to_owned());
                }
            }
        }
    }
    out.sort();
    out
}

impl<M: MaintenanceStore + 'static> Handler for ProxySweepHandler<M> {
    fn kind(&self) -> WorkKind {
        WorkKind::ProxySweep
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let (root, min_age) = (self.proxy_root.clone(), self.min_age);
            if !root.is_dir() {
                return Ok(Some(serde_json::json!({"deleted": 0, "note": "no proxy root yet"})));
            }
            let candidates = tokio::task::spawn_blocking(move || old_files(&root, min_age))
                .await
                .map_err(|e| HandlerError::retryable(format!("walking the proxy root ended abnormally: {e}")))?;
            let mut deleted = 0u64;
            let mut problems = Vec::new();
            for chunk in candidates.chunks(500) {
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
                    match delete_proxy_file(&self.proxy_root, orphan) {
                        Ok(()) => {
                            deleted += 1;
                            if let Some(parent) = Path::new(orphan).parent() {
                                remove_empty_dirs(&self.proxy_root, self.proxy_root.join(parent));
                            }
                        }
                        Err(e) => problems.push(e),
                    }
                }
                ctx.progress.report(serde_json::json!({"checked": candidates.len(), "deleted": deleted}));
            }
            info!(event = "proxies_swept", deleted, not_deleted = problems.len(), "proxy sweep finished");
            Ok(Some(serde_json::json!({"deleted": deleted, "not_deleted": problems})))
        })
    }
}

/// The token cleanup handler (kind `token_cleanup`): deletes refresh tokens expired or revoked longer than
/// `grace` ago, in batches.
pub struct TokenCleanupHandler<M> {
    store: Arc<M>,
    grace: Duration,
}

impl<M> TokenCleanupHandler<M> {
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
                delete_in_batches(&ctx, |limit| self.store.delete_refresh_tokens(cutoff, cutoff, limit)).await?;
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
            let deleted = delete_in_batches(&ctx, |limit| self.store.delete_finished_work(done, failed, limit)).await?;
            info!(event = "work_items_deleted", deleted, "retention finished");
            Ok(Some(serde_json::json!({"deleted": deleted})))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_must_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["/etc/passwd", "../x.jpg", "a/../../x.jpg", "./a.jpg"] {
            assert!(delete_proxy_file(dir.path(), bad).is_err(), "{bad}");
        }
        assert_eq!(delete_proxy_file(dir.path(), "a/b/missing.jpg"), Ok(()), "already gone counts as deleted");
    }

    #[test]
    fn empty_folders_are_removed_up_to_the_root_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proxies");
        std::fs::create_dir_all(root.join("c/ab/abcd")).unwrap();
        std::fs::create_dir_all(root.join("c/cd")).unwrap();
        remove_empty_dirs(&root, root.join("c/ab/abcd"));
        assert!(!root.join("c/ab").exists());
        assert!(root.join("c/cd").exists(), "a non-empty parent stops the walk up");
        remove_empty_dirs(&root, root.join("c/cd"));
        assert!(root.exists() && !root.join("c").exists(), "the root itself stays");
    }
}
