//! Proxy sweep: orphan proxy files, ours by their layout and referenced by no row, go once they are old.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{ProxySweepArgs, ProxySweepReport, StorageConfigId, SweptProxyRoot, ports::MaintenanceStore};
use almanac_executor::{BoxFuture, HandlerContext, HandlerError, WorkHandler};
use almanac_media::{Entry, EntryKind, Removal};
use serde::Serialize;
use tracing::{info, warn};

use super::proxy_files::{list_proxy_root, old_enough, open_proxy_root, remove_parents};
use crate::{report_progress, store_error};

/// A sweep's progress: orphan candidates to check, and how many were deleted so far.
#[derive(Serialize)]
struct SweepProgress {
    checked: usize,
    deleted: u64,
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

impl<M: MaintenanceStore + 'static> WorkHandler for ProxySweepHandler<M> {
    type Args = ProxySweepArgs;

    fn work(&self, _: ProxySweepArgs, ctx: HandlerContext) -> BoxFuture<'_, Result<ProxySweepReport, HandlerError>> {
        Box::pin(async move {
            let Some(root) = open_proxy_root(&self.proxy_root)? else {
                return Ok(ProxySweepReport::no_proxy_root());
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
                report_progress(&ctx.progress, &SweepProgress { checked: listing.candidates.len(), deleted });
            }
            info!(event = "proxies_swept", deleted, not_deleted = problems.len(), "proxy sweep finished");
            let mut swept = SweptProxyRoot::default();
            swept.not_deleted = problems;
            swept.left_alone = listing.not_ours_total;
            swept.left_alone_examples = listing.not_ours;
            swept.unreadable_folders = listing.unreadable;
            Ok(ProxySweepReport::swept(deleted, swept))
        })
    }
}

#[cfg(test)]
mod tests {
    use almanac_media::ToolLimits;

    use super::*;

    #[test]
    fn the_sweep_leaves_files_younger_than_an_hour_or_the_longest_proxy_write_and_ten_minutes() {
        type Sweep = ProxySweepHandler<()>;
        let quick = ToolLimits { quick: Duration::from_secs(10), transcode: Duration::from_secs(60) };
        assert_eq!(Sweep::min_age_for(quick), Duration::from_secs(3600));
        // Default limits: three quick tools (6 min) and an hour's transcode, plus ten minutes.
        assert_eq!(Sweep::min_age_for(ToolLimits::default()), Duration::from_secs(360 + 3600 + 600));
    }
}
